package proctrack

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The swap state machine against snapshot values: no root, no nginx, no
// /proc. Each test drives step the way scans of a real nginx would see it
// (the live tests in nginx_test.go and accept_nginx_test.go check the same
// kinds on a real one).

// fixture is a host's server processes, scanned by step one snapshot at a
// time, a second apart.
type fixture struct {
	t      *testing.T
	st     *swapState
	now    time.Time
	procs  map[int]procSnap
	alive  map[int]bool // processes outside the snapshot that exist
	events []Event      // every event so far
}

func newFixture(t *testing.T) *fixture {
	return &fixture{
		t:     t,
		st:    newSwapState(swapConfig{failedSwapTimeout: 3 * time.Second, maxGenerations: 32}),
		now:   time.Unix(1_800_000_000, 0),
		procs: map[int]procSnap{},
		alive: map[int]bool{},
	}
}

// nginxBinary is the identity of an nginx binary called name.
func nginxBinary(name string) identity {
	h := sha256.Sum256([]byte(name))
	sum := hex.EncodeToString(h[:])
	return identity{fkey: fileKey{Ino: binary.LittleEndian.Uint64(h[:8])}, exe: "/usr/sbin/" + name, sha256: sum, openssl: "OpenSSL " + name, conf: "/etc/nginx/nginx.conf", pidFile: "/run/nginx.pid"}
}

// master starts an nginx master: top-level (ppid 1) or, with a master
// parent, the USR2 child, first as a fork that has not exec'd (it carries
// its parent's binary and title) until exec.
func (f *fixture) master(pid, ppid int, bin identity) {
	f.procs[pid] = procSnap{key: procKey{pid, uint64(pid)}, ppid: ppid, comm: "nginx", role: roleMaster, ident: bin, started: f.now}
}

// fork is the USR2 child before its execve: its parent's title and binary.
func (f *fixture) fork(pid, parent int) {
	p := f.procs[parent]
	f.procs[pid] = procSnap{key: procKey{pid, uint64(pid)}, ppid: parent, comm: "nginx", role: roleMaster, ident: p.ident, forkNoExec: true, started: f.now}
}

// exec is the USR2 child's execve of bin.
func (f *fixture) exec(pid int, bin identity) {
	p := f.procs[pid]
	p.forkNoExec, p.ident = false, bin
	f.procs[pid] = p
}

func (f *fixture) workers(master int, pids ...int) {
	for _, pid := range pids {
		f.procs[pid] = procSnap{key: procKey{pid, uint64(pid)}, ppid: master, comm: "nginx", role: roleWorker, forkNoExec: true, ticks: 10, rssBytes: 1 << 20, started: f.now}
	}
}

func (f *fixture) drain(pids ...int) {
	for _, pid := range pids {
		p := f.procs[pid]
		p.role = roleDrain
		f.procs[pid] = p
	}
}

func (f *fixture) exit(pids ...int) {
	for _, pid := range pids {
		delete(f.procs, pid)
	}
}

func (f *fixture) oldbin(master int, on bool) {
	p := f.procs[master]
	p.oldbin = on
	f.procs[master] = p
}

// scan steps the state machine over the current processes and returns
// the kinds of the events it emitted.
func (f *fixture) scan(emergs ...emergNote) []string {
	f.t.Helper()
	snap := &snapshot{alive: f.alive}
	for _, p := range f.procs {
		snap.procs = append(snap.procs, p)
	}
	slices.SortFunc(snap.procs, func(a, b procSnap) int { return a.key.pid - b.key.pid })
	var out stepOut
	f.st, out = step(f.st, snap, emergs, f.now)
	f.now = f.now.Add(time.Second)
	var kinds []string
	for _, e := range out.events {
		kinds = append(kinds, e.Kind)
	}
	f.events = append(f.events, out.events...)
	return kinds
}

// expect scans and checks the kinds emitted.
func (f *fixture) expect(what string, kinds ...string) {
	f.t.Helper()
	if got := f.scan(); !slices.Equal(got, kinds) {
		f.t.Fatalf("%s: events %v, want %v (all: %+v)", what, got, kinds, f.events)
	}
}

// gen is the generation of master pid.
func (f *fixture) gen(pid int) *generation {
	f.t.Helper()
	for _, g := range f.st.order {
		if g.key.pid == pid {
			return g
		}
	}
	f.t.Fatalf("no generation of master %d", pid)
	return nil
}

// servedBy checks that worker pid's record names master.
func (f *fixture) servedBy(pid, master int) {
	f.t.Helper()
	p := f.st.procs[pid]
	if p == nil || p.rec == nil || p.rec.WorkerPID != pid || p.rec.MasterPID != master || p.rec.ID != f.gen(master).id {
		f.t.Fatalf("worker %d: %+v, want master %d", pid, p, master)
	}
}

func (f *fixture) last() Event { return f.events[len(f.events)-1] }

// TestStepBinarySwap: USR2 (the child counts once it has exec'd), WINCH,
// QUIT; the workers of each generation are attributed to their master
// throughout, and the overlap is a swap in progress.
func TestStepBinarySwap(t *testing.T) {
	f := newFixture(t)
	a, b := nginxBinary("nginx-3.0"), nginxBinary("nginx-3.5")
	f.master(100, 1, a)
	f.workers(100, 101, 102)
	f.expect("start")
	ga := f.gen(100)
	if ga.rec.ExeSHA256 != a.sha256 || ga.rec.OpenSSL != a.openssl || !strings.HasPrefix(ga.id, "nginx-"+a.sha256[:12]) {
		t.Fatalf("generation A %+v", ga)
	}
	f.servedBy(101, 100)

	f.oldbin(100, true) // nginx renames its pid file on USR2
	f.fork(200, 100)
	f.expect("USR2 fork before exec") // a fork is not a new master yet
	if len(f.st.order) != 1 {
		t.Fatalf("a fork made a generation: %d", len(f.st.order))
	}
	f.exec(200, b)
	f.expect("USR2 exec", KindUSR2)
	gb := f.gen(200)
	if gb.parent != ga || ga.successor != gb || f.last().Other != ga.id || !f.st.swapping() {
		t.Fatalf("USR2: parent %v successor %v swapping %v", gb.parent, ga.successor, f.st.swapping())
	}
	f.workers(200, 201, 202)
	f.expect("B's workers")
	f.servedBy(201, 200)
	f.servedBy(101, 100)
	if len(f.st.pendings) != 0 {
		t.Fatalf(".oldbin with a running successor opened a failure: %+v", f.st.pendings[0])
	}

	f.drain(101, 102)
	f.expect("WINCH", KindWINCH)
	f.servedBy(101, 100) // a draining worker still serves its connections
	if len(ga.live) != 0 || !slices.Equal(ga.draining, []int{101, 102}) {
		t.Fatalf("A after WINCH: live %v draining %v", ga.live, ga.draining)
	}
	f.exit(101, 102)
	f.expect("drained")
	f.exit(100)
	f.expect("QUIT", KindQUIT)
	if ga.alive || !gb.alive || f.st.swapping() || f.last().Generation != ga.id || f.last().Other != gb.id {
		t.Fatalf("after QUIT: A alive %v, B alive %v, swapping %v, %+v", ga.alive, gb.alive, f.st.swapping(), f.last())
	}
	if ga.exitedTicks != 20 { // both workers' CPU stays with A
		t.Fatalf("A's CPU after exit: %d ticks", ga.exitedTicks)
	}
}

// TestStepReloadAndCrash: a HUP replaces every worker (reload); a worker
// that crashed and was respawned is not a reload.
func TestStepReloadAndCrash(t *testing.T) {
	f := newFixture(t)
	f.master(100, 1, nginxBinary("nginx"))
	f.workers(100, 101, 102)
	f.expect("start")
	f.exit(102)
	f.workers(100, 103)
	f.expect("worker crashed and respawned")
	f.servedBy(103, 100)
	f.drain(101, 103)
	f.workers(100, 104, 105)
	f.expect("HUP", KindReload)
	if g := f.gen(100); !slices.Equal(g.live, []int{104, 105}) || !slices.Equal(g.draining, []int{101, 103}) || f.st.swapping() {
		t.Fatalf("after HUP: %+v", g)
	}
	f.exit(101, 103)
	f.expect("old workers done")
	f.exit(104)
	f.expect("a crash after the reload")
}

// TestStepRollback: the new generation exits while the old one still
// serves (the fast rollback), with and without the old one's workers.
func TestStepRollback(t *testing.T) {
	for _, winched := range []bool{false, true} {
		t.Run(fmt.Sprint("winched=", winched), func(t *testing.T) {
			f := newFixture(t)
			f.master(100, 1, nginxBinary("nginx-3.0"))
			f.workers(100, 101)
			f.expect("start")
			f.master(200, 100, nginxBinary("nginx-3.5"))
			f.workers(200, 201)
			f.expect("USR2", KindUSR2)
			f.expect("overlap")
			if winched {
				f.exit(101)
				f.expect("WINCH", KindWINCH)
			}
			f.exit(200, 201)
			f.expect("rollback", KindRollback)
			want := "still serves"
			if winched {
				want = "runs but has no workers"
			}
			if e := f.last(); e.Generation != f.gen(200).id || e.Other != f.gen(100).id || !strings.Contains(e.Message, want) {
				t.Fatalf("rollback event %+v", e)
			}
			if f.st.swapping() {
				t.Fatal("still swapping after the rollback")
			}
			if winched {
				f.workers(100, 102) // HUP after the rollback: A serves again
				f.expect("A's workers back")
				f.servedBy(102, 100)
			}
		})
	}
}

// TestStepFailedSwap: the failed USR2, three ways: the new binary logs an
// [emerg] and exits before any scan (reported at the next scan); an
// [emerg] from a process that stays (reported after FailedSwapTimeout); a
// .oldbin pid file with no new master (after FailedSwapTimeout). A new
// master that does run settles them.
func TestStepFailedSwap(t *testing.T) {
	t.Run("emerg_exited", func(t *testing.T) {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx"))
		f.workers(100, 101)
		f.expect("start")
		// pid 200 was 100's child; it logged and exited before this scan.
		kinds := f.scan(emergNote{at: f.now, ts: f.now, pid: 200, ppid: 100, msg: `invalid value "X25519MLKEM768"`})
		if !slices.Equal(kinds, []string{KindFailed}) {
			t.Fatalf("events %v", kinds)
		}
		e := f.last()
		if e.Generation != f.gen(100).id || !strings.Contains(e.Message, "X25519MLKEM768") || !strings.Contains(e.Message, "still serves") {
			t.Fatalf("failed event %+v", e)
		}
		f.expect("after", []string{}...)
	})
	t.Run("emerg_alive", func(t *testing.T) {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx"))
		f.workers(100, 101)
		f.expect("start")
		f.alive[4242] = true // an `nginx -t` run by hand, still alive
		if k := f.scan(emergNote{at: f.now, ts: f.now, pid: 4242, msg: "bad config"}, emergNote{at: f.now, ts: f.now, pid: 4242, msg: "a second line"}); len(k) != 0 {
			t.Fatalf("failed at once: %v", k)
		}
		if len(f.st.pendings) != 1 || !strings.Contains(f.st.pendings[0].reason, "a second line") {
			t.Fatalf("two lines of one failure: %+v", f.st.pendings)
		}
		f.expect("1 s")
		f.expect("2 s")
		f.expect("3 s: the deadline", KindFailed)
	})
	t.Run("oldbin", func(t *testing.T) {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx"))
		f.workers(100, 101)
		f.expect("start")
		f.oldbin(100, true)
		f.expect("oldbin")
		f.expect("1 s")
		f.expect("2 s")
		f.expect("3 s: the deadline", KindFailed)
		f.expect("reported once")
	})
	t.Run("settled", func(t *testing.T) {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx"))
		f.workers(100, 101)
		f.expect("start")
		f.oldbin(100, true)
		f.alive[200] = true
		f.fork(200, 100)
		if k := f.scan(emergNote{at: f.now, ts: f.now, pid: 200, ppid: 100, msg: "a warning nginx calls emerg"}); len(k) != 0 {
			t.Fatalf("events %v", k)
		}
		f.exec(200, nginxBinary("nginx-new"))
		f.expect("the new master runs", KindUSR2)
		f.expect("1 s")
		f.expect("2 s")
		f.expect("3 s: no failure")
		if len(f.st.pendings) != 0 {
			t.Fatalf("pending %+v", f.st.pendings)
		}
	})
	t.Run("emerg_from_worker", func(t *testing.T) {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx"))
		f.workers(100, 101)
		f.expect("start")
		f.scan(emergNote{at: f.now, ts: f.now, pid: 101, ppid: 100, msg: "a worker's emerg"})
		if len(f.st.pendings) != 0 {
			t.Fatalf("a worker's [emerg] opened a failure: %+v", f.st.pendings)
		}
	})
}

// TestStepTwoNginx: two nginx on one host, each its own lineage: a swap of
// one leaves the other's generation and workers alone, and a failed swap
// names the right one.
func TestStepTwoNginx(t *testing.T) {
	f := newFixture(t)
	f.master(100, 1, nginxBinary("nginx-a"))
	f.workers(100, 101, 102)
	f.master(300, 1, nginxBinary("nginx-b"))
	f.workers(300, 301, 302)
	f.expect("start")
	if len(f.st.order) != 2 || f.st.swapping() {
		t.Fatalf("generations %d, swapping %v", len(f.st.order), f.st.swapping())
	}
	f.master(400, 300, nginxBinary("nginx-b2"))
	f.workers(400, 401)
	f.expect("USR2 of the second", KindUSR2)
	if e := f.last(); e.Other != f.gen(300).id || f.gen(100).successor != nil {
		t.Fatalf("USR2 %+v", e)
	}
	f.exit(301, 302)
	f.expect("WINCH of the second", KindWINCH)
	f.exit(300)
	f.expect("QUIT of the second", KindQUIT)
	f.servedBy(101, 100)
	f.servedBy(401, 400)
	// A failed USR2 on the first names the first.
	if k := f.scan(emergNote{at: f.now, ts: f.now, pid: 500, ppid: 100, msg: "bad curve"}); !slices.Equal(k, []string{KindFailed}) || f.last().Generation != f.gen(100).id {
		t.Fatalf("failed: %v %+v", k, f.last())
	}
	if len(f.st.serving) != 3 { // 101 102 401
		t.Fatalf("serving %d", len(f.st.serving))
	}
}

// TestStepServer: a non-nginx server (Caddy) is its own generation and its
// only serving process; its restart is a new generation, no swap event.
func TestStepServer(t *testing.T) {
	f := newFixture(t)
	caddy := nginxBinary("caddy")
	caddy.conf, caddy.pidFile = "", ""
	f.procs[700] = procSnap{key: procKey{700, 7}, ppid: 1, comm: "caddy", server: true, ident: caddy}
	f.expect("start")
	f.servedBy(700, 700)
	delete(f.procs, 700)
	f.procs[710] = procSnap{key: procKey{710, 9}, ppid: 1, comm: "caddy", server: true, ident: caddy}
	f.expect("restart")
	f.servedBy(710, 710)
	if g := f.gen(700); g.alive || !strings.HasPrefix(g.id, "caddy-") {
		t.Fatalf("old caddy %+v", g)
	}
}

// TestStepDeterministic: the same inputs give the same events.
func TestStepDeterministic(t *testing.T) {
	run := func() []Event {
		f := newFixture(t)
		f.master(100, 1, nginxBinary("nginx-a"))
		f.workers(100, 101, 102, 103, 104)
		f.master(300, 1, nginxBinary("nginx-b"))
		f.workers(300, 301)
		f.scan()
		f.master(200, 100, nginxBinary("nginx-a2"))
		f.master(400, 300, nginxBinary("nginx-b2"))
		f.workers(200, 201)
		f.workers(400, 401)
		f.scan()
		f.exit(100, 101, 102, 103, 104, 300, 301)
		f.scan()
		return f.events
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) || len(a) != 4 {
		t.Fatalf("runs differ or miss events:\n%+v\n%+v", a, b)
	}
}

// TestReaderFixtureTree: the /proc reader and the tracker over a fixture
// /proc tree (no root, no nginx): a master and its workers become one
// generation with the binary's identity, a .oldbin pid file and a USR2
// child that exec'd another binary are seen, and a light scan finds new
// workers through the master's children file.
func TestReaderFixtureTree(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir() // the processes' root (pid files, the config)
	bins := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "stat"), "cpu 0 0 0 0\nbtime 1800000000\n")
	write(filepath.Join(root, "1/stat"), statLine(1, "init", 0, 0, 1))
	write(filepath.Join(root, "1/task/1/children"), "")
	write(filepath.Join(host, "etc/nginx/nginx.conf"), "pid /run/test-nginx.pid;\n")
	write(filepath.Join(bins, "nginx-a"), "binary A OpenSSL 3.0.19 1 Jan 2025\x00")
	write(filepath.Join(bins, "nginx-b"), "binary B OpenSSL 3.5.4 30 Sep 2025\x00")
	proc := func(pid, ppid int, title, bin string, flags uint64, kids ...int) {
		t.Helper()
		d := filepath.Join(root, fmt.Sprint(pid))
		write(filepath.Join(d, "stat"), statLine(pid, "nginx", ppid, flags, uint64(pid)))
		write(filepath.Join(d, "cmdline"), strings.ReplaceAll(title, " ", "\x00")+"\x00")
		write(filepath.Join(d, "statm"), "100 25 0 0 0 0 0\n")
		var ks []string
		for _, k := range kids {
			ks = append(ks, fmt.Sprint(k))
		}
		write(filepath.Join(d, fmt.Sprintf("task/%d/children", pid)), strings.Join(ks, " "))
		os.Remove(filepath.Join(d, "exe"))
		os.Remove(filepath.Join(d, "root"))
		if err := os.Symlink(filepath.Join(bins, bin), filepath.Join(d, "exe")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(host, filepath.Join(d, "root")); err != nil {
			t.Fatal(err)
		}
	}
	const masterA = "nginx: master process /usr/sbin/nginx -c /etc/nginx/nginx.conf"
	proc(100, 1, masterA, "nginx-a", 0, 101, 102)
	proc(101, 100, "nginx: worker process", "nginx-a", 0x40)
	proc(102, 100, "nginx: worker process", "nginx-a", 0x40)

	now := time.Unix(1_800_000_100, 0)
	tr := quietTracker(t, Config{ProcRoot: root, Now: func() time.Time { return now }})
	scan := func() {
		t.Helper()
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	scan()
	gs := tr.Generations()
	if len(gs) != 1 {
		t.Fatalf("generations %+v", gs)
	}
	a := gs[0]
	if a.MasterPID != 100 || a.OpenSSL != "OpenSSL 3.0.19" || a.PidFile != "/run/test-nginx.pid" || a.Config != "/etc/nginx/nginx.conf" ||
		!slices.Equal(a.Workers, []int{101, 102}) || a.RSSBytes != 3*25*uint64(os.Getpagesize()) || a.Start != time.Unix(1_800_000_100, 0) {
		t.Fatalf("generation A %+v", a)
	}
	if g, ok := tr.GenerationOf(101); !ok || g.ID != a.ID || g.WorkerPID != 101 {
		t.Fatalf("GenerationOf(101) = %+v %v", g, ok)
	}
	if !tr.Probe() {
		t.Fatal("probe saw a change where none was")
	}

	// USR2: the pid file is renamed, the child exec's B and forks a worker.
	write(filepath.Join(host, "run/test-nginx.pid.oldbin"), "100\n")
	if tr.Probe() {
		t.Fatal("probe missed the .oldbin")
	}
	proc(100, 1, masterA, "nginx-a", 0, 101, 102, 200)
	proc(200, 100, "nginx: master process /usr/sbin/nginx -c /etc/nginx/nginx.conf", "nginx-b", 0, 201)
	proc(201, 200, "nginx: worker process", "nginx-b", 0x40)
	scan() // a light scan: 200 and 201 are found as children
	ev := tr.Events()
	if len(ev) != 1 || ev[0].Kind != KindUSR2 {
		t.Fatalf("events %+v", ev)
	}
	b, ok := tr.Generation(ev[0].Generation)
	if !ok || b.MasterPID != 200 || b.OpenSSL != "OpenSSL 3.5.4" || b.Parent != a.ID || !slices.Equal(b.Workers, []int{201}) {
		t.Fatalf("generation B %+v", b)
	}
	if _, swapping := tr.QuietSince(); !swapping {
		t.Fatal("not swapping during the overlap")
	}
	// QUIT: A and its workers go. (The reader keeps /proc files open,
	// and reading one of an exited process fails; a fixture's deleted
	// file would still read: empty it first, which reads as gone too.)
	for _, pid := range []int{100, 101, 102} {
		for _, f := range []string{"stat", "cmdline", "statm", fmt.Sprintf("task/%d/children", pid)} {
			os.Truncate(filepath.Join(root, fmt.Sprint(pid), f), 0)
		}
		os.RemoveAll(filepath.Join(root, fmt.Sprint(pid)))
	}
	scan()
	if ev := tr.Events(); len(ev) != 2 || ev[1].Kind != KindQUIT {
		t.Fatalf("events %+v; generations %+v", ev, tr.Generations())
	}
	if st := tr.Stats(); st.Scans != 3 || st.ScanErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// statLine is a /proc/PID/stat line with the fields the reader parses.
func statLine(pid int, comm string, ppid int, flags, start uint64) string {
	f := make([]string, 52)
	for i := range f {
		f[i] = "0"
	}
	f[0], f[1], f[2], f[3] = fmt.Sprint(pid), "("+comm+")", "S", fmt.Sprint(ppid)
	f[8] = fmt.Sprint(flags)
	f[13], f[14] = "3", "2" // utime, stime
	f[21] = fmt.Sprint(start * 100)
	return strings.Join(f, " ") + "\n"
}

// renamed is the pid-file watch's fact: master's pid file was renamed to
// .oldbin since the last scan; back: and renamed back already.
func (f *fixture) renamed(master int, back bool) {
	p := f.procs[master]
	p.oldbinRenamed, p.oldbin = true, !back
	f.procs[master] = p
}

// clearRenamed is the next scan's view: the watch saw no new rename.
func (f *fixture) clearRenamed(master int) {
	p := f.procs[master]
	p.oldbinRenamed, p.oldbin = false, false
	f.procs[master] = p
}

// TestStepFailedSwapManyMasters: several nginx masters on one host (100 the
// oldest, an unrelated instance), and a USR2 to 300 that fails: its new
// binary (pid 600) logs an [emerg] and exits before any scan sees it, and
// the log is read after it has gone (no parent). The failed event names
// 300, and only 300 as still serving, from 300's own facts: its pid file's
// .oldbin, the parent a scan saw of the process that logged, or the error
// log only it writes; with no fact it names none, never the first master.
func TestStepFailedSwapManyMasters(t *testing.T) {
	emerg := func(f *fixture, masters ...int) emergNote {
		e := emergNote{at: f.now, ts: f.now, pid: 600, msg: `SSL_CTX_set1_curves_list("X25519MLKEM768:x25519") failed`, log: "/var/log/nginx/b.log"}
		for _, m := range masters {
			e.masters = append(e.masters, f.procs[m].key)
		}
		return e
	}
	host := func(t *testing.T) *fixture {
		f := newFixture(t)
		for i, m := range []int{100, 300, 500} {
			bin := nginxBinary(fmt.Sprint("nginx-", i))
			bin.pidFile = fmt.Sprintf("/run/nginx-%d.pid", i)
			f.master(m, 1, bin)
			f.workers(m, m+1, m+2)
		}
		f.expect("start")
		return f
	}
	named := func(t *testing.T, f *fixture, kinds []string, want int) {
		t.Helper()
		if !slices.Equal(kinds, []string{KindFailed}) {
			t.Fatalf("events %v (all %+v)", kinds, f.events)
		}
		e, g := f.last(), f.gen(want)
		if e.Generation != g.id || e.Other != g.id || !strings.Contains(e.Message, g.id+" still serves") {
			t.Fatalf("failed event %+v, want about %s alone", e, g.id)
		}
		for _, m := range []int{100, 300, 500} {
			if m != want && strings.Contains(e.Message+e.Other, f.gen(m).id) {
				t.Fatalf("failed event names %d: %+v", m, e)
			}
		}
	}
	t.Run("oldbin_renamed_back", func(t *testing.T) {
		f := host(t)
		f.renamed(300, true) // to .oldbin and back between two scans
		named(t, f, f.scan(emerg(f)), 300)
		f.clearRenamed(300)
		f.expect("reported once")
	})
	t.Run("oldbin_alone", func(t *testing.T) {
		// No [emerg] read (error_log above emerg, or not tailed): nginx
		// renaming its pid file back is the verdict, at the next scan.
		f := host(t)
		f.renamed(300, true)
		f.expect("renamed back: a little time for the [emerg]")
		f.clearRenamed(300)
		named(t, f, f.scan(), 300)
		// The log read after the verdict: the line joins it, whatever
		// fact it carries; a line only another master's log holds is
		// another failure.
		if k := f.scan(emerg(f), emerg(f, 300)); len(k) != 0 {
			t.Fatalf("a late [emerg] reported again: %v", k)
		}
		named(t, f, f.scan(emerg(f, 100)), 100)
	})
	t.Run("oldbin_then_emerg", func(t *testing.T) {
		f := host(t)
		f.renamed(300, false) // the scan fell inside the window: .oldbin exists
		f.alive[600] = true
		f.expect("oldbin")
		f.clearRenamed(300)
		delete(f.alive, 600)
		named(t, f, f.scan(emerg(f)), 300)
	})
	t.Run("kid_seen", func(t *testing.T) {
		f := host(t)
		f.fork(600, 300) // a scan saw the USR2 child before its exec
		f.expect("fork")
		f.exit(600)
		f.expect("the child exited")
		named(t, f, f.scan(emerg(f)), 300)
	})
	t.Run("error_log", func(t *testing.T) {
		f := host(t)
		named(t, f, f.scan(emerg(f, 300)), 300)
	})
	t.Run("shared_error_log_and_oldbin", func(t *testing.T) {
		f := host(t)
		f.renamed(300, true)
		named(t, f, f.scan(emerg(f, 100, 300)), 300)
	})
	t.Run("no_fact", func(t *testing.T) {
		f := host(t)
		if k := f.scan(emerg(f)); !slices.Equal(k, []string{KindFailed}) {
			t.Fatalf("events %v", k)
		}
		if e := f.last(); e.Generation != "" || e.Other != "" || strings.Contains(e.Message, "still serves") {
			t.Fatalf("failed event with no fact names a master: %+v", e)
		}
	})
	t.Run("shared_error_log", func(t *testing.T) {
		f := host(t)
		f.scan(emerg(f, 100, 300))
		e := f.last()
		if e.Kind != KindFailed || e.Generation != "" || e.Other != "" || !strings.Contains(e.Message, f.gen(100).id+", "+f.gen(300).id) || strings.Contains(e.Message, f.gen(500).id) {
			t.Fatalf("failed event %+v", e)
		}
	})
	t.Run("another_mid_swap", func(t *testing.T) {
		// 500 is in a swap of its own (its new master 700 runs, its pid
		// file is .oldbin) when 300's fails: 300 is named, 500's swap
		// goes on untouched.
		f := host(t)
		f.renamed(500, false)
		f.master(700, 500, nginxBinary("nginx-2b"))
		f.workers(700, 701)
		f.expect("500's USR2", KindUSR2)
		p := f.procs[500]
		p.oldbinRenamed = false
		f.procs[500] = p
		f.renamed(300, true)
		named(t, f, f.scan(emerg(f, 300, 500)), 300)
		f.clearRenamed(300)
		f.exit(501, 502)
		f.expect("500's WINCH", KindWINCH)
		f.exit(500)
		f.expect("500's QUIT", KindQUIT)
		if n := len(f.st.pendings); n != 0 {
			t.Fatalf("pending %+v", f.st.pendings[0])
		}
	})
	t.Run("another_usr2_does_not_settle", func(t *testing.T) {
		// An [emerg] that only 300's error log holds is not settled by
		// 500's successful USR2 at the same time.
		f := host(t)
		f.alive[600] = true
		e := emerg(f, 300)
		f.master(700, 500, nginxBinary("nginx-2b"))
		if k := f.scan(e); !slices.Equal(k, []string{KindUSR2}) {
			t.Fatalf("events %v", k)
		}
		delete(f.alive, 600)
		named(t, f, f.scan(), 300)
	})
}
