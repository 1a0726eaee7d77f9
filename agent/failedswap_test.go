package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/proctrack"
)

// TestAgentFailedSwapNamesItsMaster: the agent tails the error logs of two
// nginx masters on one host (loopback, host pid namespace); the second
// gets a USR2 that fails (ssl_ecdh_curve with X25519MLKEM768, a group
// Debian 12's OpenSSL 3.0 does not know). The failed event names the
// second master's generation, and only it as still serving; the first,
// started earlier, is never named (it used to be, with every master on
// the host listed as still serving).
func TestAgentFailedSwapNamesItsMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	var ngx [2]*testenv.Nginx
	var ports []uint16
	for i := range ngx {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ngx[i] = testenv.StartNginx(t, testenv.NginxOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port), ECDHCurve: "x25519", Workers: 2})
		ports = append(ports, uint16(port))
		n := ngx[i]
		t.Cleanup(func() { stopMasters(t, n.PidFile) })
	}
	masters := [2]int{readPidFile(ngx[0].PidFile), readPidFile(ngx[1].PidFile)}
	a, err := agent.New(agent.Config{Ifaces: []string{"lo"}, Ports: ports, Workers: 1, TrackProcesses: true,
		NginxErrorLogs: []string{ngx[0].ErrorLog, ngx[1].ErrorLog}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var gens [2]proctrack.GenerationInfo
	waitUntil(t, 10*time.Second, "both generations", func() bool {
		n := 0
		for _, g := range a.Processes().Generations() {
			for i, m := range masters {
				if g.MasterPID == m && g.Alive && len(g.Workers) == 2 {
					gens[i] = g
					n++
				}
			}
		}
		return n == 2
	})
	time.Sleep(300 * time.Millisecond) // the tailers are at the logs' ends

	conf := ngx[1].Dir + "/nginx.conf"
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("ssl_ecdh_curve x25519;"), []byte("ssl_ecdh_curve X25519MLKEM768:x25519;"), 1)
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	usr2At := time.Now()
	if err := syscall.Kill(masters[1], syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	var ev proctrack.Event
	waitUntil(t, 8*time.Second, "the failed event", func() bool {
		for _, e := range a.Processes().Events() {
			if e.Kind == proctrack.KindFailed && (e.Generation == gens[0].ID || e.Generation == gens[1].ID || strings.Contains(e.Message, "X25519MLKEM768")) {
				ev = e
				return true
			}
		}
		return false
	})
	t.Logf("failed swap reported after %v: %+v", time.Since(usr2At).Round(time.Millisecond), ev)
	if ev.Generation != gens[1].ID || ev.Other != gens[1].ID || !strings.Contains(ev.Message, gens[1].ID+" still serves") || strings.Contains(ev.Message, gens[0].ID) {
		t.Errorf("failed event %+v, want about %s alone", ev, gens[1].ID)
	}
	time.Sleep(1500 * time.Millisecond)
	n := 0
	for _, e := range a.Processes().Events() {
		if e.Kind == proctrack.KindFailed && (e.Generation == gens[0].ID || e.Generation == gens[1].ID || strings.Contains(e.Message, "X25519MLKEM768")) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d failed events, want 1: %+v", n, a.Processes().Events())
	}
}

// stopMasters stops the nginx masters named by a pid file and its .oldbin,
// both read before either is stopped (a master that exits renames or
// removes them). These masters run in the test's own pid namespace.
func stopMasters(t *testing.T, pidFile string) {
	var pids []int
	for _, p := range []string{pidFile, pidFile + ".oldbin"} {
		if pid := readPidFile(p); pid > 0 {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if !isMaster(pid) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && isMaster(pid); {
			time.Sleep(20 * time.Millisecond)
		}
		if isMaster(pid) {
			t.Logf("nginx master %d did not quit: killed", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
