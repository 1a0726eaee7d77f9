package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
)

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
	start uint64         // starttime, to tell a reused PID
	tids  map[int]uint64 // run time of each thread at the last sample, ns
	comm  string
}

// ServerSelection says how ServerCPU picks the server's processes.
type ServerSelection struct {
	// Target is the server address whose listening socket's owners are
	// the server (unless NoSocket).
	Target   string
	NoSocket bool
	// PIDs widen the selection: these processes and their descendants are
	// measured too.
	PIDs []int
	// Names narrow it: only socket owners whose comm is one of Names.
	// When no process owns the socket (the server is remote, or in
	// another network namespace), every process with one of these names.
	Names []string
}

// ServerCPU accounts the CPU time, and reports the resident memory, of a
// server's processes.
//
// Which processes. By default those that hold the target's listening
// socket (found in /proc/net/tcp and tcp6, then among every process's
// descriptors): for nginx the master and its workers, and no other nginx
// on the host. Names narrow that set by comm; PIDs widen it. Every
// descendant of a selected process is measured, and every process once
// measured stays so for as long as it lives, so an nginx master forked by
// USR2 and reparented to init when the old master quit stays counted.
// Refresh looks the socket owners up again (Run does before each trial).
//
// How. Each Sample reads /proc/PID/task/TID/schedstat of every thread of
// every measured process: the scheduler's run time in nanoseconds, exact,
// where utime+stime of /proc/PID/stat are 10 ms clock ticks charged by
// sampling. It adds each thread's growth since the previous sample; a
// thread or process born since then is counted in full, one found late (a
// process that existed before it was selected) from then on. The run time a
// thread or process used between its last sample and its exit is not
// counted: sample often (Run samples every 50 ms).
type ServerCPU struct {
	root    string
	sel     ServerSelection
	self    int
	roots   []int // selected at the last Refresh
	byName  bool  // no socket owner: select by name on every sample
	listen  []Listener
	note    string
	tracked map[int]*trackedProc
	seen    map[int]string // every PID ever measured, with its comm
	acc     int64          // accounted ns since creation
	lastAt  uint64
	inited  bool
	scratch map[int]uint64
}

// NewServerCPU returns a ServerCPU for sel; call Refresh before the first
// Sample. procRoot is normally "/proc".
func NewServerCPU(procRoot string, sel ServerSelection) *ServerCPU {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &ServerCPU{root: procRoot, sel: sel, self: os.Getpid(), tracked: map[int]*trackedProc{},
		seen: map[int]string{}, scratch: map[int]uint64{}}
}

// Refresh selects the server's processes anew: the owners of the target's
// listening socket (narrowed by name), plus the PIDs given. It reports
// whether any process is selected.
func (t *ServerCPU) Refresh() bool {
	t.roots, t.byName, t.note = nil, false, ""
	var owners []int
	if !t.sel.NoSocket && t.sel.Target != "" {
		ls, err := targetListeners(t.root, t.sel.Target)
		if err != nil {
			t.note = fmt.Sprintf("listening socket of %s not looked up: %v", t.sel.Target, err)
		}
		t.listen = ls
		var inodes []uint64
		for _, l := range ls {
			inodes = append(inodes, l.Inode)
		}
		for _, pid := range socketOwners(t.root, inodes) {
			if pid == t.self {
				t.note = "the target's listening socket is held by loadgen's own process, whose CPU cannot be told apart: not measured"
				continue
			}
			owners = append(owners, pid)
		}
		if len(ls) == 0 && err == nil {
			t.note = "no process on this host (in this network namespace) listens on " + t.sel.Target
		}
	}
	if len(t.sel.Names) > 0 {
		switch {
		case t.sel.NoSocket:
			t.byName = true
		case len(owners) == 0:
			t.byName = true
			t.note = fmt.Sprintf("no owner of the listening socket of %s found here: measuring every process named %v on the host", t.sel.Target, t.sel.Names)
		default:
			var named []int
			for _, pid := range owners {
				if st, err := procfs.ReadStat(t.root, pid); err == nil && slices.Contains(t.sel.Names, st.Comm) {
					named = append(named, pid)
				}
			}
			if len(named) == 0 {
				t.note = fmt.Sprintf("no process named %v owns the listening socket of %s (its owners: %v): not measured", t.sel.Names, t.sel.Target, owners)
			}
			owners = named
		}
	}
	t.roots = append(owners, t.sel.PIDs...)
	slices.Sort(t.roots)
	t.roots = slices.Compact(t.roots)
	return len(t.roots) > 0 || t.byName
}

// ServerSample is the state after one Sample.
type ServerSample struct {
	At       time.Time
	CPUNs    int64 // accounted run time since NewServerCPU, nanoseconds
	RSSBytes int64 // resident memory of the measured processes now
	PIDs     []int // measured live processes, sorted
}

// CPUMicros is CPUNs in microseconds.
func (s ServerSample) CPUMicros() int64 { return s.CPUNs / 1000 }

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
	for _, pid := range t.roots {
		add(pid)
	}
	if t.byName {
		for pid, p := range all {
			if slices.Contains(t.sel.Names, p.Comm) && pid != t.self {
				add(pid)
			}
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
	for pid, tp := range t.tracked { // gone, or the PID reused
		if p, ok := all[pid]; !ok || p.StartTime != tp.start || !cur[pid] {
			delete(t.tracked, pid)
		}
	}
	var rss int64
	pids := make([]int, 0, len(cur))
	for pid := range cur {
		p := all[pid]
		if err := procfs.ReadTaskRuntimes(t.root, pid, t.scratch); err != nil {
			if errors.Is(err, procfs.ErrBadSchedstat) {
				return ServerSample{}, fmt.Errorf("%w: %v", ErrProc, err)
			}
			delete(t.tracked, pid) // exited during the scan
			continue
		}
		pids = append(pids, pid)
		t.seen[pid] = p.Comm
		if p.State != 'Z' {
			rss += int64(p.RSS)
		}
		tp, ok := t.tracked[pid]
		if !ok {
			tp = &trackedProc{start: p.StartTime, comm: p.Comm, tids: map[int]uint64{}}
			t.tracked[pid] = tp
			born := t.inited && p.StartTime+1 >= t.lastAt // since the last sample
			for tid, ns := range t.scratch {
				if born {
					t.acc += int64(ns)
				}
				tp.tids[tid] = ns
			}
			continue
		}
		for tid, ns := range t.scratch {
			if last, ok := tp.tids[tid]; ok && ns >= last {
				t.acc += int64(ns - last)
			} else if !ok { // a thread born since the last sample
				t.acc += int64(ns)
			}
		}
		clear(tp.tids)
		maps.Copy(tp.tids, t.scratch)
	}
	slices.Sort(pids)
	t.inited = true
	t.lastAt = bt
	return ServerSample{At: now, CPUNs: t.acc, RSSBytes: rss * int64(os.Getpagesize()), PIDs: pids}, nil
}

// Info describes what was measured: how the processes were selected, the
// listening sockets, and every PID measured so far with its comm.
func (t *ServerCPU) Info() *ServerInfo {
	in := &ServerInfo{Clock: "schedstat", Note: t.note, Names: t.sel.Names, GivenPIDs: t.sel.PIDs}
	switch {
	case t.byName:
		in.SelectedBy = "name"
	case len(t.listen) > 0:
		in.SelectedBy = "listening socket"
	case len(t.sel.PIDs) > 0:
		in.SelectedBy = "pid"
	}
	for _, l := range t.listen {
		in.Listen = append(in.Listen, fmt.Sprintf("%s inode %d", l.Addr, l.Inode))
	}
	for _, pid := range sortedKeys(t.seen) {
		in.PIDs = append(in.PIDs, pid)
		in.Processes = append(in.Processes, ServerProcess{PID: pid, Comm: t.seen[pid], Cmdline: readCmdline(t.root, pid)})
	}
	return in
}

// ServerInfo is results.json's "server": which processes loadgen measured
// as the server, and how.
type ServerInfo struct {
	// SelectedBy is "listening socket" (the owners of the target's
	// socket, narrowed by -server-name), "name" (every process with one of
	// Names: no socket found), "pid" (-server-pid only) or "" (nothing
	// measured; see Note).
	SelectedBy string          `json:"selected_by"`
	Listen     []string        `json:"listen,omitempty"` // the target's listening sockets
	Names      []string        `json:"names,omitempty"`
	GivenPIDs  []int           `json:"given_pids,omitempty"`
	PIDs       []int           `json:"pids"` // every process measured in any trial
	Processes  []ServerProcess `json:"processes,omitempty"`
	// Clock is the CPU time source: "schedstat", the run time of every
	// thread in nanoseconds.
	Clock string `json:"clock"`
	Note  string `json:"note,omitempty"`
}

// ServerProcess is one measured process.
type ServerProcess struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	Cmdline string `json:"cmdline,omitempty"` // while it was still alive at the end
}

// selfRunqueueWait is the time this process's threads have waited on a run
// queue for a CPU (the second field of schedstat), or 0 when unknown.
func selfRunqueueWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var total uint64
	for _, e := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := bytes.Fields(b); len(f) == 3 {
			v, _ := strconv.ParseUint(string(f[1]), 10, 64)
			total += v
		}
	}
	return time.Duration(total)
}

// selfCPU returns this process's user+system CPU time (getrusage RUSAGE_SELF).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
