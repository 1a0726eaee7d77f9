package proctrack

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// fakeKernel stands in for the loaded accept program: a quiet set and a
// missed count the test sets; nothing to drain.
type fakeKernel struct {
	quiet    []int
	sets     int
	missedN  uint64
	notEmpty bool // an event reserved and not committed: the ring not drained
}

func (k *fakeKernel) counters() (drops, readFailures, quiet uint64) { return 0, 0, 0 }
func (k *fakeKernel) sync() (more, drained bool, missed uint64)     { return false, !k.notEmpty, k.missedN }
func (k *fakeKernel) missed() uint64                                { return k.missedN }
func (k *fakeKernel) setQuiet(pids []int) error                     { k.quiet, k.sets = pids, k.sets+1; return nil }
func (k *fakeKernel) close() error                                  { return nil }

// TestQuietAccept: the quiet epochs' answers for records with no accept
// event, against the rules of quietAccept: a server answered, every epoch
// in force since the SYN had the same generation, the port is the
// generation's, the kernel missed nothing; an accept that was reported
// answers by its event whatever the epochs.
func TestQuietAccept(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	x := newAttribIndex(Config{Now: func() time.Time { return now }}, nil)
	k := &fakeKernel{}
	acc := &Accepts{idx: newAcceptIndex(1024), kernel: k}
	x.acc.a.Store(acc)
	x.acc.started.Store(true)

	genA := &record.Generation{ID: "nginx-aaaa-10", MasterPID: 10}
	genB := &record.Generation{ID: "nginx-bbbb-20", MasterPID: 20}
	caddy := &record.Generation{ID: "caddy-cccc-30", MasterPID: 30, WorkerPID: 30}
	server := netip.MustParseAddrPort("127.0.0.1:443")
	port := 40000
	rec := func(start time.Time, sh int, srv netip.AddrPort) *record.Handshake {
		port++
		c := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
		return &record.Handshake{Transport: record.TransportTCP, Client: c.String(), Server: srv.String(),
			ClientAddr: c.Addr().As16(), ClientPort: c.Port(), ServerAddr: srv.Addr().As16(), ServerPort: srv.Port(),
			FlowStart: start, ServerHelloBytes: sh}
	}
	ask := func(r *record.Handshake) *record.Generation {
		g, res, quiet := x.acceptOrQuiet(r)
		if res != acceptFound {
			return nil
		}
		if !quiet && g != nil {
			t.Helper()
			t.Logf("answered by an event: %+v", g)
		}
		return g
	}
	step := func(d time.Duration) time.Time { now = now.Add(d); return now }

	if g := ask(rec(now, 90, server)); g != nil {
		t.Errorf("no epoch yet: answered %+v", g)
	}
	x.setQuiet([]int{11, 12}, genA, []uint16{443}, testLog(t))
	if k.sets != 1 || len(k.quiet) != 2 {
		t.Fatalf("kernel quiet set %v after %d writes", k.quiet, k.sets)
	}
	t0 := now
	x.setQuiet([]int{11, 12}, genA, []uint16{443}, testLog(t)) // unchanged: no write
	if k.sets != 1 {
		t.Fatalf("an unchanged set was written again (%d writes)", k.sets)
	}
	in := step(time.Second)
	for _, c := range []struct {
		name string
		r    *record.Handshake
		want *record.Generation
	}{
		{"in the epoch", rec(in, 90, server), genA},
		{"HelloRetryRequest only", func() *record.Handshake { r := rec(in, 0, server); r.HRR = true; return r }(), genA},
		{"no answer from a server", rec(in, 0, server), nil},
		{"another port", rec(in, 90, netip.MustParseAddrPort("127.0.0.1:8443")), nil},
		{"SYN within the margin of the epoch's start", rec(t0.Add(acceptMargin/2), 90, server), genA},
	} {
		if g := ask(c.r); g != c.want {
			t.Errorf("%s: answered %+v, want %+v", c.name, g, c.want)
		}
	}

	// An accept that was reported answers by its event, and never by the
	// epoch: a new generation's process is not quiet.
	newGen := rec(in, 90, server)
	acc.add(server, newGen.ClientAddrPort(), 21, 21, uint64(in.UnixNano())) // offset 0: the monotonic clock is the real one here
	v := *x.view.Load()
	v.byPID = map[int]*record.Generation{21: {ID: genB.ID, MasterPID: 20, WorkerPID: 21}}
	x.view.Store(&v)
	if g, res, quiet := x.acceptOrQuiet(newGen); res != acceptFound || quiet || g.WorkerPID != 21 {
		t.Errorf("reported accept: %+v %v quiet %v, want worker 21 by its event", g, res, quiet)
	}

	// The ring not drained (an event reserved, not committed): no answer.
	k.notEmpty = true
	if g := ask(rec(in, 90, server)); g != nil {
		t.Errorf("ring not drained: answered %+v", g)
	}
	k.notEmpty = false

	// The kernel missed an accept: no answer until a new epoch.
	k.missedN++
	if g := ask(rec(in, 90, server)); g != nil {
		t.Errorf("missed an accept: answered %+v", g)
	}
	x.setQuiet([]int{11, 12}, genA, []uint16{443}, testLog(t))
	if k.sets != 2 {
		t.Fatalf("the set was not written again after a miss (%d writes)", k.sets)
	}
	t1 := now
	inA := step(time.Second)
	if g := ask(rec(inA, 90, server)); g != genA {
		t.Errorf("after the miss, a new epoch: answered %+v", g)
	}

	// A worker respawned: the same generation, another set. A connection
	// of either epoch is the generation's.
	x.setQuiet([]int{11, 13}, genA, []uint16{443}, testLog(t))
	spanning := rec(t1.Add(time.Millisecond*500), 90, server)
	step(time.Second)
	if g := ask(spanning); g != genA {
		t.Errorf("across two epochs of one generation: answered %+v", g)
	}

	// The quiet generation changes (B serves most): a connection that
	// began under A's epoch may have been accepted under either: no
	// answer; one after B's start is B's.
	tB := step(time.Second)
	x.setQuiet([]int{21, 22}, genB, []uint16{443}, testLog(t))
	underA := rec(tB.Add(-500*time.Millisecond), 90, server)
	inB := step(time.Second)
	if g := ask(underA); g != nil {
		t.Errorf("began under A, asked under B: answered %+v", g)
	}
	if g := ask(rec(inB, 90, server)); g != genB {
		t.Errorf("under B: answered %+v", g)
	}

	// Another server's generation (its own port) becomes the quiet one:
	// a connection to B's port that began under B's epoch is still B's,
	// C's processes not listening there.
	other := &record.Generation{ID: "caddy-dddd-40", MasterPID: 40, WorkerPID: 40}
	underB := rec(now.Add(-100*time.Millisecond), 90, server)
	x.setQuiet([]int{40}, other, []uint16{8443}, testLog(t))
	step(time.Second)
	if g := ask(underB); g != genB {
		t.Errorf("began under B, asked under another port's generation: answered %+v", g)
	}
	x.setQuiet([]int{21, 22}, genB, []uint16{443}, testLog(t))
	inB = step(time.Second)

	// A swap: every accept reported again. A connection accepted before
	// the set was cleared, asked after, is B's; one after has no answer.
	lateB := rec(inB.Add(100*time.Millisecond), 90, server)
	step(time.Second)
	x.setQuiet(nil, nil, nil, testLog(t))
	if len(k.quiet) != 0 {
		t.Fatalf("kernel quiet set %v after clearing", k.quiet)
	}
	after := step(time.Second)
	if g := ask(lateB); g != genB {
		t.Errorf("accepted before the swap cleared the set: answered %+v", g)
	}
	if g := ask(rec(after, 90, server)); g != nil {
		t.Errorf("after the set was cleared: answered %+v", g)
	}

	// One process (Caddy): its worker is named.
	x.setQuiet([]int{30}, caddy, []uint16{443}, testLog(t))
	if g := ask(rec(step(time.Second), 90, server)); g != caddy || g.WorkerPID != 30 {
		t.Errorf("single process: answered %+v", g)
	}
	h := x.epochs.hist.Load()
	if len(h.epochs) > maxQuietEpochs {
		t.Errorf("%d epochs kept, bound %d", len(h.epochs), maxQuietEpochs)
	}
	// A connection that began before the epochs kept (one whose
	// ClientHello came long after its accept) is not answered: an epoch
	// let go, of another generation, may have been in force.
	if h.floor.IsZero() {
		t.Fatalf("no epoch let go after %d sets", k.sets)
	}
	if g := ask(rec(h.floor.Add(-time.Second), 90, server)); g != nil {
		t.Errorf("began before the epochs kept: answered %+v", g)
	}
}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

// TestQuietSetLive: the kernel's quiet set on a real accept program. This
// process serves a loopback port and is the only generation, so it
// becomes the quiet one: every connection it accepts is counted by the
// kernel (AcceptStats.Quiet, pqwatch_accept_quiet_total) and reported by
// no event, and every record, with a server answer, takes this process's
// generation from the quiet set (accept_quiet). The truth: the n
// connections this test dialled and the server accepted.
func TestQuietSetLive(t *testing.T) {
	openAccepts(t, 0).Close() // skips without root or BTF
	server, dial := goServer(t)
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}})
	for range 2 { // the first scan discovers, the second builds the generation
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var out []*record.Handshake
	at := NewAttribution(tr, func(r *record.Handshake) { mu.Lock(); out = append(out, r); mu.Unlock() })
	go at.Run()
	if err := tr.Scan(); err != nil { // chooses the quiet set
		t.Fatal(err)
	}
	h := tr.ix.epochs.hist.Load()
	if h == nil || len(h.epochs) != 1 || !slices.Equal(h.epochs[0].pids, []int{os.Getpid()}) || !slices.Contains(h.epochs[0].ports, server.Port()) {
		t.Fatalf("quiet history %+v, want this process (%d) on port %d", h, os.Getpid(), server.Port())
	}
	before := tr.AcceptStats()
	const n = 50
	for range n {
		start := time.Now()
		c := dial()
		client := c.LocalAddr().(*net.TCPAddr).AddrPort()
		c.Close()
		time.Sleep(2 * time.Millisecond) // the server accepts
		at.Process(&record.Handshake{Transport: record.TransportTCP, Client: client.String(), Server: server.String(),
			FlowStart: start, ServerHelloBytes: 90})
	}
	at.Flush()
	after := tr.AcceptStats()
	if q := after.Quiet - before.Quiet; q != n {
		t.Errorf("the kernel counted %d quiet accepts, this test made %d connections", q, n)
	}
	if st := tr.Stats(); st.ByAcceptQuiet != n || len(out) != n {
		t.Errorf("%d records, stats %+v: want %d by the quiet generation", len(out), st, n)
	}
	for i, r := range out {
		if r.Generation == nil || r.Generation.WorkerPID != os.Getpid() {
			t.Fatalf("record %d: generation %+v, want this process %d", i, r.Generation, os.Getpid())
		}
	}
	// Its accepts were reported by no event: the index holds none of them.
	if after.Events != before.Events {
		t.Logf("%d accept events meanwhile (other processes of the host)", after.Events-before.Events)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "pqwatch_accept_quiet_total" && mf.GetMetric()[0].GetCounter().GetValue() < n {
			t.Errorf("pqwatch_accept_quiet_total %v, want at least %d", mf.GetMetric()[0].GetCounter().GetValue(), n)
		}
	}
}
