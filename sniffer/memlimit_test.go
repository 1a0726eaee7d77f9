package sniffer

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestDefaultBudget: under GOMEMLIMIT the budget is a quarter of it shared
// by GOMAXPROCS sniffers, never above the default nor below 1 MiB.
func TestDefaultBudget(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	procs := int64(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ limit, want int64 }{
		{256 << 20, min(max(1<<20, (256<<20)/4/procs), DefaultMaxBufferedBytes)},
		{64 << 30, DefaultMaxBufferedBytes},
		{1 << 20, 1 << 20},
	} {
		debug.SetMemoryLimit(tc.limit)
		if got := defaultBudget(); int64(got) != tc.want {
			t.Errorf("GOMEMLIMIT %d: budget %d, want %d", tc.limit, got, tc.want)
		}
	}
}
