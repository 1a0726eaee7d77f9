package sniffer

import (
	"runtime"

	"github.com/pqwatch/pqwatch/internal/memlimit"
)

// DefaultMaxBufferedBytes is Config.MaxBufferedBytes when pqwatch runs
// under no memory limit.
const DefaultMaxBufferedBytes = 64 << 20

// defaultBudget is Config.MaxBufferedBytes's default: a quarter of the
// memory limit pqwatch runs under (GOMEMLIMIT, else the cgroup's, v2 or v1)
// shared by GOMAXPROCS sniffers (the agent runs one per worker), at most
// DefaultMaxBufferedBytes and at least 1 MiB.
func defaultBudget() int {
	lim, _ := memlimit.Limit()
	if lim <= 0 {
		return DefaultMaxBufferedBytes
	}
	share := lim / 4 / int64(runtime.GOMAXPROCS(0))
	return int(max(1<<20, min(share, DefaultMaxBufferedBytes)))
}
