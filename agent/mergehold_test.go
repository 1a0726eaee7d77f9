package agent

import (
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/merge"
)

// TestMergeHold: one ring waits merge.Hold for twins; a ring per interface
// or several workers wait a block timeout more.
func TestMergeHold(t *testing.T) {
	for _, c := range []struct {
		ifaces  []string
		workers int
		bt      time.Duration
		want    time.Duration
	}{
		{[]string{"any"}, 1, 0, merge.Hold},
		{[]string{"eth0"}, 1, 0, merge.Hold},
		{nil, 1, 0, capture.DefaultBlockTimeout + merge.Hold},
		{[]string{"eth0", "cni0"}, 1, 50 * time.Millisecond, 50*time.Millisecond + merge.Hold},
		{[]string{"any"}, 2, 0, capture.DefaultBlockTimeout + merge.Hold},
	} {
		if got := mergeHold(c.ifaces, c.workers, c.bt); got != c.want {
			t.Errorf("ifaces %v, %d workers, block timeout %v: hold %v, want %v", c.ifaces, c.workers, c.bt, got, c.want)
		}
	}
}
