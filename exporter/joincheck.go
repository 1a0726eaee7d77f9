package exporter

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// JoinCheck is the pipeline step after the live log join: it counts the
// joins (pqwatch_log_joins_total) and lets the instrument check itself:
// nginx's own $ssl_curve against the group on the wire.
type JoinCheck struct {
	next    func(*record.Handshake)
	metrics *Metrics
	log     *slog.Logger
	// mismatches counted; lastWarn (UnixNano): the warning is said at
	// most once a minute, the counter has every one.
	mismatches atomic.Uint64
	lastWarn   atomic.Int64
}

// mismatchWarnEvery spaces the $ssl_curve warnings: a server whose log
// disagrees with the wire on every handshake says so once a minute, with
// the count, not once a handshake.
const mismatchWarnEvery = time.Minute

// NewJoinCheck returns the step, handing records to next.
func NewJoinCheck(m *Metrics, log *slog.Logger, next func(*record.Handshake)) *JoinCheck {
	return &JoinCheck{next: next, metrics: m, log: log}
}

// Flush holds nothing.
func (c *JoinCheck) Flush() {}

// Process counts r's join and hands it on.
func (c *JoinCheck) Process(r *record.Handshake) {
	if r.Outcome == record.OutcomeOK {
		if r.Log != nil {
			c.metrics.LogJoin(JoinJoined)
			if r.Log.SSLCurve != "" && r.Group != "" && tlsparse.IANAName(r.Log.SSLCurve) != r.Group {
				c.metrics.LogJoin(JoinMismatch)
				n := c.mismatches.Add(1)
				now, last := time.Now().UnixNano(), c.lastWarn.Load()
				if (last == 0 || now-last >= int64(mismatchWarnEvery)) && c.lastWarn.CompareAndSwap(last, now) {
					c.log.Warn("nginx $ssl_curve disagrees with the wire (said at most once a minute; pqwatch_log_joins_total{result=\"mismatch\"} counts every one)",
						"client", r.ClientText(), "ssl_curve", r.Log.SSLCurve, "wire", r.Group, "mismatches", n)
				}
			}
		} else {
			c.metrics.LogJoin(JoinUnmatched)
		}
	}
	c.next(r)
}
