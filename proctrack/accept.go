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
// zero: half a minute of 4,000 accepts a second, far more than the seconds
// a record waits for attribution, in some 30 MB of Go heap
// (TestAcceptIndexVsFastcache measures 235 MB at a million, each entry
// keeping the accept before it of the same addresses).
const DefaultMaxAccepts = 1 << 17

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
	Replaced     uint64 // accepts replaced by a later one of the same addresses (a reused client port)
	RingDrops    uint64 // events the kernel dropped: the ring buffer was full
	ReadFailures uint64 // accepts whose socket the kernel program could not read
	Entries      int    // accepts in the index now
}

// Accepts receives accept events from the kernel and indexes them. Open it
// with OpenAccepts; it is safe for concurrent use.
type Accepts struct {
	idx *acceptIndex
	// offset is realtime minus monotonic, in nanoseconds.
	offset atomic.Int64
	kernel acceptKernel // nil in tests that feed the index directly
}

// acceptKernel is the loaded program: its counters, a sync of its reader,
// and Close.
type acceptKernel interface {
	counters() (drops, readFailures uint64)
	sync() bool
	close() error
}

// sync indexes what the kernel has sent so far, on the caller's goroutine
// (the ring is drained by a watcher only every second or in a burst): a
// record whose accept was not found asks before it waits longer.
// It says whether the ring held events not indexed yet.
func (a *Accepts) sync() bool {
	return a.kernel != nil && a.kernel.sync()
}

// Lookup returns the accept of the TCP connection client -> server (the
// server's address as the client saw it) that happened at or after
// notBefore: an older entry of the same addresses is an earlier
// connection that reused the client port. The index keeps the last two
// accepts of an address pair; with notBefore set, the one nearest to
// notBefore + acceptMargin (the connection's SYN, as the attribution asks)
// answers, so an earlier connection's record asked after its port was
// reused still finds its own accept. With notBefore zero, the latest.
func (a *Accepts) Lookup(client, server netip.AddrPort, notBefore time.Time) (Accept, bool) {
	e, ok := a.idx.get(acceptKeyOf(client, server))
	if !ok {
		return Accept{}, false
	}
	if notBefore.IsZero() {
		return e.accept(), true
	}
	nb := notBefore.UnixNano()
	syn := nb + int64(acceptMargin)
	cur := e.unixNano >= nb
	prev := e.prevNano != 0 && e.prevNano >= nb
	if prev && (!cur || absDiff(e.prevNano, syn) < absDiff(e.unixNano, syn)) {
		return Accept{TGID: int(e.prevTGID), TID: int(e.prevTID), Time: time.Unix(0, e.prevNano)}, true
	}
	if !cur {
		return Accept{}, false
	}
	return e.accept(), true
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// Stats returns the counters.
func (a *Accepts) Stats() AcceptStats {
	var s AcceptStats
	s.Events, s.Evictions, s.Replaced, s.Entries = a.idx.stats()
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
	a.idx.put(acceptKeyOf(remote, local), acceptEntry{tgid: tgid, tid: tid, unixNano: int64(mono) + a.offset.Load()})
}

// acceptKey is a connection's addresses, compact (36 bytes: the index
// holds a quarter million of them). IPv4 connections accepted on a
// dual-stack listener have v4-mapped addresses in the kernel and plain IPv4
// ones in the capture: both are unmapped, then stored as 16 bytes.
type acceptKey struct {
	client, server [16]byte
	cport, sport   uint16
}

func acceptKeyOf(client, server netip.AddrPort) acceptKey {
	return acceptKey{
		client: client.Addr().Unmap().As16(), server: server.Addr().Unmap().As16(),
		cport: client.Port(), sport: server.Port(),
	}
}

// acceptIndex is a map bounded in entries: a ring of keys in insertion
// order, the oldest evicted when the ring wraps. A key accepted again
// (a reused client port) replaces its entry; the older ring slot then no
// longer owns it and is skipped when reached.
type acceptIndex struct {
	mu       sync.Mutex
	m        map[acceptKey]acceptEntry
	ring     []acceptSlot
	seq      uint64
	evicted  uint64
	replaced uint64
}

// acceptEntry is an Accept and the one before it of the same addresses
// (a reused client port), compact: 40 bytes.
type acceptEntry struct {
	tgid, tid         uint32
	unixNano          int64
	seq               uint64
	prevTGID, prevTID uint32
	prevNano          int64 // 0: none
}

func (e acceptEntry) accept() Accept {
	return Accept{TGID: int(e.tgid), TID: int(e.tid), Time: time.Unix(0, e.unixNano)}
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

func (x *acceptIndex) put(k acceptKey, e acceptEntry) {
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
	e.seq = x.seq
	if old, ok := x.m[k]; ok {
		x.replaced++
		e.prevTGID, e.prevTID, e.prevNano = old.tgid, old.tid, old.unixNano
	}
	x.m[k] = e
	x.mu.Unlock()
}

func (x *acceptIndex) get(k acceptKey) (acceptEntry, bool) {
	x.mu.Lock()
	e, ok := x.m[k]
	x.mu.Unlock()
	return e, ok
}

func (x *acceptIndex) stats() (puts, evicted, replaced uint64, entries int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq, x.evicted, x.replaced, len(x.m)
}
