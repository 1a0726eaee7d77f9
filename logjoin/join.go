// Package logjoin attaches access-log lines (nginx, Caddy) to captured handshake
// records.
//
// A line joins a handshake by client address and port when the log has the
// port, within a time window: the line's time must fall in
// [handshake.TS-Skew, handshake.TS+Window]. When a log has only the address
// (nginx's plain "combined"), a join is made only when it is unambiguous: the
// handshake has exactly one candidate line from its address in the window, and
// that line has exactly this one candidate handshake. Everything else is
// counted as ambiguous and left unjoined: pqwatch never makes a wrong join.
//
// Handshakes and lines wait for each other in a bounded pending store (a map
// keyed by address and port with FIFO expiry; see Options.MaxPending for the
// cap and the eviction rule). The streaming API (New, AddHandshake, AddLine,
// Tick, Flush) serves the live agent; Batch serves offline analysis.
package logjoin

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// Sources of log lines.
const (
	SourceNginx = "nginx"
	SourceCaddy = "caddy"
)

// Line is an access-log line reduced to what the join needs. It owns its
// memory (unlike the logparse structs).
type Line struct {
	// Time is when the request ended (nginx and Caddy log then), as
	// logged: the line was written in [Time, Time+TimeRes).
	Time    time.Time
	TimeRes time.Duration // 0: exact
	Addr    [16]byte      // IPv4-mapped when IPv4
	Port    uint16        // 0: the log has no port; address-only join
	// ConnRequests is $connection_requests when logged (1: the first
	// request of its connection); 0: unknown.
	ConnRequests int
	// RequestTime is $request_time: the request began at
	// Time-RequestTime (0: not logged, or no time).
	RequestTime time.Duration
	// Conn is nginx's $connection, the connection's serial number (with
	// Log.PID, the worker's, it names one connection); 0: not logged.
	Conn uint64
	// Version is $ssl_protocol spelt as records spell it ("TLS1.3"); "":
	// not logged.
	Version string
	Log     record.Log
	// Pod is the pod whose container log the line was read from
	// (kubepod.FromLogPath), nil for another log: a record it joins takes
	// it as its Pod.
	Pod *record.Pod
}

// FromNginx converts a parsed nginx line. ok is false when the line has no
// usable client address or time.
func FromNginx(l *logparse.NginxLine) (Line, bool) {
	addr, ok := parseAddr(l.RemoteAddr)
	if !ok || l.Time.IsZero() {
		return Line{}, false
	}
	return Line{
		Time: l.Time, TimeRes: l.TimeRes, Addr: addr, Port: l.RemotePort, ConnRequests: l.ConnectionRequests,
		RequestTime: l.RequestTime, Conn: l.Connection, Version: versionName(l.SSLProtocol),
		Log: record.Log{
			Source: SourceNginx, Status: l.Status, Method: string(l.Method), Host: string(l.Host),
			Path: string(l.URI), UserAgent: string(l.UserAgent), PID: l.PID, SSLCurve: string(l.SSLCurve),
		},
	}, true
}

// FromCaddy converts a parsed Caddy line.
func FromCaddy(c *logparse.CaddyLine) (Line, bool) {
	addr, ok := parseAddr(c.RemoteIP)
	if !ok || c.Time.IsZero() {
		return Line{}, false
	}
	return Line{
		// Caddy's "ts" is a float: its last digits are not to be trusted.
		Time: c.Time, TimeRes: time.Millisecond, Addr: addr, Port: c.RemotePort,
		Log: record.Log{
			Source: SourceCaddy, Status: c.Status, Method: string(c.Method), Host: string(c.Host),
			Path: string(c.URI), UserAgent: string(c.UserAgent),
		},
	}, true
}

// versionName spells nginx's $ssl_protocol as records do.
func versionName(p []byte) string {
	switch string(p) {
	case "TLSv1.3":
		return "TLS1.3"
	case "TLSv1.2":
		return "TLS1.2"
	case "TLSv1.1":
		return "TLS1.1"
	case "TLSv1":
		return "TLS1.0"
	}
	return ""
}

func parseAddr(b []byte) ([16]byte, bool) {
	if len(b) > 2 && b[0] == '[' && b[len(b)-1] == ']' {
		b = b[1 : len(b)-1]
	}
	a, err := netip.ParseAddr(string(b))
	if err != nil {
		return [16]byte{}, false
	}
	return a.WithZone("").As16(), true
}

// Options configure a Joiner. The zero value is usable.
type Options struct {
	// Window is how long after the handshake its line may be logged
	// (default 60s; nginx logs when the request ends).
	Window time.Duration
	// Skew is how much earlier than the handshake a line may be stamped
	// (clock and capture skew; default 2s).
	Skew time.Duration
	// RecordDelay is how much later than its TS (by the clock passed to
	// Add/Tick) a record may reach the joiner: a line with the port is
	// decided only once every record that may be its connection's has
	// arrived, RecordDelay after the line's time (past its resolution),
	// so that a client port used again is never joined to, nor counted as
	// an extra request of, the earlier connection. Default 5s, the live
	// agent's capture block (1 s) and attribution (3 s); negative: none
	// (Batch, where records come in time order).
	RecordDelay time.Duration
	// MaxWait is how long (by the clock passed to Add/Tick) an entry waits
	// for its partner before it is decided (default Window+Skew+10s). It
	// must exceed Window+Skew plus the delivery delay of records and lines
	// (RecordDelay).
	MaxWait time.Duration
	// MaxPending caps the stored entries (waiting handshakes and lines, and
	// the recently decided ones kept to detect ambiguity; default 200,000).
	// At the cap the oldest entry is evicted: a waiting handshake is emitted
	// unjoined, a waiting line dropped, both counted in Stats.Evicted; and
	// address-only joins are refused for 2*MaxWait after an eviction,
	// since the evidence of ambiguity may be gone.
	MaxPending int
	// MaxPendingBytes caps the memory of the stored entries, as estimated
	// by entryBytes: a line holds its path and user agent (up to a log
	// line's 64 KiB, chosen by whoever sends the request) and a waiting
	// handshake its record; decided entries keep only what the evidence
	// needs. At the cap the oldest entry is evicted as at MaxPending.
	// Default DefaultMaxPendingBytes.
	MaxPendingBytes int
	// Emit receives every handshake exactly once: joined, unjoined after
	// MaxWait, not completed (at once), or evicted. May be nil.
	Emit func(*record.Handshake)
}

// SourceStats are per-source line counts.
type SourceStats struct {
	Lines     uint64 // lines added
	Joined    uint64 // lines joined to a handshake
	Unmatched uint64 // lines with no handshake in the window
	Ambiguous uint64 // address-only lines with more than one possibility
	Extra     uint64 // further requests on an already joined connection
	Malformed uint64 // lines that did not parse (CountMalformed)
}

// Stats are the joiner's counters.
type Stats struct {
	Handshakes          uint64 // handshakes added
	NotCompleted        uint64 // outcome other than ok: emitted at once, never joined
	Joined              uint64
	UnmatchedHandshakes uint64 // completed handshakes that found no line
	AmbiguousHandshakes uint64 // completed handshakes with candidate lines but no unambiguous one
	Evicted             uint64 // entries evicted from the full pending store
	CurveChecked        uint64 // joins where the log had $ssl_curve and the record a group
	CurveMismatch       uint64 // ... and they differ
	Pending             int    // entries currently stored
	PendingBytes        int    // their memory, as MaxPendingBytes counts it
	Sources             map[string]SourceStats
}

type entryState uint8

const (
	statePending entryState = iota
	stateJoined
	stateDone // decided without a join; kept as evidence until purged
)

type key struct {
	addr [16]byte
	port uint16
}

type entry struct {
	bytes     int // what it counts against MaxPendingBytes now
	port      uint16
	addr      [16]byte // a handshake's client (kept once h is let go)
	isLine    bool
	state     entryState
	ambiguous bool              // an address-only line, or a handshake, seen as a candidate in an ambiguous decision
	removed   bool              // no longer in the maps (its queue slot is skipped)
	server    serverKind        // a handshake's server, as the attribution named it (kept once h is let go)
	ts        time.Time         // event time
	arrived   time.Time         // by the caller's clock
	h         *record.Handshake // nil once emitted
	line      Line

	// A handshake's facts, kept once h is let go, and what the lines
	// given to its connection (joined, or counted as its further
	// requests) said of it.
	group, version string
	workerPID      int
	firstReq       bool   // a line with $connection_requests 1 was given to it
	hasConn        bool   // conn and connPID are a given line's
	conn           uint64 // $connection of a line given to it
	connPID        int    // $pid of that line (0: not logged)
	lineSeq        uint64 // the first line given to it (0: none yet)
	amb            int32  // waiting port lines that have it among several candidates

	// A line with the port: its arrival number, when every record that
	// may be its connection's has arrived, and, while it is ambiguous,
	// its candidates.
	seq   uint64
	ready time.Time
	tried bool // decided once and left undecided
	cands []*entry
}

func (e *entry) k() key {
	if e.isLine {
		return key{e.line.Addr, e.line.Port}
	}
	return key{e.addr, e.port}
}

// DefaultRecordDelay is Options.RecordDelay's default.
const DefaultRecordDelay = 5 * time.Second

// DefaultMaxPendingBytes is Options.MaxPendingBytes's default.
const DefaultMaxPendingBytes = 64 << 20

// Sizes of what an entry holds, for entryBytes. entryOverhead is the
// entry and its places: a slot in two maps (key, slice header, control
// byte, at the maps' load factor: about 64 bytes each), the slices'
// backing arrays and two queue slots (TestPendingBytesBounded measures it).
var (
	entryOverhead = int(unsafe.Sizeof(entry{})) + 192
	recordSize    = int(unsafe.Sizeof(record.Handshake{}))
	keyShareSize  = int(unsafe.Sizeof(record.KeyShare{}))
	genSize       = int(unsafe.Sizeof(record.Generation{}))
	logSize       = int(unsafe.Sizeof(record.Log{}))
)

// entryBytes estimates the memory e holds: every string and slice of a
// record or line it still references is counted, interned ones too, so
// the estimate errs high.
func entryBytes(e *entry) int {
	n := entryOverhead
	if e.isLine {
		lg := &e.line.Log
		return n + len(lg.Method) + len(lg.Host) + len(lg.Path) + len(lg.UserAgent) + len(lg.SSLCurve)
	}
	h := e.h
	if h == nil {
		return n
	}
	n += recordSize + len(h.Transport) + len(h.Client) + len(h.Server) + len(h.SNI) + len(h.Version) +
		len(h.Cipher) + len(h.Group) + len(h.HRRGroup) + len(h.GroupMissing) + len(h.Outcome) + len(h.Alert) +
		len(h.JA4) + len(h.Node) + h.IDLen() + 16*(cap(h.ALPN)+cap(h.OfferedGroups)) +
		keyShareSize*cap(h.KeyShares) + 2*(cap(h.OfferedIDs)+cap(h.KeyShareIDs))
	for _, a := range h.ALPN {
		n += len(a)
	}
	for _, g := range h.OfferedGroups {
		n += len(g)
	}
	for _, k := range h.KeyShares {
		n += len(k.Group)
	}
	if g := h.Generation; g != nil {
		n += genSize + len(g.ID) + len(g.Exe) + len(g.ExeSHA256) + len(g.OpenSSL)
	}
	if l := h.Log; l != nil {
		n += logSize + len(l.Source) + len(l.Method) + len(l.Host) + len(l.Path) + len(l.UserAgent) + len(l.SSLCurve)
	}
	return n
}

// settle lets go of what a decided entry no longer needs (a handshake's
// record, which now belongs to Emit's receiver; a line's request fields,
// already copied into any record it joined) and recounts its bytes: the
// evidence of ambiguity needs only time, address and port.
func (j *Joiner) settle(e *entry) {
	if e.isLine {
		e.line.Log, e.line.Pod = record.Log{Source: e.line.Log.Source}, nil
	} else {
		e.h = nil
	}
	j.bytes -= e.bytes
	e.bytes = entryBytes(e)
	j.bytes += e.bytes
}

// fifo is a queue of entries in arrival order.
type fifo struct {
	q    []*entry
	head int
}

func (f *fifo) push(e *entry) { f.q = append(f.q, e) }
func (f *fifo) len() int      { return len(f.q) - f.head }
func (f *fifo) front() *entry { return f.q[f.head] }
func (f *fifo) pop() *entry {
	e := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head > 1024 && f.head*2 > len(f.q) {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q = f.q[:n]
		f.head = 0
	}
	return e
}

// Joiner joins handshakes with log lines as they arrive. It is safe for
// concurrent use; Emit is called with the Joiner's lock held, so it must not
// call back into the Joiner.
type Joiner struct {
	mu   sync.Mutex
	opts Options

	hsByKey   map[key][]*entry
	hsByAddr  map[[16]byte][]*entry
	lineByKey map[key][]*entry      // lines with a port
	lineAddr  map[[16]byte][]*entry // lines without a port

	decideQ, purgeQ fifo
	readyQ          fifo   // lines with the port, until they are ready
	seq             uint64 // lines with the port added
	scratch         []*entry
	hsScratch       []*entry
	bounds          []span
	live            int
	bytes           int // entryBytes of the stored entries
	noAddrJoinUntil time.Time

	st      Stats
	sources map[string]*SourceStats
}

// New returns a Joiner.
func New(opts Options) *Joiner {
	if opts.Window <= 0 {
		opts.Window = 60 * time.Second
	}
	if opts.Skew <= 0 {
		opts.Skew = 2 * time.Second
	}
	switch {
	case opts.RecordDelay == 0:
		opts.RecordDelay = DefaultRecordDelay
	case opts.RecordDelay < 0:
		opts.RecordDelay = 0
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = opts.Window + opts.Skew + max(10*time.Second, 2*opts.RecordDelay)
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 200_000
	}
	if opts.MaxPendingBytes <= 0 {
		opts.MaxPendingBytes = DefaultMaxPendingBytes
	}
	return &Joiner{
		opts:      opts,
		hsByKey:   make(map[key][]*entry),
		hsByAddr:  make(map[[16]byte][]*entry),
		lineByKey: make(map[key][]*entry),
		lineAddr:  make(map[[16]byte][]*entry),
		sources: map[string]*SourceStats{
			SourceNginx: {}, SourceCaddy: {},
		},
	}
}

// Stats returns a copy of the counters.
func (j *Joiner) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.st
	s.Pending = j.live
	s.PendingBytes = j.bytes
	s.Sources = make(map[string]SourceStats, len(j.sources))
	for k, v := range j.sources {
		s.Sources[k] = *v
	}
	return s
}

// CountMalformed counts a line of source that did not parse.
func (j *Joiner) CountMalformed(source string) {
	j.mu.Lock()
	j.source(source).Malformed++
	j.mu.Unlock()
}

func (j *Joiner) source(s string) *SourceStats {
	ss := j.sources[s]
	if ss == nil {
		ss = &SourceStats{}
		j.sources[s] = ss
	}
	return ss
}

func (j *Joiner) compatible(h, l *entry) bool {
	return !l.line.Time.Before(h.ts.Add(-j.opts.Skew)) && !l.line.Time.After(h.ts.Add(j.opts.Window)) &&
		h.server.serves(l.line.Log.Source)
}

// serverKind is what the attribution (a stage before the join) said of a
// handshake's server: nginx, another server, or nothing.
type serverKind uint8

const (
	serverUnknown serverKind = iota // no generation: any log may be its server's
	serverNginx
	serverOther
)

// serverOf is the kind of h's server.
func serverOf(h *record.Handshake) serverKind {
	switch g := h.Generation; {
	case g == nil:
		return serverUnknown
	case g.Nginx():
		return serverNginx
	}
	return serverOther
}

// serves says whether a server of kind k writes the log of source: a
// client port is chosen per destination, so one port may be on a
// connection to nginx and, at once, on one to another server of the node
// (the same client's), and only the attribution tells their handshakes
// apart.
func (k serverKind) serves(source string) bool {
	switch source {
	case SourceNginx:
		return k != serverOther
	case SourceCaddy:
		return k != serverNginx
	}
	return true
}

func (j *Joiner) emit(h *record.Handshake) {
	if j.opts.Emit != nil {
		j.opts.Emit(h)
	}
}

// Process adds a handshake now (the pipeline stage's entry: records go on
// through Options.Emit once joined or given up on).
func (j *Joiner) Process(h *record.Handshake) { j.AddHandshake(h, time.Now()) }

// AddHandshake adds a record; now is the caller's clock (time.Now() live,
// the record's TS in batch). Handshakes whose outcome is not "ok" are
// emitted at once. The Joiner keeps h until it emits it; it sets h.Log when
// joined and may set h.ClientAddr/ClientPort from h.Client when they are
// empty.
func (j *Joiner) AddHandshake(h *record.Handshake, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.tick(now)
	j.st.Handshakes++
	if h.Outcome != record.OutcomeOK {
		j.st.NotCompleted++
		j.emit(h)
		return
	}
	if h.ClientAddr == ([16]byte{}) && h.Client != "" {
		if ap, err := netip.ParseAddrPort(h.Client); err == nil {
			h.ClientAddr, h.ClientPort = ap.Addr().WithZone("").As16(), ap.Port()
		}
	}
	addr, port := h.ClientAddr, h.ClientPort
	if h.Peer.IsValid() { // behind a masquerading NAT: the server logged this one
		addr, port = h.Peer.Addr().As16(), h.Peer.Port()
	}
	e := &entry{ts: h.TS, arrived: now, h: h, addr: addr, port: port, server: serverOf(h),
		group: h.Group, version: h.Version}
	if h.Generation != nil {
		e.workerPID = h.Generation.WorkerPID
	}
	j.store(e)
	// Lines with the port that are ready and still undecided (no record
	// of theirs had come, or more than one could be theirs) are looked at
	// again with this one.
	if j.lineByKey[e.k()] != nil {
		j.resolve(e.k(), now)
	}
}

// AddLine adds a log line; now is the caller's clock. A line with the
// port waits until every record that may be its connection's has arrived
// (Options.RecordDelay), then is decided with the other lines of its
// address and port (resolve).
func (j *Joiner) AddLine(l Line, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.tick(now)
	j.source(l.Log.Source).Lines++
	e := &entry{isLine: true, ts: l.Time, arrived: now, line: l}
	if l.Port == 0 {
		j.store(e)
		return
	}
	j.seq++
	e.seq = j.seq
	// A further request of a connection whose line was joined, named by
	// nginx's serial number and worker: decided at once.
	if h := j.sameConn(e); h != nil {
		j.give(h, e)
		j.source(l.Log.Source).Extra++
		return
	}
	res := l.TimeRes + j.opts.RecordDelay
	e.ready = l.Time.Add(res)
	if e.ready.Before(now) {
		e.ready = now
	} else if lim := now.Add(res); e.ready.After(lim) {
		e.ready = lim
	}
	j.store(e)
	j.readyQ.push(e)
	if !e.ready.After(now) {
		j.resolve(e.k(), now)
	}
}

// sameConn returns the handshake whose connection carried an earlier line
// with the same $connection and $pid as line l: l is a further request of
// that connection.
func (j *Joiner) sameConn(l *entry) *entry {
	if l.line.Conn == 0 || l.line.Log.PID == 0 {
		return nil
	}
	hs := j.hsByKey[l.k()]
	// The connection was open when l was logged: it began before.
	end := l.line.Time.Add(l.line.TimeRes + j.opts.Skew)
	for i := len(hs) - 1; i >= 0; i-- {
		h := hs[i]
		if h.ts.After(end) {
			continue
		}
		if h.ts.Before(l.line.Time.Add(-j.opts.Window)) {
			break
		}
		if h.hasConn && h.conn == l.line.Conn && h.connPID == l.line.Log.PID && j.compatible(h, l) {
			return h
		}
	}
	return nil
}

// give records what line l says of handshake h's connection, l being one
// of its requests (joined or further).
func (j *Joiner) give(h, l *entry) {
	if h.lineSeq == 0 || l.seq < h.lineSeq {
		h.lineSeq = l.seq
	}
	if l.line.ConnRequests == 1 {
		h.firstReq = true
	}
	if l.line.Conn != 0 && !h.hasConn {
		h.hasConn, h.conn, h.connPID = true, l.line.Conn, l.line.Log.PID
	}
}

// span is the candidates of one line with the port, as indexes into the
// handshakes of its address and port sorted by time: lo..hi, empty when
// lo > hi.
type span struct {
	lo, hi int
	none   bool // no handshake began before the line (within the window)
}

// resolve decides the ready, undecided lines with the port of key k,
// with every handshake of k known now.
//
// A client port carries one connection at a time (to one server): the
// handshakes of an address and port, in time order, are connections one
// after the other, and a request is logged when it ends, while its
// connection is open. So the line's connection is the last one that began
// before the line was logged: one handshake when the log's time is
// precise ($msec), all those that began within its second ($time_local)
// plus the one before. The facts of the line then rule candidates out: a
// first request ($connection_requests 1) is not a connection's whose first
// request is known, a line's $connection and $pid are those of every line
// of its connection, $request_time says when the request began (its
// connection began before). Lines of one log are in the order they were
// written, so a line's connection is not before an earlier line's, and
// after it when they are different connections. One candidate left: the
// line is joined to it (or counted as a further request when it is joined
// already). More: the line waits, maybe for a later line to tell, and is
// counted as ambiguous at MaxWait. None: it waits for a late record.
// maxGroup bounds the lines of an address and port decided together.
const maxGroup = 32

func (j *Joiner) resolve(k key, now time.Time) {
	ls := j.scratch[:0]
	for _, l := range j.lineByKey[k] {
		if l.state == statePending && !l.ready.After(now) {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return
	}
	if len(ls) > maxGroup {
		// Lines left ambiguous wait for MaxWait: those tried already and
		// long before the newest are left as they are (bounding the work
		// per event).
		n := 0
		for i, l := range ls {
			if !l.tried || i >= len(ls)-maxGroup {
				ls[n] = l
				n++
			}
		}
		ls = ls[:n]
	}
	// Lines of one source at a time (their own handshakes: serverKind).
	src := ls[0].line.Log.Source
	mixed := false
	for _, l := range ls {
		mixed = mixed || l.line.Log.Source != src
	}
	if !mixed {
		j.resolveGroup(k, ls)
	} else {
		for _, src := range []string{SourceNginx, SourceCaddy} {
			var group []*entry
			for _, l := range ls {
				if l.line.Log.Source == src {
					group = append(group, l)
				}
			}
			if len(group) > 0 {
				j.resolveGroup(k, group)
			}
		}
	}
	clear(ls)
	j.scratch = ls[:0]
}

func (j *Joiner) resolveGroup(k key, ls []*entry) {
	hs := j.hsScratch[:0]
	for _, h := range j.hsByKey[k] {
		if h.server.serves(ls[0].line.Log.Source) {
			hs = append(hs, h)
		}
	}
	defer func() {
		clear(hs)
		j.hsScratch = hs[:0]
	}()
	b := j.bounds[:0]
	for _, l := range ls {
		b = append(b, j.span(hs, l))
	}
	// Lines in log order: a line's connection is not before the previous
	// line's, after it when the two are different connections, the same
	// when they are one. A line without a candidate breaks the chain.
	for i := 1; i < len(ls); i++ {
		p, c := &b[i-1], &b[i]
		if p.lo > p.hi || c.lo > c.hi {
			continue
		}
		switch sameConn(ls[i-1], ls[i]) {
		case connSame:
			// One connection: both lines have the candidates of both.
			p.lo, p.hi = max(p.lo, c.lo), min(p.hi, c.hi)
			c.lo, c.hi = p.lo, p.hi
		case connOther:
			c.lo = max(c.lo, p.lo+1)
		default:
			c.lo = max(c.lo, p.lo)
		}
	}
	for i := len(ls) - 1; i > 0; i-- {
		p, c := &b[i-1], &b[i]
		if p.lo > p.hi || c.lo > c.hi {
			continue
		}
		switch sameConn(ls[i-1], ls[i]) {
		case connSame:
			p.lo, p.hi = max(p.lo, c.lo), min(p.hi, c.hi)
			c.lo, c.hi = p.lo, p.hi
		case connOther:
			p.hi = min(p.hi, c.hi-1)
		default:
			p.hi = min(p.hi, c.hi)
		}
	}
	last := -1 // the handshake the previous line was given to
	for i, l := range ls {
		sp := b[i]
		if last >= 0 && sp.lo <= sp.hi {
			switch sameConn(ls[i-1], l) {
			case connOther:
				sp.lo = max(sp.lo, last+1)
			default:
				sp.lo = max(sp.lo, last)
			}
		}
		last = j.decideLine(hs, l, sp)
	}
	j.bounds = b[:0]
}

// connRel says whether two lines are of the same connection.
type connRel uint8

const (
	connUnknown connRel = iota
	connSame
	connOther
)

// sameConn says whether line b, logged after line a, is of a's
// connection: by $connection and $pid, else by $connection_requests (b a
// first request: another connection).
func sameConn(a, b *entry) connRel {
	la, lb := &a.line, &b.line
	if la.Log.PID != 0 && lb.Log.PID != 0 && la.Log.PID != lb.Log.PID {
		return connOther
	}
	if la.Conn != 0 && lb.Conn != 0 {
		if la.Conn != lb.Conn {
			return connOther
		}
		if la.Log.PID != 0 && lb.Log.PID != 0 {
			return connSame
		}
	}
	if lb.ConnRequests == 1 {
		return connOther
	}
	return connUnknown
}

// span finds line l's candidates by time among hs (sorted by time): the
// last handshake that began by the line's time, and those that began
// within its resolution, within the window.
func (j *Joiner) span(hs []*entry, l *entry) span {
	t := l.line.Time
	end := t.Add(l.line.TimeRes) // began before the line was written
	hi := sortSearch(hs, end) - 1
	lo := sortSearch(hs, t.Add(1)) - 1 // the last one that began by t
	if first := sortSearch(hs, t.Add(-j.opts.Window)); lo < first {
		lo = first
	}
	if rt := l.line.RequestTime; rt > 0 {
		// The request began rt before it ended: its connection before.
		if h := sortSearch(hs, end.Add(-rt)) - 1; h >= lo {
			hi = h
		}
	}
	lo = max(lo, 0)
	return span{lo: lo, hi: hi, none: lo > hi}
}

// sortSearch is the index of the first handshake of hs that began at or
// after t.
func sortSearch(hs []*entry, t time.Time) int {
	lo, hi := 0, len(hs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if hs[m].ts.Before(t) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// decideLine decides line l given its candidates hs[sp.lo..sp.hi] and
// returns the index of the handshake it was given to (-1: none).
func (j *Joiner) decideLine(hs []*entry, l *entry, sp span) int {
	j.unambiguous(l)
	l.tried = true
	src := j.source(l.line.Log.Source)
	ll := &l.line
	first := ll.ConnRequests == 1
	var cands []int
	for x := sp.lo; x <= sp.hi; x++ {
		h := hs[x]
		if !j.compatible(h, l) {
			continue
		}
		if h.lineSeq != 0 && h.lineSeq < l.seq {
			// An earlier line of the log was its connection's: this
			// one's is not before it.
			cands = cands[:0]
		}
		if h.hasConn {
			if ll.Conn != 0 && h.conn != ll.Conn || ll.Log.PID != 0 && h.connPID != 0 && h.connPID != ll.Log.PID {
				continue // another connection's
			}
			if ll.Conn != 0 && ll.Log.PID != 0 && h.connPID == ll.Log.PID {
				cands = append(cands[:0], x) // this connection's
				break
			}
		}
		if first && h.firstReq {
			continue // its first request is known
		}
		cands = append(cands, x)
	}
	if len(cands) == 0 && sp.none {
		// No handshake began before the line: clocks apart by up to
		// Skew, the earliest that began after it.
		for x := max(sp.hi+1, 0); x < len(hs); x++ {
			h := hs[x]
			if !j.compatible(h, l) {
				break
			}
			if first && h.state == stateJoined || h.hasConn && ll.Conn != 0 && h.conn != ll.Conn {
				continue
			}
			cands = append(cands[:0], x)
			break
		}
	}
	if len(cands) > 1 {
		cands = j.tieBreak(hs, l, cands)
	}
	switch len(cands) {
	case 0:
		return -1 // waits for a late record, unmatched at MaxWait
	case 1:
		h := hs[cands[0]]
		switch h.state {
		case statePending:
			j.give(h, l)
			j.join(h, l)
		case stateJoined:
			j.give(h, l)
			src.Extra++
			l.state = stateDone
			j.remove(l)
		default: // emitted unjoined already: the line came too late
			src.Unmatched++
			l.state = stateDone
			j.remove(l)
		}
		return cands[0]
	}
	joined := true
	for _, x := range cands {
		joined = joined && hs[x].state == stateJoined
	}
	if joined {
		// A further request of one of several joined connections.
		src.Extra++
		l.state = stateDone
		j.remove(l)
		return -1
	}
	for _, x := range cands {
		hs[x].amb++
		l.cands = append(l.cands, hs[x])
	}
	return -1
}

// tieBreak narrows several candidates of line l by the facts both sides
// carry: a further request ($connection_requests above 1) is a joined
// connection's rather than one whose first request is missing; the TLS
// version and group, and the worker, agree. A fact rules candidates out
// only when some remain (a lone candidate that disagrees is the
// self-check's to count).
func (j *Joiner) tieBreak(hs []*entry, l *entry, cands []int) []int {
	ll := &l.line
	keep := func(ok func(h *entry) bool) {
		n := 0
		for _, x := range cands {
			if ok(hs[x]) {
				n++
			}
		}
		if n == 0 || n == len(cands) {
			return
		}
		n = 0
		for _, x := range cands {
			if ok(hs[x]) {
				cands[n] = x
				n++
			}
		}
		cands = cands[:n]
	}
	if ll.ConnRequests > 1 {
		keep(func(h *entry) bool { return h.state == stateJoined })
	}
	if ll.Log.SSLCurve != "" {
		g := IANAGroupName(ll.Log.SSLCurve)
		keep(func(h *entry) bool { return h.group == "" || strings.EqualFold(h.group, g) })
	}
	if ll.Version != "" {
		keep(func(h *entry) bool { return h.version == "" || h.version == ll.Version })
	}
	if ll.Log.PID != 0 {
		keep(func(h *entry) bool {
			return (h.workerPID == 0 || h.workerPID == ll.Log.PID) && (h.connPID == 0 || h.connPID == ll.Log.PID)
		})
	}
	return cands
}

// unambiguous forgets line l's candidates of an earlier decision.
func (j *Joiner) unambiguous(l *entry) {
	for _, h := range l.cands {
		h.amb--
	}
	clear(l.cands)
	l.cands = l.cands[:0]
}

func (j *Joiner) store(e *entry) {
	e.bytes = entryBytes(e)
	for j.live > 0 && (j.live >= j.opts.MaxPending || j.bytes+e.bytes > j.opts.MaxPendingBytes) {
		j.evictOldest(e.arrived)
	}
	j.live++
	j.bytes += e.bytes
	k := e.k()
	switch {
	case !e.isLine:
		// In time order (records come nearly in order: from the end).
		hs := j.hsByKey[k]
		i := len(hs)
		for i > 0 && hs[i-1].ts.After(e.ts) {
			i--
		}
		j.hsByKey[k] = slices.Insert(hs, i, e)
		j.hsByAddr[k.addr] = append(j.hsByAddr[k.addr], e)
	case e.line.Port != 0:
		j.lineByKey[k] = append(j.lineByKey[k], e)
	default:
		j.lineAddr[k.addr] = append(j.lineAddr[k.addr], e)
	}
	j.decideQ.push(e)
}

func (j *Joiner) evictOldest(now time.Time) {
	var e *entry
	if j.purgeQ.len() > 0 {
		if e = j.purgeQ.pop(); e.removed {
			return
		}
	} else {
		e = j.decideQ.pop()
		if e.removed {
			return
		}
		if e.state == statePending {
			if e.isLine {
				j.source(e.line.Log.Source).Unmatched++
			} else {
				j.st.UnmatchedHandshakes++
				j.emit(e.h)
				e.h = nil
			}
		}
	}
	j.st.Evicted++
	j.noAddrJoinUntil = now.Add(2 * j.opts.MaxWait)
	j.remove(e)
}

func (j *Joiner) remove(e *entry) {
	if e.removed {
		return
	}
	e.removed = true
	if e.isLine {
		j.unambiguous(e)
	}
	k := e.k()
	del := func(s []*entry) []*entry {
		switch i := slices.Index(s, e); {
		case i == 0:
			// The oldest, the usual one (entries are purged in time
			// order): no move of the rest, which behind a NAT is every
			// connection of the address in the last minutes.
			s[0] = nil
			s = s[1:]
		case i > 0:
			s = slices.Delete(s, i, i+1)
		}
		return s
	}
	switch {
	case !e.isLine:
		if s := del(j.hsByKey[k]); len(s) == 0 {
			delete(j.hsByKey, k)
		} else {
			j.hsByKey[k] = s
		}
		if s := del(j.hsByAddr[k.addr]); len(s) == 0 {
			delete(j.hsByAddr, k.addr)
		} else {
			j.hsByAddr[k.addr] = s
		}
	case e.line.Port != 0:
		if s := del(j.lineByKey[k]); len(s) == 0 {
			delete(j.lineByKey, k)
		} else {
			j.lineByKey[k] = s
		}
	default:
		if s := del(j.lineAddr[k.addr]); len(s) == 0 {
			delete(j.lineAddr, k.addr)
		} else {
			j.lineAddr[k.addr] = s
		}
	}
	j.live--
	j.bytes -= e.bytes
}

func (j *Joiner) join(h, l *entry) {
	h.state, l.state = stateJoined, stateJoined
	lg := l.line.Log
	h.h.Log = &lg
	if l.line.Pod != nil {
		h.h.Pod = l.line.Pod
	}
	j.st.Joined++
	j.source(lg.Source).Joined++
	if lg.SSLCurve != "" && h.h.Group != "" {
		j.st.CurveChecked++
		if !strings.EqualFold(IANAGroupName(lg.SSLCurve), h.h.Group) {
			j.st.CurveMismatch++
		}
	}
	j.emit(h.h)
	j.settle(h)
	if l.line.Port != 0 {
		// A joined line with the port is evidence of nothing: forget it now.
		j.remove(l)
	} else {
		j.settle(l)
	}
}

// Tick decides the entries that waited MaxWait by now and forgets the old
// evidence. AddHandshake and AddLine tick too; call it on a timer when no
// input arrives.
func (j *Joiner) Tick(now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.tick(now)
}

func (j *Joiner) tick(now time.Time) {
	for j.readyQ.len() > 0 {
		e := j.readyQ.front()
		if !e.removed && e.state == statePending && now.Before(e.ready) {
			break
		}
		j.readyQ.pop()
		if !e.removed && e.state == statePending {
			j.resolve(e.k(), now)
		}
	}
	for j.decideQ.len() > 0 && !now.Before(j.decideQ.front().arrived.Add(j.opts.MaxWait)) {
		j.decide(j.decideQ.pop())
	}
	for j.purgeQ.len() > 0 && !now.Before(j.purgeQ.front().arrived.Add(2*j.opts.MaxWait)) {
		j.remove(j.purgeQ.pop())
	}
}

// Flush decides every waiting entry now (end of input) and emits the
// handshakes still waiting.
func (j *Joiner) Flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	end := time.Unix(1<<40, 0)
	for j.readyQ.len() > 0 {
		if e := j.readyQ.pop(); !e.removed && e.state == statePending {
			j.resolve(e.k(), end)
		}
	}
	for j.decideQ.len() > 0 {
		j.decide(j.decideQ.pop())
	}
}

func (j *Joiner) decide(e *entry) {
	if e.removed {
		return
	}
	defer j.purgeQ.push(e)
	if e.state != statePending {
		return
	}
	defer func() {
		if e.state != statePending && !e.removed {
			j.settle(e)
		}
	}()
	if e.isLine {
		src := j.source(e.line.Log.Source)
		if e.line.Port != 0 {
			e.state = stateDone
			if len(e.cands) > 0 {
				src.Ambiguous++
				for _, h := range e.cands {
					h.ambiguous = true
				}
			} else {
				src.Unmatched++
			}
			j.unambiguous(e)
			return
		}
		h, n := j.addrHandshakes(e)
		switch {
		case n == 1 && j.addrJoinable(h, e):
			j.join(h, e)
		case n > 0 || e.ambiguous:
			e.state = stateDone
			src.Ambiguous++
		default:
			e.state = stateDone
			src.Unmatched++
		}
		return
	}
	// A handshake no line with its port claimed: try an address-only join.
	cand, n := j.addrLines(e)
	switch {
	case e.amb > 0 || e.ambiguous:
		// Lines with the port that more than one handshake could have
		// logged, this one among them.
		e.state = stateDone
		j.st.AmbiguousHandshakes++
		j.emit(e.h)
	case n == 0:
		e.state = stateDone
		j.st.UnmatchedHandshakes++
		j.emit(e.h)
	case n == 1 && j.addrJoinable(e, cand):
		j.join(e, cand)
	default:
		e.state = stateDone
		j.st.AmbiguousHandshakes++
		for _, l := range j.lineAddr[e.addr] {
			if j.compatible(e, l) {
				l.ambiguous = true
			}
		}
		j.emit(e.h)
	}
}

// addrJoinable reports whether handshake h and address-only line l, each the
// only candidate the other has, may be joined: both still waiting, l never
// part of an ambiguous decision, and no eviction has removed evidence.
func (j *Joiner) addrJoinable(h, l *entry) bool {
	if h.state != statePending || l.state != statePending || l.ambiguous || l.arrived.Before(j.noAddrJoinUntil) {
		return false
	}
	_, nl := j.addrLines(h)
	_, nh := j.addrHandshakes(l)
	return nl == 1 && nh == 1
}

// addrLines counts the address-only lines (waiting or decided) compatible
// with handshake h and returns the last one.
func (j *Joiner) addrLines(h *entry) (last *entry, n int) {
	for _, l := range j.lineAddr[h.addr] {
		if j.compatible(h, l) {
			last = l
			n++
		}
	}
	return last, n
}

// addrHandshakes counts the handshakes from the line's address (waiting or
// decided) that the line is compatible with and returns the last one.
func (j *Joiner) addrHandshakes(l *entry) (last *entry, n int) {
	for _, h := range j.hsByAddr[l.line.Addr] {
		if j.compatible(h, l) {
			last = h
			n++
		}
	}
	return last, n
}

// Batch joins offline: records and lines, each in any order, are merged by
// time and joined. Records are updated in place (Log set when joined). The
// options' Emit, if set, sees each record once.
func Batch(records []*record.Handshake, lines []Line, opts Options) Stats {
	hs := slices.Clone(records)
	slices.SortStableFunc(hs, func(a, b *record.Handshake) int { return a.TS.Compare(b.TS) })
	ls := make([]int, len(lines))
	for i := range ls {
		ls[i] = i
	}
	slices.SortStableFunc(ls, func(a, b int) int { return lines[a].Time.Compare(lines[b].Time) })
	if opts.MaxPendingBytes <= 0 {
		// Offline the records and lines are in memory already: the
		// entries add little, and an eviction would lose a join.
		opts.MaxPendingBytes = math.MaxInt
	}
	if opts.RecordDelay == 0 {
		// The records are merged with the lines in time order.
		opts.RecordDelay = -1
	}
	j := New(opts)
	hi, li := 0, 0
	for hi < len(hs) || li < len(ls) {
		if li >= len(ls) || (hi < len(hs) && !hs[hi].TS.After(lines[ls[li]].Time)) {
			j.AddHandshake(hs[hi], hs[hi].TS)
			hi++
		} else {
			j.AddLine(lines[ls[li]], lines[ls[li]].Time)
			li++
		}
	}
	j.Flush()
	return j.Stats()
}
