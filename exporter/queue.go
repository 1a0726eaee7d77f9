package exporter

import (
	"errors"
	"sync"
	"time"
)

// qmsg is one message waiting for delivery. key and value may share one
// allocation; nobody modifies them after enqueue.
type qmsg struct {
	topic string
	key   []byte
	value []byte
	at    time.Duration // when it was queued, on the queue's monotonic clock
	loc   spoolLoc      // where the spool holds it too (loc.n == 0: nowhere)
	// unspooled: writing it ahead failed once (counted once, in the
	// spool's WriteFailures).
	unspooled bool
}

func (m *qmsg) size() int64 { return int64(len(m.topic) + len(m.key) + len(m.value) + 64) }

type pushResult int

const (
	pushMemory pushResult = iota
	pushSpooled
	pushDropped
	pushClosed
)

// queue is the bounded FIFO between Write and the delivery goroutine: a
// memory part capped by bytes, continued by an optional disk spool.
//
// With a spool, the spool is also the memory part's write-ahead log:
// writeAhead writes messages that have waited longer than a given age, so
// a killed process loses only the youngest. The messages written are
// always the oldest (items[head:head+written]); a message goes to the
// spool only (overflow) after everything in memory is written, and it is
// read back into memory after everything older. So the spool holds the
// messages in arrival order, and delivery order is arrival order. An
// acknowledged message that the spool holds is marked there (and never
// read back after a restart).
type queue struct {
	mu       sync.Mutex
	items    []qmsg // items[head:] are queued
	head     int
	written  int // items[head:head+written] are in the spool too
	bytes    int64
	maxBytes int64
	spool    *spool
	spoolErr error // last spool I/O error, for the delivery loop to log
	notify   chan struct{}
	closed   bool
	start    time.Time // the monotonic clock's zero

	writtenAhead uint64     // messages written ahead (in memory and spool)
	ackLocs      []spoolLoc // scratch for ack
}

func newQueue(maxBytes int64, sp *spool) *queue {
	return &queue{maxBytes: maxBytes, spool: sp, notify: make(chan struct{}, 1), start: time.Now()}
}

func (q *queue) now() time.Duration { return time.Since(q.start) }

func (q *queue) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// push appends m, to memory while the spool has nothing unread and memory
// has room, else to the spool, else nowhere.
func (q *queue) push(m qmsg) pushResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return pushClosed
	}
	m.at, m.loc = q.now(), spoolLoc{}
	sz := m.size()
	if (q.spool == nil || q.spool.empty()) && q.bytes+sz <= q.maxBytes {
		q.items = append(q.items, m)
		q.bytes += sz
		q.signal()
		return pushMemory
	}
	if q.spool != nil {
		// The spool keeps arrival order: what memory holds goes first.
		q.writeAheadLocked(q.now(), -1)
		if q.head+q.written == len(q.items) && q.spool.append(&m) {
			q.signal()
			return pushSpooled
		}
	}
	return pushDropped
}

// writeAhead writes the messages queued at or before cutoff (on q.now's
// clock) that the spool does not hold yet, in chunks of about chunk bytes
// with the lock released between them. It returns how many it wrote. When
// the spool's disk is full it probes it first (the probe is due at most
// every probeInterval).
func (q *queue) writeAhead(cutoff time.Duration, chunk int64) int {
	if q.spool == nil {
		return 0
	}
	total := 0
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return total
		}
		if total == 0 {
			q.spool.tick()
		}
		n, more := q.writeAheadLocked(cutoff, chunk)
		q.mu.Unlock()
		total += n
		if !more {
			return total
		}
	}
}

// writeAheadLocked writes unwritten messages queued at or before cutoff,
// oldest first, about chunk bytes (chunk < 0: no limit), in one write.
// more reports that the chunk ended before the messages did. When the
// disk refuses them, the messages due stay in memory only, each counted
// once as a write failure. It is called with q.mu held.
func (q *queue) writeAheadLocked(cutoff time.Duration, chunk int64) (n int, more bool) {
	first := q.head + q.written
	var size int64
	i := first
	refused := false
	for ; i < len(q.items); i++ {
		m := &q.items[i]
		if m.at > cutoff {
			break
		}
		if chunk >= 0 && size >= chunk {
			more = true
			break
		}
		loc, r := q.spool.stage(m)
		if r != staged {
			// noRoom: the spool is at its bound, the rest stays in memory.
			refused = r == notWritten
			break
		}
		m.loc = loc
		size += loc.n
	}
	q.spool.commit()
	n = q.spool.takeBatch()
	q.written += n
	q.writtenAhead += uint64(n)
	if n < i-first || refused {
		more = false
		for j := first + n; j < len(q.items) && q.items[j].at <= cutoff; j++ {
			m := &q.items[j]
			m.loc = spoolLoc{}
			if !m.unspooled {
				m.unspooled = true
				q.spool.noteFailure(frameSize(m))
			}
		}
	}
	return n, more
}

// refill moves spooled messages into memory while memory has room. It is
// called with q.mu held.
func (q *queue) refill() {
	if q.spool == nil {
		return
	}
	for q.bytes < q.maxBytes && !q.spool.empty() {
		m, ok, err := q.spool.next()
		if err != nil {
			q.spoolErr = err
			return
		}
		if !ok {
			return
		}
		m.at = q.now()
		q.items = append(q.items, m)
		q.bytes += m.size()
		q.written++ // every message in memory is written while the spool has unread ones
	}
}

// peek copies up to n of the oldest messages, of at most maxBytes together
// (but at least one), into dst.
func (q *queue) peek(dst []qmsg, n int, maxBytes int64) []qmsg {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refill()
	end := min(q.head+n, len(q.items))
	var size int64
	for i := q.head; i < end; i++ {
		if size += q.items[i].size(); size > maxBytes && i > q.head {
			end = i
			break
		}
	}
	return append(dst, q.items[q.head:end]...)
}

// ack removes the first n messages except those with failed[i] set, which
// stay at the head in their order. failed may be nil (all succeeded). The
// removed messages that the spool holds are marked acknowledged there.
func (q *queue) ack(n int, failed []bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	win := q.items[q.head : q.head+n]
	q.ackLocs = q.ackLocs[:0]
	for i := range win {
		if (failed == nil || !failed[i]) && win[i].loc.n > 0 {
			q.ackLocs = append(q.ackLocs, win[i].loc)
			q.written--
		}
	}
	// Move kept messages to the end of the window, preserving order.
	w := n
	for i := n - 1; i >= 0; i-- {
		if failed != nil && failed[i] {
			w--
			win[w] = win[i]
			continue
		}
		q.bytes -= win[i].size()
	}
	clear(win[:w])
	q.head += w
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 1024 && q.head > len(q.items)/2 {
		k := copy(q.items, q.items[q.head:])
		clear(q.items[k:])
		q.items, q.head = q.items[:k], 0
	}
	if len(q.ackLocs) > 0 && q.spool != nil && !q.closed {
		if err := q.spool.markAcked(q.ackLocs); err != nil {
			q.spoolErr = err
		}
	}
}

// depth reports the queued messages in memory and the unread spool bytes.
func (q *queue) depth() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var sb int64
	if q.spool != nil && !q.closed {
		sb = q.spool.unread
	}
	return len(q.items) - q.head, sb
}

func (q *queue) empty() bool {
	n, sb := q.depth()
	return n == 0 && sb == 0
}

// writtenAheadCount reports how many messages were written ahead.
func (q *queue) writtenAheadCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.writtenAhead
}

// takeSpoolErr returns and clears the last spool error, and the start or
// end of a disk-full episode (each reported once).
func (q *queue) takeSpoolErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.spoolErr
	q.spoolErr = nil
	if q.spool != nil {
		err = errors.Join(err, q.spool.takeNotices())
	}
	return err
}

// close writes what memory holds and the spool does not to the spool, if
// any, and closes it. It returns how many messages were lost, how many of
// memory's the spool keeps for the next run, and the spool's unread bytes
// (overflow, also kept).
func (q *queue) close() (lost, kept int, unread int64, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, 0, 0, nil
	}
	q.closed = true
	lost = len(q.items) - q.head
	if q.spool != nil {
		q.spool.retryNow() // the last chance, even while the disk is full
		q.writeAheadLocked(q.now(), -1)
		kept = q.written
		lost -= q.written
		unread = q.spool.unread
		err = q.spool.close()
		lost += q.spool.corrupt
		q.spool.corrupt = 0
	}
	q.items, q.head, q.bytes, q.written = nil, 0, 0, 0
	return lost, kept, unread, err
}

// takeCorrupt returns and clears the count of spooled messages lost to
// corruption.
func (q *queue) takeCorrupt() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spool == nil {
		return 0
	}
	n := q.spool.corrupt
	q.spool.corrupt = 0
	return n
}
