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
	Time         time.Time
	Addr         [16]byte // IPv4-mapped when IPv4
	Port         uint16   // 0: the log has no port; address-only join
	ConnRequests int      // $connection_requests when logged; 0: unknown
	Log          record.Log
}

// FromNginx converts a parsed nginx line. ok is false when the line has no
// usable client address or time.
func FromNginx(l *logparse.NginxLine) (Line, bool) {
	addr, ok := parseAddr(l.RemoteAddr)
	if !ok || l.Time.IsZero() {
		return Line{}, false
	}
	return Line{
		Time: l.Time, Addr: addr, Port: l.RemotePort, ConnRequests: l.ConnectionRequests,
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
		Time: c.Time, Addr: addr, Port: c.RemotePort,
		Log: record.Log{
			Source: SourceCaddy, Status: c.Status, Method: string(c.Method), Host: string(c.Host),
			Path: string(c.URI), UserAgent: string(c.UserAgent),
		},
	}, true
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
	// MaxWait is how long (by the clock passed to Add/Tick) an entry waits
	// for its partner before it is decided (default Window+Skew+10s). It
	// must exceed Window+Skew plus the delivery delay of records and lines.
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
	ambiguous bool              // a line seen as a candidate in an ambiguous decision
	removed   bool              // no longer in the maps (its queue slot is skipped)
	server    serverKind        // a handshake's server, as the attribution named it (kept once h is let go)
	ts        time.Time         // event time
	arrived   time.Time         // by the caller's clock
	h         *record.Handshake // nil once emitted
	line      Line
}

func (e *entry) k() key {
	if e.isLine {
		return key{e.line.Addr, e.line.Port}
	}
	return key{e.addr, e.port}
}

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
		e.line.Log = record.Log{Source: e.line.Log.Source}
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
	if opts.MaxWait <= 0 {
		opts.MaxWait = opts.Window + opts.Skew + 10*time.Second
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
	e := &entry{ts: h.TS, arrived: now, h: h, addr: addr, port: port, server: serverOf(h)}
	k := e.k()
	// A line with the port may already be waiting: take the earliest
	// compatible one (the first request on the connection).
	var best *entry
	for _, l := range j.lineByKey[k] {
		if l.state == statePending && j.compatible(e, l) && (best == nil || earlier(l, best)) {
			best = l
		}
	}
	j.store(e)
	// Storing may have evicted best (the oldest entry).
	if best != nil && !best.removed {
		j.join(e, best)
	}
}

// earlier orders candidate lines: the first request of a connection first,
// then by time.
func earlier(a, b *entry) bool {
	if (a.line.ConnRequests == 1) != (b.line.ConnRequests == 1) {
		return a.line.ConnRequests == 1
	}
	return a.line.Time.Before(b.line.Time)
}

// AddLine adds a log line; now is the caller's clock.
func (j *Joiner) AddLine(l Line, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.tick(now)
	j.source(l.Log.Source).Lines++
	e := &entry{isLine: true, ts: l.Time, arrived: now, line: l}
	if l.Port != 0 {
		if h := j.bestHandshake(e); h != nil {
			switch h.state {
			case statePending:
				j.store(e)
				// Storing may have evicted h (the oldest entry).
				if !h.removed {
					j.join(h, e)
				}
				return
			case stateJoined:
				j.source(l.Log.Source).Extra++
				return
			}
		}
	}
	j.store(e)
}

// bestHandshake returns the handshake a port-carrying line belongs to: the
// most recent compatible one on that address and port.
func (j *Joiner) bestHandshake(l *entry) *entry {
	// A request is logged on a connection whose handshake came first: of
	// the compatible handshakes of the address and port, the latest that
	// began at or before the line's time, else the earliest after it
	// (within Skew). With a client port reused at once (the server closed
	// first, so the client has no TIME_WAIT), the latest overall would be
	// the next connection's, and the line would take its handshake. A
	// line logged as its connection's first request ($connection_requests
	// 1) cannot belong to a handshake another line already took: with a
	// log's times in whole seconds, both handshakes of a reused port can
	// come after the line's time.
	var before, after *entry
	first := l.line.ConnRequests == 1
	for _, h := range j.hsByKey[l.k()] {
		if !j.compatible(h, l) || first && h.state == stateJoined {
			continue
		}
		if !h.ts.After(l.line.Time) {
			if before == nil || h.ts.After(before.ts) {
				before = h
			}
		} else if after == nil || h.ts.Before(after.ts) {
			after = h
		}
	}
	if before != nil {
		return before
	}
	return after
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
		j.hsByKey[k] = append(j.hsByKey[k], e)
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
	k := e.k()
	del := func(s []*entry) []*entry {
		if i := slices.Index(s, e); i >= 0 {
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
			if h := j.bestHandshake(e); h != nil && h.state == stateJoined {
				src.Extra++
			} else {
				src.Unmatched++
			}
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
