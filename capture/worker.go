package capture

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// readBudget bounds how many packets a worker takes from one ring before it
// turns to the next, so a busy interface cannot starve a quiet one.
const readBudget = 256

// ctlMsg hands a ring to a worker (add) or takes it back (del, then done).
type ctlMsg struct {
	add  *ring
	del  *ring
	done chan<- struct{}
}

// worker reads one fanout member of every captured interface. It owns its
// rings: only it reads them and only it closes them while it runs.
//
// It never blocks in a raw poll(2): it waits for readiness through Go's
// network poller (a dup of the ring's socket registered with epoll),
// itself when it reads a single ring, else through a watcher goroutine per
// ring that nudges it. A goroutine parked in the poller costs nothing; a
// thread blocked in poll(2) keeps the runtime's sysmon thread waking every
// few microseconds and hands threads back and forth at every wakeup, which
// at a few hundred handshakes a second cost more CPU than parsing them.
type worker struct {
	c  *Capture
	id int
	// notify is nudged by ring watchers and by control messages.
	notify chan struct{}

	mu      sync.Mutex
	pending []ctlMsg

	rings []*ring
	// idle is set while the worker sleeps, for the ring watchers (see
	// ring.watch).
	idle atomic.Bool

	// With a single ring (one interface, the common case) the worker waits
	// on that ring's socket in Go's poller itself: no watcher goroutine to
	// wake and hand each block over, one goroutine wakeup a block instead
	// of two. wake interrupts the wait through the socket's read deadline.
	// direct is that socket (nil otherwise), directRing and directRC the
	// worker's own; multi: the worker held more than one ring at some
	// point, and watchers run.
	direct     atomic.Pointer[os.File]
	directRing *ring
	directRC   syscall.RawConn
	multi      bool
}

// aLongTimeAgo is a read deadline that has passed: it ends a wait at once.
var aLongTimeAgo = time.Unix(1, 0)

func newWorker(c *Capture, id int) (*worker, error) {
	return &worker{c: c, id: id, notify: make(chan struct{}, 1)}, nil
}

// send queues m for the worker and wakes it; it never blocks.
func (w *worker) send(m ctlMsg) {
	w.mu.Lock()
	w.pending = append(w.pending, m)
	w.mu.Unlock()
	w.wake()
}

func (w *worker) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
	// After the token: the worker sets its deadline, then looks for a
	// token, then waits; so it either sees the token or this deadline.
	if f := w.direct.Load(); f != nil {
		f.SetReadDeadline(aLongTimeAgo)
	}
}

// attach starts watching r, the worker's newest ring: by the worker itself
// when r is its only ring, else by watcher goroutines (the first ring's
// too, from now on).
func (w *worker) attach(r *ring) {
	if !w.multi && len(w.rings) == 1 {
		if f, rc := r.pollable(); rc != nil {
			w.directRing, w.directRC = r, rc
			w.direct.Store(f)
			return
		}
	}
	w.leaveDirect()
	r.watch(w.wake, w.idle.Load)
}

// leaveDirect hands the ring the worker waited on itself to a watcher.
func (w *worker) leaveDirect() {
	w.multi = true
	if d := w.directRing; d != nil {
		w.direct.Store(nil)
		w.directRing, w.directRC = nil, nil
		if f, _ := d.pollable(); f != nil {
			f.SetReadDeadline(time.Time{})
		}
		d.watch(w.wake, w.idle.Load)
	}
}

// waitDirect sleeps until the worker's only ring is readable (true), a
// wake (true), or PollTimeout (false).
func (w *worker) waitDirect(ctx context.Context) bool {
	f, r := w.direct.Load(), w.directRing
	f.SetReadDeadline(time.Now().Add(w.c.cfg.PollTimeout))
	select {
	case <-w.notify:
		return true
	default:
	}
	if ctx.Err() != nil {
		return false
	}
	first := true
	err := w.directRC.Read(func(uintptr) bool {
		if first {
			first = false
			return r.rd.ready() // a block retired since the last look
		}
		return true
	})
	select {
	case <-w.notify:
		return true
	default:
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// The dup failed in the poller: a watcher on the timer
		// fallback, rather than a loop on the error.
		w.c.log.Warn("capture: waiting on the ring failed; a watcher takes over", "worker", w.id, "err", err)
		w.leaveDirect()
	}
	return err == nil
}

// control applies queued messages and rebuilds the poll set.
func (w *worker) control() {
	w.mu.Lock()
	msgs := w.pending
	w.pending = nil
	w.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	for _, m := range msgs {
		if m.add != nil {
			w.rings = append(w.rings, m.add)
			w.attach(m.add)
		}
		if m.del != nil {
			if m.del == w.directRing {
				w.direct.Store(nil)
				w.directRing, w.directRC = nil, nil
			}
			for i, r := range w.rings {
				if r == m.del {
					w.rings = append(w.rings[:i], w.rings[i+1:]...)
					break
				}
			}
			m.del.close()
			m.done <- struct{}{}
		}
	}
}

// run is the worker loop: drain every ring (up to readBudget packets each),
// and wait for a nudge (or PollTimeout) when none had anything.
func (w *worker) run(ctx context.Context, handle Handler, batchEnd func(worker int)) {
	defer context.AfterFunc(ctx, w.wake)()
	w.control()
	timer := time.NewTimer(w.c.cfg.PollTimeout)
	defer timer.Stop()
	nudged, empty := false, 0
	for ctx.Err() == nil {
		got := false
		for _, r := range w.rings {
			for range readBudget {
				if w.c.stopping.Load() {
					break
				}
				data, ts, ok := r.rd.read()
				if !ok {
					break // nothing ready
				}
				got = true
				w.deliver(handle, ts, r.linkType, r.ifindex, data)
			}
		}
		if got {
			if batchEnd != nil {
				batchEnd(w.id)
			}
			for _, r := range w.rings {
				if r.rd.skipped != r.skippedLogged {
					w.c.log.Error("capture: ring blocks skipped past a packet header outside its block (a kernel or memory fault: packets lost)",
						"worker", w.id, "blocks", r.rd.skipped)
					r.skippedLogged = r.rd.skipped
				}
			}
			nudged, empty = false, 0
			w.control()
			continue
		}
		if nudged {
			// Readable with nothing to read, twice in a row: a socket
			// error (once is a nudge for a block the worker had already
			// read, common under load: no system call for it).
			if empty++; empty >= 2 {
				for _, r := range w.rings {
					r.clearError()
				}
				empty = 0
			}
		}
		nudged = false
		// Say it sleeps, then look once more: a block retired since the
		// ring was found empty is either seen here or by the watcher
		// (ring.watch).
		w.idle.Store(true)
		if !w.c.stopping.Load() && w.readable() {
			w.idle.Store(false)
			continue
		}
		if w.directRC != nil {
			nudged = w.waitDirect(ctx)
		} else {
			timer.Reset(w.c.cfg.PollTimeout)
			select {
			case <-w.notify:
				nudged = true
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		w.idle.Store(false)
		w.control()
	}
}

// readable says whether a ring has a block ready.
func (w *worker) readable() bool {
	for _, r := range w.rings {
		if r.rd.ready() {
			return true
		}
	}
	return false
}

// deliver calls handle, recovering and counting a panic so one bad packet
// does not stop the capture.
func (w *worker) deliver(handle Handler, ts time.Time, linkType, ifindex int, data []byte) {
	defer func() {
		if p := recover(); p != nil {
			if w.c.panics.Add(1) == 1 {
				w.c.log.Error("capture: packet handler panicked", "worker", w.id, "panic", p)
			}
		}
	}()
	handle(w.id, ifindex, ts, linkType, data)
}
