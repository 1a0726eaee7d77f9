package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// idleSessions is a set of TLS sessions held open and idle (handshake
// done, no request sent) while a trial's load runs: the "memory with N
// idle TLS sessions" row of a server study.
type idleSessions struct {
	conns    []*tls.Conn
	errors   int
	firstErr string
	start    time.Time
	end      time.Time
	baseline int64 // the server's RSS before the run's first idle session
	rssWith  int64
	measured bool
}

// idleOpenParallel is how many idle sessions are opened at once.
const idleOpenParallel = 32

// openIdle opens n sessions with q's arm, at most idleOpenParallel at a
// time, and reads the server's resident memory after them (when a server
// is measured). *baseline is the server's memory before the run's first
// idle session: it is read on the first call. (Resident memory is a
// high-water mark: the memory a server frees when one trial's sessions
// close is kept for the next trial's, so the growth per session is taken
// from the run's first reading, not the trial's.)
func openIdle(ctx context.Context, q *requester, n int, server *ServerCPU, baseline *int64) *idleSessions {
	is := &idleSessions{start: time.Now()}
	if server != nil {
		if *baseline == 0 {
			if s, err := server.Sample(); err == nil {
				*baseline = s.RSSBytes
			}
		}
		is.baseline, is.measured = *baseline, *baseline > 0
	}
	var mu sync.Mutex
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range min(n, idleOpenParallel) {
		wg.Go(func() {
			for range work {
				c, err := q.handshakeOnly(ctx)
				mu.Lock()
				if err != nil {
					is.errors++
					if is.firstErr == "" {
						is.firstErr = classify("idle", err) + ": " + err.Error()
					}
				} else {
					is.conns = append(is.conns, c)
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		if ctx.Err() != nil {
			break
		}
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	// Let the server settle (allocations made, buffers freed) before the
	// second reading.
	time.Sleep(100 * time.Millisecond)
	is.end = time.Now()
	if server != nil && is.measured {
		if s, err := server.Sample(); err == nil {
			is.rssWith = s.RSSBytes
		} else {
			is.measured = false
		}
	}
	return is
}

// open counts the sessions the server has not closed: a read that times
// out at once finds the connection open; EOF or a reset finds it closed.
func (is *idleSessions) open() int {
	n := 0
	for _, c := range is.conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		_, err := c.Read(b[:])
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
			n++
		}
	}
	return n
}

func (is *idleSessions) close() {
	for _, c := range is.conns {
		_ = c.Close()
	}
}

// fill records the idle sessions in tr.
func (is *idleSessions) fill(tr *TrialResult, want int) {
	tr.IdleSessionsWanted = want
	tr.IdleSessionsOpened = len(is.conns)
	tr.IdleSessions = is.open()
	tr.IdleOpenStart, tr.IdleOpenEnd = is.start, is.end
	if is.errors > 0 {
		tr.IdleErrors, tr.IdleFirstError = is.errors, is.firstErr
	}
	if is.measured && len(is.conns) > 0 {
		tr.ServerRSSBaselineBytes, tr.ServerRSSWithIdleBytes = is.baseline, is.rssWith
		per := float64(is.rssWith-is.baseline) / float64(len(is.conns))
		tr.ServerRSSPerIdleSessionBytes = &per
	}
}

// idleInvalid is why a trial's idle sessions were not what was asked, or "".
func idleInvalid(tr *TrialResult) string {
	if tr.IdleSessionsWanted == 0 {
		return ""
	}
	if tr.IdleSessionsOpened < tr.IdleSessionsWanted || tr.IdleSessions < tr.IdleSessionsOpened {
		s := fmt.Sprintf("%s: %d idle sessions asked, %d opened, %d still open at the window end", InvalidIdle,
			tr.IdleSessionsWanted, tr.IdleSessionsOpened, tr.IdleSessions)
		if tr.IdleFirstError != "" {
			s += "; first error: " + tr.IdleFirstError
		}
		return s
	}
	return ""
}

// handshakeOnly dials and completes a handshake, and returns the session.
func (q *requester) handshakeOnly(ctx context.Context) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	raw, err := q.dialer.DialContext(ctx, "tcp", q.target)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, q.tlsConf)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}
