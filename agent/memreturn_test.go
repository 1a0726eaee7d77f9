package agent

import (
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/sniffer"
)

// TestMemReturn: the ebb and flow of ordinary traffic (a few hundred flows
// that halve between housekeeping runs, as at 1,600 handshakes a second)
// never forces a collection; a flood's end does, at most every 30 s.
func TestMemReturn(t *testing.T) {
	var m memReturn
	now := time.Unix(1e9, 0)
	for i := range 600 { // ten minutes of housekeeping seconds
		flows := 150 + 300*(i%2)
		if _, ok := m.due(flows*sniffer.FlowBytes+64<<10*(i%2), now); ok {
			t.Fatalf("second %d: ordinary traffic (%d flows) forced a return", i, flows)
		}
		now = now.Add(time.Second)
	}
	flood := 20000*sniffer.FlowBytes + 16<<20
	if _, ok := m.due(flood, now); ok {
		t.Fatal("returned at the flood's peak")
	}
	now = now.Add(time.Second)
	peak, ok := m.due(300*sniffer.FlowBytes, now)
	if !ok || peak != flood {
		t.Fatalf("after the flood: due %v, peak %d; want true, %d", ok, peak, flood)
	}
	// A second flood within 30 s waits for the period.
	m.due(flood, now.Add(time.Second))
	if _, ok := m.due(0, now.Add(2*time.Second)); ok {
		t.Fatal("returned twice within 30 s")
	}
	if _, ok := m.due(0, now.Add(31*time.Second)); !ok {
		t.Fatal("not returned 31 s after the last return, the second flood over")
	}
}
