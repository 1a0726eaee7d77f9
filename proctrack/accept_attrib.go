package proctrack

import (
	"log/slog"
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

func (s *acceptSource) close() {
	if a := s.a.Swap(nil); a != nil {
		a.Close()
	}
}

// startAccepts opens the accept events, once, and says at start which
// source attribution uses and why.
func (x *attribIndex) startAccepts(off bool, maxAccepts int, log *slog.Logger) {
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
		x.acc.a.Store(a)
		log.Info("attributing handshakes from the kernel's accept events", "source", SourceEBPF)
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
// ring buffer held events not indexed yet (false without accept events): a
// lookup that missed before a sync that found nothing misses for good.
func (x *attribIndex) syncAccepts() bool {
	if a := x.acc.a.Load(); a != nil {
		return a.sync()
	}
	return false
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
func (x *attribIndex) attributeAccept(r *record.Handshake) (*record.Generation, acceptResult) {
	a := x.acc.a.Load()
	if a == nil || r.Transport != record.TransportTCP {
		return nil, acceptOff
	}
	var client, server netip.AddrPort
	if r.ClientPort != 0 && r.ServerPort != 0 && r.ServerAddr != ([16]byte{}) { // the sniffer's: no parsing
		client = netip.AddrPortFrom(netip.AddrFrom16(r.ClientAddr), r.ClientPort)
		server = netip.AddrPortFrom(netip.AddrFrom16(r.ServerAddr), r.ServerPort)
	} else {
		var err1, err2 error
		client, err1 = netip.ParseAddrPort(r.Client)
		server, err2 = netip.ParseAddrPort(r.Server)
		if err1 != nil || err2 != nil {
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
	if g, ok := x.generationOf(e.TGID); ok {
		a.Claim(e)
		return g, acceptFound
	}
	if g, ok := x.rememberedGeneration(e.TGID); ok {
		a.Claim(e)
		return g, acceptFound
	}
	x.rescanSoon()
	return nil, acceptUnknown
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
func (x *attribIndex) rememberedGeneration(pid int) (*record.Generation, bool) {
	s := &x.acc
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.seen[pid]
	return e.gen, ok
}
