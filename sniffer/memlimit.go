package sniffer

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// DefaultMaxBufferedBytes is Config.MaxBufferedBytes when pqwatch runs
// under no memory limit.
const DefaultMaxBufferedBytes = 64 << 20

// defaultBudget is Config.MaxBufferedBytes's default: a quarter of the
// memory limit pqwatch runs under (GOMEMLIMIT, else the cgroup's, v2 or v1)
// shared by GOMAXPROCS sniffers (the agent runs one per worker), at most
// DefaultMaxBufferedBytes and at least 1 MiB.
func defaultBudget() int {
	lim := memoryLimit()
	if lim <= 0 {
		return DefaultMaxBufferedBytes
	}
	share := lim / 4 / int64(runtime.GOMAXPROCS(0))
	return int(max(1<<20, min(share, DefaultMaxBufferedBytes)))
}

var cgroupLimit = sync.OnceValue(func() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			if n := parseCgroupLimit(string(b)); n > 0 {
				return n
			}
		}
	}
	return 0
})

// memoryLimit is the memory limit pqwatch runs under in bytes, 0 when none.
func memoryLimit() int64 {
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 {
		return lim
	}
	return cgroupLimit()
}

// parseCgroupLimit reads cgroup v2's memory.max or v1's
// memory.limit_in_bytes: 0 for "max" or v1's "no limit" (a value near
// 2^63).
func parseCgroupLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
