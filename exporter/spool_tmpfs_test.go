package exporter

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smallTmpfs mounts a tmpfs of size bytes (root only) and returns its
// directory; it is unmounted when the test ends.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a genuinely full file system)")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a filler file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1024)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), "no space left") {
				t.Fatal(err)
			}
			return p
		}
	}
}

// TestSpoolTmpfsFull: on a genuinely full tmpfs, marks still land (in the
// preallocated maps), a refused write leaves no partial frame, writing
// resumes within a second of space returning, and a restart hands out
// exactly the frames not acknowledged.
func TestSpoolTmpfsFull(t *testing.T) {
	fs := smallTmpfs(t, "512k")
	dir := filepath.Join(fs, "spool")
	msg := func(i int) qmsg {
		return qmsg{topic: "t", key: []byte{byte(i)}, value: []byte(strings.Repeat("v", 500))}
	}
	m0 := msg(0)
	seg := 10 * frameSize(&m0)
	sp, err := openSpool(dir, 1<<30, seg)
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(1<<30, sp)
	const n = 100
	for i := range n {
		q.push(msg(i))
	}
	if w := q.writeAhead(q.now(), -1); w != n {
		t.Fatalf("wrote %d of %d ahead", w, n)
	}
	filler := fill(t, fs)
	// Delivered and acknowledged while the disk is full: every other one
	// (a partition failing), so no segment is removed to free space.
	failed := make([]bool, n)
	for i := range failed {
		failed[i] = i%2 == 1
	}
	q.peek(nil, n, 1<<30)
	q.ack(n, failed)
	if reason, ok := sp.Degraded(); ok {
		t.Errorf("marking while the disk is full degraded the spool: %s", reason)
	}
	// A new record cannot be written: refused, counted, no partial frame.
	for i := n; i < n+20; i++ {
		q.push(msg(i))
	}
	q.writeAhead(q.now(), -1)
	if rec, _ := sp.WriteFailures(); rec != 20 {
		t.Errorf("write failures %d, want 20", rec)
	}
	if _, ok := sp.Degraded(); !ok {
		t.Error("not degraded on a full disk")
	}
	if frames := checkWholeFrames(t, dir); frames != n {
		t.Errorf("%d frames on disk, want %d", frames, n)
	}
	// Space returns: writing resumes within a second, by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for {
		q.writeAhead(q.now(), -1) // the Kafka sink ticks every SpoolAfter/2
		if _, ok := sp.Degraded(); !ok {
			break
		}
		if time.Since(freed) > 2*time.Second {
			t.Fatal("still degraded 2s after space returned")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(freed); d > time.Second {
		t.Errorf("writing resumed %v after space returned, want within 1s", d)
	}
	t.Logf("writing resumed %v after space returned", time.Since(freed).Round(time.Millisecond))
	if rec, _ := sp.WriteFailures(); rec != 20 {
		t.Errorf("write failures %d, want 20", rec)
	}
	if frames := checkWholeFrames(t, dir); frames != n+20 {
		t.Errorf("%d frames after space returned, want %d", frames, n+20)
	}
	// Clean stop, restart: the 50 unacknowledged and the 20 new ones.
	if _, _, _, err := q.close(); err != nil {
		t.Fatal(err)
	}
	sp2, err := openSpool(dir, 1<<30, seg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.close()
	var got []int
	for {
		m, ok, err := sp2.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, int(m.key[0]))
	}
	var want []int
	for i := range n + 20 {
		if i >= n || i%2 == 1 {
			want = append(want, i)
		}
	}
	if !equalInts(got, want) {
		t.Errorf("after the restart: %d records %v, want %d %v", len(got), got, len(want), want)
	}
}

// TestKafkaSpoolTmpfsFull: the Kafka sink on a genuinely full tmpfs with
// the broker down: the records the spool cannot take are dropped and
// counted (as many as are missing at the end), none is cut, the state is
// degraded until space returns and then clears within a second; after the
// broker returns and a restart, every record not dropped is delivered
// exactly once.
func TestKafkaSpoolTmpfsFull(t *testing.T) {
	fs := smallTmpfs(t, "512k")
	addr, start := deadBroker(t, testTopic)
	cfg := spoolConfig(t, addr)
	cfg.SpoolDir = filepath.Join(fs, "spool")
	cfg.SpoolBytes = 1 << 30
	cfg.SpoolAfter = 100 * time.Millisecond
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dropped := map[int]bool{}
	write := func(from, to int) {
		for i := from; i < to; i++ {
			switch err := k.Write(seqRecord(i)); {
			case errors.Is(err, ErrDropped):
				dropped[i] = true
			case err != nil:
				t.Fatalf("write %d: %v", i, err)
			}
		}
	}
	write(0, 40) // 5 in memory, written ahead, 35 spooled
	if len(dropped) != 0 {
		t.Fatalf("dropped %d with room", len(dropped))
	}
	filler := fill(t, fs)
	write(40, 80)
	// The last page of the segment file may take a few more.
	nDropped := len(dropped)
	if rec, _ := k.SpoolWriteFailures(); rec != uint64(nDropped) || nDropped < 30 {
		t.Errorf("spool write failures %d, dropped %d, want them equal and most of 40", rec, nDropped)
	}
	if st := k.Stats(); st.Dropped != uint64(nDropped) {
		t.Errorf("stats %+v, want %d dropped", st, nDropped)
	}
	if _, ok := k.SpoolDegraded(); !ok {
		t.Error("not degraded on a full disk")
	}
	checkWholeFrames(t, cfg.SpoolDir)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for {
		if _, ok := k.SpoolDegraded(); !ok {
			break
		}
		if time.Since(freed) > 2*time.Second {
			t.Fatal("still degraded 2s after space returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(freed); d > time.Second {
		t.Errorf("degraded cleared %v after space returned, want within 1s", d)
	}
	t.Logf("writing resumed %v after space returned", time.Since(freed).Round(time.Millisecond))
	write(80, 90) // spooled again
	if len(dropped) != nDropped {
		t.Errorf("dropped %d after space returned, want still %d", len(dropped), nDropped)
	}
	want := 90 - nDropped
	c := start()
	waitDelivered(t, k, 30, 15*time.Second) // part of it; the rest after the restart
	if err := closeShort(t, k); err != nil {
		t.Logf("close: %v", err)
	}
	k2, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for k.Stats().Delivered+k2.Stats().Delivered < uint64(want) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if err := k2.Close(ctx); err != nil {
		t.Error(err)
	}
	got := readAll(t, c.ListenAddrs()[0], testTopic, want, 10*time.Second)
	seen := map[int]int{}
	for _, m := range got {
		seen[m.seq]++
	}
	missing, dup := 0, 0
	for i := range 90 {
		switch {
		case dropped[i] && seen[i] > 0:
			t.Errorf("record %d counted as dropped and delivered", i)
		case !dropped[i] && seen[i] == 0:
			missing++
		case seen[i] > 1:
			dup++
		}
	}
	t.Logf("%d of 90 dropped (the disk full), %d delivered before the restart, %d after", nDropped, k.Stats().Delivered, k2.Stats().Delivered)
	if missing != 0 || dup != 0 || len(got) != want {
		t.Errorf("read %d records, want %d: %d missing, %d delivered twice (delivered %d before the restart, %d after)",
			len(got), want, missing, dup, k.Stats().Delivered, k2.Stats().Delivered)
	}
}
