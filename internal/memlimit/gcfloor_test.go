package memlimit

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestGCPercentFor(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		floor, live, roots int64
		want               int
	}{
		{32 * mb, 3 * mb, 5 * mb, 362},  // the agent at rest: goal 3 + 8*3.62 = 32 MB
		{32 * mb, 0, 0, 100},            // nothing read
		{32 * mb, 1 * mb, 1 * mb, 1000}, // capped
		{32 * mb, 16 * mb, 5 * mb, 100}, // half the floor: GOGC as without it
		{32 * mb, 64 * mb, 5 * mb, 100}, // never below 100
	} {
		if got := gcPercentFor(c.floor, c.live, c.roots); got != c.want {
			t.Errorf("gcPercentFor(%d, %d, %d) = %d, want %d", c.floor>>20, c.live>>20, c.roots>>20, got, c.want)
		}
		// The goal the runtime computes from it is the floor, or above it.
		if got := gcPercentFor(c.floor, c.live, c.roots); got < 1000 && c.live+c.roots > 0 {
			if goal := c.live + (c.live+c.roots)*int64(got)/100; goal < c.floor-c.floor/100 {
				t.Errorf("floor %d, live %d: GOGC %d aims at %d", c.floor, c.live, got, goal)
			}
		}
	}
}

func TestGCFloorAdjust(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set: the floor leaves it alone (checked below with t.Setenv)")
	}
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	g := NewGCFloor(1 << 40) // far above any test heap: the cap applies
	if g == nil {
		t.Fatal("no floor without GOGC")
	}
	if lim, _ := Limit(); lim > 0 {
		t.Skipf("a memory limit of %d bytes is in force: the floor is limit/4", lim)
	}
	g.Adjust()
	if got := debug.SetGCPercent(100); got != maxGCPercent || g.Percent() != maxGCPercent {
		t.Errorf("GOGC after Adjust %d (Percent %d), want %d", got, g.Percent(), maxGCPercent)
	}
	t.Setenv("GOGC", "50")
	if NewGCFloor(DefaultGCFloor) != nil {
		t.Error("a floor with GOGC set in the environment")
	}
	var none *GCFloor
	none.Adjust() // nil: nothing
}
