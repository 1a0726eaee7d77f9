package proctrack

import (
	"os"
	"strconv"

	"github.com/pqwatch/pqwatch/record"
)

// servingTarget is a serving process as a lookup outside t.mu sees it.
type servingTarget struct {
	pid int
	rec *record.Generation
}

// servingTargets snapshots the serving processes (workers and servers) into
// dst, so that /proc can be read without holding t.mu.
func (t *Tracker) servingTargets(dst []servingTarget) []servingTarget {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.serving {
		dst = append(dst, servingTarget{p.key.pid, p.rec})
	}
	return dst
}

// eachSocket calls fn with each socket fd of pid, in ascending fd order
// (listeners, opened first, come early), until fn returns false. It
// reports whether pid's fd table could be read.
func (t *Tracker) eachSocket(pid int, fn func(fd int, ino uint64) bool) bool {
	fdDir := t.path(pid, "fd")
	fds, err := readDirNames(fdDir)
	if err != nil {
		return false
	}
	for _, name := range fds {
		l, err := os.Readlink(fdDir + "/" + name)
		if err != nil {
			continue
		}
		ino, err := parseSocketLink(l)
		if err != nil {
			continue
		}
		fd, _ := strconv.Atoi(name)
		if !fn(fd, ino) {
			break
		}
	}
	return true
}
