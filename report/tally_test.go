package report

import (
	"fmt"
	"testing"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

// TestSummaryTallies: the per-record counts kept in tallies read the same
// as map counts would, mid-run (Snapshot) and at Finish, past the tallies'
// size too (a flood of distinct version names goes to the map).
func TestSummaryTallies(t *testing.T) {
	s := New(forecast.DefaultPolicy)
	want := map[string]int{}
	for i := range 100 {
		r := done(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "X25519MLKEM768")
		r.Transport = record.TransportTCP
		r.Version = fmt.Sprintf("0x%04x", i%40) // 40 names, more than a tally holds
		if i%3 == 0 {
			r.Group = "x25519"
		}
		want[r.Version]++
		_ = s.Write(r)
		if i == 49 {
			if c := s.Snapshot(); c.Handshakes != 50 || c.Groups["X25519MLKEM768"]+c.Groups["x25519"] != 50 || c.Groups["x25519"] != 17 {
				t.Errorf("snapshot at 50: %+v", c)
			}
		}
	}
	s.Finish()
	if s.Transports[record.TransportTCP] != 100 || s.Outcomes[record.OutcomeOK] != 100 || s.Groups["x25519"] != 34 || s.Groups["X25519MLKEM768"] != 66 {
		t.Errorf("transports %v outcomes %v groups %v", s.Transports, s.Outcomes, s.Groups)
	}
	if len(s.Versions) != 40 {
		t.Errorf("%d versions, want 40", len(s.Versions))
	}
	for k, n := range want {
		if s.Versions[k] != n {
			t.Errorf("version %s: %d, want %d", k, s.Versions[k], n)
		}
	}
	s.Finish() // twice: nothing counted again
	if s.Transports[record.TransportTCP] != 100 || s.Forecast.Groups["X25519MLKEM768"] != 100 {
		t.Errorf("after a second Finish: transports %v forecast groups %v", s.Transports, s.Forecast.Groups)
	}
}
