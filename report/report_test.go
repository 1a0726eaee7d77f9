package report

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

// TestMedianFromCounts: the per-group medians, kept as counts so a
// long-running agent's summary does not grow with every handshake, equal the
// medians of the values themselves.
func TestMedianFromCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 10, 101, 1000} {
		var c sizeCounts
		var vals []int
		for range n {
			v := 200 + rng.IntN(40)
			c.add(v)
			vals = append(vals, v)
		}
		slices.Sort(vals)
		want := 0
		switch {
		case n == 0:
		case n%2 == 1:
			want = vals[n/2]
		default:
			want = (vals[n/2-1] + vals[n/2]) / 2
		}
		if got := median(c); got != want {
			t.Errorf("n=%d: median %d, want %d", n, got, want)
		}
	}
}

// TestSummaryBounded: a summary fed a million handshakes from as many
// clients keeps a bounded number of entries.
func TestSummaryBounded(t *testing.T) {
	s := New(forecast.DefaultPolicy)
	for i := range 1_000_000 {
		s.Write(&record.Handshake{
			Transport: record.TransportTCP, Outcome: record.OutcomeOK, Version: "TLS1.3",
			Group: "x25519", PQOffered: true, ClientHelloBytes: 1800 + i%7, ServerHelloBytes: 120,
			JA4: "t13d1516h2_8daaf6152771_02713d6af862", SNI: "h" + strconv.Itoa(i) + ".test",
			Server: "10.0.0.1:443", Client: "10.1.0.1:1",
			Log: &record.Log{Source: "nginx", Host: string(rune(i))},
		})
	}
	s.Finish()
	gs := s.GroupTable["x25519"]
	if gs == nil || gs.Count != 1_000_000 || len(gs.chBytes) != 7 || gs.MedianClientHelloBytes != 1803 {
		t.Fatalf("group row %+v", gs)
	}
	if len(s.classical) != maxClassicalRows+1 || len(s.ByHost) > 1001 {
		t.Errorf("classical %d rows, hosts %d", len(s.classical), len(s.ByHost))
	}
}

// TestSummaryResumedAndGroupMissing: resumed sessions are counted, and
// completed handshakes without a group by why, in JSON and in the text.
func TestSummaryResumedAndGroupMissing(t *testing.T) {
	s := New(forecast.DefaultPolicy)
	ok := func(version, group, missing string, resumed bool) *record.Handshake {
		return &record.Handshake{Transport: record.TransportTCP, Outcome: record.OutcomeOK, Version: version,
			Group: group, GroupMissing: missing, Resumed: resumed, Server: "10.0.0.1:443"}
	}
	for _, r := range []*record.Handshake{
		ok("TLS1.3", "x25519", "", true), // psk_dhe_ke: resumed, with a group
		ok("TLS1.2", "", record.GroupMissingResumed, true),
		ok("TLS1.2", "", record.GroupMissingResumed, true),
		ok("TLS1.2", "", record.GroupMissingNoKeyExchange, false),
		ok("TLS1.2", "", "", false), // a record without group_missing (older JSONL): unknown
		ok("TLS1.2", "secp256r1", "", false),
		{Transport: record.TransportTCP, Outcome: record.OutcomeReset}, // not completed: not counted
	} {
		s.Write(r)
	}
	s.Finish()
	want := map[string]int{"resumed": 2, "no_key_exchange": 1, "unknown": 1}
	if s.Resumed != 3 || !maps.Equal(s.GroupMissing, want) || s.Groups["none"] != 4 {
		t.Errorf("resumed %d, group_missing %v, groups %v; want 3, %v, none 4", s.Resumed, s.GroupMissing, s.Groups, want)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"resumed            3 of 6 completed\n",
		"no group           4 completed (no_key_exchange 1, resumed 2, unknown 1)\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("text report lacks %q:\n%s", line, b.String())
		}
	}
}

// BenchmarkSummaryWrite is the summary sink's cost per record (pqwatch run's
// default text format counts every record here).
func BenchmarkSummaryWrite(b *testing.B) {
	s := New(forecast.DefaultPolicy)
	r := done(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "X25519MLKEM768")
	r.Node, r.Server, r.SNI, r.TS = "node-a", "10.0.0.1:443", "a.test", time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Write(r)
	}
}

// TestSummaryGenerations: records attributed to generations are counted
// per generation with their PQ share and first and last seen; records
// without one are not; the text report shows the rows and swap events.
func TestSummaryGenerations(t *testing.T) {
	s := New(forecast.DefaultPolicy)
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	a := &record.Generation{ID: "nginx-aaaaaaaaaaaa-100", Exe: "/usr/sbin/nginx", OpenSSL: "OpenSSL 3.0.19 27 Jan 2026"}
	b := &record.Generation{ID: "nginx-bbbbbbbbbbbb-200", Exe: "/usr/sbin/nginx", OpenSSL: "OpenSSL 3.5.7 1 Oct 2026"}
	for i, tc := range []struct {
		g  *record.Generation
		pq bool
	}{{a, false}, {a, false}, {b, true}, {b, true}, {b, false}, {nil, true}} {
		s.Write(&record.Handshake{TS: t0.Add(time.Duration(i) * time.Second), Outcome: record.OutcomeOK, Generation: tc.g, PQ: tc.pq, Group: "x25519"})
	}
	s.SwapEvents = []SwapEvent{{Time: t0, Kind: "usr2", Generation: b.ID, Other: a.ID, Message: "new binary started"}}
	s.Finish()
	if len(s.Generations) != 2 {
		t.Fatalf("%d generations", len(s.Generations))
	}
	ga, gb := s.Generations[0], s.Generations[1]
	if ga.ID != a.ID || ga.Handshakes != 2 || ga.PQ != 0 || !ga.FirstSeen.Equal(t0) || !ga.LastSeen.Equal(t0.Add(time.Second)) {
		t.Errorf("A: %+v", ga)
	}
	if gb.ID != b.ID || gb.Handshakes != 3 || gb.PQ != 2 || gb.PQShare < 0.66 || gb.PQShare > 0.67 || gb.OpenSSL != b.OpenSSL {
		t.Errorf("B: %+v", gb)
	}
	var out strings.Builder
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"by server generation", a.ID, "3.5.7", "66.7%", "swap events", "usr2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
}
