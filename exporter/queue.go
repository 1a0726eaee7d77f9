package exporter

import (
	"sync"
)

// qmsg is one message waiting for delivery. key and value may share one
// allocation; nobody modifies them after enqueue.
type qmsg struct {
	topic string
	key   []byte
	value []byte
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
// memory part capped by bytes, continued by an optional disk spool. All of
// the memory part is older than all of the spool, so delivery order is
// arrival order.
type queue struct {
	mu       sync.Mutex
	items    []qmsg // items[head:] are queued
	head     int
	bytes    int64
	maxBytes int64
	spool    *spool
	spoolErr error // last spool I/O error, for the delivery loop to log
	notify   chan struct{}
	closed   bool
}

func newQueue(maxBytes int64, sp *spool) *queue {
	return &queue{maxBytes: maxBytes, spool: sp, notify: make(chan struct{}, 1)}
}

func (q *queue) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// push appends m, to memory while the spool is empty and memory has room,
// else to the spool, else nowhere.
func (q *queue) push(m qmsg) pushResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return pushClosed
	}
	sz := m.size()
	if (q.spool == nil || q.spool.empty()) && q.bytes+sz <= q.maxBytes {
		q.items = append(q.items, m)
		q.bytes += sz
		q.signal()
		return pushMemory
	}
	if q.spool != nil {
		ok, err := q.spool.append(&m)
		if err != nil {
			q.spoolErr = err
		}
		if ok {
			q.signal()
			return pushSpooled
		}
	}
	return pushDropped
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
		q.items = append(q.items, m)
		q.bytes += m.size()
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
// stay at the head in their order. failed may be nil (all succeeded).
func (q *queue) ack(n int, failed []bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	win := q.items[q.head : q.head+n]
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
}

// depth reports the queued messages in memory and the unread spool bytes.
func (q *queue) depth() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var sb int64
	if q.spool != nil {
		sb = q.spool.unread()
	}
	return len(q.items) - q.head, sb
}

func (q *queue) empty() bool {
	n, sb := q.depth()
	return n == 0 && sb == 0
}

// takeSpoolErr returns and clears the last spool error.
func (q *queue) takeSpoolErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.spoolErr
	q.spoolErr = nil
	return err
}

// close persists what is left in memory to the spool, if any, and closes it.
// It returns how many messages were lost.
func (q *queue) close() (lost int, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	left := q.items[q.head:]
	lost = len(left)
	if q.spool != nil {
		var n int
		n, err = q.spool.closeWith(left)
		lost -= n
		lost += q.spool.corrupt
		q.spool.corrupt = 0
	}
	q.items, q.head, q.bytes = nil, 0, 0
	return lost, err
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
