package proctrack

import (
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// The attribution index: what answers "which process accepted this
// connection". Its sources, most exact first: the kernel's accept events
// (accept.go, accept_attrib.go), the connection's own socket (sock_diag,
// then the serving processes' fd tables), the listening socket's owner,
// and quiet periods (no serving process changed around the connection,
// one generation holds the listener). It sees the tracker's state only as
// the scans publish it (publish): the serving processes and their
// generations; it asks the scans for more through requests (a port whose
// owner is unknown, an accept by an unknown process), which the next Tick
// answers. The policy over these sources (what waits for what, and the
// fallbacks) is the Attribution stage's (attribution.go).
type attribIndex struct {
	root            string
	now             func() time.Time
	indexRefreshMin time.Duration
	diag            *sockDiag
	log             *slog.Logger

	// Servers in other network namespaces (netns.go): the agent's own
	// (0: unknown, none read), and the foreign namespaces' sockets as of
	// the last scan.
	selfNS   uint64
	nets     atomic.Pointer[nsView]
	nsLogged map[uint64]bool // namespaces logged (the scan's goroutine only)

	mu sync.RWMutex
	// As of the last scan: the serving processes (workers and servers),
	// every tracked process's generation, the serving set's signature,
	// when it last changed (the quiet period's start), when the last scan
	// (or probe) started, and a channel closed when the next completes.
	serving     []servingTarget
	byPID       map[int]*record.Generation
	masters     []int     // nginx masters
	publishedAt time.Time // when the last scan published
	servingSig  []servingEntry
	quietFrom   time.Time
	lastScanAt  time.Time
	scanDone    chan struct{}

	quietAt atomic.Int64 // quietFrom in Unix ns, for QuietSince
	// swapIDs are the generations of the nginx lineages in a swap (as of
	// the last scan; empty: no swap), read lock-free per record: a quiet
	// answer is scoped to the port's owner, so another nginx's swap does
	// not stop it.
	swapIDs atomic.Pointer[map[string]bool]
	// portQuiets: each read port's quiet period, copied on change (rare)
	// and read per record without a lock.
	portQuiets atomic.Pointer[map[listenerKey]portQuiet]

	// Requests to the scans.
	reqMu     sync.Mutex
	reqPorts  map[uint16]bool // ports whose listeners' owners to search
	reqRescan bool            // read /proc's directory and search listener owners now

	listeners listenerCache

	// The socket inode index (Attribute).
	idxMu       sync.RWMutex
	idxWhere    map[uint64]fdAt // inode -> where the index found it
	hot         hotFDs
	idx         map[uint64]*record.Generation
	idxVersion  atomic.Uint64
	refreshMu   sync.Mutex
	lastRefresh time.Time

	acc acceptSource // the kernel's accept events, started by NewAttribution

	attributed   atomic.Uint64
	quiet        atomic.Uint64 // of attributed: by AttributeQuiet
	byListener   atomic.Uint64 // of attributed: the socket was gone, the listener's owner answered
	bySocket     atomic.Uint64 // of attributed: the connection's own socket
	unattributed atomic.Uint64
	skipped      atomic.Uint64 // NoteSkipped: never asked
}

func newAttribIndex(cfg Config, diag *sockDiag) *attribIndex {
	return &attribIndex{
		root: cfg.ProcRoot, now: cfg.Now, indexRefreshMin: cfg.IndexRefreshMin, diag: diag,
		selfNS:   selfNetns(cfg.ProcRoot),
		byPID:    map[int]*record.Generation{},
		scanDone: make(chan struct{}),
		idx:      map[uint64]*record.Generation{},
		reqPorts: map[uint16]bool{},
	}
}

// servingTarget is a serving process as the index sees it.
type servingTarget struct {
	pid  int
	rec  *record.Generation
	role nginxRole
}

// servingEntry is one serving process as a quiet period sees it.
type servingEntry struct {
	key  procKey
	role nginxRole
}

// publish ends a scan that started at now with the state it left: a change
// in the serving set (a process started, exited or changed role) starts a
// new quiet period, and waiters of LastScan's channel are released. It
// says whether the serving set or the generations in a swap changed (the
// ports' owners are to be read again).
func (x *attribIndex) publish(st *swapState, now time.Time) (changed bool) {
	sig := make([]servingEntry, 0, len(st.serving))
	serving := make([]servingTarget, 0, len(st.serving))
	for _, p := range st.serving {
		sig = append(sig, servingEntry{p.key, p.role})
		serving = append(serving, servingTarget{p.key.pid, p.rec, p.role})
	}
	slices.SortFunc(sig, func(a, b servingEntry) int { return a.key.pid - b.key.pid })
	byPID := make(map[int]*record.Generation, len(st.procs))
	var masters []int
	for pid, p := range st.procs {
		if p.gen != nil && p.rec != nil {
			byPID[pid] = p.rec
		}
		if p.role == roleMaster {
			masters = append(masters, pid)
		}
	}
	x.acc.remember(byPID, now)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.serving, x.byPID, x.masters, x.publishedAt = serving, byPID, masters, now
	if !slices.Equal(sig, x.servingSig) || x.quietFrom.IsZero() {
		// A process that exited was alive at the previous scan and may
		// have served until this one: the new period starts now.
		x.servingSig, x.quietFrom = sig, now
		changed = true
	}
	ids := st.swappingIDs()
	if old := x.swapIDs.Load(); old == nil || !maps.Equal(ids, *old) {
		changed = true // the ports' quiet flags change
	}
	x.swapIDs.Store(&ids)
	x.quietAt.Store(x.quietFrom.UnixNano())
	x.scanned(now)
	return changed
}

// probed ends a probe that started at now and found nothing changed: it
// counts as a scan for quiet periods.
func (x *attribIndex) probed(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.scanned(now)
}

func (x *attribIndex) scanned(now time.Time) {
	x.lastScanAt = now
	close(x.scanDone)
	x.scanDone = make(chan struct{})
}

// lastScan is when the last completed scan started (zero before the
// first), and a channel closed when the next scan completes.
func (x *attribIndex) lastScan() (time.Time, <-chan struct{}) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.lastScanAt, x.scanDone
}

// inSwap says whether g's generation is in a swap in progress (as of the
// last scan).
func (x *attribIndex) inSwap(g *record.Generation) bool {
	ids := x.swapIDs.Load()
	return ids != nil && (*ids)[g.ID]
}

// swapping says whether any nginx swap is in progress (as of the last
// scan).
func (x *attribIndex) swapping() bool {
	ids := x.swapIDs.Load()
	return ids != nil && len(*ids) > 0
}

// portQuietSince is Attribution's per-record question, lock-free: when the
// quiet period of server's port began, and whether it is one (a single
// generation holds every listener and is not in a swap); known is false
// for a port the quiet path has not read yet.
func (x *attribIndex) portQuietSince(server netip.AddrPort, udp bool) (since time.Time, quiet, known bool) {
	m := x.portQuiets.Load()
	if m == nil {
		return time.Time{}, false, false
	}
	q, ok := (*m)[listenerKey{server, udp}]
	return q.since, q.quiet, ok
}

// quietSince is when the current quiet period began, and whether an nginx
// swap is in progress. Lock-free: it is asked per handshake.
func (x *attribIndex) quietSince() (since time.Time, swapping bool) {
	q := x.quietAt.Load()
	if q == 0 {
		return time.Time{}, x.swapping()
	}
	return time.Unix(0, q), x.swapping()
}

// generationOf is the generation pid belongs to, as of the last scan.
func (x *attribIndex) generationOf(pid int) (*record.Generation, bool) {
	x.mu.RLock()
	g, ok := x.byPID[pid]
	x.mu.RUnlock()
	return g, ok
}

// generationOfPID is the generation pid belongs to as of the last scan, or
// as of the last scan that saw it within seenTTL (a worker that exited
// since: drained after WINCH or a reload).
func (x *attribIndex) generationOfPID(pid int) (*record.Generation, bool) {
	if g, ok := x.generationOf(pid); ok {
		return g, true
	}
	return x.rememberedGeneration(pid)
}

// servingTargets appends the serving processes to dst.
func (x *attribIndex) servingTargets(dst []servingTarget) []servingTarget {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return append(dst, x.serving...)
}

// wantPort asks the scans to search for the owners of port's listeners
// (at most 64 ports).
func (x *attribIndex) wantPort(p uint16) {
	x.reqMu.Lock()
	if !x.reqPorts[p] && len(x.reqPorts) < 64 {
		x.reqPorts[p] = true
		x.reqRescan = true
	}
	x.reqMu.Unlock()
}

// rescanSoon asks the next scan to read /proc's directory and search for
// the owners of listening sockets, whatever ListenerRescan says: an
// accept by an unknown process is a new server (a restarted Caddy) or a
// new worker, and its records wait for that scan.
func (x *attribIndex) rescanSoon() {
	x.reqMu.Lock()
	x.reqRescan = true
	x.reqMu.Unlock()
}

// requested says whether the scans were asked for something.
func (x *attribIndex) requested() bool {
	x.reqMu.Lock()
	defer x.reqMu.Unlock()
	return x.reqRescan
}

// takeRequests returns what the scans were asked for since the last call:
// the ports wanted (all of them: the set only grows) and whether a rescan.
func (x *attribIndex) takeRequests() (ports []uint16, rescan bool) {
	x.reqMu.Lock()
	defer x.reqMu.Unlock()
	rescan = x.reqRescan
	x.reqRescan = false
	if rescan {
		for p := range x.reqPorts {
			ports = append(ports, p)
		}
	}
	return ports, rescan
}

// attribute returns the generation whose process owns the server side of
// the TCP connection client -> server, with WorkerPID set (see
// Tracker.Attribute). from, when set, is when the connection may first
// have been accepted: the listener's owner answers for a connection gone
// only when the serving processes have not changed since (a listener's
// owner now is not who accepted before a WINCH).
func (x *attribIndex) attribute(client, server netip.AddrPort, from time.Time) (*record.Generation, bool) {
	var s diagSocket
	var err error
	if ino, ok := x.foreignConn(server, client); ok {
		// A server in another network namespace (a pod): its socket as
		// the last scan read its namespace's /proc/PID/net/tcp.
		s.Inode = ino
	} else if ns, _ := x.serverNS(server.Addr()); ns != 0 {
		err = ErrNoConnection // sock_diag cannot see that namespace
	} else {
		s, err = x.diag.lookupTCP(server, client)
	}
	if err != nil || s.Inode == 0 {
		// The connection is gone (short connections close before the
		// capture reports them) or in TIME_WAIT: fall back to the
		// listening socket's owner when that is unambiguous.
		if g, ok := x.attributeListener(server, from); ok {
			x.attributed.Add(1)
			x.byListener.Add(1)
			return g, true
		}
		x.wantPort(server.Port())
		x.unattributed.Add(1)
		return nil, false
	}
	if g, ok := x.lookupInode(s.Inode); ok {
		x.attributed.Add(1)
		x.bySocket.Add(1)
		return g, true
	}
	if g, ok := x.probeHot(s.Inode); ok {
		x.attributed.Add(1)
		x.bySocket.Add(1)
		return g, true
	}
	if x.refreshIndex() {
		if g, ok := x.lookupInode(s.Inode); ok {
			x.attributed.Add(1)
			x.bySocket.Add(1)
			if at, ok := x.lookupFD(s.Inode); ok {
				x.hot.note(at.pid, at.fd)
			}
			return g, true
		}
	}
	x.wantPort(server.Port())
	x.unattributed.Add(1)
	return nil, false
}

// attributeQuiet is Tracker.AttributeQuiet (udp: AttributeQuietQUIC).
func (x *attribIndex) attributeQuiet(server netip.AddrPort, udp bool, from, to time.Time) (*record.Generation, bool) {
	x.mu.RLock()
	qf, ls := x.quietFrom, x.lastScanAt
	x.mu.RUnlock()
	if qf.IsZero() || !ls.After(to) {
		return nil, false
	}
	// The quiet period is the port's: since its owner (the generation
	// holding every listener on it, and that generation's processes) last
	// changed. Another server's change elsewhere on the host does not end it.
	o, since := x.portOwner(server, udp, qf)
	if o.gen == nil || !o.all || !from.After(since) || x.inSwap(o.gen) {
		return nil, false
	}
	x.attributed.Add(1)
	x.quiet.Add(1)
	if o.single != nil {
		return o.single, true
	}
	return o.gen, true
}

// fdAt is a process's fd number.
type fdAt struct{ pid, fd int }

func (x *attribIndex) lookupFD(ino uint64) (fdAt, bool) {
	x.idxMu.RLock()
	at, ok := x.idxWhere[ino]
	x.idxMu.RUnlock()
	return at, ok
}

func (x *attribIndex) lookupInode(ino uint64) (*record.Generation, bool) {
	x.idxMu.RLock()
	g, ok := x.idx[ino]
	x.idxMu.RUnlock()
	return g, ok
}

// refreshIndex rebuilds the inode index from the fd tables of the serving
// processes. Concurrent callers share one rebuild; rebuilds are at least
// IndexRefreshMin apart (a caller waits for the window rather than miss a
// connection accepted just after the previous rebuild).
func (x *attribIndex) refreshIndex() bool {
	v := x.idxVersion.Load()
	x.refreshMu.Lock()
	defer x.refreshMu.Unlock()
	if x.idxVersion.Load() != v {
		return true // someone rebuilt while we waited
	}
	if wait := x.indexRefreshMin - time.Since(x.lastRefresh); wait > 0 {
		time.Sleep(wait)
	}
	x.idxMu.RLock()
	n := len(x.idx)
	x.idxMu.RUnlock()
	idx := make(map[uint64]*record.Generation, 2*n+16)
	where := make(map[uint64]fdAt, 2*n+16)
	for _, tg := range x.servingTargets(nil) {
		eachSocket(x.root, tg.pid, func(fd int, ino uint64) bool {
			idx[ino] = tg.rec
			where[ino] = fdAt{tg.pid, fd}
			return true
		})
	}
	x.idxMu.Lock()
	x.idx = idx
	x.idxWhere = where
	x.idxMu.Unlock()
	x.lastRefresh = time.Now()
	x.idxVersion.Add(1)
	return true
}

// probeHot looks for socket inode ino at the remembered fd numbers of the
// serving processes.
func (x *attribIndex) probeHot(ino uint64) (*record.Generation, bool) {
	var buf [16]servingTarget
	targets := x.servingTargets(buf[:0])
	var fdBuf [hotPerPID]int
	for _, tg := range targets {
		if tg.rec == nil {
			continue
		}
		for _, fd := range x.hot.get(tg.pid, fdBuf[:0]) {
			l, err := os.Readlink(x.root + "/" + strconv.Itoa(tg.pid) + "/fd/" + strconv.Itoa(fd))
			if err != nil {
				continue
			}
			if got, err := parseSocketLink(l); err == nil && got == ino {
				x.hot.note(tg.pid, fd)
				return tg.rec, true
			}
		}
	}
	return nil, false
}

// eachSocket calls fn with each socket fd of pid under the proc root, in
// ascending fd order (listeners, opened first, come early), until fn
// returns false. It reports whether pid's fd table could be read.
func eachSocket(root string, pid int, fn func(fd int, ino uint64) bool) bool {
	fdDir := root + "/" + strconv.Itoa(pid) + "/fd"
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
