package agent_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/proctrack"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// hybridCurves is the study's config line for nginx on OpenSSL 3.5.
const hybridCurves = "X25519MLKEM768:X25519:prime256v1"

// ossl35Run is the agent watching a swap lab, the load on it, and what
// both saw.
type ossl35Run struct {
	t     *testing.T
	l     *swapLab
	a     *agent.Agent
	src   string // attribution source
	mu    sync.Mutex
	recs  []*record.Handshake
	sent  []served
	errs  []error
	stop  chan struct{}
	load  chan struct{}
	halt  func() error
	pair  *testenv.Pair
	start time.Time
}

// newOSSL35Run starts lab l's nginx (A) and the agent (capture on the
// veth, eBPF attribution when the kernel has it, the access log joined,
// the error log tailed), and waits for generation A.
func newOSSL35Run(t *testing.T, pair *testenv.Pair, l *swapLab) (*ossl35Run, int) {
	t.Helper()
	masterA := l.start()
	l.watch()
	logFormat, err := logparse.ParseLogFormat(strings.Trim(testenv.RecommendedLogFormat, "'"))
	if err != nil {
		t.Fatal(err)
	}
	r := &ossl35Run{t: t, l: l, pair: pair, start: time.Now()}
	cfg := agent.Config{Ifaces: []string{pair.SIf}, Ports: []uint16{443}, Workers: 2, TrackProcesses: true,
		NginxLogs: []agent.NginxLog{{Path: l.access, Format: logFormat}}, NginxErrorLogs: []string{l.errLog}, RecycleRecords: true}
	cfg.OnRecord = func(h *record.Handshake) {
		c := *h
		r.mu.Lock()
		r.recs = append(r.recs, &c)
		r.mu.Unlock()
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ml
	if err := testenv.InNS(pair.S, func() (err error) { r.a, err = agent.New(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	r.src, _ = r.a.Processes().AttributionSource()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.a.Run(ctx) }()
	stopped, runErr := false, error(nil)
	r.halt = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { r.halt() })
	waitUntil(t, 10*time.Second, "generation A found", func() bool {
		_, ok := r.gen(masterA)
		return ok
	})
	return r, masterA
}

// gen returns the generation of a master with its two workers.
func (r *ossl35Run) gen(master int) (proctrack.GenerationInfo, bool) {
	for _, g := range r.a.Processes().Generations() {
		if g.MasterPID == master && len(g.Workers) == 2 {
			return g, true
		}
	}
	return proctrack.GenerationInfo{}, false
}

// startLoad sends one TLS request every 8 ms from the client namespace
// (Go's defaults: X25519MLKEM768 and X25519 key shares), at most 1,500.
func (r *ossl35Run) startLoad() {
	r.stop, r.load = make(chan struct{}), make(chan struct{})
	server := net.JoinHostPort(r.pair.SAddr, "443")
	go func() {
		defer close(r.load)
		testenv.InNS(r.pair.C, func() error {
			tick := time.NewTicker(8 * time.Millisecond)
			defer tick.Stop()
			for range 1500 {
				select {
				case <-r.stop:
					return nil
				case <-tick.C:
				}
				s, err := oneRequest(server)
				r.mu.Lock()
				if err != nil {
					r.errs = append(r.errs, err)
				} else {
					r.sent = append(r.sent, s)
				}
				r.mu.Unlock()
			}
			return nil
		})
	}()
}

func (r *ossl35Run) stopLoad() {
	close(r.stop)
	<-r.load
}

// usr2 installs B (program and config), sends USR2 to master and returns
// the new master.
func (r *ossl35Run) usr2(master int) int {
	r.t.Helper()
	r.l.installB()
	r.l.signal(master, syscall.SIGUSR2)
	var next int
	waitUntil(r.t, 5*time.Second, "the new master's pid file", func() bool {
		next = readPidFile(r.l.pid)
		return next > 0 && next != master
	})
	r.l.addMaster(next)
	waitUntil(r.t, 10*time.Second, "the new generation found", func() bool { _, ok := r.gen(next); return ok })
	return next
}

// winch sends WINCH to master and waits until the agent has seen it.
func (r *ossl35Run) winch(master int) {
	r.t.Helper()
	r.l.signal(master, syscall.SIGWINCH)
	waitUntil(r.t, 10*time.Second, "the WINCH seen", func() bool {
		for _, e := range r.a.Processes().Events() {
			if e.Kind == proctrack.KindWINCH {
				if g, ok := r.a.Processes().Generation(e.Generation); ok && g.MasterPID == master {
					return true
				}
			}
		}
		return false
	})
}

// quit sends QUIT to master and waits for it to exit.
func (r *ossl35Run) quit(master int) {
	r.t.Helper()
	r.l.signal(master, syscall.SIGQUIT)
	waitUntil(r.t, 5*time.Second, fmt.Sprintf("master %d gone", master), func() bool { return !isMaster(master) })
}

// check waits for a record of every request, stops the agent and checks
// each request's record: the generation that served it (X-Pid's master),
// the group the client negotiated, and the group want says that
// generation negotiates. It returns per master the requests and the PQ
// ones among them, as the clients and as the records count them.
func (r *ossl35Run) check(want map[int]tls.CurveID) (clients, records map[int][2]int) {
	t := r.t
	t.Helper()
	allIn := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.recs) >= len(r.sent)
	}
	waitUntil(t, 15*time.Second, "a record of every request", allIn)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if len(r.errs) > len(r.sent)/50 {
		t.Errorf("%d of %d requests failed, first: %v", len(r.errs), len(r.sent)+len(r.errs), r.errs[0])
	}
	byClient := map[string][]*record.Handshake{}
	for _, h := range r.recs {
		byClient[h.ClientText()] = append(byClient[h.ClientText()], h)
	}
	clients, records = map[int][2]int{}, map[int][2]int{}
	curves := map[int]map[string]int{} // $ssl_curve as each master's nginx logged it
	bad := 0
	for _, s := range r.sent {
		var h *record.Handshake
		for _, c := range byClient[s.client] {
			if !c.TS.After(s.at) && (h == nil || c.TS.After(h.TS)) {
				h = c
			}
		}
		master := r.l.masterOf(s.xpid)
		wantGroup := tlsparse.Group(want[master]).String()
		gotClient := tlsparse.Group(s.curve).String()
		c := clients[master]
		c[0]++
		if tlsparse.Group(s.curve).IsPQ() {
			c[1]++
		}
		clients[master] = c
		switch {
		case h == nil:
			bad++
			t.Errorf("%s (worker %d of master %d): no record", s.client, s.xpid, master)
			continue
		case h.Generation == nil || h.Generation.MasterPID != master:
			bad++
			t.Errorf("%s: served by worker %d of master %d, record's generation %+v", s.client, s.xpid, master, h.Generation)
			continue
		case gotClient != wantGroup || h.Group != wantGroup:
			bad++
			t.Errorf("%s: master %d: the client negotiated %s, the record says %s, want %s", s.client, master, gotClient, h.Group, wantGroup)
		}
		g, _ := tlsparse.ParseGroup(h.Group)
		rc := records[h.Generation.MasterPID]
		rc[0]++
		if g.IsPQ() {
			rc[1]++
		}
		records[h.Generation.MasterPID] = rc
		if h.Log != nil {
			if curves[master] == nil {
				curves[master] = map[string]int{}
			}
			curves[master][h.Log.SSLCurve]++
		}
	}
	for m, c := range clients {
		if records[m] != c {
			t.Errorf("master %d: the records count %d handshakes, %d PQ; the clients %d, %d PQ", m, records[m][0], records[m][1], c[0], c[1])
		}
	}
	js := r.a.JoinStats()
	if js.CurveMismatch != 0 || js.CurveChecked < uint64(len(r.sent))*95/100 {
		t.Errorf("$ssl_curve self-check: %d checked, %d mismatches; want every request's checked (%d) and no mismatch", js.CurveChecked, js.CurveMismatch, len(r.sent))
	}
	t.Logf("source %s: %d requests (%d failed), %d records, %d wrong; per master [handshakes, PQ]: clients %v, records %v; $ssl_curve logged per master %v; join %d joined, self-check %d checked %d mismatches",
		r.src, len(r.sent), len(r.errs), len(r.recs), bad, clients, records, curves, js.Joined, js.CurveChecked, js.CurveMismatch)
	return clients, records
}

// events returns the agent's events about these masters' generations.
func (r *ossl35Run) events(masters ...int) (map[string]int, []proctrack.Event) {
	mine := map[string]bool{}
	for _, g := range r.a.Processes().Generations() {
		for _, m := range masters {
			if g.MasterPID == m {
				mine[g.ID] = true
			}
		}
	}
	n := map[string]int{}
	var evs []proctrack.Event
	for _, e := range r.a.Processes().Events() {
		if mine[e.Generation] {
			n[e.Kind]++
			evs = append(evs, e)
		}
	}
	return n, evs
}

// checkOpenSSL checks the openssl field of a generation.
func checkOpenSSL(t *testing.T, g proctrack.GenerationInfo, prefix string) {
	t.Helper()
	if !strings.HasPrefix(g.OpenSSL, prefix) {
		t.Errorf("generation %s (master %d, %s): openssl %q, want %s*", g.ID, g.MasterPID, g.Exe, g.OpenSSL, prefix)
	}
}

// TestOpenSSL35Swap: the migration pqwatch exists for, end to end. A
// Debian 12 nginx on OpenSSL 3.0 (A, OpenSSL's default groups) is swapped
// live (USR2, WINCH, QUIT) to nginx on OpenSSL 3.5 (B, Debian 12's nginx
// source on Debian 13's OpenSSL, testenv.NginxOpenSSL35) with
// "ssl_ecdh_curve X25519MLKEM768:X25519:prime256v1", under load from Go
// clients that offer X25519MLKEM768. Every record names the generation
// that served it and the group its client negotiated (A: x25519, B:
// X25519MLKEM768), so each generation's PQ share is the clients'; nginx's
// own $ssl_curve (B logs X25519MLKEM768 as its codepoint, 0x11ec) agrees
// with the wire on every joined line; A's openssl is 3.0.x, B's 3.5.x.
//
// Then the naive rollback: the Debian 12 binary put back with B's config
// and USR2 sent to B. OpenSSL 3.0 does not know X25519MLKEM768, the new
// binary exits with [emerg], and the agent reports kind=failed naming B,
// which still serves (PQ) throughout.
func TestOpenSSL35Swap(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	b := testenv.NginxOpenSSL35(t)
	pair := testenv.NewPair(t, 1500)
	l := newSwapLabWith(t, pair.S, swapLabOptions{binB: b, curveB: hybridCurves})
	r, masterA := newOSSL35Run(t, pair, l)
	genA, _ := r.gen(masterA)

	r.startLoad()
	time.Sleep(700 * time.Millisecond)
	masterB := r.usr2(masterA)
	genB, _ := r.gen(masterB)
	time.Sleep(900 * time.Millisecond) // the overlap: both generations serve
	r.winch(masterA)
	r.quit(masterA)
	time.Sleep(500 * time.Millisecond)

	// The naive rollback, under the same load.
	l.install(l.binA)
	usr2At := time.Now()
	l.signal(masterB, syscall.SIGUSR2)
	var failed proctrack.Event
	waitUntil(t, 8*time.Second, "the failed event", func() bool {
		for _, e := range r.a.Processes().Events() {
			if e.Kind == proctrack.KindFailed && e.Time.After(r.start) {
				failed = e
				return true
			}
		}
		return false
	})
	failedAfter := time.Since(usr2At)
	time.Sleep(500 * time.Millisecond) // B serves on
	r.stopLoad()
	if !isMaster(masterB) || readPidFile(l.pid) != masterB {
		t.Errorf("master B (%d) after the failed USR2: alive %v, pid file %d", masterB, isMaster(masterB), readPidFile(l.pid))
	}
	emerg := ""
	for line := range strings.Lines(readFileString(l.errLog)) {
		if strings.Contains(line, "[emerg]") {
			emerg = strings.TrimSpace(line)
		}
	}
	t.Logf("rollback USR2: reported after %v: %+v; error log: %s", failedAfter.Round(time.Millisecond), failed, emerg)
	if failed.Generation != genB.ID || failed.Other != genB.ID || !strings.Contains(failed.Message, genB.ID+" still serves") || strings.Contains(failed.Message, genA.ID) {
		t.Errorf("failed event %+v, want about %s (master B) alone", failed, genB.ID)
	}
	if !strings.Contains(emerg, "X25519MLKEM768") {
		t.Errorf("no [emerg] naming X25519MLKEM768 in the error log; last [emerg]: %q", emerg)
	}

	clients, _ := r.check(map[int]tls.CurveID{masterA: tls.X25519, masterB: tls.X25519MLKEM768})
	if clients[masterA][0] == 0 || clients[masterB][0] == 0 {
		t.Errorf("the load did not reach both generations: %v", clients)
	}
	genA, _ = r.a.Processes().Generation(genA.ID)
	genB, _ = r.a.Processes().Generation(genB.ID)
	t.Logf("A %s openssl %q; B %s openssl %q", genA.ID, genA.OpenSSL, genB.ID, genB.OpenSSL)
	checkOpenSSL(t, genA, "OpenSSL 3.0.")
	checkOpenSSL(t, genB, "OpenSSL 3.5.")
	ev, evs := r.events(masterA, masterB)
	if ev[proctrack.KindUSR2] != 1 || ev[proctrack.KindWINCH] != 1 || ev[proctrack.KindQUIT] != 1 || ev[proctrack.KindFailed] != 1 || len(ev) != 4 {
		t.Errorf("events of this nginx %v, want one usr2, winch, quit and failed: %+v", ev, evs)
	}
}

func readFileString(p string) string { b, _ := os.ReadFile(p); return string(b) }

// TestOpenSSL35FastRollback: the way back that works. After the swap to
// nginx on OpenSSL 3.5 (USR2 with the hybrid config, WINCH), the old
// master (OpenSSL 3.0, its config still in memory) gets HUP and starts
// workers again, and the new one QUIT: the agent reports a rollback, and
// every record names its generation and group (A's old and new workers:
// x25519, B's: X25519MLKEM768), the PQ share per generation the clients'.
func TestOpenSSL35FastRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	b := testenv.NginxOpenSSL35(t)
	pair := testenv.NewPair(t, 1500)
	l := newSwapLabWith(t, pair.S, swapLabOptions{binB: b, curveB: hybridCurves})
	r, masterA := newOSSL35Run(t, pair, l)

	r.startLoad()
	time.Sleep(500 * time.Millisecond)
	masterB := r.usr2(masterA)
	time.Sleep(500 * time.Millisecond)
	r.winch(masterA)
	time.Sleep(500 * time.Millisecond) // B alone
	l.signal(masterA, syscall.SIGHUP)
	waitUntil(t, 5*time.Second, "A's workers again", func() bool { _, ok := r.gen(masterA); return ok })
	time.Sleep(300 * time.Millisecond) // both serve again
	r.quit(masterB)
	back := time.Now()
	time.Sleep(700 * time.Millisecond) // A alone
	r.stopLoad()
	if readPidFile(l.pid) != masterA {
		t.Errorf("pid file %d after the rollback, want A's master %d", readPidFile(l.pid), masterA)
	}
	after := 0
	for _, s := range r.sent {
		if s.at.After(back) && l.masterOf(s.xpid) == masterA {
			after++
		}
	}
	clients, _ := r.check(map[int]tls.CurveID{masterA: tls.X25519, masterB: tls.X25519MLKEM768})
	if clients[masterA][0] == 0 || clients[masterB][0] == 0 || after == 0 {
		t.Errorf("the load did not reach both generations and A after the rollback: %v, %d after", clients, after)
	}
	ev, evs := r.events(masterA, masterB)
	t.Logf("events %v: %+v", ev, evs)
	if ev[proctrack.KindUSR2] != 1 || ev[proctrack.KindWINCH] != 1 || ev[proctrack.KindRollback] != 1 || ev[proctrack.KindQUIT] != 0 || ev[proctrack.KindFailed] != 0 {
		t.Errorf("events of this nginx %v, want one usr2, winch and rollback, no quit or failed", ev)
	}
}
