//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package proctrack

import (
	"encoding/binary"
	"slices"
	"testing"
)

// fakeRing is a ring buffer laid out as the kernel maps it, in plain
// memory: its data pages "mapped twice" by writing every byte to both
// copies.
type fakeRing struct {
	r    *ringReader
	size uint64
	prod uint64
}

func newFakeRing(size int) *fakeRing {
	prod := make([]byte, 8+2*size)
	return &fakeRing{r: &ringReader{cons: make([]byte, 8), prod: prod, data: prod[8:], mask: uint64(size - 1)}, size: uint64(size)}
}

// write reserves a record of payload p with header flags, as the kernel
// does, and returns its position.
func (f *fakeRing) write(p []byte, flags uint32) uint64 {
	at := f.prod
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(p))|flags)
	rec = binary.LittleEndian.AppendUint32(rec, 0)
	rec = append(rec, p...)
	for len(rec)%8 != 0 {
		rec = append(rec, 0)
	}
	for i, c := range rec {
		o := (at + uint64(i)) & f.r.mask
		f.r.data[o], f.r.data[o+f.size] = c, c
	}
	f.prod += uint64(len(rec))
	binary.LittleEndian.PutUint64(f.r.prod, f.prod)
	return at
}

func (f *fakeRing) commit(at uint64) {
	o := at & f.r.mask
	h := binary.LittleEndian.Uint32(f.r.data[o:]) &^ ringBusyBit
	for _, off := range []uint64{o, o + f.size} {
		binary.LittleEndian.PutUint32(f.r.data[off:], h)
	}
}

func (f *fakeRing) readAll(t *testing.T) []string {
	t.Helper()
	var got []string
	if _, err := f.r.read(func(b []byte) { got = append(got, string(b)) }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestRingReader: records are read in order, across the end of the ring,
// discarded ones skipped, and reading stops at one still being written and
// resumes there once it is committed.
func TestRingReader(t *testing.T) {
	f := newFakeRing(64)
	f.write([]byte("first"), 0)
	f.write([]byte("gone"), ringDiscardBit)
	f.write([]byte("second-record"), 0)
	if got := f.readAll(t); !slices.Equal(got, []string{"first", "second-record"}) {
		t.Fatalf("got %q", got)
	}
	if f.r.available() != 0 {
		t.Fatalf("available %d after reading everything", f.r.available())
	}
	// The next record wraps past the end of the 64-byte ring.
	f.write([]byte("wraps-around-the-end"), 0)
	busy := f.write([]byte("busy"), ringBusyBit)
	f.write([]byte("after"), 0)
	if got := f.readAll(t); !slices.Equal(got, []string{"wraps-around-the-end"}) {
		t.Fatalf("got %q, want the wrapped record and a stop at the busy one", got)
	}
	if f.r.available() == 0 {
		t.Fatal("the busy record and the one after it should still be available")
	}
	f.commit(busy)
	if got := f.readAll(t); !slices.Equal(got, []string{"busy", "after"}) {
		t.Fatalf("got %q after the commit", got)
	}
	// A header longer than the ring is refused; skip gives it all up.
	f.write(nil, 1000)
	if _, err := f.r.read(func([]byte) {}); err != errRingCorrupt {
		t.Fatalf("corrupt header: %v", err)
	}
	f.r.skip()
	if f.r.available() != 0 {
		t.Fatal("skip left bytes behind")
	}
}

// BenchmarkRingReader is the per-event cost of draining the accept ring
// (an event's 56 bytes), without the index.
func BenchmarkRingReader(b *testing.B) {
	f := newFakeRing(1 << 16)
	ev := make([]byte, eventSize)
	got := 0
	for b.Loop() {
		b.StopTimer() // the fake producer is slow: not measured
		for range 512 {
			f.write(ev, 0)
		}
		b.StartTimer()
		if _, err := f.r.read(func([]byte) { got++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(got), "ns/event")
}
