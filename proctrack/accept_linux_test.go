//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package proctrack

import (
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestAcceptKernelCost measures the accept program's own CPU per accept
// with the kernel's BPF run-time statistics (the cost every accept on the
// host pays while pqwatch runs).
func TestAcceptKernelCost(t *testing.T) {
	a := openAccepts(t, 0)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Skip("BPF run-time statistics unavailable:", err)
	}
	defer stats.Close()
	k := a.kernel.(*acceptLoaded)
	before, err := k.objs.ExitAccept4.Stats()
	if err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	const n = 2000
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	after, err := k.objs.ExitAccept4.Stats()
	if err != nil {
		t.Fatal(err)
	}
	runs := after.RunCount - before.RunCount
	if runs < n {
		t.Fatalf("%d runs of the accept4 program for %d accepts", runs, n)
	}
	t.Logf("accept4 program: %d runs, %v per run in the kernel", runs, (after.Runtime-before.Runtime)/time.Duration(runs))
}
