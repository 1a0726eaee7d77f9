package capture

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeBlocks lays out a TPACKET_V3 ring in plain memory as the kernel
// fills it.
type fakeBlocks struct {
	b *blockReader
}

func newFakeBlocks(blockSize, n int) *fakeBlocks {
	return &fakeBlocks{b: &blockReader{mem: make([]byte, blockSize*n), blockSize: blockSize, nblocks: n}}
}

// retire fills block i with pkts (each at the 16-byte aligned offset the
// kernel uses, tp_next_offset set unless noNext) and hands it to user space.
func (f *fakeBlocks) retire(i int, sec uint32, noNext bool, pkts ...string) {
	base := i * f.b.blockSize
	le := binary.LittleEndian
	const first, mac = 48, 80
	off := first
	for k, p := range pkts {
		h := f.b.mem[base+off:]
		next := tpAlign(mac + len(p))
		if noNext || k == len(pkts)-1 {
			le.PutUint32(h[phNext:], 0)
		} else {
			le.PutUint32(h[phNext:], uint32(next))
		}
		le.PutUint32(h[phSec:], sec)
		le.PutUint32(h[phNsec:], uint32(k))
		le.PutUint32(h[phSnaplen:], uint32(len(p)))
		le.PutUint16(h[phMac:], mac)
		copy(h[mac:], p)
		off += next
	}
	le.PutUint32(f.b.mem[base+bdNumPkts:], uint32(len(pkts)))
	le.PutUint32(f.b.mem[base+bdFirstPkt:], first)
	le.PutUint32(f.b.mem[base+bdStatus:], unix.TP_STATUS_USER)
}

func (f *fakeBlocks) owner(i int) uint32 {
	return binary.LittleEndian.Uint32(f.b.mem[i*f.b.blockSize+bdStatus:])
}

func (f *fakeBlocks) drain(t *testing.T) (got []string) {
	t.Helper()
	for {
		data, ts, ok := f.b.read()
		if !ok {
			return got
		}
		if ts.Before(time.Unix(1, 0)) {
			t.Fatalf("timestamp %v", ts)
		}
		got = append(got, string(data))
	}
}

// TestBlockReader: packets come out in order, block after block, across
// the end of the ring, with and without tp_next_offset; a block is given
// back to the kernel once its packets were read, an empty one at once; the
// reader stops at a block the kernel still owns and says so in ready; a
// header pointing outside its block costs the rest of that block, nothing
// more.
func TestBlockReader(t *testing.T) {
	f := newFakeBlocks(4096, 3)
	if f.b.ready() {
		t.Fatal("ready on an empty ring")
	}
	f.retire(0, 10, false, "a1", "a2-longer-than-sixteen-bytes", "a3")
	f.retire(1, 11, true, "b1")
	if !f.b.ready() {
		t.Fatal("not ready with two retired blocks")
	}
	if got := f.drain(t); !slices.Equal(got, []string{"a1", "a2-longer-than-sixteen-bytes", "a3", "b1"}) {
		t.Fatalf("got %q", got)
	}
	if f.owner(0) != unix.TP_STATUS_KERNEL || f.owner(1) != unix.TP_STATUS_KERNEL {
		t.Fatalf("blocks not given back: %d %d", f.owner(0), f.owner(1))
	}
	if f.b.ready() {
		t.Fatal("ready after the drain")
	}
	f.retire(2, 12, false) // retired empty (a block timeout with nothing)
	f.retire(0, 13, false, "c1")
	if got := f.drain(t); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("after the wrap: %q", got)
	}
	if f.owner(2) != unix.TP_STATUS_KERNEL || f.owner(0) != unix.TP_STATUS_KERNEL {
		t.Fatal("the empty block or the wrapped one not given back")
	}
	// Block 1 with a packet whose tp_mac points past the block.
	f.retire(1, 14, false, "bad", "lost")
	binary.LittleEndian.PutUint16(f.b.mem[1*4096+48+phMac:], 5000)
	f.retire(2, 15, false, "d1")
	if got := f.drain(t); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("after a bad header: %q", got)
	}
	if f.b.skipped != 1 {
		t.Errorf("%d blocks counted as skipped, want 1", f.b.skipped)
	}
}

// BenchmarkBlockReader is the per-packet cost of reading a ring: blocks
// of 64 packets of 300 bytes, each block handed back and retired again.
func BenchmarkBlockReader(b *testing.B) {
	f := newFakeBlocks(1<<16, 4)
	pkt := string(make([]byte, 300))
	pkts := make([]string, 64)
	for i := range pkts {
		pkts[i] = pkt
	}
	for i := range 4 {
		f.retire(i, 1, false, pkts...)
	}
	n := 0
	for b.Loop() {
		if _, _, ok := f.b.read(); !ok {
			// Every block was given back: hand them all over again.
			for i := range 4 {
				binary.LittleEndian.PutUint32(f.b.mem[i*f.b.blockSize+bdStatus:], unix.TP_STATUS_USER)
			}
			continue
		}
		n++
	}
	b.ReportMetric(float64(n)/float64(b.N), "packets/op")
}
