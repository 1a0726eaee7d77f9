package exporter

import (
	"log/slog"

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
}

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
				c.log.Warn("nginx $ssl_curve disagrees with the wire", "client", r.ClientText(), "ssl_curve", r.Log.SSLCurve, "wire", r.Group)
			}
		} else {
			c.metrics.LogJoin(JoinUnmatched)
		}
	}
	c.next(r)
}
