package pipeline

import (
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/sniffer"
)

// Worker owns one sniffer, fed by one source worker's goroutine; its lock
// serialises packets, the housekeeping's flow expiry and the counters'
// readers.
type Worker struct {
	mu sync.Mutex
	sn *sniffer.Sniffer
	// held: the source's goroutine holds mu for the batch it is handing
	// over (Packet to BatchEnd); only that goroutine reads or writes it.
	held bool
}

// Packet feeds one packet to the sniffer. It takes the worker's lock at a
// batch's first packet and keeps it until BatchEnd: one lock and unlock per
// ring block, not per packet. Only the worker's own goroutine calls it.
// ifindex is the interface of a capture with one ring per interface
// (sniffer.PacketOn), else 0.
func (w *Worker) Packet(ts time.Time, link, ifindex int, data []byte) {
	if !w.held {
		w.mu.Lock()
		w.held = true
	}
	w.sn.PacketOn(ts, link, ifindex, data)
}

// BatchEnd releases what Packet took for the batch (also after a packet
// whose handling panicked: the sniffer stays usable).
func (w *Worker) BatchEnd() {
	if w.held {
		w.held = false
		w.mu.Unlock()
	}
}

// With runs f with the worker's sniffer, under its lock.
func (w *Worker) With(f func(*sniffer.Sniffer)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.sn)
}

// TryWith runs f with the sniffer if its lock is free, and says whether it
// did: a worker busy with a batch expires its own flows as packets come.
func (w *Worker) TryWith(f func(*sniffer.Sniffer)) bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	f(w.sn)
	return true
}

// Stats are the sniffer's counters.
func (w *Worker) Stats() sniffer.Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sn.Stats()
}

// Budget is the sniffer's buffer budget in bytes (fixed at New).
func (w *Worker) Budget() int { return w.sn.Budget() }
