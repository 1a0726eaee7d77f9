package report

import (
	"math/rand/v2"
	"testing"
)

// A window never calls a new number a duplicate nor a duplicate new; it
// catches every duplicate within PlanIDWindow of the highest number, in
// order or not; and it stays within its bound.
func TestSeqWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name       string
		start, lag uint64
		jump       bool
	}{{"from 1", 1, 1000, false}, {"mid-stream", 1 << 40, 50_000, false}, {"late redelivery", 7, PlanIDWindow * 2, false}, {"jumps", 1, 100, true}} {
		var w seqWindow
		seen := map[uint64]bool{}
		var hi uint64
		catchable, caught, outside := 0, 0, 0
		s := tc.start
		for range 600_000 {
			var x uint64
			switch r := rng.IntN(100); {
			case r < 3 && s > tc.start+tc.lag: // a redelivery
				x = s - 1 - rng.Uint64N(tc.lag)
			case r < 6 && s > tc.start+100: // reordered
				x = s - 1 - rng.Uint64N(100)
			default:
				s++
				if tc.jump && r == 99 {
					s += PlanIDWindow * 3
				}
				x = s
			}
			res := w.see(x)
			if x > hi {
				hi = x
			}
			switch {
			case res == seqDup && !seen[x]:
				t.Fatalf("%s: %d new, called a duplicate", tc.name, x)
			case res == seqNew && seen[x]:
				t.Fatalf("%s: %d seen, called new", tc.name, x)
			case res == seqOutside:
				outside++
			}
			if seen[x] && hi-x < PlanIDWindow {
				catchable++
				if res == seqDup {
					caught++
				}
			}
			seen[x] = true
			if w.size() > PlanIDWindow {
				t.Fatalf("window of %d", w.size())
			}
		}
		if caught != catchable {
			t.Errorf("%s: caught %d of %d duplicates within the window", tc.name, caught, catchable)
		}
		t.Logf("%s: %d duplicates caught, %d outside the window, bitmap %d", tc.name, caught, outside, w.size())
	}
}
