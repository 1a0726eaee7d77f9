package proctrack

import (
	"encoding/binary"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// changeWatch lets the probe learn, in one system call, what it otherwise
// asks /proc for each second about every tracked master and server: that
// the process exited (a pidfd, readable once it has), and that an nginx pid
// file was renamed to .oldbin or back (an inotify watch on its directory).
// Both sit in one epoll set the probe polls without waiting. A process or
// pid file the watch does not cover (no pidfd, a watch refused, more than
// maxWatched) is probed as before.
type changeWatch struct {
	ep, in int  // epoll and inotify fds; ep < 0: no watch at all
	pids   bool // pidfds allowed: the /proc read is this process's own

	pidfds map[procKey]int // processes watched for their exit
	fired  map[procKey]bool
	dirs   map[int]*watchedDir // inotify watch descriptor -> directory
	byDir  map[string]int      // directory path (through /proc/PID/root) -> wd
	files  map[procKey]string  // master -> the pid file directory it is covered by
	// changed: something the watch saw (or could not see) since the last
	// probe means the probe should report a change.
	changed bool
	// renamed: the masters whose pid file the watch saw renamed to
	// .oldbin since the last takeRenamed (a USR2 starting; nginx renames
	// it back within milliseconds when its new binary fails, before any
	// scan may see the file).
	renamed map[procKey]bool
	buf     []byte
}

// watchedDir is one inotify-watched directory and the names in it whose
// changes count (pid files and their .oldbin), by master.
type watchedDir struct {
	names map[procKey]string // master -> pid file base name
}

// maxWatched bounds the processes and directories watched.
const maxWatched = 256

// newChangeWatch returns the watch; pids says whether the pids the scans
// read are this process's (the /proc of its own pid namespace), so that a
// pidfd may be opened for them.
func newChangeWatch(pids bool) *changeWatch {
	w := &changeWatch{ep: -1, in: -1, pids: pids}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return w
	}
	w.ep = ep
	if in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err == nil {
		if unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, in, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(in)}) == nil {
			w.in = in
		} else {
			unix.Close(in)
		}
	}
	w.pidfds = map[procKey]int{}
	w.fired = map[procKey]bool{}
	w.dirs = map[int]*watchedDir{}
	w.byDir = map[string]int{}
	w.files = map[procKey]string{}
	w.renamed = map[procKey]bool{}
	w.buf = make([]byte, 4096)
	return w
}

// coversProc says whether the watch reports k's exit.
func (w *changeWatch) coversProc(k procKey) bool {
	if w == nil || w.ep < 0 {
		return false
	}
	_, ok := w.pidfds[k]
	return ok && !w.fired[k]
}

// coversPidFile says whether the watch reports changes to master k's pid
// file and its .oldbin.
func (w *changeWatch) coversPidFile(k procKey) bool {
	if w == nil || w.in < 0 {
		return false
	}
	_, ok := w.files[k]
	return ok
}

// watchProc starts watching k's exit; verify reads the start time of the
// process the pidfd refers to (a pid reused between the scan and the open
// is not watched).
func (w *changeWatch) watchProc(k procKey, verify func() (uint64, bool)) {
	if w == nil || w.ep < 0 || !w.pids || len(w.pidfds) >= maxWatched {
		return
	}
	if _, ok := w.pidfds[k]; ok {
		return
	}
	fd, err := unix.PidfdOpen(k.pid, 0)
	if err != nil {
		return
	}
	if start, ok := verify(); !ok || start != k.start {
		unix.Close(fd)
		return
	}
	if unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}) != nil {
		unix.Close(fd)
		return
	}
	w.pidfds[k] = fd
}

// watchPidFile starts watching master k's pid file (its path as the master
// sees it, root the master's root through /proc); exists is whether the
// .oldbin existed at the scan, checked again once the watch is in place so
// a rename in between is not missed.
func (w *changeWatch) watchPidFile(k procKey, root, pidFile string, oldbinSeen bool) {
	if w == nil || w.in < 0 || pidFile == "" || !strings.HasPrefix(pidFile, "/") {
		return
	}
	if _, ok := w.files[k]; ok {
		return
	}
	dir, base := path.Split(pidFile)
	p := root + dir
	wd, ok := w.byDir[p]
	if !ok {
		if len(w.dirs) >= maxWatched {
			return
		}
		var err error
		wd, err = unix.InotifyAddWatch(w.in, p, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|
			unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
		if err != nil {
			return
		}
		if d := w.dirs[wd]; d != nil {
			// The same directory through another master's root: one
			// watch, both paths.
			w.byDir[p] = wd
		} else {
			w.dirs[wd] = &watchedDir{names: map[procKey]string{}}
			w.byDir[p] = wd
		}
	}
	w.dirs[wd].names[k] = base
	w.files[k] = p
	if rawExists(p+base+".oldbin") != oldbinSeen {
		w.changed = true
	}
}

// forget stops watching what is not in keep (the processes of the last
// scan).
func (w *changeWatch) forget(keep map[int]procKey) {
	if w == nil || w.ep < 0 {
		return
	}
	for k, fd := range w.pidfds {
		if keep[k.pid] != k {
			unix.Close(fd) // closing takes it out of the epoll set
			delete(w.pidfds, k)
			delete(w.fired, k)
		}
	}
	for k, p := range w.files {
		if keep[k.pid] == k {
			continue
		}
		delete(w.files, k)
		wd := w.byDir[p]
		d := w.dirs[wd]
		if d == nil {
			continue
		}
		delete(d.names, k)
		if len(d.names) == 0 {
			_, _ = unix.InotifyRmWatch(w.in, uint32(wd))
			delete(w.dirs, wd)
			for q, x := range w.byDir {
				if x == wd {
					delete(w.byDir, q)
				}
			}
		}
	}
}

// poll says whether anything the watch covers changed since the last poll:
// a watched process exited, or a watched pid file (or its .oldbin) was
// created, removed or renamed. It does not wait.
func (w *changeWatch) poll() bool {
	if w == nil || w.ep < 0 {
		return false
	}
	changed := w.changed
	w.changed = false
	var evs [8]unix.EpollEvent
	n, err := unix.EpollWait(w.ep, evs[:], 0)
	if err != nil {
		return true // cannot tell: let the scan look
	}
	for _, ev := range evs[:n] {
		fd := int(ev.Fd)
		if fd == w.in {
			if w.drainInotify() {
				changed = true
			}
			continue
		}
		// A pidfd: its process exited. It stays readable: take it out of
		// the set, and probe that process as before until a scan forgets
		// it.
		_ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_DEL, fd, nil)
		for k, x := range w.pidfds {
			if x == fd {
				w.fired[k] = true
			}
		}
		changed = true
	}
	return changed
}

// drainInotify reads the queued events and says whether one concerns a
// watched pid file (or the queue overflowed, or a watched directory went).
func (w *changeWatch) drainInotify() bool {
	changed := false
	for {
		n, err := unix.Read(w.in, w.buf)
		if err != nil || n <= 0 {
			return changed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(w.buf[off:])))
			mask := binary.NativeEndian.Uint32(w.buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(w.buf[off+12:]))
			name := ""
			if end := off + unix.SizeofInotifyEvent + nameLen; nameLen > 0 && end <= n {
				name = strings.TrimRight(string(w.buf[off+unix.SizeofInotifyEvent:end]), "\x00")
			}
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 {
				changed = true
				continue
			}
			d := w.dirs[wd]
			if d == nil {
				continue
			}
			if mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
				// The directory is gone or moved: its masters are probed as
				// before, and watched again by the next scans.
				changed = true
				for k := range d.names {
					delete(w.files, k)
				}
				if mask&unix.IN_IGNORED == 0 {
					_, _ = unix.InotifyRmWatch(w.in, uint32(wd))
				}
				delete(w.dirs, wd)
				for q, x := range w.byDir {
					if x == wd {
						delete(w.byDir, q)
					}
				}
				continue
			}
			for _, base := range d.names {
				if name == base || name == base+".oldbin" {
					changed = true
				}
			}
			if mask&(unix.IN_MOVED_TO|unix.IN_CREATE) != 0 && strings.HasSuffix(name, ".oldbin") {
				w.noteRenamed(d, strings.TrimSuffix(name, ".oldbin"))
			}
		}
	}
}

// noteRenamed notes the master whose pid file base in d was renamed to
// .oldbin: the one master with that pid file there, or, when several share
// the path, the one whose PID the file holds.
func (w *changeWatch) noteRenamed(d *watchedDir, base string) {
	var ks []procKey
	for k, b := range d.names {
		if b == base {
			ks = append(ks, k)
		}
	}
	if len(ks) > 1 {
		// The .oldbin holds its master's PID (or, renamed back, the pid
		// file does); a PID of another pid namespace matches none.
		var pid int
		for _, name := range []string{base + ".oldbin", base} {
			if b, err := os.ReadFile(w.files[ks[0]] + name); err == nil {
				if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					break
				}
			}
		}
		ks = slices.DeleteFunc(ks, func(k procKey) bool { return k.pid != pid })
	}
	if len(ks) == 1 && len(w.renamed) < maxWatched {
		w.renamed[ks[0]] = true
	}
}

// takeRenamed drains the pid-file watch's queue and returns the masters
// whose pid file was renamed to .oldbin since the last call (nil: none).
// A scan calls it before it reads /proc, so the changes drained are those
// it sees.
func (w *changeWatch) takeRenamed() map[procKey]bool {
	if w == nil || w.in < 0 {
		return nil
	}
	w.drainInotify()
	if len(w.renamed) == 0 {
		return nil
	}
	r := w.renamed
	w.renamed = map[procKey]bool{}
	return r
}

// close releases the fds.
func (w *changeWatch) close() {
	if w == nil || w.ep < 0 {
		return
	}
	for _, fd := range w.pidfds {
		unix.Close(fd)
	}
	if w.in >= 0 {
		unix.Close(w.in)
	}
	unix.Close(w.ep)
	w.ep, w.in = -1, -1
}
