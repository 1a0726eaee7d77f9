package agent

import (
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/exporter"

	"github.com/pqwatch/pqwatch/record"
)

// TestRecordIDs: IDs are unique across goroutines and across agent starts,
// fixed-width hex, in order within one start; the node is stamped too.
func TestRecordIDs(t *testing.T) {
	idRe := regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]{16}$`)
	seen := map[string]bool{}
	var mu sync.Mutex
	for start := range 3 { // three agent starts
		ids := newRecordIDs("edge-7")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 1000 {
					var r record.Handshake
					ids.stamp(&r)
					if r.Node != "edge-7" || !idRe.MatchString(r.ID) {
						t.Errorf("start %d: node %q id %q", start, r.Node, r.ID)
						return
					}
					mu.Lock()
					if seen[r.ID] {
						t.Errorf("id %s twice", r.ID)
					}
					seen[r.ID] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if len(seen) != 12000 {
		t.Errorf("%d distinct ids, want 12000", len(seen))
	}
	ids := newRecordIDs("")
	var a, b record.Handshake
	ids.stamp(&a)
	ids.stamp(&b)
	if a.Node == "" || a.ID >= b.ID || a.ID[:17] != b.ID[:17] {
		t.Errorf("default node %q; ids %q then %q: want the host name and increasing ids of one prefix", a.Node, a.ID, b.ID)
	}
	if n := testing.AllocsPerRun(100, func() { ids.stamp(&a) }); n > 1 {
		t.Errorf("stamp: %v allocations, want the ID string only", n)
	}
}

// TestCaptureFilterLabels: the label values of pqwatch_capture_filter_info
// are the capture's filter kinds.
func TestCaptureFilterLabels(t *testing.T) {
	for _, k := range []string{capture.FilterClassic, capture.FilterEBPF} {
		if !slices.Contains(exporter.CaptureFilters, k) {
			t.Errorf("filter kind %q is not a label value of pqwatch_capture_filter_info (%v)", k, exporter.CaptureFilters)
		}
	}
}
