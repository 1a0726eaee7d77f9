package proctrack

import (
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// Attribution sources, the label values of pqwatch_attribution_source_info.
const (
	SourceEBPF     = "ebpf"     // the kernel's accept events first
	SourceFallback = "fallback" // process scans and socket lookups only
)

// acceptSource is the tracker's accept events: opened once, by the first
// NewAttribution (the live stage), closed with the tracker.
type acceptSource struct {
	once    sync.Once
	started atomic.Bool
	a       atomic.Pointer[Accepts]
	reason  string // why fallback; set before started

	// seen remembers the generation of every process of recent scans, for
	// accepts by processes that exited since (a worker that drained after
	// WINCH or a reload): pid -> generation, dropped a minute after its
	// last scan.
	mu   sync.Mutex
	seen map[int]seenPid
}

type seenPid struct {
	gen  *record.Generation
	last time.Time
}

// seenTTL is how long an exited process's generation is remembered.
const seenTTL = time.Minute

// on says whether the accept events are open.
func (s *acceptSource) on() bool { return s.a.Load() != nil }

func (s *acceptSource) close() {
	if a := s.a.Swap(nil); a != nil {
		a.Close()
	}
}

// startAccepts opens the accept events, once, and says at start which
// source attribution uses and why.
func (x *attribIndex) startAccepts(off, all bool, maxAccepts int, log *slog.Logger) {
	x.acc.once.Do(func() {
		defer x.acc.started.Store(true)
		if off {
			x.acc.reason = "switched off"
			log.Info("attribution without accept events: process scans and socket lookups", "source", SourceFallback, "reason", x.acc.reason)
			return
		}
		a, err := OpenAccepts(AcceptConfig{MaxEntries: maxAccepts})
		if err != nil {
			x.acc.reason = err.Error()
			log.Warn("accept events (eBPF) unavailable: attributing by process scans and socket lookups; swap windows may go unattributed", "source", SourceFallback, "reason", err)
			return
		}
		x.epochs.attached = x.now()
		x.acc.a.Store(a)
		x.req.rescanSoon() // the next Tick scans, and chooses the quiet set
		if all {
			log.Info("attributing handshakes from the kernel's accept events, every accept reported", "source", SourceEBPF)
		} else {
			log.Info("attributing handshakes from the kernel's accept events; outside swaps the busiest generation's accepts are only counted (-all-accept-events reports them too)", "source", SourceEBPF)
		}
	})
}

// source says whether attribution uses the kernel's accept events
// (SourceEBPF) or not (SourceFallback, with the reason); "" before an
// Attribution stage started them.
func (x *attribIndex) source() (source, reason string) {
	if !x.acc.started.Load() {
		return "", ""
	}
	if x.acc.a.Load() != nil {
		return SourceEBPF, ""
	}
	return SourceFallback, x.acc.reason
}

// acceptStats returns the accept events' counters (zero without them).
func (x *attribIndex) acceptStats() AcceptStats {
	if a := x.acc.a.Load(); a != nil {
		return a.Stats()
	}
	return AcceptStats{}
}

// syncAccepts indexes what the kernel sent so far, and says whether the
// ring buffer held events not indexed yet (false without accept events).
func (x *attribIndex) syncAccepts() bool {
	if a := x.acc.a.Load(); a != nil {
		more, _, _ := a.sync()
		return more
	}
	return false
}

// acceptOrQuiet looks a TCP record's accept up in the index, the kernel's
// ring read first, and again after a miss when the ring held more. When
// the accept is not there for good (every event the kernel committed
// before the lookup was indexed), the quiet epoch may answer (quiet true).
func (x *attribIndex) acceptOrQuiet(r *record.Handshake) (g *record.Generation, res acceptResult, quiet bool) {
	a := x.acc.a.Load()
	if a == nil {
		return nil, acceptOff, false
	}
	_, drained, missed := a.sync()
	if drained && !r.FlowStart.IsZero() && r.Transport == record.TransportTCP &&
		a.NoEventSince(serverPort(r), r.FlowStart.Add(-acceptMargin).UnixNano()) {
		// Every committed event is indexed and none is on the record's
		// port since its SYN: the lookup would miss, for good.
		if qg, ok := x.epochs.answer(r, missed); ok {
			return qg, acceptFound, true
		}
		return nil, acceptMiss, false
	}
	v := x.view.Load()
	g, res = x.attributeAccept(r, v)
	if res == acceptMiss {
		// A sync that indexed nothing new says nothing of the lookup
		// before it (a concurrent drain may have indexed the event since):
		// only the state before the last lookup counts.
		if more, d, m := a.sync(); more {
			g, res = x.attributeAccept(r, x.view.Load())
			drained, missed = d, m
		}
	}
	if res == acceptMiss && drained {
		if qg, ok := x.epochs.answer(r, missed); ok {
			return qg, acceptFound, true
		}
	}
	return g, res, false
}

// acceptResult is what the accept index says of one record.
type acceptResult int

const (
	acceptOff     acceptResult = iota // no accept events, or not a TCP record
	acceptMiss                        // no accept event (yet: the reader may lag a connection this short)
	acceptFound                       // the accepting process's generation
	acceptUnknown                     // an accept by a process the last scan did not know
)

// attributeAccept looks up the accept of a TCP record's connection and the
// generation of the process that accepted it, as of v's scan (or one of
// the last seenTTL).
func (x *attribIndex) attributeAccept(r *record.Handshake, v *scanView) (*record.Generation, acceptResult) {
	a := x.acc.a.Load()
	if a == nil || r.Transport != record.TransportTCP {
		return nil, acceptOff
	}
	var client, server netip.AddrPort
	if r.ClientPort != 0 && r.ServerPort != 0 && r.ServerAddr != ([16]byte{}) && !r.Peer.IsValid() { // the sniffer's: no parsing
		client = netip.AddrPortFrom(netip.AddrFrom16(r.ClientAddr), r.ClientPort)
		server = netip.AddrPortFrom(netip.AddrFrom16(r.ServerAddr), r.ServerPort)
	} else {
		client, server = r.ServerSeenClient(), serverAddrPort(r)
		if !client.IsValid() || !server.IsValid() {
			return nil, acceptMiss
		}
	}
	var notBefore time.Time
	if !r.FlowStart.IsZero() {
		notBefore = r.FlowStart.Add(-acceptMargin)
	}
	e, ok := a.Lookup(client, server, notBefore)
	if !ok {
		return nil, acceptMiss
	}
	// Found: the record is attributed to g (now, or by Run once the
	// tracker is free), so the accept is claimed.
	if g, ok := v.byPID[e.TGID]; ok {
		a.Claim(e)
		return g, acceptFound
	}
	if g, ok := x.acc.rememberedGeneration(e.TGID); ok {
		a.Claim(e)
		return g, acceptFound
	}
	x.req.rescanSoon()
	return nil, acceptUnknown
}

// quietEpoch is a span during which the kernel reported every accept but
// those of pids, the serving processes of one generation (the kernel's
// quiet set): a TCP connection accepted then with no accept event was
// accepted by one of pids, so gen is the answer, without the ~1.4 µs of
// kernel time an event costs (the socket read through the fd table, the
// ring buffer write). Outside swaps nearly every accept is the quiet
// generation's.
type quietEpoch struct {
	// from is before the set began to be written, to after the next set
	// was (zero while current): every accept left unreported in the
	// epoch happened between them.
	from, to time.Time
	missed   uint64             // the kernel's missed count at from
	pids     []int              // sorted
	gen      *record.Generation // WorkerPID set when pids holds one process
	ports    []uint16           // the TCP ports gen listens on
}

// quietHistory is the recent epochs, oldest first, published whole: a
// record asked after the set changed may have been accepted in the epoch
// before. Before floor (the end of the last epoch let go) nothing is
// known any more: a connection that began then is not answered.
type quietHistory struct {
	epochs []quietEpoch
	floor  time.Time
}

// maxQuietEpochs bounds the history.
const maxQuietEpochs = 4

// quietEpochs is the kernel's quiet set over time: hist, the recent
// epochs (the last one current unless it has ended: every accept reported
// since), read per record without a lock; mu serialises set, the
// scanner's; errSaid: a failed write was logged (once).
type quietEpochs struct {
	hist     atomic.Pointer[quietHistory]
	attached time.Time // when the program was attached: no accept before it was reported
	mu       sync.Mutex
	errSaid  bool
}

// setQuiet makes pids (the serving processes of gen, sorted; ports, the
// TCP ports gen listens on, sorted) the kernel's quiet set, or reports
// every accept again when pids is empty. An epoch whose set, generation
// and ports are unchanged, and whose kernel missed nothing, goes on.
func (x *attribIndex) setQuiet(pids []int, gen *record.Generation, ports []uint16, log *slog.Logger) {
	if a := x.acc.a.Load(); a != nil && a.kernel != nil { // no kernel: nothing goes unreported
		x.epochs.set(a, pids, gen, ports, x.now, log)
	}
}

// set is setQuiet on the accept program a.
func (s *quietEpochs) set(a *Accepts, pids []int, gen *record.Generation, ports []uint16, now func() time.Time, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var h quietHistory
	if p := s.hist.Load(); p != nil {
		h = *p
	}
	var cur *quietEpoch
	if n := len(h.epochs); n > 0 && h.epochs[n-1].to.IsZero() {
		cur = &h.epochs[n-1]
	}
	if cur == nil && len(pids) == 0 {
		return
	}
	if cur != nil && len(pids) > 0 && slices.Equal(cur.pids, pids) && cur.gen.ID == gen.ID &&
		cur.gen.WorkerPID == gen.WorkerPID && slices.Equal(cur.ports, ports) {
		if a.Missed() == cur.missed {
			return
		}
	}
	from := now()
	n := a.Missed()
	err := a.SetQuiet(pids)
	if err != nil {
		if !s.errSaid {
			s.errSaid = true
			log.Warn("accept events: the quiet set could not be written: every accept is reported", "err", err)
		}
		a.SetQuiet(nil)
	}
	to := now()
	next := quietHistory{epochs: make([]quietEpoch, 0, maxQuietEpochs), floor: h.floor}
	keep := max(0, len(h.epochs)-maxQuietEpochs+1)
	for i, e := range h.epochs {
		if e.to.IsZero() {
			e.to = to
		}
		if i < keep {
			next.floor = e.to
			continue
		}
		next.epochs = append(next.epochs, e)
	}
	if err == nil && len(pids) > 0 {
		next.epochs = append(next.epochs, quietEpoch{from: from, missed: n, pids: pids, gen: gen, ports: ports})
	}
	s.hist.Store(&next)
}

// answer answers a TCP record whose accept event is not in the index
// for good (missed: the kernel's missed count when that was known): the
// quiet generation, when
//   - a server answered the ClientHello (a ServerHello or a
//     HelloRetryRequest), so some process accepted the connection before
//     the record was finished: a process outside the quiet set would
//     have reported it;
//   - of the epochs in force between the connection's SYN (less
//     acceptMargin) and now, those whose generation listens on the
//     record's server port (the others' processes cannot have accepted
//     it) had one generation, and there was at least one (so another
//     server's connection is never answered: one whose accepts the
//     tracepoints cannot see, io_uring's, say);
//   - the kernel missed no accept since the first of those epochs began,
//     and the program was attached before the connection began.
//
// WorkerPID is kept when those epochs had the same single process.
func (s *quietEpochs) answer(r *record.Handshake, missed uint64) (*record.Generation, bool) {
	p := s.hist.Load()
	if p == nil || r.Transport != record.TransportTCP || (r.ServerHelloBytes == 0 && !r.HRR) || r.FlowStart.IsZero() {
		return nil, false
	}
	if r.FlowStart.Before(s.attached) {
		return nil, false // accepted, maybe, before any accept was reported
	}
	since := r.FlowStart.Add(-acceptMargin)
	if !since.After(p.floor) {
		return nil, false // an epoch let go may have been in force
	}
	port := serverPort(r)
	// The epochs in force since the connection began, of generations
	// that listen on its port (another's processes cannot have accepted
	// it): one generation, or no answer.
	var first *quietEpoch
	g := (*record.Generation)(nil)
	for i := range p.epochs {
		e := &p.epochs[i]
		if (!e.to.IsZero() && e.to.Before(since)) || !slices.Contains(e.ports, port) {
			continue
		}
		if first == nil {
			first, g = e, e.gen
			continue
		}
		if e.gen.ID != g.ID || e.gen.MasterPID != g.MasterPID {
			return nil, false
		}
		if e.gen.WorkerPID != g.WorkerPID {
			w := *g
			w.WorkerPID = 0
			g = &w
		}
	}
	if first == nil || missed != first.missed {
		return nil, false
	}
	return g, true
}

// serverPort is r's server port: the sniffer's field, else parsed from
// its text.
func serverPort(r *record.Handshake) uint16 {
	if r.ServerPort != 0 {
		return r.ServerPort
	}
	return serverAddrPort(r).Port()
}

// remember notes the generation of every process of a scan at now, and
// forgets those last scanned more than seenTTL ago.
func (s *acceptSource) remember(byPID map[int]*record.Generation, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[int]seenPid{}
	}
	for pid, g := range byPID {
		s.seen[pid] = seenPid{g, now}
	}
	for p, e := range s.seen {
		if now.Sub(e.last) > seenTTL {
			delete(s.seen, p)
		}
	}
}

// rememberedGeneration returns the generation pid served in until it
// exited, as of the scans of the last seenTTL.
func (s *acceptSource) rememberedGeneration(pid int) (*record.Generation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.seen[pid]
	return e.gen, ok
}
