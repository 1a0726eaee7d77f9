package sniffer

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestParseCgroupLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"max\n":                 0, // v2, no limit
		"9223372036854771712\n": 0, // v1, no limit
		"536870912\n":           512 << 20,
		"":                      0,
		"garbage":               0,
		"-1":                    0,
		"268435456":             256 << 20,
		"1152921504606846976\n": 0, // 2^60: treated as no limit
	} {
		if got := parseCgroupLimit(in); got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

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
