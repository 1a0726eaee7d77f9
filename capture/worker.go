package capture

import (
	"context"
	"sync"
	"sync/atomic"
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
// It never blocks in a raw poll(2): each ring has a watcher goroutine that
// waits for readiness through Go's network poller (a dup of the ring's
// socket registered with epoll) and nudges the worker. A goroutine parked
// in the poller costs nothing; a thread blocked in poll(2) keeps the
// runtime's sysmon thread waking every few microseconds and hands threads
// back and forth at every wakeup, which at a few hundred handshakes a second
// cost more CPU than parsing them.
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
}

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
			m.add.watch(w.wake, w.idle.Load)
		}
		if m.del != nil {
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
				w.deliver(handle, ts, r.linkType, data)
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
		timer.Reset(w.c.cfg.PollTimeout)
		select {
		case <-w.notify:
			nudged = true
		case <-timer.C:
		case <-ctx.Done():
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
func (w *worker) deliver(handle Handler, ts time.Time, linkType int, data []byte) {
	defer func() {
		if p := recover(); p != nil {
			if w.c.panics.Add(1) == 1 {
				w.c.log.Error("capture: packet handler panicked", "worker", w.id, "panic", p)
			}
		}
	}()
	handle(w.id, ts, linkType, data)
}
