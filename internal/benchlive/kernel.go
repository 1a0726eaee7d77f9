// What pqwatch makes the kernel do, and whole-host CPU: BPF run time of
// pqwatch's programs (kernel.bpf_stats_enabled), context switches of its
// threads, and /proc/stat's busy time.

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// enableBPFStats turns on the kernel's BPF run-time accounting for the run
// (it costs every BPF program on the host two clock reads per run) through
// BPF_ENABLE_STATS: the kernel keeps it on while the returned descriptor is
// open, whatever others write to kernel.bpf_stats_enabled meanwhile (the
// sysctl and the descriptors are counted together), and it goes off again
// at exit. It reports whether it is on.
func enableBPFStats() bool {
	fd, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return false
	}
	atExit(func() { fd.Close() })
	return true
}

// bpfProg is one BPF program's accounting.
type bpfProg struct {
	name         string
	runNs, count uint64
}

// bpfProgs reads, from /proc/PID/fdinfo, the BPF programs pid holds open,
// by program id (a program behind several fds counts once).
func bpfProgs(pid int) map[uint32]bpfProg {
	out := map[uint32]bpfProg{}
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err != nil || l != "anon_inode:bpf-prog" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var id uint64
		var p bpfProg
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			switch k {
			case "prog_id":
				id = n
			case "run_time_ns":
				p.runNs = n
			case "run_cnt":
				p.count = n
			}
		}
		f.Close()
		if id == 0 {
			continue
		}
		if prev, ok := out[uint32(id)]; ok {
			p.name = prev.name
		} else if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
			if info, err := prog.Info(); err == nil {
				p.name = info.Name
			}
			prog.Close()
		}
		out[uint32(id)] = p
	}
	return out
}

// bpfDelta is the run time and run count per program name between two
// readings.
func bpfDelta(a, b map[uint32]bpfProg) map[string]bpfProg {
	out := map[string]bpfProg{}
	for id, pb := range b {
		pa := a[id]
		d := out[pb.name]
		d.name = pb.name
		d.runNs += pb.runNs - pa.runNs
		d.count += pb.count - pa.count
		out[pb.name] = d
	}
	return out
}

// ctxSwitches sums voluntary and involuntary context switches over pid's
// threads: each voluntary one is a thread going to sleep, and so one
// wakeup later.
func ctxSwitches(pid int) (vol, invol uint64) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			switch k {
			case "voluntary_ctxt_switches":
				vol += n
			case "nonvoluntary_ctxt_switches":
				invol += n
			}
		}
	}
	return vol, invol
}

// hostCPU is /proc/stat's first line: busy (user, nice, system, irq,
// softirq, steal) and all time of every CPU, in USER_HZ ticks.
func hostCPU() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		n, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
