package proctrack

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNginxFailedSwapManyMasters: several nginx masters on one host, each
// its own prefix, port, pid file and error log; one gets a USR2 that fails
// (a PQ group this OpenSSL 3.0 does not know, as a rollback to an old
// build with a PQ config line does): the failed event names that master's
// generation, and only it as still serving, never another master, whether
// it started first or is in a swap of its own. The error log is read
// every 200 ms, as the agent's tailer does: the new binary that logged the
// [emerg] is gone by then, so its parent is not read from /proc.
func TestNginxFailedSwapManyMasters(t *testing.T) {
	t.Run("two", func(t *testing.T) { failedSwapMany(t, 2, false, true) })
	t.Run("three_one_mid_swap", func(t *testing.T) { failedSwapMany(t, 3, true, true) })
	// Without the pid-file watch the .oldbin rename is seen only by a scan
	// that falls inside its few milliseconds: the error log names the master.
	t.Run("error_log_only", func(t *testing.T) { failedSwapMany(t, 2, false, false) })
}

func failedSwapMany(t *testing.T, n int, midSwap, watch bool) {
	labs := make([]*nginxLab, n)
	masters := make([]int, n)
	for i := range labs {
		labs[i] = newNginxLab(t)
		labs[i].writeConf("x25519")
		masters[i] = labs[i].start()
	}
	tr := startTrackerWith(t, func(tr *Tracker) {
		if !watch {
			tr.rd.watch.close()
			tr.rd.watch = nil
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gens := make([]GenerationInfo, n)
	for i, l := range labs {
		go tailEmergEvery(ctx, l.errLog, tr, 200*time.Millisecond)
		gens[i] = genByMaster(t, tr, masters[i], 2)
	}
	// The victim is the second master: the first, started before it,
	// is the one the failure used to be pinned on.
	v := 1
	victim := labs[v]
	ours := func(id string) bool {
		return slices.ContainsFunc(gens, func(g GenerationInfo) bool { return g.ID == id })
	}
	var swapNew GenerationInfo
	if midSwap {
		// The third master is in a good swap of its own: two generations
		// alive when the victim's fails.
		l := labs[2]
		l.writeConf("secp256r1")
		l.installB()
		l.signal(masters[2], syscall.SIGUSR2)
		waitEvent(t, tr, 5*time.Second, KindUSR2, gens[2].ID)
		var pid int
		waitFor(t, 5*time.Second, "the third's new pid file", func() bool { pid = readPid(l.pid); return pid > 0 && pid != masters[2] })
		swapNew = genByMaster(t, tr, pid, 2)
	}
	if !watch {
		// The error log fact alone: each log is its master's.
		tr.mu.Lock()
		for i, l := range labs {
			got := tr.rd.logMasters(l.errLog, tr.st.procs)
			if len(got) != 1 || got[0].pid != masters[i] {
				t.Errorf("masters writing %s: %v, want %d", l.errLog, got, masters[i])
			}
		}
		tr.mu.Unlock()
	}

	victim.writeConf("X25519MLKEM768:x25519")
	usr2At := time.Now()
	victim.signal(masters[v], syscall.SIGUSR2)
	ev := waitEvent(t, tr, 6*time.Second, KindFailed, gens[v].ID)
	t.Logf("failed swap reported after %v: %+v", time.Since(usr2At).Round(time.Millisecond), ev)
	if ev.Generation != gens[v].ID || ev.Other != gens[v].ID || !strings.Contains(ev.Message, gens[v].ID+" still serves") {
		t.Errorf("failed event %+v, want about %s alone", ev, gens[v].ID)
	}
	// The [emerg] read after nginx's own verdict (its pid file renamed
	// back) joins the event; nothing more is reported.
	time.Sleep(1500 * time.Millisecond)
	var failed []Event
	for _, e := range tr.Events() {
		switch {
		case e.Kind == KindFailed && (ours(e.Generation) || e.Generation == "" && strings.Contains(e.Message, "X25519MLKEM768")):
			failed = append(failed, e)
		case (e.Kind == KindRollback || e.Kind == KindFailed) && (ours(e.Generation) || ours(e.Other) || e.Generation == swapNew.ID):
			t.Errorf("event %+v", e)
		}
	}
	if len(failed) != 1 {
		t.Errorf("%d failed events, want 1: %+v", len(failed), failed)
	}
	for _, e := range failed {
		for i, g := range gens {
			if i != v && (strings.Contains(e.Message+e.Other, g.ID) || swapNew.ID != "" && strings.Contains(e.Message+e.Other, swapNew.ID)) {
				t.Errorf("failed event names another master: %+v", e)
			}
		}
	}
	for i := range gens {
		if g, _ := tr.Generation(gens[i].ID); !g.Alive || len(g.Workers) != 2 && !(midSwap && i == 2) {
			t.Errorf("master %d after the failure: %+v", masters[i], g)
		}
	}
	if midSwap {
		if g, _ := tr.Generation(swapNew.ID); !g.Alive || g.Parent != gens[2].ID {
			t.Errorf("the third's new generation after the failure: %+v", g)
		}
	}
}

// startTrackerWith is startTracker with setup run on the tracker before
// its scans start.
func startTrackerWith(t *testing.T, setup func(*Tracker)) *Tracker {
	t.Helper()
	tr, err := New(Config{
		ScanInterval: 100 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	setup(tr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; tr.Close() })
	return tr
}

// TestWatchRenamed: the pid-file watch keeps, until a scan takes it, which
// master's pid file was renamed to .oldbin, even when it was renamed back
// before the scan; of masters sharing a pid file path, the one whose PID
// the file holds. No root, no nginx: the files are the test's.
func TestWatchRenamed(t *testing.T) {
	w := newChangeWatch(false)
	defer w.close()
	if w == nil || w.in < 0 {
		t.Skip("no inotify")
	}
	dir := t.TempDir()
	a, b, c := procKey{100, 1}, procKey{200, 2}, procKey{300, 3}
	w.watchPidFile(a, dir, "/a.pid", false)
	w.watchPidFile(b, dir, "/shared.pid", false)
	w.watchPidFile(c, dir, "/shared.pid", false)
	rename := func(from, to string) {
		t.Helper()
		if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.pid", "100\n")
	write("shared.pid", "300\n")
	if r := w.takeRenamed(); len(r) != 0 {
		t.Fatalf("renamed before any rename: %v", r)
	}
	rename("a.pid", "a.pid.oldbin")
	rename("a.pid.oldbin", "a.pid") // nginx's new binary failed
	rename("shared.pid", "shared.pid.oldbin")
	if r := w.takeRenamed(); !maps.Equal(r, map[procKey]bool{a: true, c: true}) {
		t.Fatalf("renamed %v, want %v and %v", r, a, c)
	}
	if r := w.takeRenamed(); len(r) != 0 {
		t.Fatalf("taken twice: %v", r)
	}
}
