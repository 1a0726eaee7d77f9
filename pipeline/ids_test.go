package pipeline

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"

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
		ids := NewIDs("edge-7")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 1000 {
					var r record.Handshake
					ids.stamp(&r)
					id := r.RecordID()
					if r.Node != "edge-7" || !idRe.MatchString(id) || len(r.AppendID(nil)) != r.IDLen() {
						t.Errorf("start %d: node %q id %q", start, r.Node, id)
						return
					}
					mu.Lock()
					if seen[id] {
						t.Errorf("id %s twice", id)
					}
					seen[id] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if len(seen) != 12000 {
		t.Errorf("%d distinct ids, want 12000", len(seen))
	}
	ids := NewIDs("")
	var a, b record.Handshake
	ids.stamp(&a)
	ids.stamp(&b)
	ia, ib := a.RecordID(), b.RecordID()
	if a.Node == "" || ia >= ib || ia[:17] != ib[:17] {
		t.Errorf("default node %q; ids %q then %q: want the host name and increasing ids of one prefix", a.Node, ia, ib)
	}
	if n := testing.AllocsPerRun(100, func() { ids.stamp(&a) }); n != 0 {
		t.Errorf("stamp: %v allocations, want none (the ID is formatted where it is written)", n)
	}
	// Written by the encoders as it reads.
	line := exporter.AppendJSON(nil, &a)
	if want := `"id":"` + a.RecordID() + `"`; !strings.Contains(string(line), want) {
		t.Errorf("JSON line %s lacks %s", line, want)
	}
	if js, err := json.Marshal(a); err != nil || !strings.Contains(string(js), `"id":"`+a.RecordID()+`"`) {
		t.Errorf("json.Marshal: %s %v", js, err)
	}
}
