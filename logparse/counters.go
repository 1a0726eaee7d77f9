package logparse

import "sync/atomic"

// Line results, the values of the exporter's result label.
const (
	ResultOK        = "ok"
	ResultMalformed = "malformed"
	ResultTooLong   = "too_long"
)

// LineCounters counts log lines by result. The tailer counts too_long lines;
// whoever parses the lines counts ok and malformed. Safe for concurrent use;
// the exporter reads a Snapshot at scrape time.
type LineCounters struct {
	OK        atomic.Uint64
	Malformed atomic.Uint64
	TooLong   atomic.Uint64
}

// LineCountsSnapshot is a point-in-time copy of LineCounters.
type LineCountsSnapshot struct {
	OK, Malformed, TooLong uint64
}

// Snapshot returns the current counts.
func (c *LineCounters) Snapshot() LineCountsSnapshot {
	return LineCountsSnapshot{OK: c.OK.Load(), Malformed: c.Malformed.Load(), TooLong: c.TooLong.Load()}
}

// Count adds one line with the outcome of a parse: ok when err is nil,
// malformed otherwise.
func (c *LineCounters) Count(err error) {
	if err == nil {
		c.OK.Add(1)
	} else {
		c.Malformed.Add(1)
	}
}
