package proctrack

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNginxFailedSwapManyMasters: several nginx masters on one host, each
// its own prefix, port, pid file and error log; one gets a USR2 that fails
// (a PQ group this OpenSSL 3.0 does not know): the failed event names that
// master's generation, and only it as still serving, never another.
func TestNginxFailedSwapManyMasters(t *testing.T) {
	labs := []*nginxLab{newNginxLab(t), newNginxLab(t)}
	masters := make([]int, len(labs))
	for i, l := range labs {
		l.writeConf("x25519")
		masters[i] = l.start()
	}
	tr, _ := startTracker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gens := make([]GenerationInfo, len(labs))
	for i, l := range labs {
		go tailEmergEvery(ctx, l.errLog, tr, 200*time.Millisecond)
		gens[i] = genByMaster(t, tr, masters[i], 2)
	}
	victim := labs[1]
	victim.writeConf("X25519MLKEM768:x25519")
	victim.signal(masters[1], syscall.SIGUSR2)
	var ev Event
	waitFor(t, 6*time.Second, "failed event", func() bool {
		for _, e := range tr.Events() {
			if e.Kind == KindFailed {
				ev = e
				return true
			}
		}
		return false
	})
	t.Logf("failed: %+v", ev)
	if ev.Generation != gens[1].ID || ev.Other != gens[1].ID || strings.Contains(ev.Message, gens[0].ID) {
		t.Errorf("failed event %+v, want about %s alone", ev, gens[1].ID)
	}
}
