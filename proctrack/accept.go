package proctrack

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Accept events: the kernel's own record of which process accepted each TCP
// connection. An eBPF program on the syscalls:sys_exit_accept4 and
// sys_exit_accept tracepoints (bpf/accept.c) reads the new socket's
// addresses and sends them with the accepting thread through a ring buffer;
// Accepts keeps a bounded index of the recent ones, so a record is attributed
// exactly, after its connection closed and during swaps too, for any server.

// ErrAcceptsUnsupported is returned by OpenAccepts where the eBPF program
// cannot run at all (not Linux, or a big-endian build).
var ErrAcceptsUnsupported = errors.New("proctrack: accept events need Linux on a little-endian CPU")

// DefaultMaxAccepts is the accept index's bound when AcceptConfig leaves it
// zero: half a minute of 4,000 accepts a second, far more than the seconds
// a record waits for attribution, in some 13 MB of Go heap
// (TestAcceptIndexVsFastcache measures 101 MB at a million).
const DefaultMaxAccepts = 1 << 17

// AcceptConfig configures OpenAccepts.
type AcceptConfig struct {
	// MaxEntries bounds the index; the oldest accepts are evicted (and
	// counted) to make room, a sixteenth of the bound at a time, so the
	// index holds between 15/16 of it and the bound (rounded up to a
	// multiple of 16). DefaultMaxAccepts by default.
	MaxEntries int
	// TracefsDir is where tracefs is (or is mounted when absent and the
	// process may), "/sys/kernel/tracing" by default.
	TracefsDir string
}

// Accept is one accepted connection: the accepting process (tgid) and
// thread, and when accept returned (realtime, converted from the kernel's
// monotonic clock).
type Accept struct {
	TGID, TID int
	Time      time.Time
	// seq is the put of the index's recent ring it came from (0: from the
	// generations): Claim's handle.
	seq uint64
}

// AcceptStats are the accept events' counters.
type AcceptStats struct {
	Events       uint64 // accept events read from the ring buffer
	Evictions    uint64 // accepts evicted from the index to respect its bound (a generation at a time)
	Replaced     uint64 // accepts followed by a later one of the same addresses in the same generation (a reused client port)
	Claimed      uint64 // accepts whose record was attributed while they were among the newest (they leave the index then)
	RingDrops    uint64 // events the kernel dropped (the ring buffer was full), and any skipped past a record header no kernel writes
	ReadFailures uint64 // accepts whose socket the kernel program could not read
	Quiet        uint64 // accepts of the quiet set's processes, counted by the kernel and not reported (SetQuiet)
	Entries      int    // accepts in the index now
}

// Accepts receives accept events from the kernel and indexes them. Open it
// with OpenAccepts; it is safe for concurrent use.
type Accepts struct {
	idx *acceptIndex
	// offset is realtime minus monotonic, in nanoseconds.
	offset atomic.Int64
	kernel acceptKernel // nil in tests that feed the index directly
	// portLast holds, for each slot of local ports (port % portSlots),
	// the latest accept time (Unix ns) of the events indexed on a port of
	// the slot: a connection that began after it has no event to look up
	// (NoEventSince), so the quiet generation answers without a lookup.
	portLast [portSlots]atomic.Int64
}

// portSlots is the size of Accepts.portLast (32 kB).
const portSlots = 4096

// acceptKernel is the loaded program: its counters, a sync of its reader,
// and Close.
type acceptKernel interface {
	counters() (drops, readFailures, quiet uint64)
	sync() (more, drained bool, missed uint64)
	missed() uint64
	setQuiet(pids []int) error
	close() error
}

// sync indexes what the kernel has sent so far, on the caller's goroutine
// (the ring is drained by a watcher only every second or in a burst): a
// record whose accept was not found asks before it waits longer.
// It says whether the ring held events not indexed yet, and after the
// sync, whether every event the kernel committed is indexed (drained) and
// the kernel's missed count (see Missed).
func (a *Accepts) sync() (more, drained bool, missed uint64) {
	if a.kernel == nil {
		return false, true, 0
	}
	return a.kernel.sync()
}

// Lookup returns the accept of the TCP connection client -> server (the
// server's address as the client saw it) that happened at or after
// notBefore: an older entry of the same addresses is an earlier
// connection that reused the client port. Of the last two accepts of an
// address pair, with notBefore set, the one nearest to notBefore +
// acceptMargin (the connection's SYN, as the attribution asks) answers, so
// an earlier connection's record asked after its port was reused still
// finds its own accept. With notBefore zero, the latest.
//
// It sees what was read from the kernel's ring: the ring is drained every
// 10 s and in bursts by its watcher, every second by the tracker's Tick,
// and by the attribution before each record's lookup (and again when that
// misses).
func (a *Accepts) Lookup(client, server netip.AddrPort, notBefore time.Time) (Accept, bool) {
	var nb int64
	if !notBefore.IsZero() {
		nb = notBefore.UnixNano()
	}
	m := a.idx.lookup(acceptKeyOf(client, server), nb)
	if m.n == 0 {
		return Accept{}, false
	}
	if nb == 0 {
		return m.accept(0), true
	}
	syn := nb + int64(acceptMargin)
	curOK := m.e[0].unixNano >= nb
	prevOK := m.n == 2 && m.e[1].unixNano >= nb
	if prevOK && (!curOK || absDiff(m.e[1].unixNano, syn) < absDiff(m.e[0].unixNano, syn)) {
		return m.accept(1), true
	}
	if !curOK {
		return Accept{}, false
	}
	return m.accept(0), true
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// Stats returns the counters.
func (a *Accepts) Stats() AcceptStats {
	var s AcceptStats
	s.Events, s.Evictions, s.Replaced, s.Claimed, s.Entries = a.idx.stats()
	if a.kernel != nil {
		s.RingDrops, s.ReadFailures, s.Quiet = a.kernel.counters()
	}
	return s
}

// SetQuiet makes pids the quiet set: the kernel counts their accepts and
// does not report them (it reports every other process's). While Missed's
// count stands still, an accepted connection with no event was accepted
// by one of them. An empty set reports every accept again.
func (a *Accepts) SetQuiet(pids []int) error {
	if a.kernel == nil {
		return nil
	}
	return a.kernel.setQuiet(pids)
}

// Missed returns the kernel's count of accepts outside the quiet set that
// it did not report (its ring buffer full, a socket it could not read).
func (a *Accepts) Missed() uint64 {
	if a.kernel == nil {
		return 0
	}
	return a.kernel.missed()
}

// Claim says the record of e's connection was attributed: an accept
// still among the newest leaves the index, so it is never moved to the
// generations (most accepts are claimed within milliseconds; moving them
// was a cache miss per accept). Claim only an accept whose record needs
// it no more: a second Lookup of the connection misses.
func (a *Accepts) Claim(e Accept) {
	if e.seq != 0 {
		a.idx.claim(e.seq)
	}
}

// Close detaches the program and releases its maps, the ring buffer reader
// and its goroutine.
func (a *Accepts) Close() error {
	if a == nil || a.kernel == nil {
		return nil
	}
	return a.kernel.close()
}

// add indexes one accept; mono is the kernel's CLOCK_MONOTONIC nanoseconds.
func (a *Accepts) add(local, remote netip.AddrPort, tgid, tid uint32, mono uint64) {
	t := int64(mono) + a.offset.Load()
	a.idx.put(acceptKeyOf(remote, local), acceptEntry{tgid: tgid, tid: tid, unixNano: t})
	if l := &a.portLast[local.Port()%portSlots]; l.Load() < t {
		l.Store(t)
	}
}

// NoEventSince says that no event indexed so far accepted a connection on
// local port at or after since (Unix ns): a Lookup with notBefore since
// misses. False means there may be one.
func (a *Accepts) NoEventSince(port uint16, since int64) bool {
	return a.portLast[port%portSlots].Load() < since
}

// acceptKey is a connection's addresses, compact (36 bytes: the index
// holds a quarter million of them). IPv4 connections accepted on a
// dual-stack listener have v4-mapped addresses in the kernel and plain IPv4
// ones in the capture: both are unmapped, then stored as 16 bytes.
type acceptKey struct {
	client, server [16]byte
	cport, sport   uint16
}

func acceptKeyOf(client, server netip.AddrPort) acceptKey {
	return acceptKey{
		client: client.Addr().Unmap().As16(), server: server.Addr().Unmap().As16(),
		cport: client.Port(), sport: server.Port(),
	}
}

// acceptIndex is bounded in entries: a ring of generations, maps of at
// most genSize accepts each. Puts go to the newest; when it is full the
// oldest is cleared (its accepts evicted, and counted) and becomes the
// newest. A cleared map keeps its memory, so in steady state a put
// allocates nothing and touches no new page, and the newest generation,
// where the attribution's lookups land a second after the accept, is small
// enough to stay in the CPU's caches (one map of the whole bound, growing
// to some 10 MB, cost about a microsecond per accept in cache and TLB
// misses and page faults at 600 accepts a second).
type acceptIndex struct {
	mu sync.Mutex
	// recent holds the newest accepts in put order (slot seq%len): a
	// lookup looks there first, and an accept claimed there (its record
	// attributed) never reaches the generations; the others move there
	// when their slot is reused. Most records are attributed
	// milliseconds after their accept, so most accepts never cost a put
	// into a cold map, and most lookups read lines just written.
	recent []recentSlot
	// heads maps a hash's low bits to the latest put with such a hash
	// (twice the ring's slots, 16 kB at the default bound: it stays in
	// the CPU's caches), and each slot links to the put that was its
	// bucket's head before it: a chained hash table over the ring, so a
	// lookup reads a head and a slot or two.
	heads   []uint64
	claimed uint64
	gens    []acceptGen
	cur     int // the newest generation
	genSize int
	seed    maphash.Seed
	seq     uint64 // puts
	mask    uint64 // len(recent)-1
	// gensLatest is the latest accept ever put into a generation: a
	// lookup for a connection newer than that reads no generation.
	gensLatest int64
	entries    int
	evicted    uint64
	replaced   uint64
}

// acceptGen is one generation and the latest accept in it: a lookup for a
// connection newer than that skips it.
type acceptGen struct {
	m      map[uint64]acceptEntry // by acceptIndex.hash of the addresses
	latest int64
}

// acceptGens is how many generations an index keeps (fewer when its bound
// is smaller).
const acceptGens = 16

// recentSlot is one accept of the recent ring: 64 bytes, a cache line.
type recentSlot struct {
	seq uint64 // the put that wrote it, from 1; 0: empty
	h   uint64 // the addresses' hash
	// next is the put that was this slot's bucket's head before it (any
	// hash; puts only decrease along a chain, which ends at the first
	// that left the ring).
	next    uint64
	e       acceptEntry
	claimed bool
}

// recentSize is the recent ring's length for an index bound of max: 1,024
// accepts at the default bound (a third of a second at 3,000 accepts a
// second, 64 kB), a sixty-fourth of a smaller bound rounded down to a power
// of two, none below 4,096 (small indexes in tests are the generations
// alone).
func recentSize(max int) int {
	if max < 4096 {
		return 0
	}
	return 1 << (bits.Len(uint(min(1024, max/64))) - 1) // a power of two: slots by mask
}

// match is what a lookup found: up to two accepts of the addresses, the
// latest first, with their recent-ring puts (0: from the generations).
type match struct {
	e   [2]acceptEntry
	seq [2]uint64
	n   int
}

func (m *match) add(e acceptEntry, seq uint64) bool {
	m.e[m.n], m.seq[m.n] = e, seq
	m.n++
	return m.n == 2
}

func (m *match) accept(i int) Accept {
	a := m.e[i].accept()
	a.seq = m.seq[i]
	return a
}

// acceptEntry is an Accept and, when the same addresses were accepted
// twice within one generation (a reused client port), the one before:
// 32 bytes. The maps are keyed by a 64-bit hash of the addresses under a
// seed chosen at start, not by the 36 bytes themselves: the runtime's fast
// path for integer keys, and 40-byte slots instead of 72 (hashing and
// comparing 36-byte keys, with the cache misses of the larger slots, was
// 8.6% of pqwatch's CPU at 600 handshakes a second). Two connections of
// one generation share a hash with a chance of about 2^-64 a pair (some
// 10^-11 for a full generation): the later then answers for both.
type acceptEntry struct {
	tgid, tid         uint32
	unixNano          int64
	prevTGID, prevTID uint32
	prevNano          int64 // 0: none
}

func (e acceptEntry) accept() Accept {
	return Accept{TGID: int(e.tgid), TID: int(e.tid), Time: time.Unix(0, e.unixNano)}
}

// prev is the accept before e of the same addresses within its
// generation, as an entry of its own.
func (e acceptEntry) prev() (acceptEntry, bool) {
	return acceptEntry{tgid: e.prevTGID, tid: e.prevTID, unixNano: e.prevNano}, e.prevNano != 0
}

func newAcceptIndex(max int) *acceptIndex {
	if max <= 0 {
		max = DefaultMaxAccepts
	}
	r := recentSize(max)
	n := min(acceptGens, max-r)
	x := &acceptIndex{recent: make([]recentSlot, r), heads: make([]uint64, 2*r), gens: make([]acceptGen, n), genSize: (max - r + n - 1) / n, seed: maphash.MakeSeed(), mask: uint64(r) - 1}
	x.gens[0].m = make(map[uint64]acceptEntry, x.genSize)
	return x
}

// capacity is the most entries the index holds: its bound, rounded up to
// whole generations.
func (x *acceptIndex) capacity() int { return len(x.recent) + len(x.gens)*x.genSize }

func (x *acceptIndex) put(k acceptKey, e acceptEntry) {
	h := maphash.Comparable(x.seed, k)
	x.mu.Lock()
	x.seq++
	x.entries++
	if len(x.recent) > 0 {
		i := x.seq & x.mask
		sl := &x.recent[i]
		if sl.seq != 0 && !sl.claimed {
			x.putGen(sl.h, sl.e)
		}
		*sl = recentSlot{seq: x.seq, h: h, e: e}
		hd := &x.heads[h&uint64(len(x.heads)-1)]
		sl.next = *hd
		*hd = x.seq
	} else {
		x.putGen(h, e)
	}
	x.mu.Unlock()
}

// putGen adds an accept, counted in entries already, to the newest
// generation. Under mu.
func (x *acceptIndex) putGen(h uint64, e acceptEntry) {
	g := &x.gens[x.cur]
	if len(g.m) >= x.genSize {
		x.cur = (x.cur + 1) % len(x.gens)
		g = &x.gens[x.cur]
		if g.m == nil { // sized once, at first use: it never grows (rehashing cost a quarter of a put)
			g.m = make(map[uint64]acceptEntry, x.genSize)
		}
		x.evicted += uint64(len(g.m))
		x.entries -= len(g.m)
		clear(g.m)
		g.latest = 0
	}
	if old, ok := g.m[h]; ok {
		x.replaced++
		x.entries--
		e.prevTGID, e.prevTID, e.prevNano = old.tgid, old.tid, old.unixNano
	}
	g.m[h] = e
	g.latest = max(g.latest, e.unixNano)
	x.gensLatest = max(x.gensLatest, e.unixNano)
}

// lookup returns the latest two accepts of k (the generations' get),
// from the recent ring first.
func (x *acceptIndex) lookup(k acceptKey, notBefore int64) match {
	h := maphash.Comparable(x.seed, k)
	var m match
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.recent) > 0 {
		for seq := x.heads[h&uint64(len(x.heads)-1)]; x.inRing(seq); seq = x.recent[seq&x.mask].next {
			if sl := &x.recent[seq&x.mask]; sl.h == h && !sl.claimed && (m.add(sl.e, seq) || notBefore == 0) {
				return m
			}
		}
	}
	// Accepts older than the ring's are in the generations.
	if notBefore != 0 && x.gensLatest < notBefore {
		return m
	}
	cur, prev, n := x.get(h, notBefore)
	if n > 0 && !m.add(cur, 0) && n == 2 {
		m.add(prev, 0)
	}
	return m
}

// inRing says whether put seq is still in the recent ring.
func (x *acceptIndex) inRing(seq uint64) bool {
	return seq != 0 && seq+uint64(len(x.recent)) > x.seq
}

// claim takes the recent accept of put seq out of the index.
func (x *acceptIndex) claim(seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.recent) > 0 {
		if sl := &x.recent[seq&x.mask]; sl.seq == seq && !sl.claimed {
			sl.claimed = true
			x.claimed++
			x.entries--
		}
	}
}

// get returns the latest accept of k and the one before it (n of them
// found, at most 2), newest generation first; with notBefore (Unix ns)
// set, generations whose latest accept is older are skipped.
func (x *acceptIndex) get(h uint64, notBefore int64) (cur, prev acceptEntry, n int) {
	for i := range x.gens {
		g := &x.gens[(x.cur-i+len(x.gens))%len(x.gens)]
		if g.m == nil || notBefore != 0 && g.latest < notBefore {
			continue
		}
		e, ok := g.m[h]
		if !ok {
			continue
		}
		if n == 0 {
			cur, n = e, 1
			if notBefore == 0 {
				return cur, prev, n
			}
			if p, ok := e.prev(); ok {
				return cur, p, 2
			}
			continue
		}
		return cur, e, 2
	}
	return cur, prev, n
}

func (x *acceptIndex) stats() (puts, evicted, replaced, claimed uint64, entries int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq, x.evicted, x.replaced, x.claimed, x.entries
}
