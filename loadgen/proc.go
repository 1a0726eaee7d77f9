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
)

// clkTck is USER_HZ, the unit of the time fields of /proc/PID/stat. It is
// 100 on every Linux architecture Go supports (the kernel exports a fixed
// USER_HZ to user space regardless of CONFIG_HZ).
const clkTck = 100

// tickMicros is one clock tick in microseconds.
const tickMicros = 1_000_000 / clkTck

// procStat is the part of /proc/PID/stat that loadgen uses.
type procStat struct {
	pid       int
	ppid      int
	comm      string
	state     byte
	utime     uint64 // ticks
	stime     uint64
	cutime    uint64 // reaped children, ticks
	cstime    uint64
	starttime uint64 // ticks after boot
	rssPages  int64
}

// total is own plus reaped-children CPU in ticks.
func (p procStat) total() uint64 { return p.utime + p.stime + p.cutime + p.cstime }

// parseStat parses one /proc/PID/stat line. comm may contain spaces and
// parentheses, so the fields are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	var p procStat
	open := bytes.IndexByte(b, '(')
	closeParen := bytes.LastIndexByte(b, ')')
	if open < 1 || closeParen < open {
		return p, fmt.Errorf("%w: stat: no comm", ErrProc)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return p, fmt.Errorf("%w: stat pid: %v", ErrProc, err)
	}
	p.pid = pid
	p.comm = string(b[open+1 : closeParen])
	f := strings.Fields(string(b[closeParen+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 22 {
		return p, fmt.Errorf("%w: stat: %d fields", ErrProc, len(f)+2)
	}
	p.state = f[0][0]
	u := func(n int) uint64 { v, _ := strconv.ParseUint(f[n-3], 10, 64); return v }
	p.ppid = int(u(4))
	p.utime, p.stime, p.cutime, p.cstime = u(14), u(15), u(16), u(17)
	p.starttime = u(22)
	rss, _ := strconv.ParseInt(f[24-3], 10, 64)
	p.rssPages = rss
	return p, nil
}

// scanProcs reads /proc/*/stat. Processes that vanish mid-scan are skipped.
func scanProcs(root string) (map[int]procStat, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProc, err)
	}
	out := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		p, err := parseStat(b)
		if err != nil || p.pid != pid {
			continue
		}
		out[pid] = p
	}
	return out, nil
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
	return uint64(s * clkTck), nil
}

type trackedProc struct {
	start uint64 // starttime, to tell a reused PID
	ppid  int
	last  uint64 // total() at the last sample
	comm  string
}

// ProcTracker accounts the CPU time of a server's processes: those named by
// PID or by comm, every descendant of them, and every process once tracked
// for as long as it lives (so an nginx master that was forked by USR2 and
// reparented to init when the old master quit stays counted).
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
type ProcTracker struct {
	root    string
	pids    []int
	names   []string
	tracked map[int]*trackedProc
	acc     int64 // accounted ticks since creation
	lastAt  uint64
	inited  bool
	rss     int64 // bytes at the last sample
}

// NewProcTracker tracks the given PIDs and processes whose comm is one of
// names. procRoot is normally "/proc".
func NewProcTracker(procRoot string, pids []int, names []string) *ProcTracker {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &ProcTracker{root: procRoot, pids: pids, names: names, tracked: map[int]*trackedProc{}}
}

// ProcSample is the state after one Sample.
type ProcSample struct {
	At       time.Time
	CPUTicks int64 // accounted ticks since the tracker was created
	RSSBytes int64 // resident memory of the tracked processes now
	PIDs     []int // tracked live processes, sorted
}

// CPUMicros converts CPUTicks to microseconds.
func (s ProcSample) CPUMicros() int64 { return s.CPUTicks * tickMicros }

// Sample scans the process table once and updates the bookkeeping.
func (t *ProcTracker) Sample() (ProcSample, error) {
	now := time.Now()
	bt, err := bootTicks(t.root)
	if err != nil {
		return ProcSample{}, err
	}
	all, err := scanProcs(t.root)
	if err != nil {
		return ProcSample{}, err
	}
	children := map[int][]int{}
	for pid, p := range all {
		children[p.ppid] = append(children[p.ppid], pid)
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
		if slices.Contains(t.names, p.comm) {
			add(pid)
		}
	}
	for pid, tp := range t.tracked {
		if p, ok := all[pid]; ok && p.starttime == tp.start {
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
		if ok && p.starttime == tp.start && cur[pid] {
			continue
		}
		if parent, ok := t.tracked[tp.ppid]; ok {
			if pp, alive := all[tp.ppid]; alive && pp.starttime == parent.start && cur[tp.ppid] {
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
		if p.state != 'Z' {
			rss += p.rssPages
		}
		tp, ok := t.tracked[pid]
		switch {
		case ok:
			t.acc += int64(p.total()) - int64(tp.last)
			tp.last, tp.ppid = p.total(), p.ppid
		default:
			if t.inited && p.starttime+1 >= t.lastAt { // born since the last sample
				t.acc += int64(p.total())
			}
			t.tracked[pid] = &trackedProc{start: p.starttime, ppid: p.ppid, last: p.total(), comm: p.comm}
		}
	}
	slices.Sort(pids)
	t.inited = true
	t.lastAt = bt
	t.rss = rss * int64(os.Getpagesize())
	return ProcSample{At: now, CPUTicks: t.acc, RSSBytes: t.rss, PIDs: pids}, nil
}

// selfCPU returns this process's user+system CPU time (getrusage RUSAGE_SELF).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
