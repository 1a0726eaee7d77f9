package proctrack

import (
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// The attribution index: what answers "which process accepted this
// connection". Its sources, most exact first, each a part with one job and
// its own lock or none: the kernel's accept events (acceptSource,
// accept.go, accept_attrib.go) and the quiet set's epochs (quietEpochs);
// the connection's own socket (socketIndex: sock_diag, then the serving
// processes' fd tables); the listening socket's owner and each port's
// quiet period (listenerCache, listener.go). It sees the tracker's state
// only as the scans publish it: one immutable scanView per scan (view.go),
// swapped in whole, read per record without a lock; it asks the scans for
// more through scanRequests (a port whose owner is unknown, an accept by
// an unknown process), which the next Tick answers. The policy over these
// sources (what waits for what, and the fallbacks) is the Attribution
// stage's (attribution.go).
type attribIndex struct {
	root string
	now  func() time.Time
	diag *sockDiag

	view      atomic.Pointer[scanView] // the last scan's (never nil)
	req       scanRequests             // to the scans
	socks     socketIndex              // the connection's own socket
	listeners listenerCache            // the listening socket's owner; the ports' quiet periods
	acc       acceptSource             // the kernel's accept events, started by NewAttribution
	epochs    quietEpochs              // the kernel's quiet set: who goes unreported
	n         attribCounts
}

func newAttribIndex(cfg Config, diag *sockDiag) *attribIndex {
	x := &attribIndex{root: cfg.ProcRoot, now: cfg.Now, diag: diag}
	x.view.Store(&scanView{next: make(chan struct{})})
	x.req.ports = map[uint16]bool{}
	x.socks = socketIndex{root: cfg.ProcRoot, minGap: cfg.IndexRefreshMin, idx: map[uint64]*record.Generation{}}
	x.listeners = listenerCache{root: cfg.ProcRoot, diag: diag, now: cfg.Now}
	return x
}

// attribCounts are the answers given, by source
// (pqwatch_attributions_total's methods).
type attribCounts struct {
	attributed   atomic.Uint64
	quiet        atomic.Uint64 // of attributed: by AttributeQuiet
	byListener   atomic.Uint64 // of attributed: the socket was gone, the listener's owner answered
	bySocket     atomic.Uint64 // of attributed: the connection's own socket
	byAccept     atomic.Uint64 // of attributed: the accept event named the process
	byQuiet      atomic.Uint64 // of attributed: no accept event, the quiet set's generation
	unattributed atomic.Uint64
	skipped      atomic.Uint64 // NoteSkipped: never asked
	// unknownPid counts accepts found whose process the tracker did not
	// know (yet): the record waited for a scan or fell back.
	unknownPid atomic.Uint64
}

// scanRequests is what the attribution asks of the scans: the owners of
// ports' listeners to search for (a port whose owner is unknown), and a
// rescan (an accept by an unknown process). The next Tick answers.
type scanRequests struct {
	mu     sync.Mutex
	ports  map[uint16]bool // ports whose listeners' owners to search
	rescan bool            // read /proc's directory and search listener owners now
}

// wantPort asks the scans to search for the owners of port's listeners
// (at most 64 ports).
func (q *scanRequests) wantPort(p uint16) {
	q.mu.Lock()
	if !q.ports[p] && len(q.ports) < 64 {
		q.ports[p] = true
		q.rescan = true
	}
	q.mu.Unlock()
}

// rescanSoon asks the next scan to read /proc's directory and search for
// the owners of listening sockets, whatever ListenerRescan says: an
// accept by an unknown process is a new server (a restarted Caddy) or a
// new worker, and its records wait for that scan.
func (q *scanRequests) rescanSoon() {
	q.mu.Lock()
	q.rescan = true
	q.mu.Unlock()
}

// requested says whether the scans were asked for something.
func (q *scanRequests) requested() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rescan
}

// take returns what the scans were asked for since the last call: the
// ports wanted (all of them: the set only grows) and whether a rescan.
func (q *scanRequests) take() (ports []uint16, rescan bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rescan = q.rescan
	q.rescan = false
	if rescan {
		for p := range q.ports {
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
	v := x.view.Load()
	var s diagSocket
	var err error
	if ino, ok := v.foreignConn(server, client); ok {
		// A server in another network namespace (a pod): its socket as
		// the last scan read its namespace's /proc/PID/net/tcp.
		s.Inode = ino
	} else if v.serverNS(server.Addr()) != 0 {
		err = ErrNoConnection // sock_diag cannot see that namespace
	} else {
		s, err = x.diag.lookupTCP(server, client)
	}
	if err != nil || s.Inode == 0 {
		// The connection is gone (short connections close before the
		// capture reports them) or in TIME_WAIT: fall back to the
		// listening socket's owner when that is unambiguous.
		if g, ok := x.attributeListener(server, from); ok {
			x.n.attributed.Add(1)
			x.n.byListener.Add(1)
			return g, true
		}
		x.req.wantPort(server.Port())
		x.n.unattributed.Add(1)
		return nil, false
	}
	if g, ok := x.socks.find(s.Inode, &x.view); ok {
		x.n.attributed.Add(1)
		x.n.bySocket.Add(1)
		return g, true
	}
	x.req.wantPort(server.Port())
	x.n.unattributed.Add(1)
	return nil, false
}

// attributeQuiet is Tracker.AttributeQuiet (udp: AttributeQuietQUIC).
func (x *attribIndex) attributeQuiet(server netip.AddrPort, udp bool, from, to time.Time) (*record.Generation, bool) {
	v := x.view.Load()
	if v.quietFrom.IsZero() || !v.at.After(to) {
		return nil, false
	}
	// The quiet period is the port's: since its owner (the generation
	// holding every listener on it, and that generation's processes) last
	// changed. Another server's change elsewhere on the host does not end it.
	o, since := x.listeners.portOwner(v, server, udp, v.quietFrom)
	if o.gen == nil || !o.all || !from.After(since) || v.inSwap(o.gen) {
		return nil, false
	}
	x.n.attributed.Add(1)
	x.n.quiet.Add(1)
	if o.single != nil {
		return o.single, true
	}
	return o.gen, true
}

// socketIndex answers for a connection's own socket: its inode, found in
// the fd tables of the serving processes. Most lookups read the index
// (inode -> generation, under its read lock); a miss probes the fd numbers
// that answered before (hot), then rebuilds the index, concurrent callers
// sharing one rebuild (refreshMu), rebuilds at least minGap apart.
type socketIndex struct {
	root   string
	minGap time.Duration // Config.IndexRefreshMin
	hot    hotFDs

	mu    sync.RWMutex
	idx   map[uint64]*record.Generation
	where map[uint64]fdAt // inode -> where the index found it

	version     atomic.Uint64
	refreshMu   sync.Mutex
	lastRefresh time.Time
}

// fdAt is a process's fd number.
type fdAt struct{ pid, fd int }

// find is the generation of the serving process (as of view's scan) that
// holds socket inode ino.
func (s *socketIndex) find(ino uint64, view *atomic.Pointer[scanView]) (*record.Generation, bool) {
	if g, ok := s.lookup(ino); ok {
		return g, true
	}
	if g, ok := s.probeHot(ino, view.Load().serving); ok {
		return g, true
	}
	if s.refresh(view) {
		if g, ok := s.lookup(ino); ok {
			if at, ok := s.lookupFD(ino); ok {
				s.hot.note(at.pid, at.fd)
			}
			return g, true
		}
	}
	return nil, false
}

func (s *socketIndex) lookupFD(ino uint64) (fdAt, bool) {
	s.mu.RLock()
	at, ok := s.where[ino]
	s.mu.RUnlock()
	return at, ok
}

func (s *socketIndex) lookup(ino uint64) (*record.Generation, bool) {
	s.mu.RLock()
	g, ok := s.idx[ino]
	s.mu.RUnlock()
	return g, ok
}

// refresh rebuilds the inode index from the fd tables of the serving
// processes. Concurrent callers share one rebuild; rebuilds are at least
// minGap apart (a caller waits for the window rather than miss a
// connection accepted just after the previous rebuild). The serving
// processes are those of the view current when the rebuild starts.
func (s *socketIndex) refresh(view *atomic.Pointer[scanView]) bool {
	v := s.version.Load()
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if s.version.Load() != v {
		return true // someone rebuilt while we waited
	}
	if wait := s.minGap - time.Since(s.lastRefresh); wait > 0 {
		time.Sleep(wait)
	}
	s.mu.RLock()
	n := len(s.idx)
	s.mu.RUnlock()
	idx := make(map[uint64]*record.Generation, 2*n+16)
	where := make(map[uint64]fdAt, 2*n+16)
	for _, tg := range view.Load().serving {
		eachSocket(s.root, tg.pid, func(fd int, ino uint64) bool {
			idx[ino] = tg.rec
			where[ino] = fdAt{tg.pid, fd}
			return true
		})
	}
	s.mu.Lock()
	s.idx = idx
	s.where = where
	s.mu.Unlock()
	s.lastRefresh = time.Now()
	s.version.Add(1)
	return true
}

// probeHot looks for socket inode ino at the remembered fd numbers of the
// serving processes.
func (s *socketIndex) probeHot(ino uint64, serving []servingTarget) (*record.Generation, bool) {
	var fdBuf [hotPerPID]int
	for _, tg := range serving {
		if tg.rec == nil {
			continue
		}
		for _, fd := range s.hot.get(tg.pid, fdBuf[:0]) {
			l, err := os.Readlink(s.root + "/" + strconv.Itoa(tg.pid) + "/fd/" + strconv.Itoa(fd))
			if err != nil {
				continue
			}
			if got, err := parseSocketLink(l); err == nil && got == ino {
				s.hot.note(tg.pid, fd)
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
