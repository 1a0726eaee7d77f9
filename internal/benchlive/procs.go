// Subprocesses: started in their own process group from one locked
// thread, stopped at exit; and their CPU time from /proc.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

// proc is a started subprocess in its own process group; stop ends the
// group (SIGTERM, then SIGKILL) and is safe to call twice.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
	once sync.Once
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	w  io.Writer // echo (-v) or nil
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		s.w.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail is the last n bytes of the output, for error messages.
func (s *syncBuf) tail(n int) string {
	t := s.String()
	if len(t) > n {
		t = "…" + t[len(t)-n:]
	}
	return strings.TrimSpace(t)
}

// startProc starts name args in a new process group; ns != "" runs it in
// that network namespace (ip netns exec keeps the pid: it execs). The
// process dies with benchlive (Pdeathsig) and is stopped at exit.
func startProc(o options, ns string, env []string, name string, args ...string) (*proc, error) {
	p := &proc{cmd: testenv.Cmd(context.Background(), ns, name, args...), out: &syncBuf{}, done: make(chan struct{})}
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if o.verbose {
		p.out.w = os.Stderr
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(p.cmd); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	atExit(p.stop)
	return p, nil
}

// Pdeathsig fires when the *thread* that forked the child exits, and Go ends
// a thread whose goroutine exits while locked to it (testenv.InNS does that). So
// every child is forked from one goroutine locked for good to its thread.
var spawnReq = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for fn := range spawnReq {
			fn()
		}
	}()
}

// spawn starts cmd from the spawner thread.
func spawn(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	spawnReq <- func() { errc <- cmd.Start() }
	return <-errc
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	p.once.Do(func() {
		pg := -p.cmd.Process.Pid
		syscall.Kill(pg, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		syscall.Kill(pg, syscall.SIGKILL) // stragglers of the group (nginx workers)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	})
}

// schedNs is the CPU time pid's threads (and, with kids, its children's
// threads) have run, from /proc/PID/task/TID/schedstat: nanoseconds, exact,
// where utime+stime are 10 ms ticks charged by sampling.
func schedNs(pid int, kids bool) uint64 {
	var total uint64
	run := map[int]uint64{}
	_ = procfs.ReadTaskRuntimes("/proc", pid, run) // a process gone counts what was read
	for tid, ns := range run {
		total += ns
		if kids {
			cb, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
			for _, c := range strings.Fields(string(cb)) {
				if cp, err := strconv.Atoi(c); err == nil {
					total += schedNs(cp, true)
				}
			}
		}
	}
	return total
}

// cpuTicks is utime+stime of pid from /proc/PID/stat, in clock ticks
// (USER_HZ = 100 on Linux).
func cpuTicks(pid int) (uint64, error) {
	st, err := procfs.ReadStat("/proc", pid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st.Ticks(), nil
}

const tickUs = 10_000
