package pcapgen

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// pipe returns two connected in-memory conns whose writes never block (like
// a TCP socket with a large buffer): crypto/tls peers may both write at
// once, which deadlocks net.Pipe.
func pipe() (net.Conn, net.Conn) {
	a, b := newBuf(), newBuf()
	return &pipeConn{r: a, w: b}, &pipeConn{r: b, w: a}
}

type buffer struct {
	mu       sync.Mutex
	cond     *sync.Cond
	data     []byte
	closed   bool
	deadline time.Time
}

func newBuf() *buffer {
	b := &buffer{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

type pipeConn struct{ r, w *buffer }

func (c *pipeConn) Read(p []byte) (int, error) {
	b := c.r
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.data) == 0 && !b.closed {
		if !b.deadline.IsZero() && time.Now().After(b.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		b.cond.Wait()
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (c *pipeConn) Write(p []byte) (int, error) {
	b := c.w
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	b.data = append(b.data, p...)
	b.cond.Broadcast()
	return len(p), nil
}

func (c *pipeConn) Close() error {
	for _, b := range []*buffer{c.r, c.w} {
		b.mu.Lock()
		b.closed = true
		b.cond.Broadcast()
		b.mu.Unlock()
	}
	return nil
}

func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr{} }
func (c *pipeConn) RemoteAddr() net.Addr { return pipeAddr{} }
func (c *pipeConn) SetDeadline(t time.Time) error {
	c.r.mu.Lock()
	c.r.deadline = t
	c.r.mu.Unlock()
	if !t.IsZero() {
		// Wake the reader when the deadline passes.
		time.AfterFunc(time.Until(t), func() { c.r.mu.Lock(); c.r.cond.Broadcast(); c.r.mu.Unlock() })
	}
	return nil
}
func (c *pipeConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *pipeConn) SetWriteDeadline(t time.Time) error { return nil }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
