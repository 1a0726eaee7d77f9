package e2e

import (
	"math"
	"testing"
	"time"
)

// TestSoakSlope checks the soak's least-squares slope and window choice on
// samples whose answer is known.
func TestSoakSlope(t *testing.T) {
	var line, saw []soakSample
	for i := range 121 { // 20 minutes every 10 s
		at := time.Duration(i) * 10 * time.Second
		line = append(line, soakSample{at: at, rss: (100 + 3*at.Hours()) * 1e6})
		// a flat series with a ±5 MB sawtooth: no slope to speak of
		saw = append(saw, soakSample{at: at, rss: (150 + 5*float64(i%2*2-1)) * 1e6})
	}
	if s, ci := rssSlope(line); math.Abs(s-3) > 1e-9 || ci > 1e-6 {
		t.Errorf("a line rising 3 MB/h: slope %v ±%v", s, ci)
	}
	if s, ci := rssSlope(saw); s-ci > 0 || s+ci < 0 {
		t.Errorf("a flat sawtooth: slope %v ±%v, the interval should hold 0", s, ci)
	}
	if s, ci := rssSlope(line[:2]); s != 0 || !math.IsInf(ci, 1) {
		t.Errorf("two samples: slope %v ±%v, want 0 ±Inf", s, ci)
	}
	if w := samplesFrom(line, 10*time.Minute); len(w) != 61 || w[0].at != 10*time.Minute {
		t.Errorf("samplesFrom 10m: %d samples from %v", len(w), w[0].at)
	}
	if w := samplesFrom(line, time.Hour); w != nil {
		t.Errorf("samplesFrom past the end: %d samples", len(w))
	}
}
