// Package memlimit finds the memory limit pqwatch runs under: the Go soft
// limit (GOMEMLIMIT) when set, else its cgroup's (v2 memory.max, v1
// memory.limit_in_bytes), so that budgets follow the pod's limits and not
// the host's memory.
package memlimit

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// Source says where a limit came from.
type Source string

const (
	FromGOMEMLIMIT Source = "GOMEMLIMIT"
	FromCgroupV2   Source = "cgroup v2 memory.max"
	FromCgroupV1   Source = "cgroup v1 memory.limit_in_bytes"
	None           Source = "none"
)

// unlimited is where cgroup limits stop meaning anything (v1 writes
// 0x7ffffffffffff000 for "no limit"; 1 EiB is none in practice).
const unlimited = 1 << 60

// Limit is the memory limit in bytes and its source; 0 and None when there
// is none.
func Limit() (int64, Source) {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l, FromGOMEMLIMIT
	}
	return Cgroup(os.DirFS("/"))
}

// Cgroup reads the limit of this process's memory cgroup from a root
// filesystem (os.DirFS("/"), or a fixture): proc/self/cgroup names the
// group, sys/fs/cgroup holds its files. Both versions are tried; inside a
// container whose cgroup namespace hides the path the mount's own root is
// read instead.
func Cgroup(root fs.FS) (int64, Source) {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, None
	}
	var v1, v2 string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	if v1 != "" {
		for _, dir := range []string{path.Join("sys/fs/cgroup/memory", v1), "sys/fs/cgroup/memory"} {
			if l, ok := readLimit(root, path.Join(dir, "memory.limit_in_bytes")); ok {
				return l, FromCgroupV1
			}
		}
	}
	if v2 != "" {
		for _, dir := range []string{path.Join("sys/fs/cgroup", v2), "sys/fs/cgroup"} {
			if l, ok := readLimit(root, path.Join(dir, "memory.max")); ok {
				return l, FromCgroupV2
			}
		}
	}
	return 0, None
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads one limit file: ok is false when the file is absent or
// says there is no limit ("max", or a value beyond 2^62).
func readLimit(root fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(root, strings.TrimPrefix(path.Clean(name), "/"))
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= unlimited {
		return 0, false
	}
	return v, true
}

// SetSoftLimit gives the Go runtime a soft limit of fraction of the cgroup
// limit when GOMEMLIMIT is not set, so the garbage collector works harder
// before the kernel kills the process. It returns the limit now in force
// and its source.
func SetSoftLimit(fraction float64) (int64, Source) {
	l, src := Limit()
	if src == FromCgroupV1 || src == FromCgroupV2 {
		soft := int64(float64(l) * fraction)
		debug.SetMemoryLimit(soft)
		return soft, src
	}
	return l, src
}
