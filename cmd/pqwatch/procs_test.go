package main

import (
	"runtime"
	"testing"
)

// TestGoProcs: pqwatch run has as many Go processors as capture workers
// (one by default), never more than the runtime's default (the CPU limit);
// GOMAXPROCS in the environment is left alone and sizes the workers.
func TestGoProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	limit := runtime.GOMAXPROCS(0)
	for _, c := range []struct{ workers, wantWorkers, wantProcs int }{
		{0, 1, 1},
		{1, 1, 1},
		{limit + 3, limit + 3, limit},
	} {
		runtime.GOMAXPROCS(limit)
		if got := goProcs(c.workers, false); got != c.wantWorkers || runtime.GOMAXPROCS(0) != c.wantProcs {
			t.Errorf("-workers %d: %d workers, GOMAXPROCS %d; want %d and %d", c.workers, got, runtime.GOMAXPROCS(0), c.wantWorkers, c.wantProcs)
		}
	}
	runtime.GOMAXPROCS(limit)
	if got := goProcs(0, true); got != limit || runtime.GOMAXPROCS(0) != limit {
		t.Errorf("GOMAXPROCS=%d set: %d workers, GOMAXPROCS %d; want both %d", limit, got, runtime.GOMAXPROCS(0), limit)
	}
	if got := goProcs(1, true); got != 1 || runtime.GOMAXPROCS(0) != limit {
		t.Errorf("GOMAXPROCS set, -workers 1: %d workers, GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
}
