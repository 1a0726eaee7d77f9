package logparse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// collector runs a Tailer and records the lines it delivers.
type collector struct {
	mu    sync.Mutex
	lines []string
}

func (c *collector) add(line []byte, _ time.Time) {
	c.mu.Lock()
	c.lines = append(c.lines, string(line))
	c.mu.Unlock()
}

func (c *collector) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func (c *collector) waitFor(t *testing.T, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := c.snapshot()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startTailer(t *testing.T, path string, opts TailOptions, c *collector) (*Tailer, func() error) {
	t.Helper()
	tl := NewTailer(path, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, c.add) }()
	return tl, func() error { cancel(); return <-done }
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestTailPartialAndTooLong(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	appendFile(t, path, "first\nsec")
	var c collector
	var counters LineCounters
	tl, stop := startTailer(t, path, TailOptions{PollInterval: 2 * time.Millisecond, MaxLineBytes: 50, Counters: &counters}, &c)
	if got := c.waitFor(t, 1, 2*time.Second); len(got) != 1 || got[0] != "first" {
		t.Fatalf("got %q", got)
	}
	time.Sleep(20 * time.Millisecond)
	if got := c.snapshot(); len(got) != 1 {
		t.Fatalf("partial line delivered early: %q", got)
	}
	appendFile(t, path, "ond\r\n")
	appendFile(t, path, strings.Repeat("x", 120)+"\n")
	appendFile(t, path, strings.Repeat("y", 40)) // grows past the cap across writes
	time.Sleep(10 * time.Millisecond)
	appendFile(t, path, strings.Repeat("y", 40)+"\nthird\n")
	got := c.waitFor(t, 3, 2*time.Second)
	if strings.Join(got, ",") != "first,second,third" {
		t.Fatalf("got %q", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := tl.Stats(); st.TooLong != 2 || st.Lines != 3 || counters.Snapshot().TooLong != 2 {
		t.Fatalf("stats %+v counters %+v", st, counters.Snapshot())
	}
	if _, off := tl.Offset(); off != int64(len("first\nsecond\r\n")+121+81+6) {
		t.Fatalf("offset %d", off)
	}
}

func TestTailStartAtEndAndBadOffsetFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	appendFile(t, path, "old1\nold2\npart")
	var c collector
	_, stop := startTailer(t, path, TailOptions{PollInterval: 2 * time.Millisecond, StartAtEnd: true}, &c)
	time.Sleep(20 * time.Millisecond)
	appendFile(t, path, "ial\nnew\n")
	got := c.waitFor(t, 2, 2*time.Second)
	stop()
	if strings.Join(got, ",") != "partial,new" {
		t.Fatalf("got %q", got)
	}
	bad := filepath.Join(dir, "bad.offset")
	os.WriteFile(bad, []byte("nonsense\n"), 0o600)
	err := NewTailer(path, TailOptions{OffsetFile: bad}).Run(context.Background(), func([]byte, time.Time) {})
	if !errors.Is(err, ErrOffsetFile) {
		t.Fatalf("err = %v, want ErrOffsetFile", err)
	}
}

// TestTailRotationUnderLoad writes 100,000 lines while the file is rotated 50
// times (alternating rename-and-create and copytruncate, some lines written
// in two parts) and the tailer is stopped and restarted twice from its
// offset file: every line must arrive exactly once.
func TestTailRotationUnderLoad(t *testing.T) {
	const (
		total     = 100_000
		rotations = 50
		every     = total / (rotations + 1)
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	offFile := filepath.Join(dir, "access.offset")
	opts := TailOptions{PollInterval: 3 * time.Millisecond, OffsetFile: offFile, SaveInterval: 50 * time.Millisecond, RotateWait: 30 * time.Millisecond}

	var c collector
	progress := make(chan int, total)
	writerDone := make(chan error, 1)
	go func() { writerDone <- writeWithRotation(path, total, every, progress) }()

	var stats []TailStats
	tl, stop := startTailer(t, path, opts, &c)
	restartAt := []int{total / 3, 2 * total / 3}
	for written := range progress {
		if len(restartAt) > 0 && written >= restartAt[0] {
			restartAt = restartAt[1:]
			if err := stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			stats = append(stats, tl.Stats())
			time.Sleep(15 * time.Millisecond) // the writer goes on meanwhile
			tl, stop = startTailer(t, path, opts, &c)
		}
	}
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, total, 15*time.Second)
	time.Sleep(50 * time.Millisecond) // let duplicates, if any, arrive
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stats = append(stats, tl.Stats())
	got := c.snapshot()

	seen := make([]int, total)
	bad := 0
	for _, l := range got {
		n, err := strconv.Atoi(strings.TrimPrefix(strings.Fields(l + " x")[0], "seq="))
		if err != nil || n < 0 || n >= total || !strings.HasSuffix(l, " end") {
			bad++
			if bad < 5 {
				t.Errorf("corrupt line %q", l)
			}
			continue
		}
		seen[n]++
	}
	missing, dup := 0, 0
	for i, n := range seen {
		switch {
		case n == 0:
			missing++
			if missing < 5 {
				t.Errorf("line %d never read", i)
			}
		case n > 1:
			dup++
			if dup < 5 {
				t.Errorf("line %d read %d times", i, n)
			}
		}
	}
	var rot, trunc, gaps uint64
	for _, s := range stats {
		rot += s.Rotations
		trunc += s.Truncations
		gaps += s.Gaps
	}
	t.Logf("lines=%d missing=%d duplicated=%d corrupt=%d rotations=%d truncations=%d gaps=%d", len(got), missing, dup, bad, rot, trunc, gaps)
	if rot+trunc < rotations/2 {
		t.Errorf("only %d rotations and %d truncations seen", rot, trunc)
	}
}

// writeWithRotation writes total numbered lines, rotating every `every`
// lines, alternating rename-and-create (odd) and copytruncate (even) as
// logrotate does them. It reports progress every 1000 lines.
func writeWithRotation(path string, total, every int, progress chan<- int) error {
	defer close(progress)
	open := func() (*os.File, error) {
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	f, err := open()
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	rot := 0
	pad := strings.Repeat("p", 60)
	for i := range total {
		if i > 0 && i%every == 0 && rot < 50 {
			rot++
			if rot%2 == 1 {
				if err := os.Rename(path, path+".1"); err != nil {
					return err
				}
				nf, err := open()
				if err != nil {
					return err
				}
				f.Close()
				f = nf
			} else {
				if err := copyFile(path, path+".1"); err != nil {
					return err
				}
				if err := f.Truncate(0); err != nil {
					return err
				}
			}
		}
		line := fmt.Sprintf("seq=%d %s %d end\n", i, pad[:i%61], i)
		if i%7 == 0 {
			// Two writes: the tailer may see the first half alone.
			h := len(line) / 2
			if _, err := f.WriteString(line[:h]); err != nil {
				return err
			}
			if i%1000 == 0 {
				time.Sleep(time.Millisecond)
			}
			line = line[h:]
		}
		if _, err := f.WriteString(line); err != nil {
			return err
		}
		if i%25 == 0 {
			time.Sleep(time.Millisecond)
		}
		if i%1000 == 999 {
			progress <- i + 1
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// TestTailRefusesSpecialFiles: a FIFO, a device and a symbolic link that
// was not allowed are refused (said once, counted), and the tailer still
// stops at once when asked; an allowed link is followed.
func TestTailRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("2026/01/01 12:00:00 [emerg] 1#1: the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "error.log")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		path  string
		dirs  []string
		lines int
	}{
		"fifo":           {fifo, nil, 0},
		"device":         {"/dev/zero", nil, 0},
		"link refused":   {link, nil, 0},
		"link elsewhere": {link, []string{dir}, 0},
		"link allowed":   {link, []string{secretDir}, 1},
		"everything (/)": {link, []string{"/"}, 1},
	} {
		var logs bytes.Buffer
		tl := NewTailer(c.path, TailOptions{PollInterval: 10 * time.Millisecond, SymlinkDirs: c.dirs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		n := 0
		start := time.Now()
		if err := tl.Run(ctx, func([]byte, time.Time) { n++ }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		cancel()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: Run took %v to stop", name, d)
		}
		refused := c.lines == 0
		if n != c.lines || (tl.Stats().Refused > 0) != refused || refused && strings.Count(logs.String(), "refusing") != 1 {
			t.Errorf("%s: %d lines, %d refusals, log:\n%s", name, n, tl.Stats().Refused, logs.String())
		}
	}
}
