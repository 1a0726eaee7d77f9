package proctrack

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
	"github.com/pqwatch/pqwatch/kubepod"
	"github.com/pqwatch/pqwatch/record"
)

// Reading /proc into a snapshot: the server processes (nginx masters,
// workers and helpers, the owners of tracked listeners) with what the swap
// state machine (swap.go) needs of each. procReader keeps what makes the
// reading cheap between scans (kept-open files, the pids found of no
// interest) and what /proc does not say twice (a title not readable this
// time, a binary's identity already read); the state machine never reads
// a file.

// snapshot is one reading of /proc.
type snapshot struct {
	procs []procSnap   // by pid
	alive map[int]bool // of the pids asked for, those that exist (not server processes)
}

// procSnap is one server process as a scan read it.
type procSnap struct {
	key        procKey
	ppid       int
	comm       string
	role       nginxRole
	server     bool // a non-nginx process owning a tracked listener
	forkNoExec bool // PF_FORKNOEXEC: a fork that has not exec'd (a worker, or a USR2 child before exec)
	ticks      uint64
	rssBytes   uint64
	started    time.Time
	// ident is the binary of a master or a server (zero for workers).
	ident identity
	// oldbin: a master's pid file has a ".oldbin" sibling (a swap starting,
	// or one that failed before its new master ran).
	oldbin bool
	// oldbinRenamed: the pid-file watch saw the pid file renamed to
	// .oldbin since the last read (the file may be back already: nginx
	// renames it back when its new binary exits).
	oldbinRenamed bool
}

// identity is what a process's binary is: for masters and servers.
type identity struct {
	fkey    fileKey
	exe     string // the binary's path
	deleted bool   // replaced or removed on disk
	sha256  string
	openssl string // the TLS library's version
	conf    string // nginx -c path
	pidFile string // nginx's pid file
	errLog  string // the error log before the configuration is read: -e, or the compiled-in one

	// pod is the Kubernetes pod, from the cgroup path (pod.go); nil: none.
	pod *record.Pod
}

// procReader reads /proc into snapshots. It is not safe for concurrent use
// (the Tracker holds its lock).
type procReader struct {
	root         string
	nginxComms   []string
	scanInterval time.Duration
	btime        int64
	clockTicks   int64
	pageSize     int64
	nginxConf    string
	nginxPrefix  string
	nginxPidFile string
	nginxErrLog  string
	files        *fileCache
	pods         *kubepod.Resolver // names a process's pod (pod.go)
	log          *slog.Logger
	watch        *changeWatch // the probe's pidfds and pid-file watches (nil: none)

	buf        []byte
	childrenOK bool             // /proc/PID/task/PID/children exists: light scans possible
	open       map[procFile]int // kept-open /proc files of the last snapshot's processes
	boring     map[int]bool     // pids found neither nginx nor a server since the last full scan
	lastFull   time.Time
	lastDir    time.Time // last scan that read /proc's directory
	kids       map[int][]int
	last       map[int]procKey      // the last snapshot's processes
	roles      map[procKey]roleInfo // titles as last read
	idents     map[procKey]identity // binaries as last read
	errors     atomic.Uint64        // unparsable files (Stats reads it without the scanner's lock)
	// deniedSaid: a server's /proc/PID/exe was refused (no CAP_SYS_PTRACE
	// for another user's process) and the agent has said so, once.
	deniedSaid bool
}

type roleInfo struct {
	role       nginxRole
	masterArgs string
}

func newProcReader(cfg Config, btime int64, log *slog.Logger) *procReader {
	r := &procReader{
		root: cfg.ProcRoot, nginxComms: cfg.NginxComms, scanInterval: cfg.ScanInterval,
		btime: btime, clockTicks: cfg.ClockTicks, pageSize: cfg.PageSize,
		nginxConf: cfg.NginxConf, nginxPrefix: cfg.NginxPrefix, nginxPidFile: cfg.NginxPidFile, nginxErrLog: cfg.NginxErrorLog,
		files: newFileCache(256), log: log, pods: &kubepod.Resolver{PodsDir: cfg.PodLogs},
		buf:  make([]byte, 0, 4096),
		last: map[int]procKey{}, roles: map[procKey]roleInfo{}, idents: map[procKey]identity{},
	}
	// Light scans follow nginx masters' children through this file; pid 1
	// exists in every pid namespace.
	if _, err := os.Stat(filepath.Join(cfg.ProcRoot, "1/task/1/children")); err == nil {
		r.childrenOK = true
		// The probe's pidfds name pids of this process's namespace: only
		// when the /proc read is its own.
		r.watch = newChangeWatch(filepath.Clean(cfg.ProcRoot) == "/proc")
	}
	return r
}

// fullScanEvery: a scan reads every process's stat at least this many
// ScanIntervals apart, to find a process that became nginx by exec under a
// pid already seen. dirScanEvery: a scan reads /proc's directory at least
// this many ScanIntervals apart, to find servers that are not children of a
// tracked nginx master.
const (
	fullScanEvery = 60
	dirScanEvery  = 15
)

// rescan makes the next read list /proc's directory.
func (r *procReader) rescan() { r.lastDir = time.Time{} }

// read reads /proc at now: the nginx processes and the servers of
// serverPIDs (pid -> start time; an entry whose pid now has another start
// time is deleted), and whether each of alivePIDs exists.
func (r *procReader) read(now time.Time, serverPIDs map[int]uint64, alivePIDs []int) (*snapshot, error) {
	// Three depths of scan (and probe between scans). Most processes are
	// of no interest:
	//   - full (every fullScanEvery intervals): /proc's directory, every
	//     process's stat, to find a process that exec'd nginx under a pid
	//     seen before;
	//   - directory (every dirScanEvery intervals): /proc's directory,
	//     skipping the pids already found uninteresting; new processes are
	//     read;
	//   - light (the rest): no directory at all: the processes already
	//     tracked, and the children of nginx masters (new workers, a USR2
	//     master and its workers), from /proc/PID/task/PID/children.
	// Reading /proc's directory is the dearest part of a scan on a busy
	// host; a light scan costs a few reads per server process. Without the
	// children files (a kernel without CONFIG_PROC_CHILDREN) every scan
	// reads the directory.
	// The pid-file renames to .oldbin since the last read, before /proc is
	// read: a rename undone in between is seen here only.
	renamed := r.watch.takeRenamed()
	full := r.boring == nil || now.Sub(r.lastFull) >= fullScanEvery*r.scanInterval
	light := !full && r.childrenOK && now.Sub(r.lastDir) < dirScanEvery*r.scanInterval
	var pids []int
	if light {
		for pid := range r.last {
			pids = append(pids, pid)
		}
		for pid := range serverPIDs {
			if _, ok := r.last[pid]; !ok {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids) // masters before the children they fork, mostly
	} else {
		names, err := readDirNames(r.root)
		if err != nil {
			r.errors.Add(1)
			return nil, fmt.Errorf("proctrack: %w", err)
		}
		pids = make([]int, 0, len(names))
		for _, name := range names {
			if pid, err := strconv.Atoi(name); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		r.lastDir = now
	}

	snap := &snapshot{}
	kids := make(map[int][]int) // nginx master -> its children, for probe
	if full {
		r.boring = make(map[int]bool, len(pids))
		r.lastFull = now
	}
	visited := make(map[int]bool, len(pids))
	for i := 0; i < len(pids); i++ {
		pid := pids[i]
		if visited[pid] {
			continue
		}
		visited[pid] = true
		if !full && r.boring[pid] {
			if _, srv := serverPIDs[pid]; !srv {
				continue
			}
		}
		_, tracked := r.last[pid]
		b, err := r.readProc(pid, "stat", tracked)
		if err != nil {
			continue // exited between readdir and read
		}
		st, err := procfs.ParseStat(b)
		if err != nil {
			r.errors.Add(1)
			continue
		}
		key := procKey{pid, st.StartTime}
		p := procSnap{key: key, ppid: st.PPID, comm: st.Comm, ticks: st.Ticks(), forkNoExec: st.Flags&procfs.PFForkNoExec != 0}
		p.started = time.Unix(r.btime, 0).Add(time.Duration(st.StartTime) * time.Second / time.Duration(r.clockTicks))
		ri := r.roles[key]
		_, isServer := serverPIDs[pid]
		if isServer && serverPIDs[pid] != st.StartTime {
			delete(serverPIDs, pid)
			isServer = false
		}
		nginx := r.isNginxComm(st.Comm) || ri.role != roleNone
		if !nginx && !isServer {
			// A child caught between fork and exec of nginx is found at
			// the next full scan; a USR2 child is nginx from the fork on.
			r.boring[pid] = true
			continue
		}
		if nginx {
			// A parent found uninteresting may have been caught between
			// fork and exec of nginx (a master run in the foreground):
			// read it again next scan rather than at the next full one.
			delete(r.boring, st.PPID)
			if cb, err := r.readProc(pid, "cmdline", tracked); err == nil {
				role, args := nginxTitle(cb)
				ri.role = role
				if role == roleMaster {
					ri.masterArgs = args
				}
			}
			if ri.role == roleMaster && r.childrenOK {
				n := len(pids)
				pids = r.appendChildren(pids, pid)
				kids[pid] = slices.Sorted(slices.Values(pids[n:]))
				if !light {
					pids = pids[:n] // the directory lists them already
				}
			}
		}
		p.role = ri.role
		p.server = isServer && ri.role == roleNone
		if p.role == roleNone && !p.server {
			continue
		}
		r.roles[key] = ri
		if sb, err := r.readProc(pid, "statm", tracked); err == nil {
			if rss, err := procfs.ParseStatm(sb); err == nil {
				p.rssBytes = rss * uint64(r.pageSize)
			}
		}
		if p.role == roleMaster || p.server {
			p.ident = r.identity(key, ri)
			if p.role == roleMaster && p.ident.pidFile != "" {
				_, err := os.Stat(r.path(pid, "root") + p.ident.pidFile + ".oldbin")
				p.oldbin = err == nil
				p.oldbinRenamed = renamed[key]
			}
		}
		snap.procs = append(snap.procs, p)
	}
	slices.SortFunc(snap.procs, func(a, b procSnap) int { return a.key.pid - b.key.pid })

	last := make(map[int]procKey, len(snap.procs))
	for _, p := range snap.procs {
		last[p.key.pid] = p.key
	}
	for k := range r.roles {
		if last[k.pid] != k {
			delete(r.roles, k)
		}
	}
	for k := range r.idents {
		if last[k.pid] != k {
			delete(r.idents, k)
		}
	}
	for _, pid := range alivePIDs {
		if _, ok := last[pid]; ok {
			continue
		}
		if snap.alive == nil {
			snap.alive = map[int]bool{}
		}
		_, err := os.Stat(r.path(pid, "stat"))
		snap.alive[pid] = err == nil
	}
	r.last = last
	r.kids = kids
	r.closeGone()
	r.syncWatch(snap)
	return snap, nil
}

// syncWatch makes the probe's watch cover the masters and servers of snap
// (their exits, the masters' pid files) and forget the rest.
func (r *procReader) syncWatch(snap *snapshot) {
	if r.watch == nil {
		return
	}
	r.watch.forget(r.last)
	for i := range snap.procs {
		p := &snap.procs[i]
		if p.role != roleMaster && !p.server {
			continue
		}
		k := p.key
		r.watch.watchProc(k, func() (uint64, bool) {
			b, err := r.readFile(r.path(k.pid, "stat"))
			if err != nil {
				return 0, false
			}
			st, err := procfs.ParseStat(b)
			return st.StartTime, err == nil
		})
		if p.role == roleMaster && p.ident.pidFile != "" {
			r.watch.watchPidFile(k, r.path(k.pid, "root"), p.ident.pidFile, p.oldbin)
		}
	}
}

// identity returns the binary identity of a master or server: read once
// per process, and again when its binary changes (the exec of a USR2
// child).
func (r *procReader) identity(key procKey, ri roleInfo) identity {
	exePath := r.path(key.pid, "exe")
	cached, ok := r.idents[key]
	if fi, err := os.Stat(exePath); ok && (err != nil || statKey(fi) == cached.fkey) {
		if link, err := os.Readlink(exePath); err == nil {
			_, cached.deleted = trimDeleted(link)
		}
		r.idents[key] = cached
		return cached
	}
	id := r.identify(key.pid, ri)
	r.idents[key] = id
	return id
}

// identify reads a process's binary identity.
func (r *procReader) identify(pid int, ri roleInfo) identity {
	var id identity
	exePath := r.path(pid, "exe")
	key, info, err := r.files.inspect(exePath, true, false)
	if err != nil {
		r.log.Debug("cannot read binary", "pid", pid, "err", err)
		if errors.Is(err, fs.ErrPermission) && !r.deniedSaid {
			r.deniedSaid = true
			r.log.Warn("process tracking: a server's /proc/PID/exe and fd are refused (another user's process needs CAP_SYS_PTRACE): handshakes get no generation unless an nginx access log's $pid names one", "pid", pid, "err", err)
		}
	}
	id.fkey = key
	link, _ := os.Readlink(exePath)
	link, id.deleted = trimDeleted(link)
	if link == "" && ri.role == roleMaster {
		link, _, _ = masterArgs(ri.masterArgs)
	}
	id.exe, id.sha256 = link, info.SHA256
	id.openssl = r.tlsLibrary(pid, exePath)
	id.pod = r.podOf(pid)
	if ri.role == roleMaster {
		_, conf, prefix := masterArgs(ri.masterArgs)
		if prefix == "" {
			prefix = r.nginxPrefix
		}
		if conf == "" {
			conf = r.nginxConf
		} else if !filepath.IsAbs(conf) {
			conf = filepath.Join(prefix, conf)
		}
		id.conf = conf
		id.pidFile = r.nginxPidFile
		switch e := masterErrorLog(ri.masterArgs); {
		case e == "":
			id.errLog = r.nginxErrLog
		case e == "stderr":
		case filepath.IsAbs(e):
			id.errLog = e
		default:
			id.errLog = filepath.Join(prefix, e)
		}
		if b, err := os.ReadFile(r.path(pid, "root") + conf); err == nil {
			if v := nginxPidDirective(b); v != "" {
				if !filepath.IsAbs(v) {
					v = filepath.Join(prefix, v)
				}
				id.pidFile = v
			}
		}
	}
	return id
}

// tlsLibrary names the TLS library a process runs: the mapped libcrypto's
// (or libssl's) version string, the soname when the file cannot be read, or
// for a static build the version string found in the binary.
func (r *procReader) tlsLibrary(pid int, exePath string) string {
	maps, err := os.ReadFile(r.path(pid, "maps"))
	if err == nil {
		libssl, libcrypto := mappedTLSLibs(maps)
		root := r.path(pid, "root")
		for _, lib := range []string{libcrypto, libssl} {
			if lib == "" {
				continue
			}
			if _, info, err := r.files.inspect(root+lib, false, true); err == nil && info.Version != "" {
				return info.Version
			}
		}
		if libssl != "" {
			return "libssl.so." + sonameVersion(libssl)
		}
	}
	if _, info, err := r.files.inspect(exePath, false, true); err == nil {
		if info.Version != "" {
			return info.Version
		}
		if info.GoVer != "" {
			return "Go crypto/tls " + info.GoVer
		}
	}
	return ""
}

func statKey(fi fs.FileInfo) fileKey {
	k := fileKey{MtimeNs: fi.ModTime().UnixNano(), Size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.Dev, k.Ino = uint64(st.Dev), st.Ino
	}
	return k
}

// probe checks, cheaply, that the server processes of st are those of the
// last read: each nginx master's children (one read of
// /proc/PID/task/PID/children, kept open), each master's pid file's
// .oldbin, and each other server's stat. It returns true when nothing
// changed. Every nginx swap, reload, worker respawn or server restart
// changes a master's children or ends a process, so a probe that returns
// false calls for a read. Without the children files it always returns
// false.
func (r *procReader) probe(st *swapState) bool {
	if !r.childrenOK || r.kids == nil {
		return false
	}
	if r.watch.poll() {
		return false // a watched process exited, a watched pid file changed
	}
	var buf []int
	for pid, p := range st.procs {
		switch {
		case p.role == roleMaster:
			b, err := r.readProc(pid, "children", true)
			if err != nil {
				return false
			}
			buf = buf[:0]
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					buf = append(buf, c)
				}
			}
			slices.Sort(buf)
			if !slices.Equal(buf, r.kids[pid]) {
				return false
			}
			// The master itself: its stat fails once it has exited
			// (unless its pidfd says so).
			if !r.watch.coversProc(p.key) {
				if _, err := r.readProc(pid, "stat", true); err != nil {
					return false
				}
			}
			// A pid file renamed to .oldbin is a swap starting (or one
			// that failed before its new master ran); the inotify watch
			// tells when it covers the file.
			if g := p.gen; g != nil && g.key == p.key && g.ident.pidFile != "" && !r.watch.coversPidFile(p.key) {
				if rawExists(r.path(pid, "root")+g.ident.pidFile+".oldbin") != g.oldbinSeen {
					return false
				}
			}
		case p.server:
			if r.watch.coversProc(p.key) {
				continue
			}
			if _, err := r.readProc(pid, "stat", true); err != nil {
				return false
			}
		}
	}
	return true
}

// logMasters returns the masters of procs that write the file at path (as
// this process sees it): their -e error log (where a new binary started by
// USR2 writes its configuration errors) is that file, or they hold it open
// (the error_log of their configuration). Files are compared by device and
// inode, through each master's root.
func (r *procReader) logMasters(path string, procs map[int]*proc) []procKey {
	var want syscall.Stat_t
	if path == "" || syscall.Stat(path, &want) != nil {
		return nil
	}
	same := func(p string) bool {
		var st syscall.Stat_t
		return syscall.Stat(p, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
	}
	var out []procKey
	for _, pid := range slices.Sorted(maps.Keys(procs)) {
		p := procs[pid]
		if p.role != roleMaster || p.gen == nil || p.gen.key != p.key {
			continue
		}
		if e := p.ident.errLog; e != "" && same(r.path(pid, "root")+e) {
			out = append(out, p.key)
			continue
		}
		fdDir := r.path(pid, "fd")
		fds, err := readDirNames(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if same(fdDir + "/" + fd) {
				out = append(out, p.key)
				break
			}
		}
	}
	return out
}

// parentOf reads pid's parent (0 when it is gone).
func (r *procReader) parentOf(pid int) int {
	b, err := r.readFile(r.path(pid, "stat"))
	if err != nil {
		return 0
	}
	st, err := procfs.ParseStat(b)
	if err != nil {
		return 0
	}
	return st.PPID
}

// statOf reads pid's stat (for a pid the reader does not track).
func (r *procReader) statOf(pid int) (procfs.Stat, error) {
	b, err := r.readFile(r.path(pid, "stat"))
	if err != nil {
		return procfs.Stat{}, err
	}
	return procfs.ParseStat(b)
}

func (r *procReader) path(pid int, name string) string {
	return r.root + "/" + strconv.Itoa(pid) + "/" + name
}

func (r *procReader) isNginxComm(comm string) bool {
	for _, c := range r.nginxComms {
		if strings.HasPrefix(comm, c) {
			return true
		}
	}
	return false
}

// appendChildren appends the children of a single-threaded process (an
// nginx master) to pids.
func (r *procReader) appendChildren(pids []int, pid int) []int {
	b, err := r.readProc(pid, "children", true)
	if err != nil {
		return pids
	}
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil && c > 0 {
			pids = append(pids, c)
		}
	}
	return pids
}

// readFile reads a small /proc file into the reader's reusable buffer.
// It calls open/read/close itself: os.Open would also try, and fail, to
// register each /proc file with the network poller, five more system calls
// per file, and a scan reads a few files per server process every second.
func (r *procReader) readFile(path string) ([]byte, error) {
	fd, err := openRead(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	b, err := r.pread(fd, false)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return b, nil
}

// procFile names a /proc file of one process that the reader keeps open.
type procFile struct {
	pid  int
	name string // "stat", "statm", "cmdline", "children"
}

// maxOpenProcFiles bounds the /proc files kept open between scans.
const maxOpenProcFiles = 1024

// readProc reads /proc/PID/name. The files of tracked processes are kept
// open and read again with pread at offset 0, which makes the kernel
// generate them anew: one system call per file per scan instead of three,
// and no path walk (the dearest part). An open file belongs to the process,
// not the pid: once the process is gone the read fails, and the file is
// opened again by path (a reused pid is then read correctly).
func (r *procReader) readProc(pid int, name string, keep bool) ([]byte, error) {
	k := procFile{pid, name}
	if fd, ok := r.open[k]; ok {
		b, err := r.pread(fd, name == "stat" || name == "children")
		if err == nil && (len(b) > 0 || name == "children") {
			return b, nil
		}
		syscall.Close(fd)
		delete(r.open, k)
	}
	path := r.path(pid, name)
	if name == "children" {
		path = r.path(pid, "task/"+strconv.Itoa(pid)+"/children")
	}
	if !keep || len(r.open) >= maxOpenProcFiles {
		return r.readFile(path)
	}
	fd, err := openRead(path)
	if err != nil {
		return nil, err
	}
	b, err := r.pread(fd, false)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if r.open == nil {
		r.open = make(map[procFile]int)
	}
	r.open[k] = fd
	return b, nil
}

// pread reads a whole /proc file from offset 0 into the reusable buffer.
// raw makes the reads raw system calls, for files whose read never blocks
// (a process's stat and children: task fields under RCU, no lock of its
// memory map): the probe reads them every second, and an ordinary system
// call, the first since the Go runtime's sysmon thread went to deep sleep,
// wakes it and has it poll every 20 µs for a while, which cost more than
// the probe.
func (r *procReader) pread(fd int, raw bool) ([]byte, error) {
	b := r.buf[:0]
	for {
		if len(b) == cap(b) {
			if cap(b) >= 1<<20 {
				break
			}
			b = slices.Grow(b, cap(b))
		}
		var n int
		var err error
		if raw {
			n, err = rawPread(fd, b[len(b):cap(b)], int64(len(b)))
		} else {
			n, err = syscall.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			r.buf = b
			return nil, err
		}
		if n <= 0 {
			break
		}
		short := n < cap(b)-len(b)
		b = b[:len(b)+n]
		if short {
			break // these files are generated whole: a short read is the end
		}
	}
	r.buf = b
	return b, nil
}

// closeGone closes the kept files of processes no longer tracked.
func (r *procReader) closeGone() {
	for k, fd := range r.open {
		if _, ok := r.last[k.pid]; !ok {
			syscall.Close(fd)
			delete(r.open, k)
		}
	}
}

// close closes every kept file.
func (r *procReader) close() {
	for k, fd := range r.open {
		syscall.Close(fd)
		delete(r.open, k)
	}
	r.watch.close()
}

func openRead(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			if err != nil {
				return -1, &fs.PathError{Op: "open", Path: path, Err: err}
			}
			return fd, nil
		}
	}
}

// readDirNames lists a /proc directory (see readFile for why not os.Open).
func readDirNames(dir string) ([]string, error) {
	fd, err := openRead(dir)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return names, &fs.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}
