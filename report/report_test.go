package report

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

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
