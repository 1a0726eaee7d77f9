package logparse

import (
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// criWriter writes CRI lines as containerd does: into the file it holds
// open, which kubelet may have renamed, until it is told to reopen.
type criWriter struct {
	t      *testing.T
	path   string
	f      *os.File
	seq    int
	stderr int
}

func (w *criWriter) open() {
	w.t.Helper()
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		w.t.Fatal(err)
	}
	if w.f != nil {
		w.f.Close()
	}
	w.f = f
}

// lines writes n access lines on stdout, each third one in two partials,
// and an error line on stderr after every fifth.
func (w *criWriter) lines(n int) {
	w.t.Helper()
	var b strings.Builder
	for range n {
		line := fmt.Sprintf("10.0.0.1 - - seq=%d end", w.seq)
		if w.seq%3 == 0 {
			fmt.Fprintf(&b, "%s stdout P %s\n", criTime, line[:8])
			fmt.Fprintf(&b, "%s stdout F %s\n", criTime, line[8:])
		} else {
			fmt.Fprintf(&b, "%s stdout F %s\n", criTime, line)
		}
		if w.seq%5 == 0 {
			fmt.Fprintf(&b, "%s stderr F [error] %d\n", criTime, w.seq)
			w.stderr++
		}
		w.seq++
	}
	if _, err := w.f.WriteString(b.String()); err != nil {
		w.t.Fatal(err)
	}
}

// partial writes the first half of a line whose end comes later.
func (w *criWriter) partial() {
	fmt.Fprintf(w.f, "%s stdout P 10.0.0.1 - - seq=%d\n", criTime, w.seq)
}

func (w *criWriter) rest() {
	fmt.Fprintf(w.f, "%s stdout F  end\n", criTime)
	w.seq++
}

// gzipAway compresses name into name.gz and removes it, as kubelet does with
// a rotated log at the next rotation.
func gzipAway(t *testing.T, name string) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(name + ".gz")
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	zw.Write(data)
	zw.Close()
	f.Close()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

// unwrapCollector unwraps what a tailer delivers and keeps the stdout lines.
type unwrapCollector struct {
	mu     sync.Mutex
	u      Unwrapper
	lines  []string
	stderr int
	errs   []error
}

func (c *unwrapCollector) add(raw []byte, _ time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	content, s, complete, err := c.u.Unwrap(raw)
	switch {
	case err != nil:
		c.errs = append(c.errs, err)
	case !complete:
	case s == StreamStderr:
		c.stderr++
	default:
		c.lines = append(c.lines, string(content))
	}
}

func (c *unwrapCollector) waitFor(n int, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		c.mu.Lock()
		got := append([]string(nil), c.lines...)
		c.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func checkSeq(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Errorf("%d lines, want %d", len(got), n)
	}
	for i, l := range got {
		if want := fmt.Sprintf("10.0.0.1 - - seq=%d end", i); l != want {
			t.Fatalf("line %d is %q, want %q (every line once, in order)", i, l, want)
		}
	}
}

// TestTailKubeletRotation follows a container log through kubelet's
// rotation: 0.log renamed to 0.log.TIMESTAMP, lines still written to the
// renamed file until the runtime reopens, a partial line whose end is in
// the new file, a new 0.log, and at the next rotation the previous rotated
// file gzipped away. Every line arrives once, in order, with no gap.
func TestTailKubeletRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	w := &criWriter{t: t, path: path}
	w.open()
	defer func() { w.f.Close() }()
	w.lines(10)

	var c unwrapCollector
	tl := NewTailer(path, TailOptions{PollInterval: 2 * time.Millisecond, RotateWait: 200 * time.Millisecond})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- tl.Run(ctx, c.add) }()
	c.waitFor(10, 2*time.Second)

	rotate := func(stamp string) string {
		rotated := path + "." + stamp
		if err := os.Rename(path, rotated); err != nil {
			t.Fatal(err)
		}
		w.lines(5) // before the runtime reopens: into the renamed file
		w.partial()
		time.Sleep(10 * time.Millisecond) // the tailer polls with no file at the path
		w.open()                          // ReopenContainerLog: a new 0.log
		w.rest()
		w.lines(10)
		return rotated
	}
	first := rotate("20261205-085845")
	c.waitFor(26, 2*time.Second)
	gzipAway(t, first)
	rotate("20261205-085900")
	got := c.waitFor(42, 2*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkSeq(t, got, 42)
	st := tl.Stats()
	if st.Rotations != 2 || st.Gaps != 0 || st.Truncations != 0 {
		t.Errorf("stats %+v, want 2 rotations and no gap", st)
	}
	if c.stderr != w.stderr || len(c.errs) != 0 {
		t.Errorf("stderr lines %d (want %d), errors %v", c.stderr, w.stderr, c.errs)
	}
}

// TestTailKubeletRotationWhileStopped: the tailer is stopped (its offset
// saved), kubelet rotates and the runtime writes on into both files; the
// restarted tailer finds the renamed file at 0.log.TIMESTAMP by its inode
// and reads its rest before the new 0.log.
func TestTailKubeletRotationWhileStopped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	opts := TailOptions{PollInterval: 2 * time.Millisecond, RotateWait: 50 * time.Millisecond, OffsetFile: filepath.Join(dir, "offset")}
	w := &criWriter{t: t, path: path}
	w.open()
	defer func() { w.f.Close() }()
	w.lines(10)

	var c unwrapCollector
	run := func(want int) *Tailer {
		tl := NewTailer(path, opts)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tl.Run(ctx, c.add) }()
		c.waitFor(want, 2*time.Second)
		time.Sleep(20 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return tl
	}
	run(10)
	w.lines(5)
	if err := os.Rename(path, path+".20261205-085845"); err != nil {
		t.Fatal(err)
	}
	w.lines(5)
	w.open()
	w.lines(5)
	tl := run(25)
	checkSeq(t, c.waitFor(25, 0), 25)
	if st := tl.Stats(); st.Gaps != 0 {
		t.Errorf("stats %+v, want no gap", st)
	}
}
