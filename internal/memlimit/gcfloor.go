package memlimit

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
)

// DefaultGCFloor is the heap size below which the agent does not make the
// collector run: on a quiet edge node its live heap is a few megabytes, so
// with GOGC=100 every few megabytes of records (a few thousand handshakes)
// cost a whole collection, marking the same globals each time.
const DefaultGCFloor = 32 << 20

// maxGCPercent bounds the GOGC a floor sets: a tiny live heap would
// otherwise ask for thousands.
const maxGCPercent = 1000

// GCFloor raises GOGC while the live heap is small, so that the heap the
// collector aims for is about floor bytes instead of twice the live heap;
// once the live heap reaches about half the floor GOGC is 100 again, as
// without it. It never lowers GOGC below 100, and the memory limit (GOMEMLIMIT, or
// the soft limit SetSoftLimit gives) still makes the collector work
// harder near it. Adjust is meant to be called from a ticker the caller
// already has (reading the runtime's metrics is cheap; setting GOGC does not
// stop the world).
type GCFloor struct {
	floor   int64
	percent int
	samples []metrics.Sample
}

// NewGCFloor returns a floor of floor bytes (a quarter of the memory limit
// when that is less), or nil (Adjust does nothing) when GOGC is set in the
// environment (the operator's choice stands) or floor is not positive.
func NewGCFloor(floor int64) *GCFloor {
	if _, set := os.LookupEnv("GOGC"); set || floor <= 0 {
		return nil
	}
	if lim, _ := Limit(); lim > 0 && lim/4 < floor {
		floor = lim / 4
	}
	return &GCFloor{floor: floor, percent: 100, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/globals:bytes"},
		{Name: "/gc/scan/stack:bytes"},
	}}
}

// Floor is the heap size aimed at, in bytes (0 for nil).
func (g *GCFloor) Floor() int64 {
	if g == nil {
		return 0
	}
	return g.floor
}

// Percent is the GOGC the floor set last (100 before any change).
func (g *GCFloor) Percent() int {
	if g == nil {
		return 0
	}
	return g.percent
}

// Adjust sets GOGC for the live heap of the last collection.
func (g *GCFloor) Adjust() {
	if g == nil {
		return
	}
	metrics.Read(g.samples)
	var v [3]int64
	for i, s := range g.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	p := gcPercentFor(g.floor, v[0], v[1]+v[2])
	// Small moves are not worth a change (the goal follows the live heap
	// anyway).
	if p != g.percent && (p == 100 || p*10 < g.percent*9 || p*10 > g.percent*11) {
		debug.SetGCPercent(p)
		g.percent = p
	}
}

// gcPercentFor is the GOGC whose heap goal, live + (live + roots) *
// GOGC/100 (the Go runtime's since 1.21), is floor: at least 100, at most
// maxGCPercent.
func gcPercentFor(floor, live, roots int64) int {
	if live <= 0 && roots <= 0 {
		return 100
	}
	p := (floor - live) * 100 / max(1, live+roots)
	return int(min(max(p, 100), maxGCPercent))
}
