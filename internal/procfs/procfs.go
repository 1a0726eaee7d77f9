// Package procfs parses the few Linux /proc files pqwatch reads about
// processes: /proc/PID/stat, /proc/PID/statm, /proc/PID/task/TID/schedstat
// and the btime line of /proc/stat. The Parse functions work on bytes the caller read (so a caller
// can keep files open and reuse buffers); the Read functions are thin
// conveniences that read the file under a proc root ("/proc", or
// "/host/proc" in a container) and parse it.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// UserHZ is USER_HZ, the unit of the time fields of /proc/PID/stat. It is
// 100 on every Linux architecture Go supports (the kernel exports a fixed
// USER_HZ to user space regardless of CONFIG_HZ).
const UserHZ = 100

// PFForkNoExec is PF_FORKNOEXEC in Stat.Flags: the process forked and has
// not exec'd.
const PFForkNoExec = 0x40

// Sentinel errors returned (wrapped) by the parsers.
var (
	// ErrBadStat reports a /proc/PID/stat line that cannot be parsed.
	ErrBadStat = errors.New("procfs: malformed /proc/PID/stat")
	// ErrBadStatm reports a /proc/PID/statm line that cannot be parsed.
	ErrBadStatm = errors.New("procfs: malformed /proc/PID/statm")
	// ErrNoBtime reports a /proc/stat without a usable btime line.
	ErrNoBtime = errors.New("procfs: no btime in /proc/stat")
	// ErrBadSchedstat reports a schedstat line that cannot be parsed.
	ErrBadSchedstat = errors.New("procfs: malformed schedstat")
)

// Stat is the part of /proc/PID/stat that pqwatch uses. Field numbers are
// those of proc_pid_stat(5).
type Stat struct {
	PID       int    // (1)
	Comm      string // (2) without the parentheses
	State     byte   // (3) R, S, D, Z, ...
	PPID      int    // (4)
	Flags     uint64 // (9) PF_* flags
	UTime     uint64 // (14) clock ticks (UserHZ)
	STime     uint64 // (15) clock ticks
	CUTime    uint64 // (16) reaped children's utime, clock ticks
	CSTime    uint64 // (17) reaped children's stime, clock ticks
	StartTime uint64 // (22) clock ticks after boot
	RSS       uint64 // (24) resident set size, pages
}

// Ticks is the process's own CPU time, utime+stime, in clock ticks.
func (s Stat) Ticks() uint64 { return s.UTime + s.STime }

// TicksWithChildren is Ticks plus the CPU time of the children the process
// has reaped (cutime+cstime).
func (s Stat) TicksWithChildren() uint64 { return s.Ticks() + s.CUTime + s.CSTime }

// maxPID bounds PID and PPID (the kernel's PID_MAX_LIMIT is 2^22).
const maxPID = math.MaxInt32

// ParseStat parses a /proc/PID/stat line. The comm field may hold spaces and
// parentheses, so it runs from the first '(' to the last ')'. Every field
// Stat holds must be present and well formed (fields 1 to 24); later ones
// are ignored. It allocates only Comm.
func ParseStat(b []byte) (Stat, error) {
	var st Stat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open <= 0 || closing < open {
		return st, fmt.Errorf("%w: no comm", ErrBadStat)
	}
	pid, ok := atoi(bytes.TrimSpace(b[:open]))
	if !ok || pid == 0 || pid > maxPID {
		return st, fmt.Errorf("%w: bad pid", ErrBadStat)
	}
	st.PID = int(pid)
	// n is the field number of proc_pid_stat(5), 3 (state) the first after
	// comm; f is field n, found by hand (bytes.IndexAny costs more here).
	i, n := closing+1, 3
	for ; n <= 24; n++ {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n') {
			i++
		}
		if i == len(b) {
			break
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\n' {
			j++
		}
		f := b[i:j]
		i = j
		var dst *uint64
		switch n {
		case 3:
			if len(f) != 1 {
				return st, fmt.Errorf("%w: bad state", ErrBadStat)
			}
			st.State = f[0]
			continue
		case 4:
			v, ok := atoi(f)
			if !ok || v > maxPID {
				return st, fmt.Errorf("%w: bad ppid", ErrBadStat)
			}
			st.PPID = int(v)
			continue
		case 9:
			dst = &st.Flags
		case 14:
			dst = &st.UTime
		case 15:
			dst = &st.STime
		case 16:
			dst = &st.CUTime
		case 17:
			dst = &st.CSTime
		case 22:
			dst = &st.StartTime
		case 24:
			dst = &st.RSS
		default:
			continue
		}
		v, ok := atoi(f)
		if !ok {
			return st, fmt.Errorf("%w: bad field %d", ErrBadStat, n)
		}
		*dst = v
	}
	if n <= 24 {
		return st, fmt.Errorf("%w: %d fields", ErrBadStat, n-1)
	}
	st.Comm = string(b[open+1 : closing])
	return st, nil
}

// ParseStatm returns the resident set size in pages (the second field) from
// /proc/PID/statm.
func ParseStatm(b []byte) (uint64, error) {
	b = bytes.TrimLeft(b, " ")
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return 0, fmt.Errorf("%w: one field", ErrBadStatm)
	}
	b = bytes.TrimLeft(b[sp:], " ")
	end := bytes.IndexAny(b, " \n")
	if end < 0 {
		end = len(b)
	}
	v, ok := atoi(b[:end])
	if !ok {
		return 0, fmt.Errorf("%w: bad resident", ErrBadStatm)
	}
	return v, nil
}

// ParseBtime returns the boot time (seconds since the epoch) from the btime
// line of /proc/stat.
func ParseBtime(b []byte) (int64, error) {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, ok := atoi(bytes.TrimSpace(v))
			if !ok || n > math.MaxInt64 {
				break
			}
			return int64(n), nil
		}
	}
	return 0, ErrNoBtime
}

// ParseSchedstat returns the first field of a /proc/PID/task/TID/schedstat
// line: the time the thread has run on a CPU, in nanoseconds (the
// scheduler's sum_exec_runtime). Unlike utime+stime of /proc/PID/stat, which
// are clock ticks charged by sampling, it is exact. The other two fields
// (time waiting on a run queue, and timeslices run) are checked for form
// and ignored.
func ParseSchedstat(b []byte) (uint64, error) {
	var run uint64
	n := 0
	space := func(c byte) bool { return c == ' ' || c == '\n' || c == '\t' }
	for i := 0; i < len(b); {
		for i < len(b) && space(b[i]) {
			i++
		}
		if i == len(b) {
			break
		}
		j := i
		for j < len(b) && !space(b[j]) {
			j++
		}
		if n++; n > 3 {
			return 0, fmt.Errorf("%w: more than 3 fields", ErrBadSchedstat)
		}
		v, ok := atoi(b[i:j])
		if !ok {
			return 0, fmt.Errorf("%w: bad field %d", ErrBadSchedstat, n)
		}
		if n == 1 {
			run = v
		}
		i = j
	}
	if n != 3 {
		return 0, fmt.Errorf("%w: %d fields", ErrBadSchedstat, n)
	}
	return run, nil
}

// ReadTaskRuntimes reads root/PID/task/*/schedstat and stores each
// thread's run time in nanoseconds in dst, by TID (dst is cleared first).
// A thread that exits during the scan is skipped; the error is that of
// reading the task directory (the process is gone) or of a schedstat file
// that does not parse (a kernel without CONFIG_SCHED_INFO has none).
func ReadTaskRuntimes(root string, pid int, dst map[int]uint64) error {
	clear(dst)
	dir := filepath.Join(root, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return err
		}
		ns, err := ParseSchedstat(b)
		if err != nil {
			return fmt.Errorf("%s/%d/schedstat: %w", dir, tid, err)
		}
		dst[tid] = ns
	}
	return nil
}

// ReadStat reads and parses root/PID/stat.
func ReadStat(root string, pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ReadAllStats reads root/*/stat, by PID. Processes that vanish during the
// scan, and stat files that do not parse or name another PID, are skipped;
// the error is only that of reading root's directory.
func ReadAllStats(root string) (map[int]Stat, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	out := make(map[int]Stat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		st, err := ReadStat(root, pid)
		if err != nil || st.PID != pid {
			continue
		}
		out[pid] = st
	}
	return out, nil
}

// ReadBtime reads the boot time (seconds since the epoch) from root/stat.
func ReadBtime(root string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return 0, err
	}
	return ParseBtime(b)
}

// atoi parses a non-negative decimal number without allocating.
func atoi(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
