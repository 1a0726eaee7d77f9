package logparse

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Confined opens: a file named by an operator (a log, an nginx.conf) is
// opened with every component of its path resolved by pqwatch itself, so
// that a symbolic link planted by someone else cannot lead it elsewhere.
//
// The rule (OpenLog): the path is made absolute and cleaned lexically (a
// ".." the operator wrote removes the component before it). The log's
// directory, the path without its last component, is reached from "/" with
// no symbolic link on the way, except a link whose target lies inside one of
// the allowed directories (-log-symlink-dirs, each taken at its real path:
// naming it is the consent). Beneath the log's directory every component is
// resolved, and a link is followed where it stays inside that directory
// (resolved step by step: a ".." that climbs out of it, or an absolute link
// that does not name a path inside it, leaves it) or leads inside an allowed
// directory; inside an allowed directory, links are followed while they stay
// inside it or lead into another one. "/" among the allowed directories
// allows every link. Anything else is refused with ErrSymlink, naming the
// path, the link and the flag. At most 40 links are followed (ELOOP), and the
// magic links of /proc never.
//
// The kernel does this itself where it has openat2 (Linux 5.6): the log's
// directory is opened with RESOLVE_NO_SYMLINKS and the file beneath it with
// RESOLVE_BENEATH; whenever that refuses a link (or openat2 is missing or
// filtered), the component-by-component walk below decides, with openat
// O_PATH|O_NOFOLLOW per component and readlinkat, never following a link
// implicitly and never opening "..". Only a regular file is opened for
// reading (a FIFO would block, a device never ends); it is checked through
// an O_PATH descriptor before the open.

// maxLinks is the most symbolic links one open follows (the kernel's
// MAXSYMLINKS).
const maxLinks = 40

// noOpenat2 forces the component walk (tests; and once the kernel answered
// ENOSYS).
var noOpenat2 atomic.Bool

// OpenLog opens the file at path for reading under the rule above. dirs are
// the directories a symbolic link may lead into (-log-symlink-dirs; pod logs
// would add /var/log/pods, where kubelet's /var/log/containers links lead).
// It refuses a symbolic link with ErrSymlink and anything but a regular file
// with ErrNotRegular; other errors are *os.PathError.
func OpenLog(path string, dirs []string) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir, base := filepath.Split(abs)
	if base == "" {
		return nil, fmt.Errorf("%w: %s is a directory; point the flag at the log file itself", ErrNotRegular, path)
	}
	if !noOpenat2.Load() {
		if f, err, ok := openLogOpenat2(path, dir, base); ok {
			return f, err
		}
	}
	w := &walker{mode: modeLog, name: path, dirs: dirs, base: -1}
	defer w.close()
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	w.stack = []entry{{root, "/"}}
	return w.open(append(components(dir), ownMark, base))
}

// OpenBeneath opens the regular file name (relative) beneath the directory
// root, as openat2's RESOLVE_BENEATH: every link is followed only while it
// stays beneath root; an absolute link or name, or a ".." that climbs out of
// root, is refused with ErrSymlink (wrapping EXDEV).
func OpenBeneath(root, name string) (*os.File, error) {
	return openIn(root, name, modeBeneath)
}

// OpenInRoot opens the regular file name as if root were "/", as openat2's
// RESOLVE_IN_ROOT: an absolute link or name starts at root, ".." at root
// stays there. For a file of another mount namespace seen through
// /proc/PID/root (a pod's nginx.conf), with root that path.
func OpenInRoot(root, name string) (*os.File, error) {
	return openIn(root, name, modeInRoot)
}

func openIn(root, name string, m mode) (*os.File, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	display := filepath.Join(root, name)
	if !noOpenat2.Load() {
		res := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
		if m == modeInRoot {
			res = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
		}
		if f, err, ok := openat2File(rfd, name, display, res); ok {
			return f, err
		}
	}
	w := &walker{mode: m, name: display, base: 0}
	defer w.close()
	if filepath.IsAbs(name) && m == modeBeneath {
		return nil, w.refuse(syscall.EXDEV, "%s is absolute, not beneath %s", name, root)
	}
	fd, err := unix.Dup(rfd)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: root, Err: err}
	}
	unix.CloseOnExec(fd)
	w.stack = []entry{{fd, filepath.Clean(root)}}
	return w.open(components(name))
}

// openLogOpenat2 is OpenLog's fast path; ok is false when the walk must
// decide (a link met, or no usable openat2).
func openLogOpenat2(name, dir, base string) (f *os.File, err error, ok bool) {
	dfd, err := openat2(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		if walkDecides(err) {
			return nil, nil, false
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: err}, true
	}
	defer unix.Close(dfd)
	return openat2File(dfd, base, name, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS)
}

// openat2File resolves name under dfd with res, checks that it is a regular
// file through an O_PATH descriptor, then opens it for reading.
func openat2File(dfd int, name, display string, res uint64) (f *os.File, err error, ok bool) {
	pfd, err := openat2(dfd, name, unix.O_PATH, res)
	if err != nil {
		if walkDecides(err) {
			return nil, nil, false
		}
		return nil, &os.PathError{Op: "open", Path: display, Err: err}, true
	}
	var st unix.Stat_t
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil {
		return nil, &os.PathError{Op: "stat", Path: display, Err: err}, true
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular(display, st.Mode), true
	}
	fd, err := openat2(dfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, res)
	if err != nil {
		if walkDecides(err) {
			return nil, nil, false
		}
		return nil, &os.PathError{Op: "open", Path: display, Err: err}, true
	}
	f, err = checkSame(fd, display, &st)
	return f, err, true
}

func openat2(dfd int, name string, flags int, res uint64) (int, error) {
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: res})
	if err == unix.ENOSYS {
		noOpenat2.Store(true)
	}
	return fd, err
}

// walkDecides: errors of openat2 after which the walk decides: a link it
// refused (ELOOP, EXDEV), a race it would not judge (EAGAIN), or openat2
// missing or filtered.
func walkDecides(err error) bool {
	switch err {
	case unix.ELOOP, unix.EXDEV, unix.EAGAIN, unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.E2BIG:
		return true
	}
	return false
}

// checkSame wraps fd when it is the regular file st describes (the path
// may have changed between the O_PATH look and the open).
func checkSame(fd int, display string, st *unix.Stat_t) (*os.File, error) {
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: display, Err: err}
	}
	if st2.Dev != st.Dev || st2.Ino != st.Ino {
		unix.Close(fd)
		if st2.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, notRegular(display, st2.Mode)
		}
		return nil, &os.PathError{Op: "open", Path: display, Err: unix.EAGAIN}
	}
	return os.NewFile(uintptr(fd), display), nil
}

func notRegular(name string, m uint32) error {
	return fmt.Errorf("%w: %s is a %s; point the flag at the log file itself", ErrNotRegular, name, fileKind(statMode(m)))
}

// statMode is the os.FileMode type bits of a stat mode.
func statMode(m uint32) os.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	case unix.S_IFSOCK:
		return os.ModeSocket
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		return os.ModeDevice
	case unix.S_IFDIR:
		return os.ModeDir
	case unix.S_IFLNK:
		return os.ModeSymlink
	}
	return os.ModeIrregular
}

// mode is how a walk treats links and "..".
type mode uint8

const (
	modeLog     mode = iota // OpenLog's rule
	modeBeneath             // RESOLVE_BENEATH
	modeInRoot              // RESOLVE_IN_ROOT
)

// ownMark, among a walk's components, marks the log's directory: where it
// is popped, the current position becomes the walk's root (modeLog).
const ownMark = "\x00"

type entry struct {
	fd   int    // O_PATH directory
	path string // its real path
}

// walker resolves a path component by component. stack holds the
// directories from the current root (stack[base]) down to the position;
// in modeLog, before the log's directory is reached (base -1), from "/".
type walker struct {
	mode   mode
	name   string   // the path asked for (messages)
	dirs   []string // modeLog: the allowed directories as given
	roots  []entry  // modeLog: those opened, at their real paths
	rooted bool     // roots opened
	stack  []entry
	base   int
	links  int
	link   string // the last link followed (messages)
}

func (w *walker) close() {
	for _, e := range w.stack {
		unix.Close(e.fd)
	}
	w.stack = nil
	for _, r := range w.roots {
		unix.Close(r.fd)
	}
	w.roots = nil
}

func (w *walker) top() entry { return w.stack[len(w.stack)-1] }

func (w *walker) pop() {
	unix.Close(w.top().fd)
	w.stack = w.stack[:len(w.stack)-1]
}

// reset makes the stack the root r alone (its descriptor duplicated).
func (w *walker) reset(r entry) error {
	fd, err := unix.Dup(r.fd)
	if err != nil {
		return &os.PathError{Op: "dup", Path: r.path, Err: err}
	}
	unix.CloseOnExec(fd)
	for len(w.stack) > 0 {
		w.pop()
	}
	w.stack = append(w.stack, entry{fd, r.path})
	w.base = 0
	return nil
}

// linkError is a refused link: errors.Is matches ErrSymlink and the errno
// the kernel would have given (EXDEV, ELOOP).
type linkError struct {
	msg   string
	errno syscall.Errno
}

func (e *linkError) Error() string        { return e.msg }
func (e *linkError) Is(target error) bool { return target == ErrSymlink }
func (e *linkError) Unwrap() error        { return e.errno }

func (w *walker) refuse(errno syscall.Errno, format string, args ...any) error {
	if w.link == "" {
		w.link = `".."`
	}
	msg := ErrSymlink.Error() + ": " + w.name + ": " + fmt.Sprintf(format, args...)
	if w.mode == modeLog && errno == syscall.EXDEV {
		msg += "; allow its target's directory with -log-symlink-dirs"
	}
	return &linkError{msg, errno}
}

// open walks q and opens the regular file it ends at.
func (w *walker) open(q []string) (*os.File, error) {
	for len(q) > 0 {
		c := q[0]
		q = q[1:]
		switch c {
		case "", ".":
			continue
		case ownMark:
			w.base = len(w.stack) - 1
			continue
		case "..":
			var err error
			if q, err = w.dotdot(q); err != nil {
				return nil, err
			}
			continue
		}
		last := len(q) == 0
		parent := w.top()
		here := joinPath(parent.path, c)
		fd, err := unix.Openat(parent.fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: w.name, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "stat", Path: w.name, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			text, err := readlinkFd(fd)
			unix.Close(fd)
			if err != nil {
				return nil, &os.PathError{Op: "readlink", Path: here, Err: err}
			}
			if q, err = w.follow(parent, here, text, q); err != nil {
				return nil, err
			}
		case unix.S_IFDIR:
			if last {
				unix.Close(fd)
				return nil, notRegular(w.name, st.Mode)
			}
			w.stack = append(w.stack, entry{fd, here})
		default:
			unix.Close(fd)
			if !last {
				return nil, &os.PathError{Op: "open", Path: w.name, Err: unix.ENOTDIR}
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil, notRegular(w.name, st.Mode)
			}
			rfd, err := unix.Openat(parent.fd, c, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: w.name, Err: err}
			}
			return checkSame(rfd, w.name, &st)
		}
	}
	// The path ended at a directory (a link to one, or a trailing "..").
	return nil, notRegular(w.name, unix.S_IFDIR)
}

// dotdot moves to the parent directory: within the current root by popping
// the stack. At the root it stays (modeInRoot) or is refused (modeBeneath);
// in modeLog the walk goes on only when the parent directory followed by
// the components left to walk names a path inside an allowed directory
// (a link leading out of the log's directory into one), and returns the
// components left from there.
func (w *walker) dotdot(q []string) ([]string, error) {
	if w.base >= 0 && len(w.stack)-1 > w.base {
		w.pop()
		return q, nil
	}
	root := w.top().path
	switch w.mode {
	case modeInRoot:
		return q, nil
	case modeBeneath:
		return nil, w.refuse(syscall.EXDEV, "%s climbs out of %s", w.link, root)
	}
	// modeLog: the log's path is clean, so a ".." comes from a link, and
	// links met on the way to the log's directory jump to a root: base >= 0.
	r, rest, ok := w.allowed(append(components(filepath.Dir(root)), q...))
	if !ok || w.base < 0 {
		return nil, w.refuse(syscall.EXDEV, "%s climbs out of %s, and not into a -log-symlink-dirs directory", w.link, root)
	}
	if err := w.reset(r); err != nil {
		return nil, err
	}
	return rest, nil
}

// follow decides the link at here (in parent) whose text is text, and
// returns the components left to walk.
func (w *walker) follow(parent entry, here, text string, q []string) ([]string, error) {
	w.links++
	w.link = "the symbolic link " + here + " -> " + text
	if w.links > maxLinks {
		return nil, w.refuse(syscall.ELOOP, "more than %d symbolic links (a loop?)", maxLinks)
	}
	if text == "" {
		return nil, &os.PathError{Op: "open", Path: w.name, Err: unix.ENOENT}
	}
	var sfs unix.Statfs_t
	if unix.Fstatfs(parent.fd, &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC &&
		(filepath.IsAbs(text) || strings.ContainsRune(text, ':')) {
		return nil, w.refuse(syscall.ELOOP, "%s is a magic link of /proc", here)
	}
	comps := components(text)
	abs := filepath.IsAbs(text)
	switch {
	case w.mode == modeBeneath && abs:
		return nil, w.refuse(syscall.EXDEV, "%s -> %s is absolute", here, text)
	case w.mode == modeInRoot && abs:
		if err := w.reset(w.stack[0]); err != nil {
			return nil, err
		}
		return append(comps, q...), nil
	case w.mode != modeLog || (!abs && w.base >= 0):
		// Relative, inside the root: step by step from the link's directory.
		return append(comps, q...), nil
	}
	// modeLog: an absolute link, or any link on the way to the log's
	// directory, leads where its target names a path inside the current
	// root or an allowed directory.
	if !abs {
		comps = append(components(parent.path), comps...)
	}
	if w.base >= 0 {
		cur := w.stack[w.base]
		if rest, ok := under(comps, cur.path); ok {
			for len(w.stack)-1 > w.base {
				w.pop()
			}
			return append(rest, q...), nil
		}
	}
	r, rest, ok := w.allowed(comps)
	if !ok {
		if w.base < 0 {
			return nil, w.refuse(syscall.EXDEV, "%s is a symbolic link to %s, and a link on the way to the log's directory is followed only into a -log-symlink-dirs directory", here, text)
		}
		return nil, w.refuse(syscall.EXDEV, "%s is a symbolic link to %s, outside %s and the -log-symlink-dirs directories", here, text, w.stack[w.base].path)
	}
	if err := w.reset(r); err != nil {
		return nil, err
	}
	return append(rest, q...), nil
}

// allowed finds the allowed directory (the deepest) whose real path is a
// leading part of comps, and returns it with the components after it.
func (w *walker) allowed(comps []string) (entry, []string, bool) {
	if !w.rooted {
		w.rooted = true
		for _, d := range w.dirs {
			real, err := filepath.EvalSymlinks(d)
			if err != nil {
				continue
			}
			if real, err = filepath.Abs(real); err != nil {
				continue
			}
			fd, err := openNoLinks(real)
			if err != nil {
				continue
			}
			w.roots = append(w.roots, entry{fd, real})
		}
	}
	best := -1
	var rest []string
	for i, r := range w.roots {
		if rs, ok := under(comps, r.path); ok && (best < 0 || len(r.path) > len(w.roots[best].path)) {
			best, rest = i, rs
		}
	}
	if best < 0 {
		return entry{}, nil, false
	}
	return w.roots[best], rest, true
}

// openNoLinks opens the directory at the absolute path real with no symbolic
// link on the way.
func openNoLinks(real string) (int, error) {
	if !noOpenat2.Load() {
		fd, err := openat2(unix.AT_FDCWD, real, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err == nil || !walkDecides(err) || err == unix.ELOOP {
			return fd, err
		}
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range components(real) {
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

// under reports whether comps starts with the components of the absolute
// path dir, and returns the rest.
func under(comps []string, dir string) ([]string, bool) {
	dc := components(dir)
	if len(dc) > len(comps) {
		return nil, false
	}
	for i, c := range dc {
		if comps[i] != c {
			return nil, false
		}
	}
	return comps[len(dc):], true
}

// components splits a path at "/", dropping empty and "." components (a
// ".." is kept: it is resolved where the walk meets it).
func components(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func joinPath(dir, c string) string {
	if dir == "/" {
		return "/" + c
	}
	return dir + "/" + c
}

// readlinkFd reads the link an O_PATH|O_NOFOLLOW descriptor refers to.
func readlinkFd(fd int) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		k, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if k < n {
			return string(buf[:k]), nil
		}
		if n >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}
