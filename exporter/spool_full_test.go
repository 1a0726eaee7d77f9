package exporter

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// diskBudget makes spool writes behave like a file system with budget free
// bytes: a write within a file's current size (its allocated blocks)
// always succeeds, what would grow it takes from the budget, and past the
// budget the write stops short with ENOSPC.
type diskBudget struct {
	mu     sync.Mutex
	budget int64 // < 0: unlimited
	calls  int
}

func (d *diskBudget) writeAt(f *os.File, p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.budget < 0 {
		return f.WriteAt(p, off)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	allowed := max(fi.Size()-off, 0) + d.budget
	n := int64(len(p))
	if n > allowed {
		n = allowed
	}
	k, err := f.WriteAt(p[:n], off)
	if grown := off + int64(k) - fi.Size(); grown > 0 {
		d.budget -= grown
	}
	if err == nil && k < len(p) {
		err = syscall.ENOSPC
	}
	return k, err
}

func (d *diskBudget) set(b int64) {
	d.mu.Lock()
	d.budget = b
	d.mu.Unlock()
}

// checkWholeFrames fails when a segment file in dir does not end with a
// whole frame.
func checkWholeFrames(t *testing.T, dir string) (frames int) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	for _, p := range segs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for off+8 <= len(b) {
			plen := int(binary.BigEndian.Uint32(b[off:]))
			if off+8+plen > len(b) {
				break
			}
			off += 8 + plen
			frames++
		}
		if off != len(b) {
			t.Errorf("%s: %d bytes after the last whole frame at %d", filepath.Base(p), len(b)-off, off)
		}
	}
	return frames
}

// TestSpoolWriteErrorInjected: a write cut short by ENOSPC leaves whole
// frames only; the records not written are counted once each however
// often they are retried; further writes wait for a probe (no system call
// in between); the episode is reported once when it starts and once when
// it ends, with its totals; marks written while the disk is full land in
// the preallocated map, so a restart hands out exactly what is not acked.
func TestSpoolWriteErrorInjected(t *testing.T) {
	dir := t.TempDir()
	msg := func(i int) qmsg {
		return qmsg{topic: "t", key: []byte{byte('a' + i%26)}, value: []byte(strings.Repeat("v", 40+i))}
	}
	m0 := msg(0)
	sp, err := openSpool(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d := &diskBudget{budget: -1}
	clock := time.Unix(1000, 0)
	sp.writeAt, sp.now = d.writeAt, func() time.Time { return clock }
	q := newQueue(1<<20, sp)

	// Room for the map and three and a half frames.
	d.set(mapLen(1<<20) + 3*frameSize(&m0) + frameSize(&m0)/2)
	for i := range 10 {
		if r := q.push(msg(i)); r != pushMemory {
			t.Fatalf("push %d: %v", i, r)
		}
	}
	var wantBytes uint64
	for i := 3; i < 10; i++ {
		m := msg(i)
		wantBytes += uint64(frameSize(&m))
	}
	if n := q.writeAhead(q.now(), -1); n != 3 {
		t.Fatalf("wrote %d ahead, want 3", n)
	}
	if got := checkWholeFrames(t, dir); got != 3 {
		t.Errorf("%d frames on disk, want 3", got)
	}
	if rec, b := sp.WriteFailures(); rec != 7 || b != wantBytes {
		t.Errorf("write failures %d records %d bytes, want 7 and %d", rec, b, wantBytes)
	}
	reason, ok := sp.Degraded()
	if !ok || !strings.Contains(reason, "no space left") {
		t.Errorf("degraded %q %v", reason, ok)
	}
	if err := q.takeSpoolErr(); err == nil || !strings.Contains(err.Error(), "kept in memory only") {
		t.Errorf("first notice %v", err)
	}
	// Retried before a probe is due: no system call, nothing counted twice.
	calls := d.calls
	for range 5 {
		q.writeAhead(q.now(), -1)
	}
	if d.calls != calls {
		t.Errorf("%d writes while the disk is full and no probe is due", d.calls-calls)
	}
	if rec, _ := sp.WriteFailures(); rec != 7 {
		t.Errorf("write failures %d after retries, want still 7", rec)
	}
	if err := q.takeSpoolErr(); err != nil {
		t.Errorf("a second notice in the same episode: %v", err)
	}
	// A probe that fails keeps the state; then space returns.
	clock = clock.Add(probeInterval)
	q.writeAhead(q.now(), -1)
	if _, ok := sp.Degraded(); !ok {
		t.Error("not degraded after a failed probe")
	}
	// Deliver and acknowledge the three on disk while the disk is full.
	batch := q.peek(nil, 3, 1<<20)
	q.ack(len(batch), []bool{false, true, false}) // the second failed
	d.set(-1)
	clock = clock.Add(probeInterval)
	if n := q.writeAhead(q.now(), -1); n != 7 {
		t.Errorf("wrote %d ahead after space returned, want 7", n)
	}
	if _, ok := sp.Degraded(); ok {
		t.Error("still degraded after space returned")
	}
	if err := q.takeSpoolErr(); err == nil || !strings.Contains(err.Error(), "7 records") {
		t.Errorf("end notice %v, want the totals", err)
	}
	if rec, _ := sp.WriteFailures(); rec != 7 {
		t.Errorf("write failures %d, want 7", rec)
	}
	// A crash: the next run hands out the 8 not acknowledged, in order.
	sp2, err := openSpool(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for {
		m, ok, err := sp2.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, len(m.value)-40)
	}
	want := []int{1, 3, 4, 5, 6, 7, 8, 9}
	if len(got) != len(want) || !equalInts(got, want) {
		t.Errorf("after the restart: %v, want %v", got, want)
	}
	_ = sp2.close()
	_, _, _, _ = q.close()
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSpoolMapPreallocated: a new segment's ack map is written in full
// when the segment is created; a segment whose map cannot be written is
// not created (the frame is refused, not half-stored).
func TestSpoolMapPreallocated(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 1<<30, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	d := &diskBudget{budget: 100}
	sp.writeAt = d.writeAt
	m := qmsg{topic: "t", value: []byte("x")}
	if sp.append(&m) {
		t.Fatal("appended without room for the map")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left by the refused segment: %v", left)
	}
	d.set(-1)
	sp.retryNow()
	if !sp.append(&m) {
		t.Fatal("not appended with room")
	}
	maps, _ := filepath.Glob(filepath.Join(dir, "*"+mapSuffix))
	if len(maps) != 1 {
		t.Fatalf("maps %v", maps)
	}
	fi, _ := os.Stat(maps[0])
	if fi.Size() != mapLen(4<<20) || fi.Size() > 48<<10 {
		t.Errorf("map of a 4 MiB segment: %d bytes, want %d (under 48 KiB)", fi.Size(), mapLen(4<<20))
	}
	if rec, _ := sp.WriteFailures(); rec != 1 {
		t.Errorf("write failures %d, want 1", rec)
	}
	if err := sp.close(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Error(err)
	}
}

// BenchmarkSpoolAppend: an overflow record written to the spool (one write
// a record, whole frames only).
func BenchmarkSpoolAppend(b *testing.B) {
	sp, err := openSpool(b.TempDir(), 1<<40, 4<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.close()
	m := qmsg{topic: testTopic, key: []byte(seqRecord(0).Server), value: AppendJSON(nil, seqRecord(0))}
	b.SetBytes(frameSize(&m))
	b.ReportAllocs()
	for b.Loop() {
		if !sp.append(&m) {
			b.Fatal("not appended")
		}
	}
}

// BenchmarkSpoolWriteAhead: records in memory written ahead, 1000 to a
// write.
func BenchmarkSpoolWriteAhead(b *testing.B) {
	sp, err := openSpool(b.TempDir(), 1<<40, 4<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.close()
	m := qmsg{topic: testTopic, key: []byte(seqRecord(0).Server), value: AppendJSON(nil, seqRecord(0))}
	q := newQueue(1<<40, sp)
	b.SetBytes(frameSize(&m))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.push(m)
		if i++; i%1000 == 0 {
			q.writeAhead(q.now(), -1)
			q.mu.Lock()
			q.items, q.head, q.written, q.bytes = q.items[:0], 0, 0, 0
			q.mu.Unlock()
		}
	}
}
