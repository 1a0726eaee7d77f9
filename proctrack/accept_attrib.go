package proctrack

import (
	"net/netip"
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
	once     sync.Once
	started  atomic.Bool
	a        atomic.Pointer[Accepts]
	reason   string // why fallback; set before started
	byAccept atomic.Uint64
	// unknownPid counts accepts found whose process the tracker did not
	// know (yet): the record waited for a scan or fell back.
	unknownPid atomic.Uint64

	// seen remembers the generation of every serving pid of recent scans,
	// for accepts by processes that exited since (a worker that drained
	// after WINCH or a reload): pid -> generation, dropped a minute after
	// its last scan.
	mu       sync.Mutex
	seen     map[int]seenPid
	seenScan time.Time // the scan seen was last refreshed from
}

type seenPid struct {
	gen  *record.Generation
	last time.Time
}

// seenTTL is how long an exited process's generation is remembered.
const seenTTL = time.Minute

func (s *acceptSource) close() {
	if a := s.a.Swap(nil); a != nil {
		a.Close()
	}
}

// startAccepts opens the accept events, once, and says at start which
// source attribution uses and why.
func (t *Tracker) startAccepts() {
	t.acc.once.Do(func() {
		defer t.acc.started.Store(true)
		if t.cfg.NoAcceptEvents {
			t.acc.reason = "switched off"
			t.log.Info("attribution without accept events: process scans and socket lookups", "source", SourceFallback, "reason", t.acc.reason)
			return
		}
		a, err := OpenAccepts(AcceptConfig{MaxEntries: t.cfg.MaxAccepts})
		if err != nil {
			t.acc.reason = err.Error()
			t.log.Warn("accept events (eBPF) unavailable: attributing by process scans and socket lookups; swap windows may go unattributed", "source", SourceFallback, "reason", err)
			return
		}
		t.acc.a.Store(a)
		t.log.Info("attributing handshakes from the kernel's accept events", "source", SourceEBPF)
	})
}

// AttributionSource says whether attribution uses the kernel's accept
// events (SourceEBPF) or not (SourceFallback, with the reason); "" before
// an Attribution stage started them.
func (t *Tracker) AttributionSource() (source, reason string) {
	if !t.acc.started.Load() {
		return "", ""
	}
	if t.acc.a.Load() != nil {
		return SourceEBPF, ""
	}
	return SourceFallback, t.acc.reason
}

// AcceptStats returns the accept events' counters (zero without them).
func (t *Tracker) AcceptStats() AcceptStats {
	if a := t.acc.a.Load(); a != nil {
		return a.Stats()
	}
	return AcceptStats{}
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
// generation of the process that accepted it.
func (t *Tracker) attributeAccept(r *record.Handshake) (*record.Generation, acceptResult) {
	a := t.acc.a.Load()
	if a == nil || r.Transport != record.TransportTCP {
		return nil, acceptOff
	}
	client, err1 := netip.ParseAddrPort(r.Client)
	server, err2 := netip.ParseAddrPort(r.Server)
	if err1 != nil || err2 != nil {
		return nil, acceptMiss
	}
	var notBefore time.Time
	if !r.FlowStart.IsZero() {
		notBefore = r.FlowStart.Add(-acceptMargin)
	}
	e, ok := a.Lookup(client, server, notBefore)
	if !ok {
		return nil, acceptMiss
	}
	if g, ok := t.GenerationOf(e.TGID); ok {
		return g, acceptFound
	}
	if g, ok := t.rememberedGeneration(e.TGID); ok {
		return g, acceptFound
	}
	t.rescanSoon()
	return nil, acceptUnknown
}

// rescanSoon makes the next scan read /proc's directory and search for
// the owners of listening sockets, whatever ListenerRescan says: an
// accept by an unknown process is a new server (a restarted Caddy) or a
// new worker, and its records wait for that scan.
func (t *Tracker) rescanSoon() {
	t.mu.Lock()
	t.lastListen = time.Time{}
	t.lastDir = time.Time{}
	t.mu.Unlock()
}

// rememberedGeneration returns the generation pid served in until it
// exited, as of the scans since the last call (refreshed once per scan).
func (t *Tracker) rememberedGeneration(pid int) (*record.Generation, bool) {
	s := &t.acc
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, _ := t.LastScan(); last.After(s.seenScan) {
		s.seenScan = last
		if s.seen == nil {
			s.seen = map[int]seenPid{}
		}
		for _, g := range t.Generations() {
			if !g.Alive {
				continue
			}
			if g.MasterPID > 0 {
				gc := g.Generation
				gc.WorkerPID = 0
				s.seen[g.MasterPID] = seenPid{&gc, last}
			}
			for _, w := range append(g.Workers, g.Draining...) {
				gc := g.Generation
				gc.WorkerPID = w
				s.seen[w] = seenPid{&gc, last}
			}
		}
		for p, e := range s.seen {
			if last.Sub(e.last) > seenTTL {
				delete(s.seen, p)
			}
		}
	}
	e, ok := s.seen[pid]
	return e.gen, ok
}
