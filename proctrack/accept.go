package proctrack

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Accept events: the kernel's own record of which process accepted each TCP
// connection. An eBPF program on the syscalls:sys_exit_accept4 and
// sys_exit_accept tracepoints (bpf/accept.c) reads the new socket's
// addresses and sends them with the accepting thread through a ring buffer;
// Accepts keeps a bounded index of the recent ones, so a record is attributed
// exactly, after its connection closed and during swaps too, for any server.

// ErrAcceptsUnsupported is returned by OpenAccepts where the eBPF program
// cannot run at all (not Linux, or a big-endian build).
var ErrAcceptsUnsupported = errors.New("proctrack: accept events need Linux on a little-endian CPU")

// DefaultMaxAccepts is the accept index's bound when AcceptConfig leaves it
// zero: at some 100 bytes an entry, about 25 MB, a minute of 4,000 accepts
// a second, far more than the seconds a record waits for attribution.
const DefaultMaxAccepts = 1 << 18

// AcceptConfig configures OpenAccepts.
type AcceptConfig struct {
	// MaxEntries bounds the index; the oldest accept is evicted (and
	// counted) to make room. DefaultMaxAccepts by default.
	MaxEntries int
	// TracefsDir is where tracefs is (or is mounted when absent and the
	// process may), "/sys/kernel/tracing" by default.
	TracefsDir string
}

// Accept is one accepted connection: the accepting process (tgid) and
// thread, and when accept returned (realtime, converted from the kernel's
// monotonic clock).
type Accept struct {
	TGID, TID int
	Time      time.Time
}

// AcceptStats are the accept events' counters.
type AcceptStats struct {
	Events       uint64 // accept events read from the ring buffer
	Evictions    uint64 // accepts evicted from the index to respect its bound
	RingDrops    uint64 // events the kernel dropped: the ring buffer was full
	ReadFailures uint64 // accepts whose socket the kernel program could not read
	Entries      int    // accepts in the index now
}

// Accepts receives accept events from the kernel and indexes them. Open it
// with OpenAccepts; it is safe for concurrent use.
type Accepts struct {
	idx    *acceptIndex
	events atomic.Uint64
	// offset is realtime minus monotonic, in nanoseconds.
	offset atomic.Int64
	kernel acceptKernel // nil in tests that feed the index directly
}

// acceptKernel is the loaded program: its counters, and Close.
type acceptKernel interface {
	counters() (drops, readFailures uint64)
	close() error
}

// Lookup returns the accept of the TCP connection client -> server (the
// server's address as the client saw it) that happened at or after
// notBefore: an older entry of the same addresses is an earlier
// connection that reused the client port.
func (a *Accepts) Lookup(client, server netip.AddrPort, notBefore time.Time) (Accept, bool) {
	e, ok := a.idx.get(acceptKeyOf(client, server))
	if !ok || e.Time.Before(notBefore) {
		return Accept{}, false
	}
	return e, true
}

// Stats returns the counters.
func (a *Accepts) Stats() AcceptStats {
	s := AcceptStats{Events: a.events.Load()}
	s.Evictions, s.Entries = a.idx.stats()
	if a.kernel != nil {
		s.RingDrops, s.ReadFailures = a.kernel.counters()
	}
	return s
}

// Close detaches the program and releases its maps, the ring buffer reader
// and its goroutine.
func (a *Accepts) Close() error {
	if a == nil || a.kernel == nil {
		return nil
	}
	return a.kernel.close()
}

// add indexes one accept; mono is the kernel's CLOCK_MONOTONIC nanoseconds.
func (a *Accepts) add(local, remote netip.AddrPort, tgid, tid uint32, mono uint64) {
	a.events.Add(1)
	t := time.Unix(0, int64(mono)+a.offset.Load())
	a.idx.put(acceptKeyOf(remote, local), Accept{TGID: int(tgid), TID: int(tid), Time: t})
}

// acceptKey is a connection's addresses. IPv4 connections accepted on a
// dual-stack listener have v4-mapped addresses in the kernel and plain IPv4
// ones in the capture: both are unmapped.
type acceptKey struct{ client, server netip.AddrPort }

func acceptKeyOf(client, server netip.AddrPort) acceptKey {
	return acceptKey{
		netip.AddrPortFrom(client.Addr().Unmap(), client.Port()),
		netip.AddrPortFrom(server.Addr().Unmap(), server.Port()),
	}
}

// acceptIndex is a map bounded in entries: a ring of keys in insertion
// order, the oldest evicted when the ring wraps. A key accepted again
// (a reused client port) replaces its entry; the older ring slot then no
// longer owns it and is skipped when reached.
type acceptIndex struct {
	mu      sync.Mutex
	m       map[acceptKey]acceptEntry
	ring    []acceptSlot
	seq     uint64
	evicted uint64
}

type acceptEntry struct {
	Accept
	seq uint64
}

type acceptSlot struct {
	key acceptKey
	seq uint64 // 0: empty
}

func newAcceptIndex(max int) *acceptIndex {
	if max <= 0 {
		max = DefaultMaxAccepts
	}
	return &acceptIndex{m: make(map[acceptKey]acceptEntry, min(max, 1<<14)), ring: make([]acceptSlot, max)}
}

func (x *acceptIndex) put(k acceptKey, a Accept) {
	x.mu.Lock()
	x.seq++
	s := &x.ring[x.seq%uint64(len(x.ring))]
	if s.seq != 0 {
		if e, ok := x.m[s.key]; ok && e.seq == s.seq {
			delete(x.m, s.key)
			x.evicted++
		}
	}
	*s = acceptSlot{k, x.seq}
	x.m[k] = acceptEntry{a, x.seq}
	x.mu.Unlock()
}

func (x *acceptIndex) get(k acceptKey) (Accept, bool) {
	x.mu.Lock()
	e, ok := x.m[k]
	x.mu.Unlock()
	return e.Accept, ok
}

func (x *acceptIndex) stats() (evicted uint64, entries int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.evicted, len(x.m)
}
