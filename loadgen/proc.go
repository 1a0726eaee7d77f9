package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
)

// tickMicros is one clock tick of /proc/PID/stat in microseconds.
const tickMicros = 1_000_000 / procfs.UserHZ

// scanProcs reads the stat of every process under root (see
// procfs.ReadAllStats).
func scanProcs(root string) (map[int]procfs.Stat, error) {
	all, err := procfs.ReadAllStats(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProc, err)
	}
	return all, nil
}

// readCmdline returns /proc/PID/cmdline with NULs as spaces.
func readCmdline(root string, pid int) string {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// bootTicks returns the time since boot in clock ticks.
func bootTicks(root string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(root, "uptime"))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrProc, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: uptime", ErrProc)
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("%w: uptime: %v", ErrProc, err)
	}
	return uint64(s * procfs.UserHZ), nil
}

type trackedProc struct {
	start uint64 // starttime, to tell a reused PID
	ppid  int
	last  uint64 // TicksWithChildren() at the last sample
	comm  string
}

// ServerCPU accounts the CPU time, and reports the resident memory, of a
// server's processes: those named by PID or by comm, every descendant of
// them, and every process once tracked for as long as it lives (so an
// nginx master that was forked by USR2 and reparented to init when the old
// master quit stays counted).
//
// Method. Each Sample scans /proc and, per tracked process, adds the growth
// of utime+stime+cutime+cstime since the previous sample. A process first
// seen after the previous sample that started after it is counted in full;
// one that existed before (a late name match) only from now on. When a
// tracked process disappears and its parent is tracked and alive, the
// parent's cutime/cstime grows by the child's final total when it reaps it,
// so the child's last total is subtracted (no double count, and the CPU the
// child used after the last sample is still counted, through the parent).
// When the parent is not tracked (a daemonized master reparented to init),
// the CPU between the last sample and exit is lost: sample often. The clock
// tick is 10 ms, so a window needs many ticks of server CPU (seconds of
// load, not milliseconds) for a precise per-handshake figure.
type ServerCPU struct {
	root    string
	pids    []int
	names   []string
	tracked map[int]*trackedProc
	acc     int64 // accounted ticks since creation
	lastAt  uint64
	inited  bool
	rss     int64 // bytes at the last sample
}

// NewServerCPU tracks the given PIDs and processes whose comm is one of
// names. procRoot is normally "/proc".
func NewServerCPU(procRoot string, pids []int, names []string) *ServerCPU {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &ServerCPU{root: procRoot, pids: pids, names: names, tracked: map[int]*trackedProc{}}
}

// ServerSample is the state after one Sample.
type ServerSample struct {
	At       time.Time
	CPUTicks int64 // accounted ticks since NewServerCPU
	RSSBytes int64 // resident memory of the tracked processes now
	PIDs     []int // tracked live processes, sorted
}

// CPUMicros converts CPUTicks to microseconds.
func (s ServerSample) CPUMicros() int64 { return s.CPUTicks * tickMicros }

// Sample scans the process table once and updates the bookkeeping.
func (t *ServerCPU) Sample() (ServerSample, error) {
	now := time.Now()
	bt, err := bootTicks(t.root)
	if err != nil {
		return ServerSample{}, err
	}
	all, err := scanProcs(t.root)
	if err != nil {
		return ServerSample{}, err
	}
	children := map[int][]int{}
	for pid, p := range all {
		children[p.PPID] = append(children[p.PPID], pid)
	}
	cur := map[int]bool{}
	var queue []int
	add := func(pid int) {
		if _, ok := all[pid]; ok && !cur[pid] {
			cur[pid] = true
			queue = append(queue, pid)
		}
	}
	for _, pid := range t.pids {
		add(pid)
	}
	for pid, p := range all {
		if slices.Contains(t.names, p.Comm) {
			add(pid)
		}
	}
	for pid, tp := range t.tracked {
		if p, ok := all[pid]; ok && p.StartTime == tp.start {
			add(pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			add(c)
		}
	}
	// Vanished (or PID reused) processes.
	for pid, tp := range t.tracked {
		p, ok := all[pid]
		if ok && p.StartTime == tp.start && cur[pid] {
			continue
		}
		if parent, ok := t.tracked[tp.ppid]; ok {
			if pp, alive := all[tp.ppid]; alive && pp.StartTime == parent.start && cur[tp.ppid] {
				t.acc -= int64(tp.last)
			}
		}
		delete(t.tracked, pid)
	}
	var rss int64
	pids := make([]int, 0, len(cur))
	for pid := range cur {
		p := all[pid]
		pids = append(pids, pid)
		if p.State != 'Z' {
			rss += int64(p.RSS)
		}
		tp, ok := t.tracked[pid]
		switch {
		case ok:
			t.acc += int64(p.TicksWithChildren()) - int64(tp.last)
			tp.last, tp.ppid = p.TicksWithChildren(), p.PPID
		default:
			if t.inited && p.StartTime+1 >= t.lastAt { // born since the last sample
				t.acc += int64(p.TicksWithChildren())
			}
			t.tracked[pid] = &trackedProc{start: p.StartTime, ppid: p.PPID, last: p.TicksWithChildren(), comm: p.Comm}
		}
	}
	slices.Sort(pids)
	t.inited = true
	t.lastAt = bt
	t.rss = rss * int64(os.Getpagesize())
	return ServerSample{At: now, CPUTicks: t.acc, RSSBytes: t.rss, PIDs: pids}, nil
}

// selfCPU returns this process's user+system CPU time (getrusage RUSAGE_SELF).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
