package logjoin

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

var t0 = time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)

func hs(addr string, port uint16, at time.Duration, group string) *record.Handshake {
	a := netip.MustParseAddr(addr)
	return &record.Handshake{
		TS: t0.Add(at), Transport: record.TransportTCP, Client: netip.AddrPortFrom(a, port).String(),
		Outcome: record.OutcomeOK, Group: group, ClientAddr: a.As16(), ClientPort: port,
	}
}

func line(addr string, port uint16, at time.Duration, path string) Line {
	return Line{Time: t0.Add(at), Addr: netip.MustParseAddr(addr).As16(), Port: port,
		Log: record.Log{Source: SourceNginx, Status: 200, Method: "GET", Path: path}}
}

type step struct {
	h    *record.Handshake
	l    *Line
	tick time.Duration // when h and l are nil: Tick at t0+tick
}

func H(h *record.Handshake) step { return step{h: h} }
func L(l Line) step              { return step{l: &l} }
func T(d time.Duration) step     { return step{tick: d} }

// play feeds steps to j at their own times (a tick when h and l are nil).
func play(j *Joiner, steps []step) {
	for _, s := range steps {
		switch {
		case s.h != nil:
			j.AddHandshake(s.h, s.h.TS)
		case s.l != nil:
			j.AddLine(*s.l, s.l.Time)
		default:
			j.Tick(t0.Add(s.tick))
		}
	}
}

func TestJoinerScenarios(t *testing.T) {
	s := time.Second
	cases := []struct {
		name      string
		steps     []step
		wantPaths map[string]string // Client -> joined path ("" = not joined)
		check     func(t *testing.T, st Stats)
	}{
		{
			name:      "port: handshake first",
			steps:     []step{H(hs("10.0.0.1", 5000, 0, "x25519")), L(line("10.0.0.1", 5000, s, "/a")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.1:5000": "/a"},
			check:     func(t *testing.T, st Stats) { want(t, st.Joined == 1 && st.Sources[SourceNginx].Joined == 1, st) },
		},
		{
			name:      "port: line first, follow-up request is extra",
			steps:     []step{L(line("10.0.0.1", 5000, 0, "/a")), H(hs("10.0.0.1", 5000, -s/2, "")), L(line("10.0.0.1", 5000, 2*s, "/b")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.1:5000": "/a"},
			check: func(t *testing.T, st Stats) {
				want(t, st.Joined == 1 && st.Sources[SourceNginx].Extra == 1 && st.Sources[SourceNginx].Unmatched == 0, st)
			},
		},
		{
			name: "port: reuse of a port later joins the right connection",
			steps: []step{H(hs("10.0.0.1", 5000, 0, "")), L(line("10.0.0.1", 5000, s, "/first")),
				H(hs("10.0.0.1", 5000, 40*s, "")), L(line("10.0.0.1", 5000, 41*s, "/second")), T(300 * s)},
			check: func(t *testing.T, st Stats) { want(t, st.Joined == 2, st) },
		},
		{
			name:      "port: line outside the window",
			steps:     []step{H(hs("10.0.0.1", 5000, 0, "")), L(line("10.0.0.1", 5000, 90*s, "/late")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.1:5000": ""},
			check: func(t *testing.T, st Stats) {
				want(t, st.Joined == 0 && st.UnmatchedHandshakes == 1 && st.Sources[SourceNginx].Unmatched == 1, st)
			},
		},
		{
			name:      "address only: unambiguous joins after the wait",
			steps:     []step{H(hs("10.0.0.2", 6000, 0, "")), L(line("10.0.0.2", 0, s, "/only")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.2:6000": "/only"},
			check:     func(t *testing.T, st Stats) { want(t, st.Joined == 1, st) },
		},
		{
			name: "address only: two handshakes one line is ambiguous",
			steps: []step{H(hs("10.0.0.2", 6000, 0, "")), H(hs("10.0.0.2", 6001, s, "")),
				L(line("10.0.0.2", 0, 2*s, "/x")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.2:6000": "", "10.0.0.2:6001": ""},
			check: func(t *testing.T, st Stats) {
				want(t, st.Joined == 0 && st.AmbiguousHandshakes == 2 && st.Sources[SourceNginx].Ambiguous == 1, st)
			},
		},
		{
			name: "address only: one handshake two lines is ambiguous",
			steps: []step{H(hs("10.0.0.2", 6000, 0, "")), L(line("10.0.0.2", 0, s, "/x")),
				L(line("10.0.0.2", 0, 2*s, "/y")), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.2:6000": ""},
			check: func(t *testing.T, st Stats) {
				want(t, st.Joined == 0 && st.AmbiguousHandshakes == 1 && st.Sources[SourceNginx].Ambiguous == 2, st)
			},
		},
		{
			name: "address only: an earlier decided handshake still makes the line ambiguous",
			steps: []step{H(hs("10.0.0.3", 1, 0, "")), T(50 * s), H(hs("10.0.0.3", 2, 55*s, "")),
				L(line("10.0.0.3", 0, 56*s, "/z")), T(80 * s), T(300 * s)},
			wantPaths: map[string]string{"10.0.0.3:1": "", "10.0.0.3:2": ""},
			check:     func(t *testing.T, st Stats) { want(t, st.Joined == 0, st) },
		},
		{
			name:  "not completed handshakes are emitted at once",
			steps: []step{H(func() *record.Handshake { h := hs("10.0.0.4", 1, 0, ""); h.Outcome = record.OutcomeAlert; return h }())},
			check: func(t *testing.T, st Stats) { want(t, st.NotCompleted == 1 && st.Pending == 0, st) },
		},
		{
			name: "curve self-check",
			steps: []step{
				H(hs("10.0.0.5", 1, 0, "x25519")), L(func() Line { l := line("10.0.0.5", 1, s, "/"); l.Log.SSLCurve = "X25519"; return l }()),
				H(hs("10.0.0.5", 2, 0, "X25519MLKEM768")), L(func() Line { l := line("10.0.0.5", 2, s, "/"); l.Log.SSLCurve = "X25519MLKEM768"; return l }()),
				H(hs("10.0.0.5", 3, 0, "secp256r1")), L(func() Line { l := line("10.0.0.5", 3, s, "/"); l.Log.SSLCurve = "prime256v1"; return l }()),
				H(hs("10.0.0.5", 4, 0, "x25519")), L(func() Line { l := line("10.0.0.5", 4, s, "/"); l.Log.SSLCurve = "prime256v1"; return l }()),
				T(300 * s), // lines are decided once every record that may be theirs has come
			},
			check: func(t *testing.T, st Stats) { want(t, st.CurveChecked == 4 && st.CurveMismatch == 1, st) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			emitted := map[string]*record.Handshake{}
			j := New(Options{Window: 60 * time.Second, Emit: func(h *record.Handshake) {
				if emitted[h.ClientText()] != nil && emitted[h.ClientText()] == h {
					t.Errorf("%s emitted twice", h.ClientText())
				}
				emitted[h.ClientText()] = h
			}})
			play(j, tc.steps)
			for client, path := range tc.wantPaths {
				h := emitted[client]
				if h == nil {
					t.Errorf("%s not emitted", client)
					continue
				}
				got := ""
				if h.Log != nil {
					got = h.Log.Path
				}
				if got != path {
					t.Errorf("%s joined %q, want %q", client, got, path)
				}
			}
			tc.check(t, j.Stats())
		})
	}
}

// TestPortReusedAtOnce: a client port used again at once (the server
// closed first, so the client kept no TIME_WAIT) gives one address and port
// two handshakes a few milliseconds apart; each line joins its own, whatever
// the order they arrive in.
func TestPortReusedAtOnce(t *testing.T) {
	ms := time.Millisecond
	first := func(l Line) Line { l.ConnRequests = 1; return l }
	cases := []struct {
		name  string
		steps []step
	}{
		{"handshakes then lines", []step{H(hs("10.0.0.1", 5000, 0, "")), H(hs("10.0.0.1", 5000, 20*ms, "")),
			L(line("10.0.0.1", 5000, 10*ms, "/a")), L(line("10.0.0.1", 5000, 30*ms, "/b"))}},
		{"lines then handshakes", []step{L(line("10.0.0.1", 5000, 10*ms, "/a")), L(line("10.0.0.1", 5000, 30*ms, "/b")),
			H(hs("10.0.0.1", 5000, 0, "")), H(hs("10.0.0.1", 5000, 20*ms, ""))}},
		{"interleaved", []step{H(hs("10.0.0.1", 5000, 0, "")), L(line("10.0.0.1", 5000, 10*ms, "/a")),
			H(hs("10.0.0.1", 5000, 20*ms, "")), L(line("10.0.0.1", 5000, 30*ms, "/b"))}},
		{"second handshake before the first line", []step{H(hs("10.0.0.1", 5000, 0, "")), H(hs("10.0.0.1", 5000, 20*ms, "")),
			L(line("10.0.0.1", 5000, 10*ms, "/a")), H(hs("10.0.0.1", 5000, 40*ms, "")), L(line("10.0.0.1", 5000, 30*ms, "/b")),
			L(line("10.0.0.1", 5000, 50*ms, "/c"))}},
		// Whole-second log times (nginx's $time_local): both handshakes
		// come after the lines' time; $connection_requests tells them apart.
		{"whole seconds, first requests", []step{H(hs("10.0.0.1", 5000, 100*ms, "")), H(hs("10.0.0.1", 5000, 300*ms, "")),
			L(first(line("10.0.0.1", 5000, 0, "/a"))), L(first(line("10.0.0.1", 5000, 0, "/b")))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []*record.Handshake
			j := New(Options{Window: 60 * time.Second, Skew: 2 * time.Second, Emit: func(h *record.Handshake) { got = append(got, h) }})
			var n int
			for _, s := range tc.steps {
				if s.h != nil {
					n++
				}
			}
			play(j, tc.steps)
			j.Tick(t0.Add(300 * time.Second))
			if len(got) != n {
				t.Fatalf("%d records emitted, want %d", len(got), n)
			}
			slices.SortFunc(got, func(a, b *record.Handshake) int { return a.TS.Compare(b.TS) })
			for i, h := range got {
				want := "/" + string(rune('a'+i))
				if h.Log == nil || h.Log.Path != want {
					t.Errorf("handshake %d (at %v) joined %+v, want %s", i, h.TS.Sub(t0), h.Log, want)
				}
			}
			if st := j.Stats(); st.Joined != uint64(n) || st.Sources[SourceNginx].Extra != 0 {
				t.Errorf("stats: %+v", st)
			}
		})
	}
}

func want(t *testing.T, ok bool, st Stats) {
	t.Helper()
	if !ok {
		t.Errorf("stats: %+v", st)
	}
}

func TestEviction(t *testing.T) {
	var emitted int
	j := New(Options{MaxPending: 3, Emit: func(*record.Handshake) { emitted++ }})
	for i := range 10 {
		j.AddHandshake(hs("10.1.0.1", uint16(1000+i), time.Duration(i)*time.Millisecond, ""), t0)
	}
	st := j.Stats()
	if st.Evicted != 7 || emitted != 7 || st.Pending != 3 || st.UnmatchedHandshakes != 7 {
		t.Fatalf("stats %+v emitted %d", st, emitted)
	}
	j.Flush()
	if emitted != 10 {
		t.Fatalf("emitted %d after flush", emitted)
	}
}

// TestBatchNeverWrong simulates many clients behind few addresses (NAT),
// keep-alive connections with several requests and reused ports, logged with
// and without the port, and checks that every join is right, and that with
// the port every completed handshake is joined.
func TestBatchNeverWrong(t *testing.T) {
	for _, withPort := range []bool{true, false} {
		t.Run(fmt.Sprintf("port=%v", withPort), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var recs []*record.Handshake
			var lines []Line
			for i := range 5000 {
				addr := fmt.Sprintf("10.2.0.%d", rng.IntN(200))
				port := uint16(1024 + rng.IntN(2000)) // reuse within the run
				at := time.Duration(i) * 50 * time.Millisecond
				h := hs(addr, port, at, "x25519")
				h.SNI = fmt.Sprint(i) // ground truth
				recs = append(recs, h)
				for r := range 1 + rng.IntN(3) {
					lp := port
					if !withPort {
						lp = 0
					}
					l := line(addr, lp, at+time.Duration(1+r*200+rng.IntN(100))*time.Millisecond, fmt.Sprintf("/%d/%d", i, r))
					l.ConnRequests = r + 1
					lines = append(lines, l)
				}
			}
			rng.Shuffle(len(lines), func(a, b int) { lines[a], lines[b] = lines[b], lines[a] })
			st := Batch(recs, lines, Options{Window: 5 * time.Second})
			joined := 0
			for _, h := range recs {
				if h.Log == nil {
					continue
				}
				joined++
				var id, r int
				fmt.Sscanf(h.Log.Path, "/%d/%d", &id, &r)
				if fmt.Sprint(id) != h.SNI {
					t.Fatalf("wrong join: handshake %s got %s", h.SNI, h.Log.Path)
				}
				if withPort && r != 0 {
					t.Errorf("handshake %s joined request %d, want the first", h.SNI, r)
				}
			}
			t.Logf("joined %d/%d, stats %+v", joined, len(recs), st)
			if withPort && joined != len(recs) {
				t.Errorf("with the port only %d/%d joined", joined, len(recs))
			}
			if !withPort && (joined == 0 || st.AmbiguousHandshakes == 0) {
				t.Errorf("address-only: joined %d ambiguous %d: the simulation should produce both", joined, st.AmbiguousHandshakes)
			}
			if st.Evicted != 0 || st.Pending != 0 && false {
				t.Errorf("evicted %d", st.Evicted)
			}
		})
	}
}

func TestFromParsed(t *testing.T) {
	var nl logparse.NginxLine
	f, _ := logparse.CompileFormat("pq", logparse.EscapeDefault, logparse.RecommendedText)
	if err := f.Parse([]byte(`127.0.0.1 41234 1764487815.123 TLSv1.3 TLS_AES_128_GCM_SHA256 X25519MLKEM768 X25519MLKEM768:X25519 4711 17 "GET /p HTTP/1.1" 200 "curl/8.5.0" "localhost"`), &nl); err != nil {
		t.Fatal(err)
	}
	l, ok := FromNginx(&nl)
	if !ok || l.Port != 41234 || l.Addr != netip.MustParseAddr("127.0.0.1").As16() || l.Log.PID != 4711 ||
		l.Log.SSLCurve != "X25519MLKEM768" || l.Log.Path != "/p" || l.Log.Host != "localhost" || l.Log.Source != SourceNginx {
		t.Fatalf("FromNginx = %+v %v", l, ok)
	}
	var cl logparse.CaddyLine
	if err := logparse.ParseCaddyLine([]byte(`{"ts":1764487815.5,"request":{"remote_ip":"::1","remote_port":"443","method":"GET","uri":"/c","host":"h","headers":{"User-Agent":["okhttp/4"]}},"status":204}`), &cl); err != nil {
		t.Fatal(err)
	}
	l, ok = FromCaddy(&cl)
	if !ok || l.Port != 443 || l.Addr != netip.IPv6Loopback().As16() || l.Log.Status != 204 || l.Log.UserAgent != "okhttp/4" || l.Log.Source != SourceCaddy {
		t.Fatalf("FromCaddy = %+v %v", l, ok)
	}
	nl.Reset()
	if _, ok := FromNginx(&nl); ok {
		t.Fatal("empty line converted")
	}
}

func TestIANAGroupName(t *testing.T) {
	for in, want := range map[string]string{
		"X25519": "x25519", "prime256v1": "secp256r1", "secp384r1": "secp384r1", "X25519MLKEM768": "X25519MLKEM768",
		"0x11ec": "X25519MLKEM768", "0x1234": "0x1234", "SecP256r1MLKEM768": "SecP256r1MLKEM768", "weird": "weird",
	} {
		if got := IANAGroupName(in); got != want {
			t.Errorf("IANAGroupName(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkJoinAdd measures the live path: one handshake and its line, at
// 100,000 connections per second of simulated time from distinct clients, the
// store in steady state (lines decided after RecordDelay, entries purged
// after 2*MaxWait).
func BenchmarkJoinAdd(b *testing.B) {
	j := New(Options{Window: time.Second, Skew: 100 * time.Millisecond, RecordDelay: 100 * time.Millisecond, MaxWait: 2 * time.Second,
		MaxPending: 1 << 20, MaxPendingBytes: 1 << 30})
	h0 := hs("10.0.0.0", 0, 0, "x25519")
	l0 := line("10.0.0.0", 0, 0, "/")
	b.ReportAllocs()
	i := uint32(0)
	now := t0
	for b.Loop() {
		h := *h0
		// A port per connection (a port used again at once, by a
		// connection that began before the last one's line, is not
		// physical: TestPortReuse has that).
		binary.BigEndian.PutUint32(h.ClientAddr[12:], i>>8|0x0a000000)
		h.ClientPort = uint16(i&255) + 1024
		h.TS = now
		l := l0
		l.Addr, l.Port, l.Time = h.ClientAddr, h.ClientPort, now.Add(time.Millisecond)
		j.AddHandshake(&h, now)
		j.AddLine(l, now)
		i++
		now = now.Add(10 * time.Microsecond)
	}
	j.Flush() // the lines of the last RecordDelay
	if st := j.Stats(); st.Joined != uint64(i) || st.Evicted != 0 {
		b.Fatalf("joined %d of %d, evicted %d", st.Joined, i, st.Evicted)
	}
}

// BenchmarkJoinAddOneAddress is BenchmarkJoinAdd behind a NAT: every
// connection from one client address (its ports in turn), 300 a second of
// simulated time, the default windows: some 43,000 decided entries of that
// address are kept, and each one purged is taken out of its address's list.
func BenchmarkJoinAddOneAddress(b *testing.B) {
	j := New(Options{MaxPending: 1 << 20, MaxPendingBytes: 1 << 30})
	h0 := hs("10.0.0.1", 0, 0, "x25519")
	l0 := line("10.0.0.1", 0, 0, "/")
	b.ReportAllocs()
	i := 0
	now := t0
	for b.Loop() {
		h := *h0
		h.ClientPort = uint16(1024 + i%64000)
		h.TS = now
		l := l0
		l.Port, l.Time = h.ClientPort, now.Add(time.Millisecond)
		j.AddHandshake(&h, now)
		j.AddLine(l, now)
		i++
		now = now.Add(time.Second / 300)
	}
	j.Flush()
	if st := j.Stats(); st.Joined != uint64(i) {
		b.Fatalf("joined %d of %d", st.Joined, i)
	}
}

// BenchmarkPendingStore compares the two candidate stores for the pending
// index (address+port -> entry) on insert+lookup+delete: a Go map of
// pointers, and fastcache (which stores bytes only, so it would hold an index
// into a slab of entries that must itself be managed).
func BenchmarkPendingStore(b *testing.B) {
	const n = 1 << 16
	keys := make([]key, n)
	for i := range keys {
		keys[i] = key{port: uint16(i)}
		binary.BigEndian.PutUint32(keys[i].addr[12:], uint32(i*7919))
	}
	b.Run("map", func(b *testing.B) {
		m := make(map[key][]*entry, n)
		e := &entry{}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%n]
			m[k] = append(m[k][:0], e)
			if len(m[k]) == 0 {
				b.Fatal("lost")
			}
			if i >= n/2 {
				delete(m, keys[(i-n/2)%n])
			}
			i++
		}
	})
	b.Run("fastcache", func(b *testing.B) {
		c := fastcache.New(32 << 20)
		var kb [18]byte
		var vb [8]byte
		var out [8]byte
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%n]
			copy(kb[:16], k.addr[:])
			binary.BigEndian.PutUint16(kb[16:], k.port)
			binary.BigEndian.PutUint64(vb[:], uint64(i))
			c.Set(kb[:], vb[:])
			if len(c.Get(out[:0], kb[:])) == 0 {
				b.Fatal("lost")
			}
			if i >= n/2 {
				k := keys[(i-n/2)%n]
				copy(kb[:16], k.addr[:])
				binary.BigEndian.PutUint16(kb[16:], k.port)
				c.Del(kb[:])
			}
			i++
		}
	})
}

// TestPortReusedAcrossServers: a client port used for a connection to
// nginx and, at once, for one to another server on the node (the kernel
// picks source ports per destination, so the two may share one). The
// attribution names each record's server before the join: an nginx line
// joins only a record of an nginx generation (or one without a
// generation), whatever order the three arrive in.
func TestPortReusedAcrossServers(t *testing.T) {
	ms := time.Millisecond
	ngx := func(h *record.Handshake) *record.Handshake {
		h.Generation = &record.Generation{ID: "nginx-0123456789ab-100", MasterPID: 100}
		return h
	}
	other := func(h *record.Handshake) *record.Handshake {
		h.Generation = &record.Generation{ID: "caddy-0123456789ab-200", MasterPID: 200}
		return h
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"nginx first", []step{H(ngx(hs("10.0.0.1", 5000, 0, "x25519"))), H(other(hs("10.0.0.1", 5000, 5*ms, "X25519MLKEM768"))),
			L(line("10.0.0.1", 5000, 10*ms, "/a"))}},
		{"other first", []step{H(other(hs("10.0.0.1", 5000, 0, "X25519MLKEM768"))), H(ngx(hs("10.0.0.1", 5000, 5*ms, "x25519"))),
			L(line("10.0.0.1", 5000, 10*ms, "/a"))}},
		{"line first", []step{L(line("10.0.0.1", 5000, 10*ms, "/a")), H(other(hs("10.0.0.1", 5000, 0, "X25519MLKEM768"))),
			H(ngx(hs("10.0.0.1", 5000, 5*ms, "x25519")))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []*record.Handshake
			j := New(Options{Window: 60 * time.Second, Skew: 2 * time.Second, Emit: func(h *record.Handshake) { got = append(got, h) }})
			play(j, tc.steps)
			j.Tick(t0.Add(300 * time.Second))
			if len(got) != 2 {
				t.Fatalf("%d records emitted, want 2", len(got))
			}
			for _, h := range got {
				nginx := strings.HasPrefix(h.Generation.ID, "nginx-")
				if joined := h.Log != nil; joined != nginx {
					t.Errorf("record of %s (%s): joined %v", h.Generation.ID, h.Group, joined)
				}
			}
		})
	}
}
