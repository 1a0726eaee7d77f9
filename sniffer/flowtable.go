package sniffer

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
)

// flowTable is the TCP flow table: flows by a 64-bit hash of their
// endpoints under a seed chosen at start, so the map is the runtime's fast
// path for integer keys with 16-byte slots, not one keyed by the 64-byte
// flowKey (hashing a flowKey field by field and the misses of its 72-byte
// slots were some 8% of the live agent's CPU). A hit is checked against the
// flow's own key; the rare flow whose hash is taken by another flow (two
// distinct endpoint pairs share a hash with a chance of 2^-64 a pair, and
// a forger does not know the seed) lives in spill, keyed by its endpoints.
type flowTable struct {
	m     map[uint64]*flow
	spill map[flowKey]*flow
	seed  [6]uint64
	// last is the flow the last lookup found: a flow's segments often
	// follow each other (a bulk transfer's, a capture file's), and the
	// next packet's flow is then found by comparing keys, with no hash
	// and no map probe.
	last *flow
}

func newFlowTable(size int) flowTable {
	t := flowTable{m: make(map[uint64]*flow, size)}
	for i := range t.seed {
		t.seed[i] = rand.Uint64()
	}
	return t
}

// hash is a keyed hash of k's endpoints: their 16-byte forms and ports,
// multiplied and folded (as wyhash mixes) with the table's random seed. An
// IPv4 address and its v4-mapped IPv6 form hash alike; the check against
// the flow's own key tells them apart. (maphash over the same 36 bytes:
// BenchmarkFlowTableGet 43 ns a lookup, 32 with this.)
func (t *flowTable) hash(k flowKey) uint64 {
	a, b := k.lo.Addr().As16(), k.hi.Addr().As16()
	le := binary.LittleEndian
	x := mix(le.Uint64(a[:8])^t.seed[0], le.Uint64(a[8:])^t.seed[1])
	y := mix(le.Uint64(b[:8])^t.seed[2], le.Uint64(b[8:])^t.seed[3])
	return mix(x^y^t.seed[4], (uint64(uint32(k.iface))<<32|uint64(k.lo.Port())<<16|uint64(k.hi.Port()))^t.seed[5])
}

// mix is the 128-bit product of a and b, folded to 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// get returns the flow of k (nil when none) and k's hash, for put.
func (t *flowTable) get(k flowKey) (*flow, uint64) {
	if f := t.last; f != nil && f.key == k {
		return f, f.hash
	}
	h := t.hash(k)
	f := t.lookup(k, h)
	if f != nil {
		t.last = f
	}
	return f, h
}

// lookup returns the flow of k, whose hash is h.
func (t *flowTable) lookup(k flowKey, h uint64) *flow {
	f := t.m[h]
	if f != nil && f.key == k {
		return f
	}
	if len(t.spill) > 0 {
		return t.spill[k]
	}
	return nil
}

// put adds f, whose key hashes to h and is not in the table.
func (t *flowTable) put(f *flow, h uint64) {
	f.hash = h
	if _, taken := t.m[h]; !taken {
		t.m[h] = f
		return
	}
	if t.spill == nil {
		t.spill = map[flowKey]*flow{}
	}
	t.spill[f.key] = f
}

// del removes f.
func (t *flowTable) del(f *flow) {
	if t.last == f {
		t.last = nil
	}
	if t.m[f.hash] == f {
		delete(t.m, f.hash)
		return
	}
	delete(t.spill, f.key)
}

func (t *flowTable) len() int { return len(t.m) + len(t.spill) }

// rebuilt returns a copy of t in maps sized to what it holds now (Go maps
// keep their peak size when entries are deleted).
func (t *flowTable) rebuilt(min int) flowTable {
	n := flowTable{m: make(map[uint64]*flow, max(len(t.m), min)), seed: t.seed}
	for h, f := range t.m {
		n.m[h] = f
	}
	if len(t.spill) > 0 {
		n.spill = make(map[flowKey]*flow, len(t.spill))
		for k, f := range t.spill {
			n.spill[k] = f
		}
	}
	return n
}
