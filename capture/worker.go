package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
type worker struct {
	c   *Capture
	id  int
	efd int // eventfd: new control messages or shutdown

	mu      sync.Mutex
	pending []ctlMsg

	rings []*ring
	pfds  []unix.PollFd
}

func newWorker(c *Capture, id int) (*worker, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("capture: eventfd: %w", err)
	}
	return &worker{c: c, id: id, efd: efd}, nil
}

// send queues m for the worker and wakes it; it never blocks.
func (w *worker) send(m ctlMsg) {
	w.mu.Lock()
	w.pending = append(w.pending, m)
	w.mu.Unlock()
	w.wake()
}

func (w *worker) wake() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(w.efd, one[:])
}

func (w *worker) closeFD() {
	if w.efd >= 0 {
		unix.Close(w.efd)
		w.efd = -1
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
	w.pfds = w.pfds[:0]
	w.pfds = append(w.pfds, unix.PollFd{Fd: int32(w.efd), Events: unix.POLLIN})
	for _, r := range w.rings {
		w.pfds = append(w.pfds, unix.PollFd{Fd: int32(r.fd), Events: unix.POLLIN})
	}
}

// run is the worker loop: drain every ring (up to readBudget packets each),
// and sleep in poll(2) on all of them when none had anything.
func (w *worker) run(ctx context.Context, handle Handler) {
	w.control()
	timeout := int(w.c.cfg.PollTimeout / time.Millisecond)
	var buf [8]byte
	for ctx.Err() == nil {
		got := false
		for _, r := range w.rings {
			for range readBudget {
				if w.c.stopping.Load() {
					break
				}
				data, ci, err := r.tp.ZeroCopyReadPacketData()
				if err != nil {
					break // ErrTimeout: nothing ready (or ErrPoll, handled below)
				}
				got = true
				w.deliver(handle, ci.Timestamp, r.linkType, data)
			}
		}
		if got {
			w.control()
			continue
		}
		for i := range w.pfds {
			w.pfds[i].Revents = 0
		}
		n, err := unix.Poll(w.pfds, timeout)
		if err != nil || n <= 0 {
			w.control()
			continue
		}
		if w.pfds[0].Revents != 0 {
			unix.Read(w.efd, buf[:])
		}
		for _, p := range w.pfds[1:] {
			if p.Revents&unix.POLLERR != 0 {
				// ENETDOWN when the link goes down or away: read it to
				// clear it; the netlink follower closes rings of links
				// that are gone, a link that comes back up resumes.
				unix.GetsockoptInt(int(p.Fd), unix.SOL_SOCKET, unix.SO_ERROR)
			}
		}
		w.control()
	}
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
