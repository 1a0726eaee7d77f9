package merge

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// view is one sighting of handshake n (its random and sequence number)
// seen at ts from client to server with TTL ttl.
func view(n int, ts time.Duration, client, server string, ttl uint8) *record.Handshake {
	c, s := netip.MustParseAddrPort(client), netip.MustParseAddrPort(server)
	r := &record.Handshake{
		TS: t0.Add(ts), Transport: record.TransportTCP, Outcome: record.OutcomeOK,
		Client: record.ClientField(c), Server: s.String(),
		ClientAddr: c.Addr().As16(), ClientPort: c.Port(), ServerAddr: s.Addr().As16(), ServerPort: s.Port(),
		HandshakeRTTMicros: 200,
		View:               record.View{Seq: uint32(1000 + n), TTL: ttl, Known: true},
	}
	r.View.Random[0], r.View.Random[1] = byte(n), byte(n>>8)
	return r
}

// harness is an offline stage (capture time) that collects its output.
type harness struct {
	m    *Merger
	out  []*record.Handshake
	done map[*record.Handshake]int
	mu   sync.Mutex
}

func newHarness(cfg Config) *harness {
	h := &harness{done: map[*record.Handshake]int{}}
	cfg.Done = func(r *record.Handshake) {
		h.mu.Lock()
		h.done[r]++
		h.mu.Unlock()
	}
	h.m = New(cfg, func(r *record.Handshake) {
		h.mu.Lock()
		h.out = append(h.out, r)
		h.mu.Unlock()
	})
	return h
}

func (h *harness) feed(rs ...*record.Handshake) {
	for _, r := range rs {
		h.m.Process(r)
	}
}

const (
	clientAddr = "192.0.2.7:51000"
	nodeAddr   = "10.198.0.1:40000" // the node, masquerading the client
	svc        = "10.198.0.2:443"
	pod        = "10.199.0.2:8443"
)

func TestTwinsMerged(t *testing.T) {
	h := newHarness(Config{Offline: true})
	up := view(1, 0, clientAddr, svc, 64)                   // uplink, before DNAT
	br := view(1, 20*time.Microsecond, clientAddr, pod, 63) // bridge, after it
	br.Group, br.Version = "X25519MLKEM768", "TLS1.3"
	h.feed(up, br)
	h.m.Flush()
	if len(h.out) != 1 {
		t.Fatalf("%d records, want 1", len(h.out))
	}
	r := h.out[0]
	if r != br {
		t.Errorf("the record is not the server's view (TTL 63)")
	}
	if r.Server != pod || r.Frontend != svc || r.ClientText() != clientAddr || !r.TS.Equal(t0) || r.Group != "X25519MLKEM768" {
		t.Errorf("merged: server %s frontend %s client %s ts %v group %s", r.Server, r.Frontend, r.ClientText(), r.TS, r.Group)
	}
	if h.done[up] != 1 || h.done[br] != 0 {
		t.Errorf("Done: uplink view %d times, released record %d times", h.done[up], h.done[br])
	}
	if st := h.m.Stats(); st.Merged != 1 || st.Late != 0 || st.Held != 0 {
		t.Errorf("stats %+v", st)
	}
}

// The server's view first (the capture order of two interfaces is
// anyone's), with SNAT: its client is the node.
func TestSNATServerViewFirst(t *testing.T) {
	h := newHarness(Config{Offline: true})
	br := view(2, 15*time.Microsecond, nodeAddr, pod, 63)
	up := view(2, 0, clientAddr, svc, 64)
	h.feed(br, up)
	h.m.Flush()
	if len(h.out) != 1 {
		t.Fatalf("%d records, want 1", len(h.out))
	}
	r := h.out[0]
	if r != br || r.Server != pod || r.Frontend != svc || r.ClientText() != clientAddr || r.ClientAddrPort() != netip.MustParseAddrPort(clientAddr) || !r.TS.Equal(t0) {
		t.Errorf("merged: server %s frontend %s client %s ts %v", r.Server, r.Frontend, r.ClientText(), r.TS)
	}
	if h.done[up] != 1 {
		t.Errorf("the uplink view went to Done %d times", h.done[up])
	}
	if r.Peer != netip.MustParseAddrPort(nodeAddr) || r.ServerSeenClient() != netip.MustParseAddrPort(nodeAddr) {
		t.Errorf("the client the server saw (its socket's, its log's) is %v, want the node's %s", r.Peer, nodeAddr)
	}
}

// Of two views as near the server, the one that saw the handshake
// complete is kept: a bridge whose netfilter undoes the SNAT before the
// reply reaches it sees only the client's half (reset), the pod's veth
// both halves.
func TestEqualTTLCompleteViewKept(t *testing.T) {
	h := newHarness(Config{Offline: true})
	up := view(5, 0, clientAddr, svc, 64)
	br := view(5, 10*time.Microsecond, clientAddr, pod, 63)
	br.Outcome = record.OutcomeReset
	veth := view(5, 12*time.Microsecond, nodeAddr, pod, 63)
	h.feed(up, br, veth)
	h.m.Flush()
	if len(h.out) != 1 || h.out[0] != veth || h.out[0].Outcome != record.OutcomeOK {
		t.Fatalf("%d records; kept the complete view: %v", len(h.out), len(h.out) == 1 && h.out[0] == veth)
	}
	if r := h.out[0]; r.ClientText() != clientAddr || r.Frontend != svc || r.Peer != netip.MustParseAddrPort(nodeAddr) {
		t.Errorf("client %s frontend %s peer %v", r.ClientText(), r.Frontend, r.Peer)
	}
}

// Uplink, bridge and veth: three views, two with TTL 63 and the same
// addresses (a bridged copy), collapse into one record.
func TestThreeViews(t *testing.T) {
	h := newHarness(Config{Offline: true})
	up := view(3, 0, clientAddr, svc, 64)
	br := view(3, 10*time.Microsecond, clientAddr, pod, 63)
	veth := view(3, 12*time.Microsecond, clientAddr, pod, 63)
	h.feed(veth, up, br)
	h.m.Flush()
	if len(h.out) != 1 {
		t.Fatalf("%d records, want 1", len(h.out))
	}
	r := h.out[0]
	if r != veth || r.Server != pod || r.Frontend != svc || !r.TS.Equal(t0) {
		t.Errorf("merged: server %s frontend %s ts %v", r.Server, r.Frontend, r.TS)
	}
	if h.done[up] != 1 || h.done[br] != 1 || h.done[veth] != 0 {
		t.Errorf("Done: %d %d %d", h.done[up], h.done[br], h.done[veth])
	}
	if st := h.m.Stats(); st.Merged != 2 {
		t.Errorf("merged %d, want 2", st.Merged)
	}
}

// Two views with the same addresses and TTL (bridge and veth) just
// collapse: no frontend, the first's record.
func TestSameViewCollapses(t *testing.T) {
	h := newHarness(Config{Offline: true})
	a := view(4, 0, clientAddr, pod, 63)
	b := view(4, 3*time.Microsecond, clientAddr, pod, 63)
	h.feed(a, b)
	h.m.Flush()
	if len(h.out) != 1 || h.out[0] != a || a.Frontend != "" || a.ClientText() != clientAddr {
		t.Fatalf("out %v, frontend %q", h.out, a.Frontend)
	}
}

// A ClientHello replayed on another connection (another sequence number),
// or the same bytes outside the window, stays a record of its own.
func TestReplayStaysSeparate(t *testing.T) {
	h := newHarness(Config{Offline: true})
	orig := view(5, 0, clientAddr, pod, 63)
	otherSeq := view(5, 10*time.Microsecond, "198.51.100.9:4444", pod, 60)
	otherSeq.View.Seq++
	later := view(5, 6*time.Millisecond, "198.51.100.9:4445", pod, 60) // outside W, still held
	quic := view(5, 20*time.Microsecond, clientAddr, pod, 62)
	quic.Transport = record.TransportQUIC // another transport
	h.feed(orig, otherSeq, later, quic)
	h.m.Flush()
	if len(h.out) != 4 {
		t.Fatalf("%d records, want 4", len(h.out))
	}
	for i, want := range []*record.Handshake{orig, otherSeq, later, quic} {
		if h.out[i] != want || want.Frontend != "" {
			t.Errorf("record %d is not the %d-th in, or has frontend %q", i, i, h.out[i].Frontend)
		}
	}
	if st := h.m.Stats(); st.Merged != 0 {
		t.Errorf("merged %d", st.Merged)
	}
}

// Records without an identity (a ClientHello cut before its random) pass
// through in order and never merge.
func TestUnknownIdentityNeverMerges(t *testing.T) {
	h := newHarness(Config{Offline: true})
	a, b := view(6, 0, clientAddr, svc, 64), view(6, 0, clientAddr, pod, 63)
	a.View.Known, b.View.Known = false, false
	h.feed(a, b)
	h.m.Flush()
	if len(h.out) != 2 || h.out[0] != a || h.out[1] != b {
		t.Fatalf("out %v", h.out)
	}
}

// A twin that comes after its first sighting left is dropped and counted,
// offline (watermark) and live (wall time).
func TestLateTwin(t *testing.T) {
	h := newHarness(Config{Offline: true})
	first := view(7, 0, clientAddr, pod, 63)
	// Later handshakes move the watermark past the hold.
	h.feed(first, view(8, 40*time.Millisecond, clientAddr, pod, 63))
	if len(h.out) != 1 || h.out[0] != first {
		t.Fatalf("after the hold: %d records out", len(h.out))
	}
	late := view(7, 5*time.Microsecond, clientAddr, svc, 64) // expired a second later
	late.Outcome = record.OutcomeTimeout
	h.feed(view(9, 1000*time.Millisecond, clientAddr, pod, 63), late)
	h.m.Flush()
	if len(h.out) != 3 {
		t.Fatalf("%d records, want 3", len(h.out))
	}
	if st := h.m.Stats(); st.Late != 1 || h.done[late] != 1 {
		t.Errorf("late %d, done %d", st.Late, h.done[late])
	}
	// Past Remember it is forgotten: a record again.
	again := view(7, 5*time.Microsecond, clientAddr, svc, 64)
	h.feed(view(10, 4*time.Second, clientAddr, pod, 63), again)
	h.m.Flush()
	if h.out[len(h.out)-1] != again {
		t.Errorf("a view past Remember was dropped")
	}
}

// Live, before any handshake was seen twice, nothing waits (a host
// without NAT: the attribution's socket lookups need the connection still
// open); the first twin turns the hold on, and is dropped as late.
func TestLiveHoldOnlyWithViews(t *testing.T) {
	h := newHarness(Config{Hold: time.Hour})
	first := view(12, 0, clientAddr, pod, 63)
	h.feed(first)
	h.mu.Lock()
	n := len(h.out)
	h.mu.Unlock()
	if n != 1 {
		t.Fatalf("a record waited with no views seen (%d out)", n)
	}
	twin := view(12, 10*time.Microsecond, clientAddr, svc, 64)
	h.feed(twin)
	if st := h.m.Stats(); st.Late != 1 || h.done[twin] != 1 {
		t.Fatalf("the twin: late %d, done %d", st.Late, h.done[twin])
	}
	h.feed(view(13, time.Second, clientAddr, pod, 63))
	h.mu.Lock()
	n = len(h.out)
	h.mu.Unlock()
	if n != 1 {
		t.Errorf("after a twin, records are held: %d out, want 1", n)
	}
	h.m.Flush()
}

// Live: a timer releases the held records once Hold has passed.
func TestLiveTimer(t *testing.T) {
	h := newHarness(Config{Hold: 20 * time.Millisecond})
	// A twin seen once turns the hold on.
	h.feed(view(14, 0, clientAddr, pod, 63), view(14, time.Microsecond, clientAddr, svc, 64))
	h.mu.Lock()
	h.out = nil
	h.mu.Unlock()
	up := view(11, 0, clientAddr, svc, 64)
	br := view(11, 30*time.Microsecond, clientAddr, pod, 63)
	start := time.Now()
	h.feed(up)
	time.Sleep(2 * time.Millisecond)
	h.feed(br)
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		n := len(h.out)
		h.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing released in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("released after %v, before the hold", el)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.out) != 1 || h.out[0] != br || br.Frontend != svc {
		t.Fatalf("out %v", h.out)
	}
	late := view(11, 40*time.Microsecond, clientAddr, pod, 63)
	h.mu.Unlock()
	h.feed(late)
	h.mu.Lock()
	if st := h.m.Stats(); st.Late != 2 || h.done[late] != 1 || h.done[up] != 1 { // the warm-up twin and this one
		t.Errorf("late %d; done late %d, up %d", st.Late, h.done[late], h.done[up])
	}
}

// One interface, nothing to merge: the same records in the same order,
// with nothing changed.
func TestFIFO(t *testing.T) {
	h := newHarness(Config{Offline: true})
	var in []*record.Handshake
	for i := range 1000 {
		// Out of ts order (a timeout finished late), interleaved.
		ts := time.Duration(i) * time.Millisecond
		if i%7 == 3 {
			ts -= 30 * time.Second
		}
		in = append(in, view(100+i, ts, clientAddr, pod, 63))
	}
	var before []string
	for _, r := range in {
		before = append(before, fmt.Sprintf("%v %s %s %s", r.TS, r.ClientText(), r.Server, r.Frontend))
	}
	h.feed(in...)
	h.m.Flush()
	if len(h.out) != len(in) {
		t.Fatalf("%d records out of %d", len(h.out), len(in))
	}
	for i, r := range h.out {
		if r != in[i] {
			t.Fatalf("record %d out of order", i)
		}
		if got := fmt.Sprintf("%v %s %s %s", r.TS, r.ClientText(), r.Server, r.Frontend); got != before[i] {
			t.Errorf("record %d changed: %s, was %s", i, got, before[i])
		}
	}
	if len(h.done) != 0 {
		t.Errorf("%d records went to Done", len(h.done))
	}
}

// A flood of distinct identities stays within the bounds: the oldest
// records leave early, the oldest identities are forgotten, both counted.
func TestBoundedFlood(t *testing.T) {
	h := newHarness(Config{Offline: true, MaxHeld: 64, MaxRemembered: 128})
	const n = 10000
	for i := range n {
		// All within one hold: only the bound releases them.
		h.m.Process(view(i, time.Duration(i)*time.Nanosecond, clientAddr, pod, 63))
		if st := h.m.Stats(); st.Held > 64+1 || st.Remembered > 128 {
			t.Fatalf("after %d: %d held, %d remembered", i, st.Held, st.Remembered)
		}
	}
	st := h.m.Stats()
	if st.OverflowHeld != n-64 || st.OverflowRemembered == 0 {
		t.Errorf("stats %+v", st)
	}
	h.m.Flush()
	if len(h.out) != n {
		t.Errorf("%d records out of %d", len(h.out), n)
	}
	for i, r := range h.out {
		if int(r.View.Random[0])|int(r.View.Random[1])<<8 != i%65536 {
			t.Fatalf("record %d out of order", i)
		}
	}
}

// Records merged away are handed to Done exactly once, and no record
// that left is: under concurrent producers too (the agent's workers).
func TestDoneExactlyOnce(t *testing.T) {
	h := newHarness(Config{Hold: 5 * time.Millisecond})
	const n = 2000
	var wg sync.WaitGroup
	views := make([][3]*record.Handshake, n)
	for i := range views {
		views[i] = [3]*record.Handshake{
			view(i, time.Duration(i)*time.Millisecond, clientAddr, svc, 64),
			view(i, time.Duration(i)*time.Millisecond+10*time.Microsecond, clientAddr, pod, 63),
			view(i, time.Duration(i)*time.Millisecond+11*time.Microsecond, clientAddr, pod, 63),
		}
	}
	for w := range 3 {
		wg.Go(func() {
			for i := range views {
				h.m.Process(views[i][w])
			}
		})
	}
	wg.Wait()
	h.m.Flush()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[*record.Handshake]bool{}
	for _, r := range h.out {
		out[r] = true
		if h.done[r] != 0 {
			t.Fatalf("a released record also went to Done")
		}
	}
	for i, vs := range views {
		k := 0
		for _, r := range vs {
			switch {
			case out[r]:
				k++
			case h.done[r] != 1:
				t.Fatalf("handshake %d: a view went to Done %d times", i, h.done[r])
			}
		}
		if k != 1 {
			t.Fatalf("handshake %d: %d records", i, k)
		}
	}
	st := h.m.Stats()
	if st.Merged+st.Late != 2*n || len(h.out) != n {
		t.Errorf("%d records, stats %+v", len(h.out), st)
	}
}

// BenchmarkMerge: two views of each handshake through the stage, offline
// (the clock is the records'): the per-record cost of the merge.
func BenchmarkMerge(b *testing.B) {
	const n = 4096
	recs := make([]*record.Handshake, 0, 2*n)
	for i := range n {
		recs = append(recs, view(i, time.Duration(i)*time.Millisecond, clientAddr, svc, 64),
			view(i, time.Duration(i)*time.Millisecond+10*time.Microsecond, clientAddr, pod, 63))
	}
	base := make([]time.Time, len(recs))
	for i, r := range recs {
		base[i] = r.TS
	}
	m := New(Config{Offline: true}, func(*record.Handshake) {})
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		// Each round later than Remember: the same identities are new
		// handshakes again.
		shift := time.Duration(round) * n * time.Millisecond
		for i, r := range recs {
			r.TS = base[i].Add(shift)
			m.Process(r)
		}
		round++
	}
	m.Flush()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(round*len(recs)), "ns/record")
}

// A pod reaching a Service on its own bridge: DNAT without a routing hop,
// so both views have the same TTL; the later one, after the rewrite, is
// the server's, whichever arrives first.
func TestSameBridgeDNAT(t *testing.T) {
	for _, first := range []string{"client side", "server side"} {
		h := newHarness(Config{Offline: true})
		cli := view(6, 0, "10.199.0.3:41000", "10.96.0.10:443", 64)
		srv := view(6, 8*time.Microsecond, "10.199.0.3:41000", pod, 64)
		if first == "client side" {
			h.feed(cli, srv)
		} else {
			h.feed(srv, cli)
		}
		h.m.Flush()
		if len(h.out) != 1 {
			t.Fatalf("%s first: %d records", first, len(h.out))
		}
		if r := h.out[0]; r != srv || r.Server != pod || r.Frontend != "10.96.0.10:443" || r.Peer.IsValid() {
			t.Errorf("%s first: server %s frontend %s peer %v", first, r.Server, r.Frontend, r.Peer)
		}
	}
}
