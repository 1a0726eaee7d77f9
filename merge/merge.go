// Package merge makes one record of the views of one handshake: the stage
// right after the sniffer, before the taps (metrics) and every other stage.
//
// A node sees a handshake several times. Before kube-proxy's DNAT the
// client's packets cross the uplink addressed to a Service or Node address
// (10.198.0.2:443); after it they cross the CNI bridge and the pod's veth
// addressed to the pod (10.199.0.2:8443). Capturing on several interfaces
// (or -iface any) each sighting becomes a record of its own, and every
// count doubles or triples. The views share what NAT leaves alone: the
// ClientHello's random and, for TCP, the sequence number of its first byte
// (DNAT and SNAT/masquerade rewrite addresses and ports, never sequence
// numbers), for QUIC the client's first Destination Connection ID
// (record.View). Each routing hop takes one off the IP TTL: the view with
// the lowest TTL is the one nearest the server.
//
// Records with the same identity (same transport, random and sequence
// number or DCID) whose ts lie within Window of each other are one
// handshake. Each record is held for Hold waiting for its twins, then
// released in arrival order (FIFO: a capture on one interface, where
// nothing merges, gives the same records in the same order). The record
// released is the server's view (the lowest TTL: its server, outcome and
// ServerHello facts), with ts the earliest sighting, client from the view
// farthest from the server (with SNAT the server's view has the node's
// address; the client's side has the real client) and Frontend that
// view's server when it differs (the address the client dialled). Views
// with the same TTL collapse into the first. A twin that comes after its
// first sighting was released (within Remember) is dropped and counted,
// never a second record. A ClientHello replayed or copied on another
// connection (another sequence number, or outside Window) stays a record
// of its own: a stranger cannot hide handshakes by replaying one.
//
// Live, wall time drives the stage (a timer releases what is held);
// offline, the records' own capture times do: a watermark, the latest
// record time seen (ts plus the handshake's RTT), releases what arrived
// more than Hold before it, and Flush releases everything.
package merge

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

const (
	// Window is how far apart the sightings of one ClientHello may be.
	// The copies of one packet cross the uplink, the bridge and the veth
	// in the kernel's forwarding path of one softirq, expected
	// microseconds apart (not yet measured on a node: the Kubernetes-node
	// fixture is to confirm it); 5 ms also covers captures whose
	// timestamps are taken per ring block or on another CPU, and is still
	// far shorter than a client's retransmission timeout (200 ms at
	// least), so a retransmitted ClientHello is never within it.
	Window = 5 * time.Millisecond
	// Hold is how long a record waits for its twins. The views of a
	// completed handshake finish on the same ServerHello crossing both
	// interfaces (microseconds apart, plus the time the capture workers
	// take to reach it: a ring block, up to its timeout); 30 ms covers
	// that and costs only that much latency on the way to the sinks.
	// Records that end by expiry (timeout) are finished by housekeeping,
	// each worker's flows in turn, most often within the same run; when
	// not, a second apart, Remember catches the twin.
	Hold = 30 * time.Millisecond
	// Remember is how long an identity is remembered once its record was
	// released: a twin that comes later (a timeout its worker expired a
	// housekeeping second after the other) is dropped as late.
	Remember = 2 * time.Second
	// DefaultMaxHeld bounds the records held: 8192 in 30 ms is some
	// 270,000 handshakes a second. Beyond it the oldest leaves at once
	// (counted as overflow held).
	DefaultMaxHeld = 8192
	// DefaultMaxRemembered bounds the identities remembered (some 40
	// bytes each, 2.6 MB in all): 65,536 in 2 s is 32,000 handshakes a
	// second. Beyond it the oldest memory goes (counted as overflow
	// remembered): its late twin would become a record of its own.
	DefaultMaxRemembered = 1 << 16
)

// Config is the shape of a merge stage. Zero values take the defaults.
type Config struct {
	Window, Hold, Remember time.Duration
	MaxHeld, MaxRemembered int
	// Offline: the records' capture times drive the stage (a watermark);
	// else wall time, and a timer releases what is held.
	Offline bool
	// HoldNow, live: hold records from the start, not only once a
	// handshake was seen twice (a capture on several interfaces of a host
	// that forwards: a node's first handshakes are merged too).
	HoldNow bool
	// Now is the wall clock (tests); nil: time.Now.
	Now func() time.Time
	// Done receives each record merged into another (or dropped as a late
	// twin) once its fields were copied: it never reaches the sinks, and
	// Done may reuse its memory (pipeline.Config.Done).
	Done func(*record.Handshake)
}

// Stats counts what the stage did.
type Stats struct {
	Merged             uint64 // records merged into another's
	Late               uint64 // late twins dropped
	OverflowHeld       uint64 // records released before their hold: too many held
	OverflowRemembered uint64 // identities forgotten before Remember: too many remembered
	Held               int    // records held now
	Remembered         int    // identities remembered now
}

// key is a handshake's identity.
type key struct {
	random    [32]byte
	dcid      [20]byte
	seq       uint32
	dcidLen   uint8
	transport uint8
}

// entry is one handshake held: the view nearest the server, and what the
// record takes from the one farthest from it.
type entry struct {
	r   *record.Handshake // the view with the lowest TTL: the record released
	k   key
	h   uint64    // k's keyed hash
	has bool      // k is known (record.View.Known)
	at  time.Time // arrival, on the stage's clock
	ts  time.Time // the earliest sighting
	// The view with the highest TTL, when higher than r's.
	hi           bool
	hiTTL        uint8
	hiClient     string
	hiClientAddr [16]byte
	hiClientPort uint16
	hiServer     string
}

// memo is an identity released: its earliest sighting and until when it is
// remembered (UnixNano, on the stage's clock).
type memo struct{ ts, until int64 }

type memoAt struct {
	h     uint64
	until int64
}

// Merger is the stage. It is safe for concurrent use: the live agent's
// capture workers hand it records from several goroutines (the views of
// one handshake, under other addresses, go to other workers).
type Merger struct {
	cfg  Config
	next func(*record.Handshake)
	done func(*record.Handshake)
	seed maphash.Seed

	out   sync.Mutex          // held while records leave: they leave in order
	batch []*record.Handshake // under out

	mu   sync.Mutex
	q    ring[entry]       // held, in arrival order
	held map[uint64]uint64 // q's index by the keyed hash of the identity (the entry has it whole)
	mem  map[uint64]memo   // by the keyed hash of the identity
	// holdUntil (UnixNano, under mu): live, records are held until then,
	// HoldFor after a handshake was last seen twice; before, none waits.
	holdUntil int64
	memQ      ring[memoAt] // remembered identities, oldest first
	wm        time.Time    // offline: the watermark
	timer     *time.Timer
	armed     bool

	merged, late, overHeld, overMem atomic.Uint64
}

// New builds a stage that hands its records to next.
func New(cfg Config, next func(*record.Handshake)) *Merger {
	if cfg.Window <= 0 {
		cfg.Window = Window
	}
	if cfg.Hold <= 0 {
		cfg.Hold = Hold
	}
	if cfg.Remember <= 0 {
		cfg.Remember = Remember
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.MaxRemembered <= 0 {
		cfg.MaxRemembered = DefaultMaxRemembered
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Merger{cfg: cfg, next: next, done: cfg.Done, seed: maphash.MakeSeed(),
		held: make(map[uint64]uint64), mem: make(map[uint64]memo)}
	if m.done == nil {
		m.done = func(*record.Handshake) {}
	}
	if cfg.HoldNow && !cfg.Offline {
		m.holdUntil = cfg.Now().Add(HoldFor).UnixNano()
	}
	return m
}

// Stats returns the counters.
func (m *Merger) Stats() Stats {
	m.mu.Lock()
	held, remembered := m.q.len(), len(m.mem)
	m.mu.Unlock()
	return Stats{Merged: m.merged.Load(), Late: m.late.Load(), OverflowHeld: m.overHeld.Load(),
		OverflowRemembered: m.overMem.Load(), Held: held, Remembered: remembered}
}

func keyOf(r *record.Handshake) (key, bool) {
	v := &r.View
	if !v.Known {
		return key{}, false
	}
	k := key{random: v.Random, seq: v.Seq}
	switch r.Transport {
	case record.TransportTCP:
		k.transport = 1
	case record.TransportQUIC:
		k.transport = 2
		k.seq = 0
		k.dcid, k.dcidLen = v.DCID, v.DCIDLen
	default:
		return key{}, false
	}
	return k, true
}

func (m *Merger) hash(k *key) uint64 {
	var b [32 + 20 + 4 + 2]byte
	copy(b[:32], k.random[:])
	copy(b[32:52], k.dcid[:])
	b[52], b[53], b[54], b[55] = byte(k.seq>>24), byte(k.seq>>16), byte(k.seq>>8), byte(k.seq)
	b[56], b[57] = k.dcidLen, k.transport
	return maphash.Bytes(m.seed, b[:])
}

func within(a, b time.Time, w time.Duration) bool {
	d := a.Sub(b)
	return d <= w && d >= -w
}

// recordTime is when the sniffer finished r, as far as r tells: its
// ServerHello, else its ClientHello.
func recordTime(r *record.Handshake) time.Time {
	return r.TS.Add(time.Duration(r.HandshakeRTTMicros) * time.Microsecond)
}

// clock is the stage's time now (under mu); r, when set, is the record
// arriving, whose time moves the offline watermark on.
func (m *Merger) clock(r *record.Handshake) time.Time {
	if !m.cfg.Offline {
		return m.cfg.Now()
	}
	if r != nil {
		if t := recordTime(r); t.After(m.wm) {
			m.wm = t
		}
	}
	return m.wm
}

// Process takes a record from the sniffer.
func (m *Merger) Process(r *record.Handshake) {
	k, has := keyOf(r)
	var h uint64
	if has {
		h = m.hash(&k)
	}
	m.mu.Lock()
	now := m.clock(r)
	m.forget(now)
	if has {
		if i, ok := m.held[h]; ok {
			if e := m.q.at(i); e != nil && e.k == k && within(r.TS, e.ts, m.cfg.Window) {
				gone := m.merge(e, r)
				m.merged.Add(1)
				m.viewsSeen(now)
				m.mu.Unlock()
				m.done(gone)
				return
			}
		}
		if len(m.mem) > 0 {
			if mm, ok := m.mem[h]; ok && within(r.TS, time.Unix(0, mm.ts), m.cfg.Window) {
				m.late.Add(1)
				m.viewsSeen(now)
				m.mu.Unlock()
				m.done(r)
				return
			}
		}
	}
	at := now
	if !m.cfg.Offline && now.UnixNano() >= m.holdUntil {
		// Live, no handshake was seen twice lately (a host without NAT or
		// a second interface on the path): nothing waits. Holding would
		// delay every record, and the attribution's socket lookup misses
		// a short connection that closed meanwhile. The identity is still
		// remembered: a twin coming now is dropped as late, and turns
		// the hold on.
		at = now.Add(-m.cfg.Hold)
	}
	i := m.q.push(entry{r: r, k: k, h: h, has: has, at: at, ts: r.TS})
	if has {
		m.held[h] = i
	}
	ready := m.ready(now)
	m.arm(now)
	m.mu.Unlock()
	if ready {
		m.drain(false)
	}
}

// HoldFor is how long, live, records are held after a handshake was last
// seen twice (merged or late): a node with NAT or several captured
// interfaces on the path holds them as long as its views keep coming.
const HoldFor = 10 * time.Minute

// viewsSeen turns the live hold on, or keeps it on, from now (under mu).
func (m *Merger) viewsSeen(now time.Time) {
	if !m.cfg.Offline {
		m.holdUntil = now.Add(HoldFor).UnixNano()
	}
}

// merge takes view r into e and returns the record no longer needed.
func (m *Merger) merge(e *entry, r *record.Handshake) *record.Handshake {
	if r.TS.Before(e.ts) {
		e.ts = r.TS
	}
	ttl, near := r.View.TTL, e.r.View.TTL
	switch {
	case ttl > near:
		if !e.hi || ttl > e.hiTTL {
			e.setHi(r)
		}
		return r
	case ttl < near:
		// r is nearer the server: it is the record now.
		return e.replace(r, true)
	case r.Server != e.r.Server:
		// A DNAT without a routing hop (a pod reaching a Service on its
		// own bridge): the TTLs agree, and the view seen later, after
		// the rewrite, is the server's.
		if r.TS.After(e.r.TS) {
			return e.replace(r, true)
		}
		if !e.hi {
			e.setHi(r)
		}
		return r
	case r.Outcome == record.OutcomeOK && e.r.Outcome != record.OutcomeOK:
		// Of two views as near, the one that saw the handshake complete:
		// a bridge whose netfilter undoes the SNAT before the reply
		// reaches it carries only the client's half (its view ends
		// reset), the pod's veth both.
		return e.replace(r, false)
	}
	return r
}

// replace makes r the record and returns the one it replaces; farther
// says the old one is the client's side of r (when no farther view was
// seen, it gives the client and the frontend).
func (e *entry) replace(r *record.Handshake, farther bool) *record.Handshake {
	old := e.r
	if farther && !e.hi {
		e.setHi(old)
	}
	e.r = r
	return old
}

// setHi keeps what the record takes from the view farthest from the
// server: strings and scalars only, since the record goes back to Done.
func (e *entry) setHi(r *record.Handshake) {
	e.hi, e.hiTTL = true, r.View.TTL
	e.hiClient, e.hiClientAddr, e.hiClientPort = r.Client, r.ClientAddr, r.ClientPort
	e.hiServer = r.Server
}

// ready says whether the oldest record held may leave (under mu).
func (m *Merger) ready(now time.Time) bool {
	e := m.q.peek()
	return e != nil && (m.q.len() > m.cfg.MaxHeld || m.due(e, now))
}

func (m *Merger) due(e *entry, now time.Time) bool {
	if m.cfg.Offline {
		return now.Sub(e.at) > m.cfg.Hold
	}
	return now.Sub(e.at) >= m.cfg.Hold
}

// arm sets the timer, live, for the oldest record held (under mu).
func (m *Merger) arm(now time.Time) {
	if m.cfg.Offline || m.armed {
		return
	}
	e := m.q.peek()
	if e == nil {
		return
	}
	d := max(e.at.Add(m.cfg.Hold).Sub(now), 0)
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.tick)
	} else {
		m.timer.Reset(d)
	}
	m.armed = true
}

func (m *Merger) tick() {
	m.mu.Lock()
	m.armed = false
	m.mu.Unlock()
	m.drain(false)
}

// Flush releases every record held, in order.
func (m *Merger) Flush() { m.drain(true) }

// Reset releases every record held and forgets every identity and, offline,
// the watermark: another capture begins (analyze's next file), whose
// records are no twins of the last one's.
func (m *Merger) Reset() {
	m.drain(true)
	m.mu.Lock()
	clear(m.mem)
	m.memQ = ring[memoAt]{}
	m.wm = time.Time{}
	m.mu.Unlock()
}

// drain releases, in arrival order, the records whose hold is over (all
// with flush) and hands them on.
func (m *Merger) drain(flush bool) {
	m.out.Lock()
	m.mu.Lock()
	now := m.clock(nil)
	for {
		e := m.q.peek()
		if e == nil {
			break
		}
		over := m.q.len() > m.cfg.MaxHeld
		if !flush && !over && !m.due(e, now) {
			break
		}
		if over && !m.due(e, now) {
			m.overHeld.Add(1)
		}
		m.batch = append(m.batch, m.release(e, m.q.first, now))
		m.q.pop()
	}
	if flush && m.timer != nil {
		m.timer.Stop()
		m.armed = false
	} else {
		m.arm(now)
	}
	m.mu.Unlock()
	for i, r := range m.batch {
		m.next(r)
		m.batch[i] = nil
	}
	m.batch = m.batch[:0]
	m.out.Unlock()
}

// release finishes the record of the held entry e, q's i-th, and
// remembers its identity (under mu).
func (m *Merger) release(e *entry, i uint64, now time.Time) *record.Handshake {
	r := e.r
	r.TS = e.ts
	if e.hi {
		if e.hiServer != r.Server {
			r.Frontend = e.hiServer
		}
		seen := r.ClientAddrPort()
		r.Client, r.ClientAddr, r.ClientPort = e.hiClient, e.hiClientAddr, e.hiClientPort
		if seen != r.ClientAddrPort() {
			r.Peer = seen // SNAT: the server, its socket and its log saw this one
		}
	}
	if e.has {
		if j, ok := m.held[e.h]; ok && j == i {
			delete(m.held, e.h)
		}
		m.remember(e.h, e.ts, now)
	}
	return r
}

// remember keeps a released identity for Remember (under mu).
func (m *Merger) remember(h uint64, ts, now time.Time) {
	if m.memQ.len() >= m.cfg.MaxRemembered {
		old := *m.memQ.peek()
		m.memQ.pop()
		if mm, ok := m.mem[old.h]; ok && mm.until == old.until {
			delete(m.mem, old.h)
			m.overMem.Add(1)
		}
	}
	until := now.Add(m.cfg.Remember).UnixNano()
	m.mem[h] = memo{ts: ts.UnixNano(), until: until}
	m.memQ.push(memoAt{h: h, until: until})
}

// forget drops the identities remembered past their time (under mu).
func (m *Merger) forget(now time.Time) {
	t := now.UnixNano()
	for {
		p := m.memQ.peek()
		if p == nil || p.until > t {
			return
		}
		old := *p
		m.memQ.pop()
		if mm, ok := m.mem[old.h]; ok && mm.until == old.until {
			delete(m.mem, old.h)
		}
	}
}

// ring is a FIFO queue over a slice that grows by doubling. Its elements
// keep their index while they are in it (the i-th pushed is at
// buf[i%len(buf)]), so that a map can point into it.
type ring[T any] struct {
	buf   []T
	first uint64 // the index of the oldest element
	size  int
}

func (r *ring[T]) len() int { return r.size }

// push appends v and returns its index.
func (r *ring[T]) push(v T) uint64 {
	if r.size == len(r.buf) {
		n := make([]T, max(16, 2*len(r.buf)))
		for i := r.first; i < r.first+uint64(r.size); i++ {
			n[i%uint64(len(n))] = r.buf[i%uint64(len(r.buf))]
		}
		r.buf = n
	}
	i := r.first + uint64(r.size)
	r.buf[i%uint64(len(r.buf))] = v
	r.size++
	return i
}

// at is the element of index i, nil when it is no longer (or not yet) in
// the ring.
func (r *ring[T]) at(i uint64) *T {
	if i < r.first || i >= r.first+uint64(r.size) {
		return nil
	}
	return &r.buf[i%uint64(len(r.buf))]
}

// peek is the oldest element, nil when the ring is empty.
func (r *ring[T]) peek() *T { return r.at(r.first) }

// pop drops the oldest element.
func (r *ring[T]) pop() {
	if r.size == 0 {
		return
	}
	var zero T
	r.buf[r.first%uint64(len(r.buf))] = zero
	r.first++
	r.size--
}
