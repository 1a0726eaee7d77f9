package proctrack

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

func TestAcceptIndexBound(t *testing.T) {
	a := &Accepts{idx: newAcceptIndex(1000)}
	server := netip.MustParseAddrPort("127.0.0.1:443")
	for i := range 5000 {
		c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i%5)}), uint16(10000+i))
		a.add(server, c, uint32(100+i), uint32(100+i), uint64(i))
	}
	s := a.Stats()
	capa, gen := a.idx.capacity(), a.idx.genSize // 1008: 16 generations of 63
	if s.Events != 5000 || s.Entries > capa || s.Entries <= capa-gen || uint64(s.Entries)+s.Evictions != 5000 || s.Replaced != 0 {
		t.Fatalf("stats %+v, want 5000 events, %d to %d entries, the rest evicted", s, capa-gen+1, capa)
	}
	old := netip.MustParseAddrPort("127.0.0.2:10000")
	if _, ok := a.Lookup(old, server, time.Time{}); ok {
		t.Errorf("the oldest accept is still indexed")
	}
	last := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + 4999%5)}), 10000+4999)
	if e, ok := a.Lookup(last, server, time.Time{}); !ok || e.TGID != 5099 {
		t.Errorf("newest: %+v %v", e, ok)
	}

	// A reused client port: the later accept answers; within one
	// generation it replaces the entry (counted), across generations the
	// older one stays until its generation is evicted.
	b := &Accepts{idx: newAcceptIndex(64)} // 16 generations of 4
	c := netip.MustParseAddrPort("10.0.0.1:5000")
	b.add(server, c, 1, 1, 1)
	b.add(server, c, 2, 2, 2)
	for i := range 2 {
		b.add(server, netip.AddrPortFrom(c.Addr(), uint16(6000+i)), 9, 9, 3)
	}
	if e, ok := b.Lookup(c, server, time.Time{}); !ok || e.TGID != 2 {
		t.Errorf("reused port: %+v %v, want tgid 2", e, ok)
	}
	if st := b.Stats(); st.Evictions != 0 || st.Replaced != 1 || st.Entries != 3 {
		t.Errorf("%+v, want 3 entries, 1 replaced, none evicted", st)
	}
	b.add(server, netip.AddrPortFrom(c.Addr(), 6002), 9, 9, 3) // fills the first generation
	b.add(server, c, 3, 3, 4)                                  // the next one: the older entry stays
	if e, ok := b.Lookup(c, server, time.Time{}); !ok || e.TGID != 3 {
		t.Errorf("reused port across generations: %+v %v, want tgid 3", e, ok)
	}
	if st := b.Stats(); st.Replaced != 1 || st.Entries != 5 {
		t.Errorf("%+v, want 5 entries, 1 replaced", st)
	}

	// v4-mapped addresses (a dual-stack listener) match plain IPv4, and
	// an accept before notBefore is an earlier connection.
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.9]:443")
	b.add(mapped, netip.MustParseAddrPort("[::ffff:127.0.0.8]:4000"), 7, 8, uint64(time.Second))
	e, ok := b.Lookup(netip.MustParseAddrPort("127.0.0.8:4000"), netip.MustParseAddrPort("127.0.0.9:443"), time.Time{})
	if !ok || e.TGID != 7 || e.TID != 8 {
		t.Errorf("v4-mapped: %+v %v", e, ok)
	}
	if _, ok := b.Lookup(netip.MustParseAddrPort("127.0.0.8:4000"), netip.MustParseAddrPort("127.0.0.9:443"), time.Unix(2, 0)); ok {
		t.Errorf("an accept older than notBefore matched")
	}

	// A client port reused 2 s later: each connection's record, asked with
	// its own SYN (notBefore = SYN - acceptMargin), finds its own accept,
	// the earlier one too after the reuse; the two accepts in two
	// generations (bound 16: generations of one) and in one (bound 64).
	for _, bound := range []int{16, 64} {
		r := &Accepts{idx: newAcceptIndex(bound)}
		rc := netip.MustParseAddrPort("10.0.0.2:5000")
		syn1, syn2 := time.Unix(100, 0), time.Unix(102, 0)
		r.add(server, rc, 11, 11, uint64(syn1.Add(time.Millisecond).UnixNano()))
		r.add(server, rc, 22, 22, uint64(syn2.Add(time.Millisecond).UnixNano()))
		for _, tc := range []struct {
			syn  time.Time
			tgid int
		}{{syn1, 11}, {syn2, 22}} {
			if e, ok := r.Lookup(rc, server, tc.syn.Add(-acceptMargin)); !ok || e.TGID != tc.tgid {
				t.Errorf("bound %d, SYN at %v: %+v %v, want tgid %d", bound, tc.syn, e, ok, tc.tgid)
			}
		}
		if _, ok := r.Lookup(rc, server, time.Unix(103, 0)); ok {
			t.Errorf("bound %d: an accept older than notBefore matched after a reuse", bound)
		}
	}
}

// openAccepts opens the kernel's accept events or skips with the reason.
func openAccepts(t *testing.T, max int) *Accepts {
	t.Helper()
	if err := testenv.CheckRoot(); err != nil {
		t.Skip("needs root to load eBPF:", err)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs a kernel with BTF:", err)
	}
	a, err := OpenAccepts(AcceptConfig{MaxEntries: max})
	if err == ErrAcceptsUnsupported {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// waitAccept polls the index for the connection client -> server.
func waitAccept(a *Accepts, client, server netip.AddrPort, since time.Time) (Accept, bool) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		a.sync()
		if e, ok := a.Lookup(client, server, since); ok {
			return e, true
		}
	}
	return Accept{}, false
}

func addrPorts(c net.Conn) (client, server netip.AddrPort) {
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

// acceptAll accepts and closes connections until ln is closed; the truth
// for the accept events of a Go listener is the test's own pid.
func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func TestAcceptEventsGoListener(t *testing.T) {
	a := openAccepts(t, 0)
	for _, tc := range []struct{ name, listen, dial string }{
		{"ipv4", "127.0.0.1:0", "127.0.0.1"},
		{"ipv6", "[::1]:0", "::1"},
		{"dual-stack listener, IPv4 client", "[::]:0", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", tc.listen) // "[::]:0" is dual-stack
			if err != nil {
				t.Skip("listen:", err)
			}
			defer ln.Close()
			go acceptAll(ln)
			port := ln.Addr().(*net.TCPAddr).Port
			start := time.Now()
			for i := range 20 {
				c, err := net.Dial("tcp", net.JoinHostPort(tc.dial, strconv.Itoa(port)))
				if err != nil {
					t.Fatal(err)
				}
				client, server := addrPorts(c)
				e, ok := waitAccept(a, client, server, start.Add(-time.Millisecond))
				c.Close()
				if !ok {
					t.Fatalf("connection %d %v -> %v: no accept event (stats %+v)", i, client, server, a.Stats())
				}
				if e.TGID != os.Getpid() || e.TID == 0 {
					t.Fatalf("connection %d: tgid %d tid %d, want tgid %d", i, e.TGID, e.TID, os.Getpid())
				}
				if d := e.Time.Sub(start); d < -time.Millisecond || time.Since(e.Time) < -time.Millisecond {
					t.Fatalf("connection %d: accept time %v outside [%v, now]", i, e.Time, start)
				}
			}
		})
	}
}

func TestAcceptEventsNginx(t *testing.T) {
	a := openAccepts(t, 0)
	if _, err := testenv.LookBin("nginx"); err != nil {
		t.Skip(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ng := testenv.StartNginx(t, testenv.NginxOptions{Listen: "127.0.0.1:" + strconv.Itoa(port), Workers: 4})
	defer ng.Stop()
	workers := map[int]int{}
	start := time.Now()
	const n = 200
	for i := range n {
		var client, server netip.AddrPort
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					client, server = addrPorts(c)
				}
				return c, err
			},
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pid, err := strconv.Atoi(resp.Header.Get("X-Pid"))
		if err != nil {
			t.Fatalf("X-Pid %q", resp.Header.Get("X-Pid"))
		}
		e, ok := waitAccept(a, client, server, start.Add(-time.Millisecond))
		if !ok {
			t.Fatalf("request %d %v -> %v: no accept event (stats %+v)", i, client, server, a.Stats())
		}
		if e.TGID != pid {
			t.Fatalf("request %d %v -> %v: accept by %d, served by worker %d (X-Pid)", i, client, server, e.TGID, pid)
		}
		workers[pid]++
	}
	t.Logf("%d requests, each accept event's tgid the X-Pid worker; by worker: %v; stats %+v", n, workers, a.Stats())
}

func TestAcceptIndexFlood(t *testing.T) {
	// 100,000 accepts from 10 addresses (one address runs out of ports
	// in TIME_WAIT) into an index of 10,000; -short: 5,000 into 1,000.
	bound, sources, per := 10000, 10, 10000
	if testing.Short() {
		bound, sources, per = 1000, 5, 1000
	}
	a := openAccepts(t, bound)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	before := a.Stats()
	var wg sync.WaitGroup
	errs := make(chan error, sources)
	for s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+s))}}
			for range per {
				c, err := d.Dial("tcp", ln.Addr().String())
				if err != nil {
					errs <- err
					return
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Other processes accept meanwhile too: at least our accepts arrive.
	var s AcceptStats
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		a.sync() // as a record that misses does
		if s = a.Stats(); s.Events-before.Events+s.RingDrops >= uint64(sources*per) {
			break
		}
	}
	t.Logf("%d accepts from %d addresses into an index of %d: %+v", sources*per, sources, bound, s)
	if s.Events+s.RingDrops-before.Events < uint64(sources*per) {
		t.Errorf("%d events (+%d dropped), want at least %d", s.Events-before.Events, s.RingDrops, sources*per)
	}
	if !testing.Short() && s.RingDrops != 0 {
		// 10,000 accepts a second and more (640 kB/s into a 1 MiB ring):
		// the watcher must have been woken for the bursts, not only synced.
		t.Errorf("%d accept events dropped: the ring's watcher did not keep up", s.RingDrops)
	}
	if s.Entries > a.idx.capacity() {
		t.Errorf("%d entries, bound %d (%d in whole generations)", s.Entries, bound, a.idx.capacity())
	}
	// Every accept indexed is still there, evicted, or replaced by a
	// later one of the same addresses (loopback reuses TIME_WAIT ports).
	if s.Evictions+s.Replaced+s.Claimed+uint64(s.Entries) != s.Events || s.Evictions == 0 {
		t.Errorf("%d evictions + %d replaced + %d claimed + %d entries != %d events", s.Evictions, s.Replaced, s.Claimed, s.Entries, s.Events)
	}
}

// TestAttributionFromAccepts: records of connections to a tracked server
// (this test process) are attributed from the accept events, after their
// sockets closed, and the metrics say the source; with the events switched
// off the source is the fallback.
func TestAttributionFromAccepts(t *testing.T) {
	openAccepts(t, 0) // skips without root or BTF
	server, dial := goServer(t)
	var logs strings.Builder
	tr := quietTracker(t, Config{ServerPorts: []uint16{server.Port()}, NginxComms: []string{noNginx}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 2 { // the first scan discovers, the second builds the generation
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex // records come from Process (found inline) and from Run
	var out []*record.Handshake
	at := NewAttribution(tr, func(r *record.Handshake) { mu.Lock(); out = append(out, r); mu.Unlock() })
	if src, reason := tr.AttributionSource(); src != SourceEBPF {
		t.Fatalf("source %q (%s), want ebpf", src, reason)
	}
	go at.Run()
	const n = 20
	for i := range n {
		start := time.Now()
		c := dial()
		client := c.LocalAddr().(*net.TCPAddr).AddrPort()
		c.Close()
		time.Sleep(2 * time.Millisecond) // the server accepts
		r := &record.Handshake{Transport: record.TransportTCP, Client: client.String(), Server: server.String(), FlowStart: start}
		if i%4 == 3 {
			// A scan holds the tracker: Process does not wait for it,
			// and Run counts the record once it is free.
			tr.mu.Lock()
			at.Process(r)
			tr.mu.Unlock()
			continue
		}
		at.Process(r)
	}
	at.Flush()
	for i, r := range out {
		if r.Generation == nil || r.Generation.WorkerPID != os.Getpid() {
			t.Fatalf("record %d: generation %+v, want worker %d", i, r.Generation, os.Getpid())
		}
	}
	if st := tr.Stats(); len(out) != n || st.ByAccept != n {
		t.Fatalf("%d records, stats %+v: want %d by accept", len(out), st, n)
	}
	if !strings.Contains(logs.String(), "source=ebpf") {
		t.Errorf("no start log naming the source: %s", logs.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collector())
	want := `
# HELP pqwatch_attribution_source_info 1 for the source attribution uses: ebpf (the kernel's accept events first), fallback (process scans and socket lookups only: eBPF unavailable or switched off; the start log says why).
# TYPE pqwatch_attribution_source_info gauge
pqwatch_attribution_source_info{source="ebpf"} 1
pqwatch_attribution_source_info{source="fallback"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pqwatch_attribution_source_info"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP pqwatch_attributions_total TCP handshakes by how their server process was found: accept (the kernel's accept event named the process), accept_quiet (the kernel reported every accept but the quiet generation's, and none for this connection: that generation accepted it), quiet (one generation alone served throughout, no lookup), socket (the connection's socket), listener (the connection was gone; one generation holds the listener), none (not found), skipped (the attribution queue was full).
# TYPE pqwatch_attributions_total counter
pqwatch_attributions_total{method="accept"} %d
pqwatch_attributions_total{method="accept_quiet"} 0
pqwatch_attributions_total{method="listener"} 0
pqwatch_attributions_total{method="none"} 0
pqwatch_attributions_total{method="quiet"} 0
pqwatch_attributions_total{method="skipped"} 0
pqwatch_attributions_total{method="socket"} 0
`, n)), "pqwatch_attributions_total"); err != nil {
		t.Error(err)
	}
	if lint, err := testutil.CollectAndLint(tr.Collector()); err != nil || len(lint) > 0 {
		t.Errorf("lint: %v %v", lint, err)
	}

	off := quietTracker(t, Config{NoAcceptEvents: true, NginxComms: []string{noNginx}})
	NewAttribution(off, func(*record.Handshake) {}).Flush()
	if src, reason := off.AttributionSource(); src != SourceFallback || reason == "" {
		t.Errorf("switched off: source %q reason %q", src, reason)
	}
}

// TestAcceptRecentRing: at a bound with a recent ring (the default's
// kind), lookups find the newest accepts there, a claimed accept leaves
// the index, the unclaimed ones move to the generations when their slot is
// reused and are still found there, a reused client port answers each
// connection with its own accept across the two, and every accept is
// counted once: in the index, claimed, replaced or evicted.
func TestAcceptRecentRing(t *testing.T) {
	const bound = 1 << 16
	a := &Accepts{idx: newAcceptIndex(bound)}
	r := len(a.idx.recent)
	if r != 1024 {
		t.Fatalf("recent ring of %d at bound %d, want 1024", r, bound)
	}
	server := netip.MustParseAddrPort("10.0.0.1:443")
	cl := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(20000+i%30000))
	}
	at := func(i int) uint64 { return uint64(time.Second) + uint64(i)*uint64(time.Millisecond) }
	syn := func(i int) time.Time { return time.Unix(0, int64(at(i))-int64(time.Millisecond)).Add(-acceptMargin) }
	a.add(server, cl(0), 100, 100, at(0))
	e, ok := a.Lookup(cl(0), server, syn(0))
	if !ok || e.TGID != 100 || e.seq == 0 {
		t.Fatalf("newest accept: %+v %v, want tgid 100 from the ring", e, ok)
	}
	a.Claim(e)
	if _, ok := a.Lookup(cl(0), server, syn(0)); ok {
		t.Fatal("a claimed accept was found again")
	}
	if st := a.Stats(); st.Claimed != 1 || st.Entries != 0 || st.Events != 1 {
		t.Fatalf("after one claim: %+v", st)
	}

	// Fill past the ring: the first unclaimed accepts move to the
	// generations and are found there (no ring handle), and Claim of such
	// an accept changes nothing.
	for i := 1; i <= r+10; i++ {
		a.add(server, cl(i), uint32(100+i), uint32(100+i), at(i))
	}
	e, ok = a.Lookup(cl(1), server, syn(1))
	if !ok || e.TGID != 101 || e.seq != 0 {
		t.Fatalf("an accept moved to the generations: %+v %v", e, ok)
	}
	a.Claim(e)
	e, ok = a.Lookup(cl(r+10), server, syn(r+10))
	if !ok || e.TGID != 100+r+10 || e.seq == 0 {
		t.Fatalf("the newest accept: %+v %v", e, ok)
	}
	if _, ok := a.Lookup(cl(r+10), server, time.Unix(100, 0)); ok {
		t.Fatal("an accept older than notBefore matched")
	}
	if e, ok := a.Lookup(cl(5), server, time.Time{}); !ok || e.TGID != 105 {
		t.Fatalf("without notBefore: %+v %v", e, ok)
	}

	// A client port reused 2 s later: one accept in the generations, one
	// in the ring; each connection's record finds its own.
	rc := netip.MustParseAddrPort("10.9.0.2:5000")
	syn1 := time.Unix(50, 0)
	a.add(server, rc, 11, 11, uint64(syn1.Add(time.Millisecond).UnixNano()))
	for i := range r {
		a.add(server, cl(40000+i), 7, 7, uint64(syn1.Add(time.Second+time.Duration(i)*time.Microsecond).UnixNano()))
	}
	syn2 := syn1.Add(2 * time.Second)
	a.add(server, rc, 22, 22, uint64(syn2.Add(time.Millisecond).UnixNano()))
	for _, tc := range []struct {
		syn  time.Time
		tgid int
	}{{syn1, 11}, {syn2, 22}} {
		if e, ok := a.Lookup(rc, server, tc.syn.Add(-acceptMargin)); !ok || e.TGID != tc.tgid {
			t.Errorf("SYN at %v: %+v %v, want tgid %d", tc.syn, e, ok, tc.tgid)
		}
	}
	// Both in the ring.
	a.add(server, rc, 33, 33, uint64(syn2.Add(10*time.Millisecond).UnixNano()))
	if e, ok := a.Lookup(rc, server, syn2.Add(-acceptMargin)); !ok || e.TGID != 22 {
		t.Errorf("two accepts in the ring, SYN of the first: %+v %v, want tgid 22", e, ok)
	}
	if e, ok := a.Lookup(rc, server, syn2.Add(10*time.Millisecond-acceptMargin)); !ok || e.TGID != 33 {
		t.Errorf("two accepts in the ring, SYN of the second: %+v %v, want tgid 33", e, ok)
	}

	// Two address pairs whose hashes share a head: the later one's head
	// hides the earlier's, which a scan still finds, and a reuse of the
	// earlier pair after it (a link left unknown) still answers each
	// connection with its own accept.
	x := a.idx
	mask := uint64(len(x.heads) - 1)
	pa := netip.MustParseAddrPort("10.7.0.1:4000")
	ha := maphash.Comparable(x.seed, acceptKeyOf(pa, server))
	var pb netip.AddrPort
	for i := 1; ; i++ {
		pb = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)}), 4000)
		if maphash.Comparable(x.seed, acceptKeyOf(pb, server))&mask == ha&mask {
			break
		}
	}
	t0 := time.Unix(80, 0)
	a.add(server, pa, 41, 41, uint64(t0.UnixNano()))
	a.add(server, pb, 42, 42, uint64(t0.Add(time.Millisecond).UnixNano()))
	if e, ok := a.Lookup(pa, server, t0.Add(-acceptMargin)); !ok || e.TGID != 41 || e.seq == 0 {
		t.Errorf("behind another pair's head: %+v %v, want tgid 41 from the ring", e, ok)
	}
	a.add(server, pa, 43, 43, uint64(t0.Add(20*time.Millisecond).UnixNano()))
	if e, ok := a.Lookup(pa, server, t0.Add(-acceptMargin)); !ok || e.TGID != 41 {
		t.Errorf("reuse after another pair's head, first SYN: %+v %v, want tgid 41", e, ok)
	}
	if e, ok := a.Lookup(pa, server, t0.Add(20*time.Millisecond-acceptMargin)); !ok || e.TGID != 43 {
		t.Errorf("reuse after another pair's head, second SYN: %+v %v, want tgid 43", e, ok)
	}
	if e, ok := a.Lookup(pb, server, time.Time{}); !ok || e.TGID != 42 {
		t.Errorf("the other pair: %+v %v", e, ok)
	}

	// Every accept counted once, with claims along the way.
	for i := range 200000 {
		a.add(server, cl(i), 1, 1, at(3000+i))
		if i%3 == 0 {
			if e, ok := a.Lookup(cl(i), server, time.Time{}); ok {
				a.Claim(e)
			}
		}
	}
	st := a.Stats()
	if st.Evictions+st.Replaced+st.Claimed+uint64(st.Entries) != st.Events || st.Entries > a.idx.capacity() || a.idx.capacity() > bound+acceptGens {
		t.Errorf("%+v: entries + claimed + replaced + evicted != events, or past the bound %d (capacity %d)", st, bound, a.idx.capacity())
	}
	t.Logf("%+v", st)
}
