package proctrack

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// Attribution is the pipeline stage that gives each record the server
// generation that accepted its connection (record.Generation). It runs off
// the capture path: a process lookup may wait on netlink and /proc, and the
// rings must keep draining meanwhile. Process queues a record (or, when the
// queue is full, hands it on unattributed: the capture never waits); Run
// attributes the queue; Flush closes the queue and waits for Run to hand on
// everything.
//
// A record whose accept event is indexed is attributed in Process, on the
// caller's goroutine: no queue, no wakeup. Run is not woken for each of the
// others either: in a quiet period records wait for the next process scan
// anyway, and waking another goroutine (another thread) per record cost
// more than parsing it. It is nudged only for records that need a prompt
// exact lookup (swap windows), when the queue is half full, and when it
// sleeps with nothing pending.
type Attribution struct {
	t    *Tracker     // the generations (their handshake counts)
	x    *attribIndex // the answers
	next func(*record.Handshake)

	q       chan attribItem
	nudge   chan struct{} // wakes Run
	done    chan struct{}
	started atomic.Bool
	idle    atomic.Bool // Run sleeps with nothing pending
	skipped atomic.Uint64
}

// NewAttribution returns the stage for tracker t, handing records to next.
// It starts the kernel's accept events (once per tracker) unless
// Config.NoAcceptEvents, and says which source it uses.
func NewAttribution(t *Tracker, next func(*record.Handshake)) *Attribution {
	t.ix.startAccepts(t.cfg.NoAcceptEvents, t.cfg.AllAcceptEvents, t.cfg.MaxAccepts, t.log)
	return &Attribution{t: t, x: t.ix, next: next, q: make(chan attribItem, 8192), nudge: make(chan struct{}, 1), done: make(chan struct{})}
}

// attribItem is a finished record waiting for attribution, and when it was
// finished: its connection had been accepted by then.
type attribItem struct {
	r    *record.Handshake
	done time.Time
	// gen, when set, is the answer Process found but could not count
	// (the tracker was busy scanning): Run counts it and hands it on;
	// quiet says the quiet epoch gave it.
	gen   *record.Generation
	quiet bool
	// due is when the scan it waits for must follow: done, or for a
	// record waiting for its accept event, done + acceptGrace.
	due time.Time
}

// acceptGrace is how long a record whose accept event is not indexed yet
// (or names a process not scanned yet) waits before it is asked again: the
// ring buffer's reader and the scans lag most on a loaded machine.
const acceptGrace = 300 * time.Millisecond

// acceptMargin is how long before its SYN a connection may count as
// accepted in a quiet-period check: clock granularity and the capture's
// timestamps, not the network, so a small margin.
const acceptMargin = 50 * time.Millisecond

// maxAttribWait bounds how long a record waits for the process scan that
// confirms a quiet period; past it the record is looked up exactly.
const maxAttribWait = 3 * time.Second

// Process attributes r from its accept event when the index has it (the
// ring buffer is drained first if it holds events not indexed yet), and
// otherwise queues it for Run.
func (a *Attribution) Process(r *record.Handshake) {
	it := attribItem{r: r}
	// The ring is read first (nothing to do, most often, but a load of its
	// two positions): a record's accept is then the newest in the index,
	// found in the first slots the lookup reads, rather than missed once
	// by a scan back to the record's SYN.
	g, res, quiet := a.x.acceptOrQuiet(r)
	if res == acceptFound && !a.found(g, r, false, quiet) {
		it.gen, it.quiet = g, quiet // counted and handed on by Run
		res = acceptMiss
	}
	if res != acceptFound {
		a.queue(it)
	}
}

// found attributes r to g (its accept event's process, or the quiet
// epoch's generation) and hands it on. Off Run's goroutine (wait false) it
// does not wait for the tracker, which a scan may hold for milliseconds,
// and says false when it did nothing.
func (a *Attribution) found(g *record.Generation, r *record.Handshake, wait, quiet bool) bool {
	if !a.t.observeAttributed(g, r, wait, quiet) {
		return false
	}
	a.x.n.attributed.Add(1)
	if quiet {
		a.x.n.byQuiet.Add(1)
	} else {
		a.x.n.byAccept.Add(1)
	}
	r.Generation = g // published generations are never changed: shared, not copied
	a.next(r)
	return true
}

func (a *Attribution) queue(it attribItem) {
	r := it.r
	it.done = time.Now() // only a queued record needs its time
	it.due = it.done
	// Decided before the send: once queued, the record is Run's (and,
	// handed on, may be reused at once).
	now := it.gen != nil || !a.mayBeQuiet(it)
	select {
	case a.q <- it:
		if now || len(a.q) >= cap(a.q)/2 || a.idle.CompareAndSwap(true, false) {
			a.wake()
		}
	default:
		if it.gen != nil { // found, only not counted yet: wait for the tracker
			a.found(it.gen, r, true, it.quiet)
			return
		}
		a.skipped.Add(1)
		a.x.n.skipped.Add(1)
		a.next(r)
	}
}

// Skipped counts records handed on unattributed because the queue was full.
func (a *Attribution) Skipped() uint64 { return a.skipped.Load() }

func (a *Attribution) wake() {
	select {
	case a.nudge <- struct{}{}:
	default:
	}
}

// Flush closes the queue and waits until Run has attributed and handed on
// every queued record. No Process may follow.
func (a *Attribution) Flush() {
	close(a.q)
	a.wake()
	if a.started.Load() {
		<-a.done
		return
	}
	for it := range a.q { // Run never started: hand on as they are
		if it.gen != nil {
			a.found(it.gen, it.r, true, it.quiet)
			continue
		}
		a.next(it.r)
	}
}

// Run attributes queued records until Flush.
//
// Outside nginx swaps and reloads one generation serves each port, and a
// per-connection lookup (sock_diag and /proc/PID/fd, some 15 µs, often too
// late for a short connection) would only repeat what the process table
// already says. So a record waits for the next process scan (at most a
// ScanInterval): when no serving process started, exited or changed role
// between its SYN and that scan, and one generation alone holds the
// listener, that generation is the answer (Tracker.AttributeQuiet).
// Otherwise — a swap in progress — the record's socket is looked up
// exactly (Tracker.Attribute).
func (a *Attribution) Run() {
	a.started.Store(true)
	defer close(a.done)
	var pending []attribItem // waiting for a scan, oldest first
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	in := a.q
	for {
		// Take what is queued.
	drain:
		for in != nil {
			select {
			case it, ok := <-in:
				if !ok {
					in = nil
					break drain
				}
				// An accept event answers at once. An accept by a
				// process not yet scanned (a new worker), or none at
				// all after the ring was read, waits for the next scan
				// like a quiet-period record, and is asked again.
				if it.gen != nil {
					a.found(it.gen, it.r, true, it.quiet)
					continue
				}
				res := a.fromAccept(it, false)
				switch res {
				case acceptFound:
					continue
				case acceptUnknown, acceptMiss:
					if len(pending) < cap(a.q) {
						it.due = it.done.Add(acceptGrace)
						pending = append(pending, it)
						continue
					}
				}
				if a.mayBeQuiet(it) && len(pending) < cap(a.q) {
					pending = append(pending, it)
				} else {
					a.attribute(it, false)
				}
			default:
				break drain
			}
		}
		if in == nil && len(pending) > 0 {
			// Closing: a record still waiting for its accept event (the
			// ring buffer's reader may lag the last connections) gets
			// what is left of its grace, once.
			var last time.Time
			for _, it := range pending {
				if it.due.After(last) {
					last = it.due
				}
			}
			if d := time.Until(last); d > 0 && d <= acceptGrace {
				time.Sleep(d)
			}
		}
		scanAt, scanDone := a.x.lastScan()
		for len(pending) > 0 {
			it := pending[0]
			scanned := scanAt.After(it.due)
			if in != nil && !scanned && time.Since(it.done) < maxAttribWait {
				break // wait for the scan that follows it
			}
			a.attribute(it, scanned)
			pending[0] = attribItem{}
			pending = pending[1:]
		}
		if in == nil {
			return // closed and drained: everything was attributed
		}
		// Wait for the next scan only when a record waits for it. With
		// nothing pending, sleep until the next record nudges (idle); a
		// record queued just before the flag was raised is seen here.
		var timeout <-chan time.Time
		var scanned <-chan struct{}
		if len(pending) > 0 {
			timer.Reset(maxAttribWait - time.Since(pending[0].done))
			timeout, scanned = timer.C, scanDone
		} else {
			a.idle.Store(true)
			if len(in) > 0 {
				a.idle.Store(false)
				continue
			}
		}
		select {
		case <-a.nudge:
		case <-scanned:
		case <-timeout:
		}
		a.idle.Store(false)
		timer.Stop()
	}
}

// mayBeQuiet says whether waiting for the next process scan can let the
// record be attributed without a lookup: a TCP connection whose SYN was
// seen after the current quiet period began, while no nginx swap is in
// progress. Otherwise the record is looked up at once, while its socket
// may still exist.
func (a *Attribution) mayBeQuiet(it attribItem) bool {
	r := it.r
	if r.FlowStart.IsZero() {
		return false
	}
	if since, quiet, known := a.x.listeners.portQuietSince(serverAddrPort(r), false); known {
		// The port's own period: another server's change or swap
		// elsewhere on the host does not end it.
		return quiet && r.FlowStart.Add(-acceptMargin).After(since)
	}
	since, swapping := a.x.quietSince()
	return !swapping && r.FlowStart.Add(-acceptMargin).After(since)
}

// attribute finds the generation of one record's server process; scanned
// says a process scan has completed since the record was finished.
func (a *Attribution) attribute(it attribItem, scanned bool) {
	if a.fromAccept(it, true) == acceptFound {
		return
	}
	r := it.r
	server, client := serverAddrPort(r), r.ServerSeenClient()
	g, ok, quiet := (*record.Generation)(nil), false, false
	switch r.Transport {
	case record.TransportTCP:
		if scanned && !r.FlowStart.IsZero() {
			g, ok = a.t.AttributeQuiet(server, r.FlowStart.Add(-acceptMargin), it.done)
			quiet = ok
		}
		if !ok {
			var from time.Time
			if !r.FlowStart.IsZero() {
				from = r.FlowStart.Add(-acceptMargin)
			}
			g, ok = a.x.attribute(client, server, from)
		}
	case record.TransportQUIC:
		// Quiet periods only: there is no per-connection lookup for QUIC.
		if !r.FlowStart.IsZero() {
			g, ok = a.t.AttributeQuietQUIC(server, r.FlowStart.Add(-acceptMargin), it.done)
		}
	}
	if ok {
		r.Generation = g
	}
	a.t.observeAttributed(g, r, true, quiet)
	a.next(r)
}

// fromAccept attributes a TCP record from the accept index and hands it
// on when found; last says no later attempt follows (count a process the
// tracker does not know).
func (a *Attribution) fromAccept(it attribItem, last bool) acceptResult {
	g, res, quiet := a.x.acceptOrQuiet(it.r)
	switch res {
	case acceptFound:
		a.found(g, it.r, true, quiet)
	case acceptUnknown:
		if last {
			a.x.n.unknownPid.Add(1)
		}
	}
	return res
}

// serverAddrPort is r's server endpoint: the sniffer's address fields,
// else parsed from the text (records read back, and an IPv4-mapped IPv6
// address, which the fields cannot tell from IPv4; see record.ClientField).
func serverAddrPort(r *record.Handshake) netip.AddrPort {
	if r.ServerPort != 0 && r.ServerAddr != ([16]byte{}) && !strings.HasPrefix(r.Server, "[::ffff:") {
		return netip.AddrPortFrom(netip.AddrFrom16(r.ServerAddr).Unmap(), r.ServerPort)
	}
	ap, _ := netip.ParseAddrPort(r.Server)
	return ap
}
