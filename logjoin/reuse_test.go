package logjoin

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// Client ports used again within milliseconds and within seconds, behind
// one client address (NAT, a load balancer, a narrow
// ip_local_port_range): the simulation below writes what nginx would log
// for every request, in several log formats, and delivers the records and
// lines to the join in several orders. Each connection's record and lines
// carry its number (the record's SNI, the line's path), so every join can
// be checked: never a wrong one, and with $remote_port and $msec every
// record that has a line joined to its own first line.

// reuseFormats are the log formats the simulation writes, from the most
// facts to the fewest.
var reuseFormats = []struct {
	name string
	text string
	// exact: the format has $remote_port and $msec, so every record with
	// a line must be joined to its own, but for ambPct percent left
	// ambiguous: a port used again within the millisecond its last line
	// was logged in gives that line two candidates, told apart by
	// $request_time or $connection_requests, by $connection when the
	// other connection logged a line too (not a probe), and by nothing
	// else (the line may be the next connection's first request, the
	// earlier connection a probe).
	exact  bool
	ambPct int
}{
	{"full", `$remote_addr $remote_port $msec $pid $connection $connection_requests $request_time $ssl_protocol $ssl_curve "$request" $status`, true, 0},
	{"recommended", logparse.RecommendedText, true, 1},
	{"port+msec", `$remote_addr $remote_port $msec "$request" $status`, true, 5},
	{"port+msec+requests", `$remote_addr $remote_port $msec $connection_requests "$request" $status`, true, 1},
	{"port+seconds+requests", `$remote_addr $remote_port [$time_local] $connection_requests $request_time "$request" $status`, false, 0},
	{"port+seconds+connection", `$remote_addr $remote_port [$time_local] $pid $connection "$request" $status`, false, 0},
	{"port+seconds", `$remote_addr $remote_port [$time_local] "$request" $status`, false, 0},
	{"combined", logparse.CombinedText, false, 0},
	{"address+msec", `$remote_addr $msec "$request" $status`, false, 0},
}

// simConn is one simulated TCP connection and its requests.
type simConn struct {
	id     int
	port   uint16
	start  time.Time     // SYN
	ts     time.Time     // ClientHello
	end    time.Time     // closed (the port is free after this)
	sh     time.Duration // ClientHello to ServerHello
	group  string
	serial uint64 // nginx's $connection
	pid    int
	reqs   []simReq
}

type simReq struct {
	start, end time.Time // as nginx's clock has them
}

// simulate makes n connections from one address over ports (each port
// carries one connection at a time; the next begins gap after the last
// ended). A tenth of the connections make no request (a probe, a client
// that gave up): their records have no line, and the next connection on
// their port must not be taken for theirs.
func simulate(rng *rand.Rand, n int, ports []uint16, gap func() time.Duration, reqs func() int) []*simConn {
	free := map[uint16]time.Time{}
	for _, p := range ports {
		free[p] = t0.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
	}
	serial := uint64(1000)
	var out []*simConn
	for i := range n {
		// The port that frees first takes the next connection.
		p := slices.MinFunc(ports, func(a, b uint16) int { return free[a].Compare(free[b]) })
		c := &simConn{id: i, port: p, start: free[p], pid: 4000 + rng.IntN(2), serial: serial}
		serial += uint64(1 + rng.IntN(3)) // other clients' connections in between
		c.group = []string{"x25519", "X25519MLKEM768"}[rng.IntN(2)]
		c.ts = c.start.Add(time.Duration(50+rng.IntN(200)) * time.Microsecond)
		c.sh = time.Duration(100+rng.IntN(300)) * time.Microsecond
		at := c.ts.Add(c.sh + time.Duration(200+rng.IntN(400))*time.Microsecond) // handshake done
		k := reqs()
		if rng.IntN(10) == 0 {
			k = 0
		}
		for range k {
			s := at.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
			e := s.Add(time.Duration(100+rng.IntN(5000)) * time.Microsecond)
			c.reqs = append(c.reqs, simReq{start: s, end: e})
			at = e
		}
		c.end = at.Add(time.Duration(100+rng.IntN(500)) * time.Microsecond)
		free[p] = c.end.Add(gap())
		out = append(out, c)
	}
	return out
}

// logText writes request r of connection c as format f logs it.
func logText(f string, c *simConn, r int) string {
	rq := c.reqs[r]
	msec := fmt.Sprintf("%d.%03d", rq.end.Unix(), rq.end.Nanosecond()/1e6)
	rt := rq.end.Truncate(time.Millisecond).Sub(rq.start.Truncate(time.Millisecond))
	curve := map[string]string{"x25519": "X25519", "X25519MLKEM768": "X25519MLKEM768"}[c.group]
	return strings.NewReplacer(
		"$remote_addr", "10.9.0.1", "$remote_port", fmt.Sprint(c.port), "$msec", msec,
		"$time_local", rq.end.Format("02/Jan/2006:15:04:05 -0700"), "$pid", fmt.Sprint(c.pid),
		"$connection_requests", fmt.Sprint(r+1), "$connection", fmt.Sprint(c.serial),
		"$request_time", fmt.Sprintf("%.3f", rt.Seconds()), "$ssl_protocol", "TLSv1.3", "$ssl_cipher", "TLS_AES_128_GCM_SHA256",
		"$ssl_curves", "X25519MLKEM768:X25519", "$ssl_curve", curve, "$request", fmt.Sprintf("GET /c%d/r%d HTTP/1.1", c.id, r),
		"$status", "200", "$http_user_agent", "sim", "$host", "localhost", "$remote_user", "-",
		"$body_bytes_sent", "3", "$http_referer", "-",
	).Replace(f)
}

// simEvent is a record or a line as the join receives it.
type simEvent struct {
	at time.Time // arrival, by the caller's clock
	h  *record.Handshake
	l  Line
}

// reuseOrders are the arrival orders: how late records and lines reach the
// join after their own time.
var reuseOrders = []struct {
	name         string
	rec, lineLag func(rng *rand.Rand) time.Duration
}{
	{"records first", func(*rand.Rand) time.Duration { return 0 }, func(*rand.Rand) time.Duration { return 50 * time.Millisecond }},
	// The live agent: a record waits for its capture block (up to 1 s) and
	// its attribution (up to 3 s); the log is tailed at once.
	{"lines first", func(rng *rand.Rand) time.Duration {
		return time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
	},
		func(*rand.Rand) time.Duration { return 0 }},
	{"interleaved", func(rng *rand.Rand) time.Duration { return time.Duration(rng.IntN(4000)) * time.Millisecond },
		func(rng *rand.Rand) time.Duration { return time.Duration(rng.IntN(1500)) * time.Millisecond }},
	// The earlier connection's lines come after the next connection's
	// record (a slow log reader, a buffered access_log).
	{"lines late", func(*rand.Rand) time.Duration { return 0 }, func(rng *rand.Rand) time.Duration {
		return 1500*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond
	}},
}

// reuseResult counts what became of the records of one run.
type reuseResult struct {
	records, withLine        int // records; those whose connection logged a line
	joined, wrong, ambiguous int
	missed                   int // records with a line, not joined
	st                       Stats
}

func (r reuseResult) String() string {
	return fmt.Sprintf("%d/%d joined (%d records), %d wrong, %d missed, ambiguous handshakes %d lines %d, extra %d, unmatched lines %d",
		r.joined, r.withLine, r.records, r.wrong, r.missed, r.st.AmbiguousHandshakes, r.st.Sources[SourceNginx].Ambiguous,
		r.st.Sources[SourceNginx].Extra, r.st.Sources[SourceNginx].Unmatched)
}

// runReuse joins the connections' records and lines logged in format f,
// streaming (delivered in order o) or in batch, and checks each join.
func runReuse(t *testing.T, rng *rand.Rand, conns []*simConn, f string, batch bool, oi int) reuseResult {
	t.Helper()
	fm, err := logparse.CompileFormat("sim", logparse.EscapeDefault, f)
	if err != nil {
		t.Fatal(err)
	}
	lr := NewNginxReader(fm)
	var ev, lev []simEvent
	var recs []*record.Handshake
	var lines []Line
	res := reuseResult{}
	for _, c := range conns {
		h := hs("10.9.0.1", c.port, c.ts.Sub(t0), c.group)
		h.FlowStart = c.start
		h.HandshakeRTTMicros = c.sh.Microseconds()
		h.SNI = fmt.Sprintf("/c%d/", c.id)
		recs = append(recs, h)
		res.records++
		if len(c.reqs) > 0 {
			res.withLine++
		}
		ev = append(ev, simEvent{at: c.ts.Add(reuseOrders[oi].rec(rng)), h: h})
		for r := range c.reqs {
			l, lres := lr.Read([]byte(logText(f, c, r)))
			if lres != LineOK {
				t.Fatalf("line does not parse (%d): %s", lres, logText(f, c, r))
			}
			lines = append(lines, l)
			lev = append(lev, simEvent{at: c.reqs[r].end, l: l})
		}
	}
	// A log is read in its order, the order nginx wrote it in.
	slices.SortStableFunc(lev, func(a, b simEvent) int { return a.at.Compare(b.at) })
	var last time.Time
	for _, e := range lev {
		e.at = e.at.Add(reuseOrders[oi].lineLag(rng))
		if e.at.Before(last) {
			e.at = last
		}
		last = e.at
		ev = append(ev, e)
	}
	if batch {
		res.st = Batch(recs, lines, Options{})
	} else {
		// Lines of one log reach the join in the log's order.
		slices.SortStableFunc(ev, func(a, b simEvent) int { return a.at.Compare(b.at) })
		j := New(Options{})
		for _, e := range ev {
			if e.h != nil {
				j.AddHandshake(e.h, e.at)
			} else {
				j.AddLine(e.l, e.at)
			}
		}
		j.Tick(ev[len(ev)-1].at.Add(10 * time.Minute))
		j.Flush()
		res.st = j.Stats()
	}
	byID := map[string]*simConn{}
	for _, c := range conns {
		byID[fmt.Sprintf("/c%d/", c.id)] = c
	}
	for _, h := range recs {
		c := byID[h.SNI]
		switch {
		case h.Log == nil:
			if len(c.reqs) > 0 {
				res.missed++
			}
		case !strings.HasPrefix(h.Log.Path, h.SNI):
			res.wrong++
			if res.wrong <= 3 {
				t.Errorf("wrong join: record of %s (port %d, ts %v) joined %s", h.SNI, h.ClientPort, h.TS.Sub(t0), h.Log.Path)
			}
		default:
			res.joined++
		}
	}
	res.ambiguous = int(res.st.AmbiguousHandshakes)
	return res
}

// TestPortReuse: one client address, four ports (a narrow
// ip_local_port_range), 400 connections of 1 or 3 requests, ports used
// again within milliseconds or within seconds; every format, every arrival
// order, streaming and batch.
func TestPortReuse(t *testing.T) {
	gaps := []struct {
		name string
		gap  func(rng *rand.Rand) time.Duration
	}{
		{"ms", func(rng *rand.Rand) time.Duration { return time.Duration(100+rng.IntN(3000)) * time.Microsecond }},
		{"s", func(rng *rand.Rand) time.Duration {
			return 10*time.Second + time.Duration(rng.IntN(5000))*time.Millisecond
		}},
	}
	reqs := []struct {
		name string
		n    func(rng *rand.Rand) int
	}{
		{"1req", func(*rand.Rand) int { return 1 }},
		{"3req", func(*rand.Rand) int { return 3 }},
		{"mixed", func(rng *rand.Rand) int { return 1 + 2*rng.IntN(2) }},
	}
	total := map[string]*reuseResult{}
	for _, g := range gaps {
		for _, rq := range reqs {
			rng := rand.New(rand.NewPCG(7, uint64(len(g.name)*10+len(rq.name))))
			conns := simulate(rng, 400, []uint16{40000, 40001, 40002, 40003},
				func() time.Duration { return g.gap(rng) }, func() int { return rq.n(rng) })
			for _, f := range reuseFormats {
				for oi := -1; oi < len(reuseOrders); oi++ {
					how := "batch"
					if oi >= 0 {
						how = reuseOrders[oi].name
					}
					name := fmt.Sprintf("%s/%s/%s/%s", g.name, rq.name, f.name, how)
					t.Run(name, func(t *testing.T) {
						r := runReuse(t, rng, conns, f.text, oi < 0, max(oi, 0))
						t.Logf("%s: %v", name, r)
						if r.wrong != 0 {
							t.Errorf("%d wrong joins", r.wrong)
						}
						if f.exact && (r.missed > r.ambiguous || r.missed*100 > f.ambPct*r.withLine) {
							t.Errorf("%s: %d of %d records with a line joined, %d ambiguous", f.name, r.joined, r.withLine, r.ambiguous)
						}
						tot := total[f.name]
						if tot == nil {
							tot = &reuseResult{}
							total[f.name] = tot
						}
						tot.records += r.records
						tot.withLine += r.withLine
						tot.joined += r.joined
						tot.wrong += r.wrong
						tot.missed += r.missed
						tot.ambiguous += r.ambiguous
					})
				}
			}
		}
	}
	for _, f := range reuseFormats {
		if r := total[f.name]; r != nil {
			t.Logf("%-24s %d/%d joined, %d wrong, %d missed, %d ambiguous (%d records)", f.name, r.joined, r.withLine, r.wrong, r.missed, r.ambiguous, r.records)
		}
	}
}

// BenchmarkBatchReuse measures the offline join of a simulated capture:
// 20,000 connections from one address over 64 ports used again within
// milliseconds, 1 to 3 requests each, logged in the recommended format
// ($remote_port, $msec, $pid, $connection). Per record.
func BenchmarkBatchReuse(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	ports := make([]uint16, 64)
	for i := range ports {
		ports[i] = uint16(40000 + i)
	}
	conns := simulate(rng, 20000, ports, func() time.Duration { return time.Duration(100+rng.IntN(3000)) * time.Microsecond },
		func() int { return 1 + rng.IntN(3) })
	fm, _ := logparse.CompileFormat("sim", logparse.EscapeDefault, logparse.RecommendedText)
	lr := NewNginxReader(fm)
	var lines []Line
	for _, c := range conns {
		for r := range c.reqs {
			l, _ := lr.Read([]byte(logText(logparse.RecommendedText, c, r)))
			lines = append(lines, l)
		}
	}
	recs := make([]*record.Handshake, len(conns))
	b.ReportAllocs()
	for b.Loop() {
		for i, c := range conns {
			recs[i] = hs("10.9.0.1", c.port, c.ts.Sub(t0), c.group)
		}
		Batch(recs, lines, Options{})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(conns)), "ns/record")
}
