package proctrack

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/internal/procfs"
	"github.com/pqwatch/pqwatch/record"
)

func quietTracker(t testing.TB, cfg Config) *Tracker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// goServer listens on loopback and accepts (and holds) connections.
func goServer(t testing.TB) (netip.AddrPort, func() net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	server := ln.Addr().(*net.TCPAddr).AddrPort()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", server.String())
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		t.Cleanup(func() { c.Close(); s.Close() })
		return c
	}
	return server, dial
}

// noNginx is a process name nothing has: trackers in the quiet-period tests
// ignore the nginx processes of tests running in parallel.
const noNginx = "pqwatch-test-none"

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to read /proc/PID/fd of every process")
	}
}

// TestOtherServerAttribution: a process that is not nginx (this Go test
// binary) is found through the listening socket it owns, and connections to
// it are attributed to it.
func TestOtherServerAttribution(t *testing.T) {
	requireRoot(t)
	server, dial := goServer(t)
	// Other packages' tests start and stop nginx meanwhile: track no
	// nginx here, so the serving set is this process alone.
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}})
	if err := tr.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Scan(); err != nil { // the first scan discovers, the second builds the generation
		t.Fatal(err)
	}
	var me GenerationInfo
	for _, g := range tr.Generations() {
		if g.MasterPID == os.Getpid() {
			me = g
		}
	}
	if me.ID == "" {
		t.Fatalf("this process (%d) not found as a server: %+v", os.Getpid(), tr.Generations())
	}
	if !strings.HasPrefix(me.OpenSSL, "Go crypto/tls go") || me.ExeSHA256 == "" || me.Start.IsZero() {
		t.Errorf("identity: %+v", me)
	}
	if d := time.Since(me.Start); d < 0 || d > time.Hour {
		t.Errorf("start time %v is %v ago", me.Start, d)
	}
	c := dial()
	client := c.LocalAddr().(*net.TCPAddr).AddrPort()
	g, ok := tr.Attribute(client, server)
	if !ok || g.ID != me.ID || g.WorkerPID != os.Getpid() {
		t.Fatalf("Attribute = %+v, %v; want %s", g, ok, me.ID)
	}
	// A connection whose socket is gone (short connections close before
	// the capture reports them): attributed by the listening socket, which
	// one generation alone holds, without a worker PID.
	if g, ok := tr.Attribute(netip.MustParseAddrPort("127.0.0.1:1"), server); !ok || g.ID != me.ID || g.WorkerPID != 0 {
		t.Fatalf("Attribute of a closed connection = %+v, %v; want %s by its listener", g, ok, me.ID)
	}
	// A port nobody listens on is never attributed.
	if g, ok := tr.Attribute(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:9")); ok {
		t.Fatalf("Attribute with no listener = %+v", g)
	}
	// Quiet periods: the serving set has not changed since the second
	// scan. A connection accepted after the period began and finished
	// before the last scan is attributed without a lookup, to the one
	// process serving, worker PID included.
	quiet, _ := tr.QuietSince()
	if err := tr.Scan(); err != nil {
		t.Fatal(err)
	}
	last, _ := tr.LastScan()
	if q, swapping := tr.QuietSince(); !q.Equal(quiet) || swapping || !last.After(quiet) {
		t.Fatalf("quiet since %v then %v (swapping %v), last scan %v: the serving set should not have changed", quiet, q, swapping, last)
	}
	mid := quiet.Add(last.Sub(quiet) / 2)
	if g, ok := tr.AttributeQuiet(server, mid, mid); !ok || g.ID != me.ID || g.WorkerPID != os.Getpid() {
		t.Fatalf("AttributeQuiet inside the period = %+v, %v; want %s with worker %d", g, ok, me.ID, os.Getpid())
	}
	// Accepted before the period began, or finished after the last scan
	// (a new process may have started meanwhile): no answer.
	if g, ok := tr.AttributeQuiet(server, quiet.Add(-time.Millisecond), mid); ok {
		t.Errorf("AttributeQuiet from before the period = %+v", g)
	}
	if g, ok := tr.AttributeQuiet(server, mid, last.Add(time.Millisecond)); ok {
		t.Errorf("AttributeQuiet finished after the last scan = %+v", g)
	}
	// A port this process does not listen on: no owner, no answer.
	if g, ok := tr.AttributeQuiet(netip.MustParseAddrPort("127.0.0.1:9"), mid, mid); ok {
		t.Errorf("AttributeQuiet with no listener = %+v", g)
	}
	st := tr.Stats()
	if st.Attributed != 3 || st.Unattributed != 1 || st.Quiet != 1 || st.ByListener != 1 {
		t.Errorf("stats %+v", st)
	}
	// The metric says the same, one line per way.
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collector())
	want := `
# HELP pqwatch_attributions_total TCP handshakes by how their server process was found: accept (the kernel's accept event named the process), accept_quiet (the kernel reported every accept but the quiet generation's, and none for this connection: that generation accepted it), quiet (one generation alone served throughout, no lookup), socket (the connection's socket), listener (the connection was gone; one generation holds the listener), none (not found), skipped (the attribution queue was full).
# TYPE pqwatch_attributions_total counter
pqwatch_attributions_total{method="accept"} 0
pqwatch_attributions_total{method="accept_quiet"} 0
pqwatch_attributions_total{method="listener"} 1
pqwatch_attributions_total{method="none"} 1
pqwatch_attributions_total{method="quiet"} 1
pqwatch_attributions_total{method="skipped"} 0
pqwatch_attributions_total{method="socket"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pqwatch_attributions_total"); err != nil {
		t.Error(err)
	}
}

// TestFailedSwapDeadline: an [emerg] from a process that stays alive (so
// the early verdict does not apply) becomes a failed swap after
// FailedSwapTimeout when no second master runs.
func TestFailedSwapDeadline(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	// A fixture /proc with no nginx but the process that logged (pid
	// 4242, alive): the host's own nginx swaps must not settle it.
	root := t.TempDir()
	for p, s := range map[string]string{
		"stat":              "cpu 0 0 0 0\nbtime 1800000000\n",
		"1/stat":            statLine(1, "init", 0, 0, 1),
		"1/task/1/children": "",
		"4242/stat":         statLine(4242, "nginx", 1, 0, 2),
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr := quietTracker(t, Config{ProcRoot: root, FailedSwapTimeout: 3 * time.Second, Now: func() time.Time { return now }})
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collector())
	tr.NoteEmerg(now, 4242, `invalid value "X25519MLKEM768"`)
	tr.NoteEmerg(now, 4242, "duplicate line of the same failure")
	for range 3 {
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	if n := tr.FailedSwaps(); n != 0 {
		t.Fatalf("failed before the deadline: %d", n)
	}
	if err := tr.Scan(); err != nil {
		t.Fatal(err)
	}
	if n := tr.FailedSwaps(); n != 1 {
		t.Fatalf("FailedSwaps = %d after the deadline", n)
	}
	evs := tr.Events()
	if len(evs) != 1 || evs[0].Kind != KindFailed || !strings.Contains(evs[0].Message, "X25519MLKEM768") {
		t.Fatalf("events %+v", evs)
	}
	want := `
# HELP pqwatch_swap_events_total Binary swap and reload events observed, by kind.
# TYPE pqwatch_swap_events_total counter
pqwatch_swap_events_total{kind="failed"} 1
pqwatch_swap_events_total{kind="quit"} 0
pqwatch_swap_events_total{kind="reload"} 0
pqwatch_swap_events_total{kind="rollback"} 0
pqwatch_swap_events_total{kind="usr2"} 0
pqwatch_swap_events_total{kind="winch"} 0
# HELP pqwatch_swap_failed_total Swaps that failed: .oldbin or [emerg] without a new master running in time.
# TYPE pqwatch_swap_failed_total counter
pqwatch_swap_failed_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pqwatch_swap_events_total", "pqwatch_swap_failed_total"); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorLint(t *testing.T) {
	requireRoot(t)
	server, _ := goServer(t)
	// Other packages' tests start and stop nginx meanwhile: track no
	// nginx here, so the serving set is this process alone.
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}})
	for range 2 {
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	g, ok := tr.GenerationOf(os.Getpid())
	if !ok {
		t.Fatal("this process not tracked")
	}
	tr.ObserveHandshake(g, "X25519MLKEM768")
	tr.ObserveHandshake(g, "x25519")
	tr.ObserveHandshake(&record.Generation{ID: "gone"}, "x25519")
	c := tr.Collector()
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("lint: %v %+v", err, probs)
	}
	want := fmt.Sprintf(`
# HELP pqwatch_generation_handshakes_total Handshakes served by the generation, by negotiated group.
# TYPE pqwatch_generation_handshakes_total counter
pqwatch_generation_handshakes_total{generation=%[1]q,group="X25519MLKEM768"} 1
pqwatch_generation_handshakes_total{generation=%[1]q,group="x25519"} 1
`, g.ID)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pqwatch_generation_handshakes_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "pqwatch_generation_info"); n < 1 {
		t.Fatalf("%d info series", n)
	}
	if st := tr.Stats(); st.UnknownHandshakes != 1 {
		t.Errorf("unknown handshakes %d", st.UnknownHandshakes)
	}
}

func TestEvictOldestExited(t *testing.T) {
	tr := newSwapState(swapConfig{maxGenerations: 3})
	mk := func(pid int, alive bool) *generation {
		g := &generation{key: procKey{pid, 1}, id: fmt.Sprint("g", pid), alive: alive, handshakes: map[string]uint64{}}
		tr.gens[g.key] = g
		tr.order = append(tr.order, g)
		return g
	}
	a := mk(1, false)
	mk(2, true)
	c := mk(3, false)
	d := mk(4, true)
	d.parent, c.successor = c, d
	mk(5, true)
	tr.evict()
	var ids []string
	for _, g := range tr.order {
		ids = append(ids, g.id)
	}
	if got := strings.Join(ids, ","); got != "g2,g4,g5" || d.parent != nil || tr.evicted != 2 {
		t.Fatalf("kept %s (parent %v, evicted %d)", got, d.parent, tr.evicted)
	}
	_ = a
}

func BenchmarkAttributeCached(b *testing.B) {
	requireRoot(b)
	server, dial := goServer(b)
	tr := quietTracker(b, Config{ServerPorts: []uint16{server.Port()}})
	for range 2 {
		if err := tr.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	client := dial().LocalAddr().(*net.TCPAddr).AddrPort()
	if _, ok := tr.Attribute(client, server); !ok {
		b.Fatal("not attributed")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tr.Attribute(client, server); !ok {
			b.Fatal("not attributed")
		}
	}
}

func BenchmarkScan(b *testing.B) {
	tr := quietTracker(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Scan(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStat(b *testing.B) {
	line := []byte("1234 (nginx) S 1 1234 1234 0 -1 4194624 93 0 0 0 12 34 0 0 20 0 1 0 5678 12345678 1500 18446744073709551615 1 1 0 0 0 0 0 4096 134749696 0 0 0 17 1 0 0 0 0 0\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := procfs.ParseStat(line); err != nil {
			b.Fatal(err)
		}
	}
}

// TestQUICServerQuietAttribution: a QUIC server is found through the
// unconnected UDP socket it receives on, and a QUIC connection in a quiet
// period is attributed to it; a port no UDP socket is bound to is not, and
// that is counted.
func TestQUICServerQuietAttribution(t *testing.T) {
	requireRoot(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	server := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	// Other packages' tests start and stop nginx meanwhile: track no
	// nginx here, so the serving set is this process alone.
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}})
	for range 3 { // discover, build the generation, confirm the period
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	quiet, _ := tr.QuietSince()
	if !tr.Probe() {
		t.Fatal("probe saw a change with nothing changing")
	}
	last, _ := tr.LastScan()
	if !last.After(quiet) {
		t.Fatalf("last scan %v not after the quiet period's start %v", last, quiet)
	}
	mid := quiet.Add(last.Sub(quiet) / 2)
	g, ok := tr.AttributeQuietQUIC(server, mid, mid)
	if !ok || g.MasterPID != os.Getpid() || g.WorkerPID != os.Getpid() {
		t.Fatalf("AttributeQuietQUIC = %+v, %v; want this process (%d)", g, ok, os.Getpid())
	}
	// TCP on the same port: nobody listens.
	if g, ok := tr.AttributeQuiet(server, mid, mid); ok {
		t.Errorf("AttributeQuiet (TCP) on a UDP-only port = %+v", g)
	}
	before := tr.Stats().Unattributed
	if g, ok := tr.AttributeQuietQUIC(netip.MustParseAddrPort("127.0.0.1:9"), mid, mid); ok {
		t.Errorf("AttributeQuietQUIC with no UDP socket = %+v", g)
	}
	if st := tr.Stats(); st.Unattributed != before+1 || st.Quiet != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestScannerBlocksNoReader: what the scanner holds while it reads /proc
// (scanMu) is taken by no reader: the per-record questions, the counts,
// the generations and the collector's figures are answered meanwhile.
func TestScannerBlocksNoReader(t *testing.T) {
	requireRoot(t)
	server, dial := goServer(t)
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}})
	for range 2 {
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	me, ok := tr.GenerationOf(os.Getpid())
	if !ok {
		t.Skip("this process is not found as a server (needs /proc/self/fd and sock_diag)")
	}
	client := dial().LocalAddr().(*net.TCPAddr).AddrPort()
	tr.scanMu.Lock() // a scan reading /proc
	done := make(chan struct{})
	go func() {
		defer close(done)
		if g, ok := tr.Attribute(client, server); !ok || g.ID != me.ID {
			t.Errorf("Attribute = %+v, %v; want %s", g, ok, me.ID)
		}
		tr.AttributeQuiet(server, time.Now().Add(-time.Hour), time.Now())
		tr.QuietSince()
		tr.LastScan()
		tr.ScanDue()
		tr.ObserveHandshake(me, "x25519")
		if len(tr.Generations()) == 0 {
			t.Error("no generation")
		}
		tr.Stats()
		tr.Events()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(tr.Collector())
		if _, err := reg.Gather(); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("a reader waited for the scanner's lock")
	}
	tr.scanMu.Unlock()
	<-done
}
