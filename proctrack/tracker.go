// Package proctrack tracks TLS server processes through /proc: nginx masters
// and workers grouped into generations (one master and its workers, one
// binary), the binary's path, SHA-256 and OpenSSL version, and any other
// process that owns a listening socket on a configured port (Caddy, a Go
// server...).
//
// Periodic scans drive a swap state machine over what is observed: USR2 (a
// second master appears as a child of the first), WINCH (the old master's
// workers leave), QUIT (the old master exits), HUP reloads (new workers, same
// master), the fast rollback (the new generation exits while the old one
// still runs) and the failed swap (a ".oldbin" pid file or an [emerg] log
// line without a second master running shortly after).
//
// Attribute maps a TCP connection to the generation whose process owns its
// socket, through an exact NETLINK_SOCK_DIAG lookup (socket inode) and an
// index of socket inodes from /proc/PID/fd.
//
// The Tracker is safe for concurrent use. Scan and Run are driven by one
// goroutine; Attribute, NoteEmerg, ObserveHandshake and the Prometheus
// collector may be called from any goroutine.
package proctrack

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
	"github.com/pqwatch/pqwatch/record"
)

// Swap event kinds, the label values of pqwatch_swap_events_total.
const (
	KindUSR2     = "usr2"     // a new master started as a child of a running one
	KindWINCH    = "winch"    // a master with a live successor lost its workers
	KindQUIT     = "quit"     // a master exited while its successor runs: swap complete
	KindReload   = "reload"   // a master replaced all its workers (HUP)
	KindRollback = "rollback" // a new generation exited while the one it replaced still runs
	KindFailed   = "failed"   // .oldbin or [emerg] seen but no second master ran in time
)

// Kinds lists every swap event kind.
var Kinds = []string{KindUSR2, KindWINCH, KindQUIT, KindReload, KindRollback, KindFailed}

// Config configures a Tracker. The zero value is usable: every field has a
// default.
type Config struct {
	// ProcRoot is the proc filesystem to read, "/proc" by default
	// ("/host/proc" for a Kubernetes DaemonSet with hostPID and a host mount).
	ProcRoot string
	// ScanInterval is the period of Run's scans, 1 s by default: swap
	// events are seen within it, and records wait up to it for the scan
	// that confirms a quiet period. A scan reads /proc's directory and the
	// files of the server processes (every process's stat in one scan of
	// thirty); on a small VM one costs about a millisecond of CPU, most of
	// it system calls and the Go runtime's wakeups around them.
	ScanInterval time.Duration
	// FailedSwapTimeout is how long after a ".oldbin" pid file or an [emerg]
	// a second master must run before the swap is declared failed, 3 s by
	// default. A failure is reported earlier when the process that logged the
	// [emerg] is already gone and no second master exists.
	FailedSwapTimeout time.Duration
	// MaxGenerations bounds the generations kept; the oldest exited ones are
	// evicted first. 32 by default.
	MaxGenerations int
	// MaxEvents bounds the event history returned by Events. 256 by default.
	MaxEvents int
	// NginxComms are process names (/proc/PID/comm prefixes) whose titles are
	// read to find nginx masters and workers. {"nginx"} by default.
	NginxComms []string
	// ServerPorts are TCP ports whose listening sockets' owners are tracked
	// as TLS servers even when they are not nginx (Caddy, Go servers...).
	// Attribute also adds the server port of a connection it could not
	// attribute.
	ServerPorts []uint16
	// ListenerRescan is the minimum period between searches for the owners
	// of unknown listening sockets. 5 s by default.
	ListenerRescan time.Duration
	// IndexRefreshMin is the minimum period between rebuilds of the socket
	// inode index on an Attribute miss. 10 ms by default.
	IndexRefreshMin time.Duration
	// NoAcceptEvents switches off attribution from the kernel's accept
	// events (eBPF), leaving process scans and socket lookups.
	NoAcceptEvents bool
	// MaxAccepts bounds the index of accept events, DefaultMaxAccepts by
	// default.
	MaxAccepts int
	// NginxConf, NginxPrefix and NginxPidFile are the compiled-in defaults
	// used when a master's command line has no -c / -p and its configuration
	// has no pid directive. Debian's by default.
	NginxConf, NginxPrefix, NginxPidFile string
	// ClockTicks is USER_HZ (CLK_TCK), 100 by default.
	ClockTicks int64
	// PageSize is the page size for /proc/PID/statm, os.Getpagesize() by default.
	PageSize int64
	// Logger receives swap events and generation changes. slog.Default() by default.
	Logger *slog.Logger
	// Now is the clock, time.Now by default.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.ScanInterval <= 0 {
		c.ScanInterval = time.Second
	}
	if c.FailedSwapTimeout <= 0 {
		c.FailedSwapTimeout = 3 * time.Second
	}
	if c.MaxGenerations <= 0 {
		c.MaxGenerations = 32
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = 256
	}
	if len(c.NginxComms) == 0 {
		c.NginxComms = []string{"nginx"}
	}
	if c.ListenerRescan <= 0 {
		c.ListenerRescan = 5 * time.Second
	}
	if c.IndexRefreshMin <= 0 {
		c.IndexRefreshMin = 10 * time.Millisecond
	}
	if c.NginxConf == "" {
		c.NginxConf = "/etc/nginx/nginx.conf"
	}
	if c.NginxPrefix == "" {
		c.NginxPrefix = "/usr/share/nginx"
	}
	if c.NginxPidFile == "" {
		c.NginxPidFile = "/run/nginx.pid"
	}
	if c.ClockTicks <= 0 {
		c.ClockTicks = 100
	}
	if c.PageSize <= 0 {
		c.PageSize = int64(os.Getpagesize())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Event is one observed swap event.
type Event struct {
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Generation string    `json:"generation"`      // the generation the event is about
	Other      string    `json:"other,omitempty"` // the other side of a swap, or the still serving generation(s)
	Message    string    `json:"message"`
}

// GenerationInfo is a snapshot of one generation.
type GenerationInfo struct {
	record.Generation
	Kind        string    // "nginx" or the process name of another server
	Start       time.Time // master start time
	Exited      time.Time // zero while alive
	Alive       bool
	ExeDeleted  bool   // the binary was replaced or removed on disk
	ExeInode    uint64 // inode of the running binary
	Config      string // nginx -c path
	PidFile     string
	Parent      string // the generation that started this one by USR2
	Workers     []int  // live worker PIDs (not shutting down)
	Draining    []int  // workers shutting down
	CPUSeconds  float64
	RSSBytes    uint64
	Handshakes  map[string]uint64 // by group
	Connections uint64            // handshakes observed
}

type procKey struct {
	pid   int
	start uint64
}

type proc struct {
	key        procKey
	ppid       int
	comm       string
	role       nginxRole
	server     bool // a non-nginx process owning a tracked listener
	masterArgs string
	ticks      uint64
	rssPages   uint64
	forkNoExec bool // PF_FORKNOEXEC: a fork that has not exec'd (a worker, or a USR2 child before exec)
	gen        *generation
	rec        *record.Generation // attribution answer for this process
	recID      string
}

type generation struct {
	key       procKey
	kind      string
	id        string
	rec       record.Generation
	start     time.Time
	exited    time.Time
	alive     bool
	deleted   bool
	fkey      fileKey
	conf      string
	pidFile   string
	parent    *generation
	successor *generation

	live, draining []int
	baseline       map[int]bool
	hadWorkers     bool
	oldbinSeen     bool

	exitedTicks uint64
	liveTicks   uint64
	rssBytes    uint64
	handshakes  map[string]uint64
}

// maxGroupsPerGeneration bounds the group label values per generation;
// further groups are counted as "other".
const maxGroupsPerGeneration = 32

type pending struct {
	gen      *generation
	since    time.Time
	ts       time.Time
	emergPID int
	reason   string
	scans    int
}

// Tracker tracks server processes and their generations. Create it with New.
type Tracker struct {
	cfg   Config
	log   *slog.Logger
	files *fileCache
	diag  sockDiag
	acc   acceptSource // the kernel's accept events, started by NewAttribution

	mu          sync.RWMutex
	btime       int64
	procs       map[int]*proc
	gens        map[procKey]*generation
	order       []*generation // creation order, for eviction
	pendings    []*pending
	events      []Event
	counts      map[string]uint64
	failed      uint64
	serving     []*proc // workers and servers, for the socket index
	wantPorts   map[uint16]bool
	lastListen  time.Time
	listenOwner map[uint64]int // listener inode -> pid
	boring      map[int]bool   // pids found neither nginx nor a server since the last full scan
	lastFull    time.Time
	listeners   listenerCache
	serverPIDs  map[int]uint64 // pid -> start time of non-nginx servers
	scans       uint64
	scanErrors  uint64
	buf         []byte

	// Quiet periods (AttributeQuiet): the serving set as of the last
	// scan, when it last changed, when the last scan started, and a
	// channel closed when the next scan completes.
	servingSig []servingEntry
	quietFrom  time.Time
	lastScanAt time.Time
	scanDone   chan struct{}

	quietAt  atomic.Int64 // quietFrom in Unix ns, for QuietSince
	swapping atomic.Bool  // two generations of one nginx lineage alive

	childrenOK bool             // /proc/PID/task/PID/children exists: light scans possible
	open       map[procFile]int // kept-open /proc files of tracked processes
	kids       map[int][]int    // nginx master -> children at the last scan
	lastScan   time.Time        // last Scan (not Probe)
	lastDir    time.Time        // last scan that read /proc's directory

	idxMu       sync.RWMutex
	idxWhere    map[uint64]fdAt // inode -> where the index found it
	hot         hotFDs
	idx         map[uint64]*record.Generation
	idxVersion  atomic.Uint64
	refreshMu   sync.Mutex
	lastRefresh time.Time

	attributed   atomic.Uint64
	quiet        atomic.Uint64 // of attributed: by AttributeQuiet
	byListener   atomic.Uint64 // of attributed: the socket was gone, the listener's owner answered
	bySocket     atomic.Uint64 // of attributed: the connection's own socket
	unattributed atomic.Uint64
	skipped      atomic.Uint64 // NoteSkipped: never asked
	unknownHS    atomic.Uint64
	evicted      atomic.Uint64
}

// New returns a Tracker. It reads the boot time from ProcRoot/stat.
func New(cfg Config) (*Tracker, error) {
	cfg.setDefaults()
	btime, err := procfs.ReadBtime(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("proctrack: %w", err)
	}
	t := &Tracker{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "proctrack"),
		files:       newFileCache(256),
		btime:       btime,
		procs:       make(map[int]*proc),
		gens:        make(map[procKey]*generation),
		counts:      make(map[string]uint64, len(Kinds)),
		wantPorts:   make(map[uint16]bool),
		listenOwner: make(map[uint64]int),
		serverPIDs:  make(map[int]uint64),
		idx:         make(map[uint64]*record.Generation),
		buf:         make([]byte, 0, 4096),
		scanDone:    make(chan struct{}),
	}
	for _, k := range Kinds {
		t.counts[k] = 0
	}
	// Light scans follow nginx masters' children through this file; pid 1
	// exists in every pid namespace.
	if _, err := os.Stat(filepath.Join(cfg.ProcRoot, "1/task/1/children")); err == nil {
		t.childrenOK = true
	}
	for _, p := range cfg.ServerPorts {
		t.wantPorts[p] = true
	}
	// Open the sock_diag socket now: it queries the network namespace of
	// the thread that creates it, which is the caller's (the agent may be
	// built inside a namespace, as its tests do).
	if _, err := t.diag.handle(); err != nil {
		t.log.Warn("sock_diag unavailable: handshakes will not be attributed to processes", "err", err)
	}
	return t, nil
}

// Close releases the netlink socket and the kept-open /proc files.
func (t *Tracker) Close() error {
	t.acc.close()
	t.diag.close()
	t.mu.Lock()
	for k, fd := range t.open {
		syscall.Close(fd)
		delete(t.open, k)
	}
	t.mu.Unlock()
	return nil
}

// Run scans every ScanInterval until ctx is done. Scan errors are logged and
// counted, never fatal.
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.ScanInterval)
	defer tick.Stop()
	if err := t.Scan(); err != nil {
		t.log.Warn("scan failed", "err", err)
	}
	for {
		if err := t.Tick(); err != nil {
			t.log.Warn("scan failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (t *Tracker) path(pid int, name string) string {
	return t.cfg.ProcRoot + "/" + strconv.Itoa(pid) + "/" + name
}

// readFile reads a small /proc file into the tracker's reusable buffer.
// It calls open/read/close itself: os.Open would also try, and fail, to
// register each /proc file with the network poller, five more system calls
// per file, and a scan reads a few files per server process every second.
func (t *Tracker) readFile(path string) ([]byte, error) {
	fd, err := openRead(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	b, err := t.pread(fd)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return b, nil
}

// procFile names a /proc file of one process that the tracker keeps open.
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
func (t *Tracker) readProc(pid int, name string, keep bool) ([]byte, error) {
	k := procFile{pid, name}
	if fd, ok := t.open[k]; ok {
		b, err := t.pread(fd)
		if err == nil && (len(b) > 0 || name == "children") {
			return b, nil
		}
		syscall.Close(fd)
		delete(t.open, k)
	}
	path := t.path(pid, name)
	if name == "children" {
		path = t.path(pid, "task/"+strconv.Itoa(pid)+"/children")
	}
	if !keep || len(t.open) >= maxOpenProcFiles {
		return t.readFile(path)
	}
	fd, err := openRead(path)
	if err != nil {
		return nil, err
	}
	b, err := t.pread(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if t.open == nil {
		t.open = make(map[procFile]int)
	}
	t.open[k] = fd
	return b, nil
}

// pread reads a whole /proc file from offset 0 into the reusable buffer.
func (t *Tracker) pread(fd int) ([]byte, error) {
	b := t.buf[:0]
	for {
		if len(b) == cap(b) {
			if cap(b) >= 1<<20 {
				break
			}
			b = slices.Grow(b, cap(b))
		}
		n, err := syscall.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.buf = b
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
	t.buf = b
	return b, nil
}

// closeGone closes the kept files of processes no longer tracked.
func (t *Tracker) closeGone() {
	for k, fd := range t.open {
		if t.procs[k.pid] == nil {
			syscall.Close(fd)
			delete(t.open, k)
		}
	}
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

func (t *Tracker) isNginxComm(comm string) bool {
	for _, c := range t.cfg.NginxComms {
		if strings.HasPrefix(comm, c) {
			return true
		}
	}
	return false
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

// appendChildren appends the children of a single-threaded process (an
// nginx master) to pids.
func (t *Tracker) appendChildren(pids []int, pid int) []int {
	b, err := t.readProc(pid, "children", true)
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

// Scan reads /proc once, updates generations and emits swap events.
func (t *Tracker) Scan() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.Now()
	t.scans++

	// Three depths of scan (and Probe between scans). Most processes are
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
	full := t.boring == nil || now.Sub(t.lastFull) >= fullScanEvery*t.cfg.ScanInterval
	light := !full && t.childrenOK && now.Sub(t.lastDir) < dirScanEvery*t.cfg.ScanInterval
	var pids []int
	if light {
		for pid := range t.procs {
			pids = append(pids, pid)
		}
		for pid := range t.serverPIDs {
			if t.procs[pid] == nil {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids) // masters before the children they fork, mostly
	} else {
		names, err := readDirNames(t.cfg.ProcRoot)
		if err != nil {
			t.scanErrors++
			return fmt.Errorf("proctrack: %w", err)
		}
		pids = make([]int, 0, len(names))
		for _, name := range names {
			if pid, err := strconv.Atoi(name); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		t.lastDir = now
	}

	seen := make(map[int]*proc, 64)
	kids := make(map[int][]int) // nginx master -> its children, for Probe
	if full {
		t.boring = make(map[int]bool, len(pids))
		t.lastFull = now
	}
	visited := make(map[int]bool, len(pids))
	for i := 0; i < len(pids); i++ {
		pid := pids[i]
		if visited[pid] {
			continue
		}
		visited[pid] = true
		if !full && t.boring[pid] {
			if _, srv := t.serverPIDs[pid]; !srv {
				continue
			}
		}
		tracked := t.procs[pid] != nil
		b, err := t.readProc(pid, "stat", tracked)
		if err != nil {
			continue // exited between readdir and read
		}
		st, err := procfs.ParseStat(b)
		if err != nil {
			t.scanErrors++
			continue
		}
		key := procKey{pid, st.StartTime}
		p := t.procs[pid]
		if p == nil || p.key != key {
			p = &proc{key: key}
		}
		p.ppid, p.ticks = st.PPID, st.Ticks()
		p.forkNoExec = st.Flags&procfs.PFForkNoExec != 0
		if p.comm != st.Comm {
			p.comm = st.Comm
		}
		_, isServer := t.serverPIDs[pid]
		if isServer && t.serverPIDs[pid] != st.StartTime {
			delete(t.serverPIDs, pid)
			isServer = false
		}
		nginx := t.isNginxComm(st.Comm) || p.role != roleNone
		if !nginx && !isServer {
			// A child caught between fork and exec of nginx is found at
			// the next full scan; a USR2 child is nginx from the fork on.
			t.boring[pid] = true
			continue
		}
		if nginx {
			// A parent found uninteresting may have been caught between
			// fork and exec of nginx (a master run in the foreground):
			// read it again next scan rather than at the next full one.
			delete(t.boring, st.PPID)
			if cb, err := t.readProc(pid, "cmdline", tracked); err == nil {
				role, args := nginxTitle(cb)
				p.role = role
				if role == roleMaster {
					p.masterArgs = args
				}
			}
			if p.role == roleMaster && t.childrenOK {
				n := len(pids)
				pids = t.appendChildren(pids, pid)
				kids[pid] = slices.Sorted(slices.Values(pids[n:]))
				if !light {
					pids = pids[:n] // the directory lists them already
				}
			}
		}
		p.server = isServer && p.role == roleNone
		if p.role == roleNone && !p.server {
			continue
		}
		if sb, err := t.readProc(pid, "statm", tracked); err == nil {
			if rss, err := procfs.ParseStatm(sb); err == nil {
				p.rssPages = rss
			}
		}
		seen[pid] = p
	}

	var evs []Event
	emit := func(kind, gen, other, msg string) {
		evs = append(evs, Event{Time: now, Kind: kind, Generation: gen, Other: other, Message: msg})
	}

	// Masters: top-level ones are confirmed at once. A master-titled child of
	// a master is a new master (USR2) only once it has exec'd: a freshly
	// forked worker, and the USR2 child before its execve, carry their
	// parent's title but have PF_FORKNOEXEC set.
	for _, p := range seen {
		if p.role != roleMaster || (p.gen != nil && p.gen.key == p.key) {
			continue
		}
		parent := seen[p.ppid]
		isChild := parent != nil && parent.role == roleMaster
		if isChild && (p.forkNoExec || parent.gen == nil) {
			continue
		}
		g := t.gens[p.key]
		if g == nil {
			g = &generation{key: p.key, kind: "nginx", alive: true, baseline: map[int]bool{}, handshakes: map[string]uint64{}}
			g.start = time.Unix(t.btime, 0).Add(time.Duration(p.key.start) * time.Second / time.Duration(t.cfg.ClockTicks))
			t.gens[p.key] = g
			t.order = append(t.order, g)
			if isChild && parent.gen != nil {
				g.parent = parent.gen
				parent.gen.successor = g
			}
		}
		p.gen = g
		t.identify(g, p)
		if g.parent != nil {
			emit(KindUSR2, g.id, g.parent.id, fmt.Sprintf("new master %d (%s) started by %s", p.key.pid, g.id, g.parent.id))
			t.resolvePendings(g.parent, now)
		} else {
			t.log.Info("generation found", "generation", g.id, "master_pid", p.key.pid, "exe", g.rec.Exe, "openssl", g.rec.OpenSSL)
		}
	}
	// Workers and helpers belong to their parent master's generation.
	for _, p := range seen {
		switch p.role {
		case roleWorker, roleDrain, roleHelper:
			if m := seen[p.ppid]; m != nil && m.role == roleMaster && m.gen != nil && m.gen.key == m.key {
				p.gen = m.gen
			}
		case roleNone:
			if p.server && (p.gen == nil || p.gen.key != p.key) {
				g := t.gens[p.key]
				if g == nil {
					g = &generation{key: p.key, kind: p.comm, alive: true, baseline: map[int]bool{}, handshakes: map[string]uint64{}}
					g.start = time.Unix(t.btime, 0).Add(time.Duration(p.key.start) * time.Second / time.Duration(t.cfg.ClockTicks))
					t.gens[p.key] = g
					t.order = append(t.order, g)
				}
				p.gen = g
				t.identify(g, p)
				t.log.Info("server found", "generation", g.id, "pid", p.key.pid, "exe", g.rec.Exe)
			}
		}
	}
	// Re-identify live masters whose binary changed (exec after USR2 fork).
	for _, p := range seen {
		if g := p.gen; g != nil && g.key == p.key {
			if link, err := os.Readlink(t.path(p.key.pid, "exe")); err == nil {
				_, g.deleted = trimDeleted(link)
			}
			if fi, err := os.Stat(t.path(p.key.pid, "exe")); err == nil {
				if k := statKey(fi); k != g.fkey {
					old := g.id
					t.identify(g, p)
					if old != g.id {
						t.log.Info("generation binary changed", "generation", g.id, "was", old)
					}
				}
			}
		}
	}

	// Accounting: exited processes keep their last CPU in their generation.
	for pid, p := range t.procs {
		if q := seen[pid]; q == p {
			continue
		}
		if p.gen != nil {
			p.gen.exitedTicks += p.ticks
		}
	}
	for _, g := range t.gens {
		g.liveTicks, g.rssBytes = 0, 0
		g.live, g.draining = g.live[:0], g.draining[:0]
	}
	t.serving = t.serving[:0]
	for _, p := range seen {
		g := p.gen
		if g == nil {
			continue
		}
		g.liveTicks += p.ticks
		g.rssBytes += p.rssPages * uint64(t.cfg.PageSize)
		switch {
		case p.role == roleWorker:
			g.live = append(g.live, p.key.pid)
			t.serving = append(t.serving, p)
		case p.role == roleDrain:
			g.draining = append(g.draining, p.key.pid)
			t.serving = append(t.serving, p)
		case p.server:
			t.serving = append(t.serving, p)
		}
		if p.rec == nil || p.recID != g.id || p.rec.MasterPID != g.rec.MasterPID || p.rec.ExeSHA256 != g.rec.ExeSHA256 {
			r := g.rec
			r.WorkerPID = p.key.pid
			p.rec, p.recID = &r, g.id
		}
	}

	// Generation transitions.
	for _, g := range t.order {
		if !g.alive {
			continue
		}
		m := seen[g.key.pid]
		if m == nil || m.key != g.key || m.gen != g {
			g.alive = false
			g.exited = now
			succ := g.successor
			switch {
			case succ != nil && succ.alive:
				emit(KindQUIT, g.id, succ.id, fmt.Sprintf("old master %d exited; %s serves", g.key.pid, succ.id))
			case g.parent != nil && g.parent.alive:
				msg := fmt.Sprintf("new generation %s exited; %s still serves", g.id, g.parent.id)
				if len(g.parent.live) == 0 {
					msg = fmt.Sprintf("new generation %s exited; %s runs but has no workers", g.id, g.parent.id)
				}
				emit(KindRollback, g.id, g.parent.id, msg)
			default:
				t.log.Info("generation exited", "generation", g.id)
			}
			continue
		}
		slices.Sort(g.live)
		slices.Sort(g.draining)
		succ := g.successor
		switch {
		case len(g.live) == 0 && g.hadWorkers && succ != nil && succ.alive:
			emit(KindWINCH, g.id, succ.id, fmt.Sprintf("old generation %s has no workers left; %s serves", g.id, succ.id))
			clear(g.baseline)
		case len(g.live) > 0 && len(g.baseline) == 0:
			if g.hadWorkers || (succ != nil && succ.alive && t.scans > 1 && g.start.Before(succ.start)) {
				t.log.Info("generation has workers again", "generation", g.id, "workers", g.live)
			}
			for _, w := range g.live {
				g.baseline[w] = true
			}
		case len(g.live) > 0:
			liveSet := make(map[int]bool, len(g.live))
			for _, w := range g.live {
				liveSet[w] = true
			}
			before := len(g.baseline)
			for w := range g.baseline {
				if !liveSet[w] {
					delete(g.baseline, w)
				}
			}
			switch {
			case len(g.baseline) == 0:
				emit(KindReload, g.id, "", fmt.Sprintf("master %d replaced its workers: %v", g.key.pid, g.live))
				for _, w := range g.live {
					g.baseline[w] = true
				}
			case len(g.live) <= before:
				// A worker crashed and was respawned: not a reload.
				for _, w := range g.live {
					g.baseline[w] = true
				}
			}
		}
		g.hadWorkers = len(g.live) > 0
	}

	t.checkOldbin(seen, now)
	t.checkPendings(seen, now, emit)

	// Bookkeeping.
	for pid, p := range t.procs {
		if seen[pid] != p && p.gen != nil && p.gen.key == p.key && t.serverPIDs[pid] == p.key.start {
			delete(t.serverPIDs, pid)
		}
	}
	t.procs = seen
	t.kids = kids
	t.lastScan = now
	t.closeGone()
	for _, e := range evs {
		t.record(e)
	}
	t.evict()
	t.discoverServers(now)
	t.noteServing(now)
	return nil
}

// servingEntry is one serving process as a quiet period sees it.
type servingEntry struct {
	key  procKey
	role nginxRole
}

// noteServing ends a scan that started at now: a change in the serving set
// (a process started, exited or changed role) starts a new quiet period,
// and waiters of ScanDone are released. The caller holds t.mu.
func (t *Tracker) noteServing(now time.Time) {
	sig := make([]servingEntry, 0, len(t.serving))
	for _, p := range t.serving {
		sig = append(sig, servingEntry{p.key, p.role})
	}
	slices.SortFunc(sig, func(a, b servingEntry) int { return a.key.pid - b.key.pid })
	if !slices.Equal(sig, t.servingSig) || t.quietFrom.IsZero() {
		// A process that exited was alive at the previous scan and may
		// have served until this one: the new period starts now.
		t.servingSig, t.quietFrom = sig, now
	}
	swapping := false
	for _, g := range t.order {
		if g.alive && ((g.parent != nil && g.parent.alive) || (g.successor != nil && g.successor.alive)) {
			swapping = true
		}
	}
	t.swapping.Store(swapping)
	t.quietAt.Store(t.quietFrom.UnixNano())
	t.lastScanAt = now
	close(t.scanDone)
	t.scanDone = make(chan struct{})
}

// NoteSkipped counts a handshake its caller had no time to attribute
// (pqwatch_attributions_total{method="skipped"}).
func (t *Tracker) NoteSkipped() { t.skipped.Add(1) }

// scanEvery: between probes, a scan (stat, cmdline and statm of every
// server process: CPU, memory, roles) runs at least once in this many
// ScanIntervals.
const scanEvery = 5

// Tick is one ScanInterval's work: a Probe, and a Scan when the probe saw a
// change or the last scan is scanEvery intervals old. Run calls it; so does
// the agent, from the timer it already has.
func (t *Tracker) Tick() error {
	t.mu.RLock()
	// A swap in flux (two generations alive, a failure pending) is
	// scanned every interval.
	// So is a search for the owner of a port an attribution missed.
	due := t.lastScan.IsZero() || t.cfg.Now().Sub(t.lastScan) >= scanEvery*t.cfg.ScanInterval-t.cfg.ScanInterval/2 ||
		len(t.pendings) > 0 || t.swapping.Load() || (t.lastListen.IsZero() && len(t.wantPorts) > 0)
	t.mu.RUnlock()
	if !due && t.Probe() {
		return nil
	}
	return t.Scan()
}

// Probe checks, cheaply, that the serving processes are those of the last
// scan: each nginx master's children (one read of
// /proc/PID/task/PID/children, kept open) and each other server's stat. It
// returns true when nothing changed, and then counts as a scan for quiet
// periods (LastScan, AttributeQuiet). Every nginx swap, reload, worker
// respawn or server restart changes a master's children or ends a
// process, so a probe that returns false calls for a Scan. Without the
// children files it always returns false.
func (t *Tracker) Probe() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.childrenOK || t.kids == nil {
		return false
	}
	now := t.cfg.Now()
	var buf []int
	for pid, p := range t.procs {
		switch {
		case p.role == roleMaster:
			b, err := t.readProc(pid, "children", true)
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
			if !slices.Equal(buf, t.kids[pid]) {
				return false
			}
			// The master itself: its stat fails once it has exited.
			if _, err := t.readProc(pid, "stat", true); err != nil {
				return false
			}
			// A pid file renamed to .oldbin is a swap starting (or one
			// that failed before its new master ran).
			if g := p.gen; g != nil && g.key == p.key && g.pidFile != "" {
				_, err := os.Stat(t.path(pid, "root") + g.pidFile + ".oldbin")
				if (err == nil) != g.oldbinSeen {
					return false
				}
			}
		case p.server:
			if _, err := t.readProc(pid, "stat", true); err != nil {
				return false
			}
		}
	}
	t.lastScanAt = now
	close(t.scanDone)
	t.scanDone = make(chan struct{})
	return true
}

// QuietSince is when the current quiet period began: the last time a scan
// found the serving processes changed (zero before the first scan); and
// whether an nginx swap is in progress (two generations of one lineage
// alive), when no period is quiet. Lock-free: it is asked per handshake.
func (t *Tracker) QuietSince() (since time.Time, swapping bool) {
	q := t.quietAt.Load()
	if q == 0 {
		return time.Time{}, t.swapping.Load()
	}
	return time.Unix(0, q), t.swapping.Load()
}

// LastScan is when the last completed scan started (zero before the
// first), and a channel closed when the next scan completes.
func (t *Tracker) LastScan() (time.Time, <-chan struct{}) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.lastScanAt, t.scanDone
}

// AttributeQuiet attributes a connection without looking it up, when the
// answer cannot be wrong: the serving processes did not change from before
// from until after to (a scan that started after to saw the same set as
// every scan since before from), and one generation alone holds every
// listening socket of server. WorkerPID is set when that generation has
// a single serving process (one nginx worker, a Caddy or Go server), and
// left unset otherwise. Outside quiet periods (a swap, a reload, a worker
// respawned) it answers false and Attribute must look the socket up.
//
// from is when the connection may first have been accepted (its first
// packet, with a margin) and to when it surely was (the handshake record
// was finished). A process that started and exited between two scans is
// never seen; what it accepted in that window is attributed to the
// generation that was serving.
func (t *Tracker) AttributeQuiet(server netip.AddrPort, from, to time.Time) (*record.Generation, bool) {
	return t.attributeQuiet(server, false, from, to)
}

// AttributeQuietQUIC is AttributeQuiet for a QUIC connection: the server's
// unconnected UDP sockets on the address play the listener's part. There is
// no exact lookup for QUIC (a server receives every connection on shared
// UDP sockets), so outside quiet periods QUIC stays unattributed; a miss is
// counted and the port's owner is searched for, as for TCP.
func (t *Tracker) AttributeQuietQUIC(server netip.AddrPort, from, to time.Time) (*record.Generation, bool) {
	g, ok := t.attributeQuiet(server, true, from, to)
	if !ok {
		t.unattributed.Add(1)
		t.wantPort(server.Port())
	}
	return g, ok
}

func (t *Tracker) attributeQuiet(server netip.AddrPort, udp bool, from, to time.Time) (*record.Generation, bool) {
	t.mu.RLock()
	qf, ls := t.quietFrom, t.lastScanAt
	t.mu.RUnlock()
	if qf.IsZero() || !from.After(qf) || !ls.After(to) || t.swapping.Load() {
		return nil, false
	}
	o := t.listenerOwnerCached(server, udp, qf)
	if o.gen == nil || !o.all {
		return nil, false
	}
	t.attributed.Add(1)
	t.quiet.Add(1)
	if o.single != nil {
		return o.single, true
	}
	return o.gen, true
}

func statKey(fi fs.FileInfo) fileKey {
	k := fileKey{MtimeNs: fi.ModTime().UnixNano(), Size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.Dev, k.Ino = uint64(st.Dev), st.Ino
	}
	return k
}

// identify (re)reads a generation's binary identity from its main process.
func (t *Tracker) identify(g *generation, p *proc) {
	pid := p.key.pid
	exePath := t.path(pid, "exe")
	key, info, err := t.files.inspect(exePath, true, false)
	if err != nil {
		t.log.Debug("cannot read binary", "pid", pid, "err", err)
	}
	g.fkey = key
	link, _ := os.Readlink(exePath)
	link, g.deleted = trimDeleted(link)
	if link == "" && p.role == roleMaster {
		link, _, _ = masterArgs(p.masterArgs)
	}
	g.rec = record.Generation{MasterPID: pid, Exe: link, ExeSHA256: info.SHA256}
	g.rec.OpenSSL = t.tlsLibrary(pid, exePath)
	sha12 := info.SHA256
	if len(sha12) > 12 {
		sha12 = sha12[:12]
	}
	if sha12 == "" {
		sha12 = "unknown"
	}
	g.id = fmt.Sprintf("%s-%s-%d", labelSafe(g.kind), sha12, pid)
	g.rec.ID = g.id
	if p.role == roleMaster {
		_, conf, prefix := masterArgs(p.masterArgs)
		if prefix == "" {
			prefix = t.cfg.NginxPrefix
		}
		if conf == "" {
			conf = t.cfg.NginxConf
		} else if !filepath.IsAbs(conf) {
			conf = filepath.Join(prefix, conf)
		}
		g.conf = conf
		g.pidFile = t.cfg.NginxPidFile
		if b, err := os.ReadFile(t.path(pid, "root") + conf); err == nil {
			if v := nginxPidDirective(b); v != "" {
				if !filepath.IsAbs(v) {
					v = filepath.Join(prefix, v)
				}
				g.pidFile = v
			}
		}
	}
}

// labelSafe keeps a process name usable inside a generation id.
func labelSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// tlsLibrary names the TLS library a process runs: the mapped libcrypto's
// (or libssl's) version string, the soname when the file cannot be read, or
// for a static build the version string found in the binary.
func (t *Tracker) tlsLibrary(pid int, exePath string) string {
	maps, err := os.ReadFile(t.path(pid, "maps"))
	if err == nil {
		libssl, libcrypto := mappedTLSLibs(maps)
		root := t.path(pid, "root")
		for _, lib := range []string{libcrypto, libssl} {
			if lib == "" {
				continue
			}
			if _, info, err := t.files.inspect(root+lib, false, true); err == nil && info.Version != "" {
				return info.Version
			}
		}
		if libssl != "" {
			return "libssl.so." + sonameVersion(libssl)
		}
	}
	if _, info, err := t.files.inspect(exePath, false, true); err == nil {
		if info.Version != "" {
			return info.Version
		}
		if info.GoVer != "" {
			return "Go crypto/tls " + info.GoVer
		}
	}
	return ""
}

// checkOldbin opens a pending failure when a master's pid file was renamed
// to .oldbin and it has no running successor.
func (t *Tracker) checkOldbin(seen map[int]*proc, now time.Time) {
	for _, g := range t.order {
		if !g.alive || g.kind != "nginx" || g.pidFile == "" {
			continue
		}
		if g.parent != nil && g.parent.alive {
			continue // the new master of an ongoing swap shares the pid path
		}
		_, err := os.Stat(t.path(g.key.pid, "root") + g.pidFile + ".oldbin")
		exists := err == nil
		if exists && !g.oldbinSeen && (g.successor == nil || !g.successor.alive) {
			t.log.Info("pid file renamed to .oldbin", "generation", g.id, "pid_file", g.pidFile)
			t.addPending(&pending{gen: g, since: now, ts: now, reason: g.pidFile + ".oldbin appeared"})
		}
		g.oldbinSeen = exists
	}
}

func (t *Tracker) addPending(p *pending) {
	for _, q := range t.pendings {
		if q.gen == nil || p.gen == nil || q.gen == p.gen {
			if q.gen == nil {
				q.gen = p.gen
			}
			if q.emergPID == 0 {
				q.emergPID = p.emergPID
			}
			if p.reason != "" && !strings.Contains(q.reason, p.reason) {
				q.reason += "; " + p.reason
			}
			return
		}
	}
	t.pendings = append(t.pendings, p)
}

// resolvePendings drops the pending failures that a new master of g settles.
func (t *Tracker) resolvePendings(g *generation, now time.Time) {
	t.pendings = slices.DeleteFunc(t.pendings, func(p *pending) bool {
		return p.gen == nil || p.gen == g
	})
}

func (t *Tracker) checkPendings(seen map[int]*proc, now time.Time, emit func(kind, gen, other, msg string)) {
	keep := t.pendings[:0]
	for _, p := range t.pendings {
		p.scans++
		candidate := false // a master-titled child that may still become the new master
		for _, q := range seen {
			if q.role == roleMaster && q.gen == nil {
				if m := seen[q.ppid]; m != nil && m.role == roleMaster && (p.gen == nil || m.gen == p.gen) {
					candidate = true
				}
			}
		}
		_, emergAlive := seen[p.emergPID]
		if p.emergPID > 0 && !emergAlive {
			_, err := os.Stat(t.path(p.emergPID, "stat"))
			emergAlive = err == nil
		}
		fast := p.emergPID > 0 && !emergAlive && !candidate && p.scans >= 1
		if !fast && now.Sub(p.since) < t.cfg.FailedSwapTimeout {
			keep = append(keep, p)
			continue
		}
		var serving []string
		subject := ""
		if p.gen != nil && p.gen.alive {
			serving = append(serving, p.gen.id)
			subject = p.gen.id
		} else {
			for _, g := range t.order {
				if g.alive && g.kind == "nginx" && len(g.live) > 0 && (g.successor == nil || !g.successor.alive) {
					serving = append(serving, g.id)
				}
			}
			if len(serving) > 0 {
				subject = serving[0]
			}
		}
		t.failed++
		msg := fmt.Sprintf("swap failed (%s): no new master runs; %s still serves", p.reason, strings.Join(serving, ", "))
		if len(serving) == 0 {
			msg = fmt.Sprintf("swap failed (%s): no new master runs and no generation serves", p.reason)
		}
		emit(KindFailed, subject, strings.Join(serving, ","), msg)
	}
	clear(t.pendings[len(keep):])
	t.pendings = keep
}

// NoteEmerg reports an [emerg] line from an nginx error log: ts is the line's
// time, pid the process that logged it. An [emerg] from a worker is ignored;
// any other opens a pending failed swap that a new master running within
// FailedSwapTimeout settles.
func (t *Tracker) NoteEmerg(ts time.Time, pid int, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.Now()
	var g *generation
	if p := t.procs[pid]; p != nil {
		switch p.role {
		case roleWorker, roleDrain, roleHelper:
			t.log.Debug("emerg from a worker ignored", "pid", pid, "msg", msg)
			return
		case roleMaster:
			if p.gen != nil && p.gen.key == p.key {
				g = p.gen
			} else if m := t.procs[p.ppid]; m != nil && m.gen != nil {
				g = m.gen
			}
		}
	}
	if pid < 0 {
		pid = 0
	}
	if g == nil && pid > 0 {
		// A new binary that fails its configuration usually logs and exits
		// before a scan sees it; while it lives, its parent names the
		// generation that tried the swap.
		if b, err := t.readFile(t.path(pid, "stat")); err == nil {
			if st, err := procfs.ParseStat(b); err == nil {
				if m := t.procs[st.PPID]; m != nil && m.role == roleMaster && m.gen != nil && m.gen.key == m.key {
					g = m.gen
				}
			}
		}
	}
	t.log.Warn("nginx emerg", "pid", pid, "msg", msg, "ts", ts)
	t.addPending(&pending{gen: g, since: now, ts: ts, emergPID: pid, reason: "[emerg] " + msg})
}

func (t *Tracker) record(e Event) {
	t.counts[e.Kind]++
	if len(t.events) >= t.cfg.MaxEvents {
		copy(t.events, t.events[1:])
		t.events = t.events[:len(t.events)-1]
	}
	t.events = append(t.events, e)
	lvl := slog.LevelInfo
	if e.Kind == KindFailed || e.Kind == KindRollback {
		lvl = slog.LevelWarn
	}
	t.log.Log(context.Background(), lvl, "swap event", "kind", e.Kind, "generation", e.Generation, "other", e.Other, "msg", e.Message, "ts", e.Time)
}

// evict drops the oldest exited generations beyond MaxGenerations.
func (t *Tracker) evict() {
	for len(t.order) > t.cfg.MaxGenerations {
		i := slices.IndexFunc(t.order, func(g *generation) bool { return !g.alive })
		if i < 0 {
			return
		}
		g := t.order[i]
		t.order = slices.Delete(t.order, i, i+1)
		delete(t.gens, g.key)
		for _, o := range t.order {
			if o.parent == g {
				o.parent = nil
			}
			if o.successor == g {
				o.successor = nil
			}
		}
		t.evicted.Add(1)
	}
}

// discoverServers finds the owners of listening sockets on wanted ports that
// are not known yet, at most every ListenerRescan.
func (t *Tracker) discoverServers(now time.Time) {
	if len(t.wantPorts) == 0 || now.Sub(t.lastListen) < t.cfg.ListenerRescan {
		return
	}
	t.lastListen = now
	ls, err := t.diag.listeners()
	if err != nil {
		t.log.Debug("listener dump failed", "err", err)
		return
	}
	// QUIC servers: their unconnected UDP sockets on the ports.
	if us, err := t.diag.udpBound(); err == nil {
		ls = append(ls, us...)
	}
	unknown := make(map[uint64]bool)
	for _, l := range ls {
		if !t.wantPorts[l.Local.Port()] || l.Inode == 0 {
			continue
		}
		if pid, ok := t.listenOwner[l.Inode]; ok {
			if _, alive := t.procs[pid]; alive {
				continue
			}
		}
		unknown[l.Inode] = true
	}
	if len(unknown) == 0 {
		return
	}
	names, err := readDirNames(t.cfg.ProcRoot)
	if err != nil {
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		t.eachSocket(pid, func(_ int, ino uint64) bool {
			if !unknown[ino] {
				return true
			}
			t.listenOwner[ino] = pid
			if p := t.procs[pid]; p != nil && p.role != roleNone {
				return true // nginx is tracked by its titles
			}
			b, err := t.readFile(t.path(pid, "stat"))
			if err != nil {
				return true
			}
			if st, err := procfs.ParseStat(b); err == nil && !t.isNginxComm(st.Comm) {
				if _, known := t.serverPIDs[pid]; !known {
					t.lastScan = time.Time{} // the next Tick scans: the server's generation
				}
				t.serverPIDs[pid] = st.StartTime
			}
			return true
		})
	}
	for ino, pid := range t.listenOwner {
		if _, ok := t.procs[pid]; !ok && !unknown[ino] {
			delete(t.listenOwner, ino)
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

// Attribute returns the generation whose process owns the server side of the
// TCP connection client -> server, with WorkerPID set. The returned value is
// shared and must not be modified. It needs the socket to exist (call it
// while the connection is open or shortly after the capture saw it) and
// CAP_NET_ADMIN-free sock_diag access plus read access to /proc/PID/fd.
func (t *Tracker) Attribute(client, server netip.AddrPort) (*record.Generation, bool) {
	s, err := t.diag.lookupTCP(server, client)
	if err != nil || s.Inode == 0 {
		// The connection is gone (short connections close before the
		// capture reports them) or in TIME_WAIT: fall back to the
		// listening socket's owner when that is unambiguous.
		if g, ok := t.attributeListener(server); ok {
			t.attributed.Add(1)
			t.byListener.Add(1)
			return g, true
		}
		t.wantPort(server.Port())
		t.unattributed.Add(1)
		return nil, false
	}
	if g, ok := t.lookupInode(s.Inode); ok {
		t.attributed.Add(1)
		t.bySocket.Add(1)
		return g, true
	}
	if g, ok := t.probeHot(s.Inode); ok {
		t.attributed.Add(1)
		t.bySocket.Add(1)
		return g, true
	}
	if t.refreshIndex() {
		if g, ok := t.lookupInode(s.Inode); ok {
			t.attributed.Add(1)
			t.bySocket.Add(1)
			if at, ok := t.lookupFD(s.Inode); ok {
				t.hot.note(at.pid, at.fd)
			}
			return g, true
		}
	}
	t.wantPort(server.Port())
	t.unattributed.Add(1)
	return nil, false
}

// wantPort adds a server port whose listener owners the next scan looks
// for (at most 64 ports).
func (t *Tracker) wantPort(p uint16) {
	t.mu.Lock()
	if !t.wantPorts[p] && len(t.wantPorts) < 64 {
		t.wantPorts[p] = true
		t.lastListen = time.Time{}
		t.lastDir = time.Time{} // the next scan reads /proc's directory
	}
	t.mu.Unlock()
}

// fdAt is a process's fd number.
type fdAt struct{ pid, fd int }

func (t *Tracker) lookupFD(ino uint64) (fdAt, bool) {
	t.idxMu.RLock()
	at, ok := t.idxWhere[ino]
	t.idxMu.RUnlock()
	return at, ok
}

func (t *Tracker) lookupInode(ino uint64) (*record.Generation, bool) {
	t.idxMu.RLock()
	g, ok := t.idx[ino]
	t.idxMu.RUnlock()
	return g, ok
}

// refreshIndex rebuilds the inode index from the fd tables of the serving
// processes. Concurrent callers share one rebuild; rebuilds are at least
// IndexRefreshMin apart (a caller waits for the window rather than miss a
// connection accepted just after the previous rebuild).
func (t *Tracker) refreshIndex() bool {
	v := t.idxVersion.Load()
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	if t.idxVersion.Load() != v {
		return true // someone rebuilt while we waited
	}
	if wait := t.cfg.IndexRefreshMin - time.Since(t.lastRefresh); wait > 0 {
		time.Sleep(wait)
	}
	idx := make(map[uint64]*record.Generation, 2*len(t.idx)+16)
	where := make(map[uint64]fdAt, 2*len(t.idx)+16)
	for _, tg := range t.servingTargets(nil) {
		t.eachSocket(tg.pid, func(fd int, ino uint64) bool {
			idx[ino] = tg.rec
			where[ino] = fdAt{tg.pid, fd}
			return true
		})
	}
	t.idxMu.Lock()
	t.idx = idx
	t.idxWhere = where
	t.idxMu.Unlock()
	t.lastRefresh = time.Now()
	t.idxVersion.Add(1)
	return true
}

// ObserveHandshake counts a handshake served by gen with the negotiated group
// (pqwatch_generation_handshakes_total). Handshakes of unknown or evicted
// generations are counted apart.
func (t *Tracker) ObserveHandshake(gen *record.Generation, group string) {
	if gen == nil {
		t.unknownHS.Add(1)
		return
	}
	switch {
	case group == "":
		group = "none" // as pqwatch_handshakes_total: no group negotiated
	case strings.HasPrefix(group, "0x"):
		group = "other" // unregistered codepoints: keep label values bounded
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var g *generation
	if p := t.procs[gen.MasterPID]; p != nil && p.gen != nil && p.gen.id == gen.ID {
		g = p.gen
	} else {
		for _, o := range t.order {
			if o.id == gen.ID {
				g = o
				break
			}
		}
	}
	if g == nil {
		t.unknownHS.Add(1)
		return
	}
	if _, ok := g.handshakes[group]; !ok && len(g.handshakes) >= maxGroupsPerGeneration {
		group = "other"
	}
	g.handshakes[group]++
}

// Events returns the most recent swap events, oldest first.
func (t *Tracker) Events() []Event {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.events)
}

// EventCounts returns the number of events by kind.
func (t *Tracker) EventCounts() map[string]uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.counts)
}

// FailedSwaps returns the number of failed swaps seen.
func (t *Tracker) FailedSwaps() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.failed
}

// Generations returns a snapshot of the kept generations, oldest first.
func (t *Tracker) Generations() []GenerationInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]GenerationInfo, 0, len(t.order))
	for _, g := range t.order {
		out = append(out, t.info(g))
	}
	return out
}

// Generation returns the snapshot of one generation by id.
func (t *Tracker) Generation(id string) (GenerationInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, g := range t.order {
		if g.id == id {
			return t.info(g), true
		}
	}
	return GenerationInfo{}, false
}

// GenerationOf returns the generation a process belongs to, as of the last scan.
func (t *Tracker) GenerationOf(pid int) (*record.Generation, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p := t.procs[pid]
	if p == nil || p.gen == nil || p.rec == nil {
		return nil, false
	}
	return p.rec, true
}

func (t *Tracker) info(g *generation) GenerationInfo {
	gi := GenerationInfo{
		Generation: g.rec,
		Kind:       g.kind,
		Start:      g.start,
		Exited:     g.exited,
		Alive:      g.alive,
		ExeDeleted: g.deleted,
		ExeInode:   g.fkey.Ino,
		Config:     g.conf,
		PidFile:    g.pidFile,
		CPUSeconds: float64(g.exitedTicks+g.liveTicks) / float64(t.cfg.ClockTicks),
		Handshakes: maps.Clone(g.handshakes),
	}
	if g.alive {
		gi.Workers = slices.Clone(g.live)
		gi.Draining = slices.Clone(g.draining)
		gi.RSSBytes = g.rssBytes
	}
	if g.parent != nil {
		gi.Parent = g.parent.id
	}
	for _, n := range g.handshakes {
		gi.Connections += n
	}
	return gi
}

// Stats are the tracker's own counters.
type Stats struct {
	Scans, ScanErrors        uint64
	Attributed, Unattributed uint64
	// Of Attributed: in a quiet period without a lookup, and by the
	// listening socket's owner when the connection was gone; the rest by
	// the connection's own socket.
	Quiet, ByListener  uint64
	ByAccept           uint64 // the kernel's accept event named the process
	Skipped            uint64 // NoteSkipped
	UnknownHandshakes  uint64
	EvictedGenerations uint64
}

// Stats returns the tracker's own counters.
func (t *Tracker) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return Stats{
		Scans: t.scans, ScanErrors: t.scanErrors,
		Attributed: t.attributed.Load(), Unattributed: t.unattributed.Load(),
		Quiet: t.quiet.Load(), ByListener: t.byListener.Load(), ByAccept: t.acc.byAccept.Load(), Skipped: t.skipped.Load(),
		UnknownHandshakes: t.unknownHS.Load(), EvictedGenerations: t.evicted.Load(),
	}
}
