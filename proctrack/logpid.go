package proctrack

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// LogPID is the pipeline stage after the access-log join: nginx's $pid in
// the joined line is the worker that served the connection (a connection
// never leaves the worker that accepted it). A record the attribution left
// without a generation — every handshake of a swap window, where sockets
// are gone before they can be looked up — takes that worker's generation;
// an attributed record without a worker takes the worker.
type LogPID struct {
	t         *Tracker
	next      func(*record.Handshake)
	attribute atomic.Uint64 // generations found from $pid
	unknown   atomic.Uint64 // $pid of no tracked nginx process
	desc      *prometheus.Desc
}

// NewLogPID returns the stage for tracker t; Then says where it hands
// records. Its counters exist (at zero) from the start, with or without a log.
func NewLogPID(t *Tracker) *LogPID {
	return &LogPID{t: t, desc: prometheus.NewDesc("pqwatch_attributions_from_log_total",
		"TCP handshakes the attribution left without a server generation that the joined nginx access-log line's $pid attributed (result found), or whose $pid names no tracked process (result unknown_pid).",
		[]string{"result"}, nil)}
}

// Then sets the step after this one and returns the stage.
func (s *LogPID) Then(next func(*record.Handshake)) *LogPID {
	s.next = next
	return s
}

// Flush implements the stage; LogPID holds nothing.
func (s *LogPID) Flush() {}

// Process fills the record's generation from its log line's $pid.
func (s *LogPID) Process(r *record.Handshake) {
	if l := r.Log; l != nil && l.Source == "nginx" && l.PID > 0 {
		switch g := r.Generation; {
		case g != nil && g.WorkerPID == 0:
			g.WorkerPID = l.PID
		case g == nil && r.Transport == record.TransportTCP:
			if found, ok := s.t.GenerationOf(l.PID); ok {
				gc := *found
				gc.WorkerPID = l.PID
				r.Generation = &gc
				s.t.ObserveHandshake(found, r.Group)
				s.attribute.Add(1)
			} else {
				s.unknown.Add(1)
			}
		}
	}
	s.next(r)
}

// Describe implements prometheus.Collector.
func (s *LogPID) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *LogPID) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.attribute.Load()), "found")
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.unknown.Load()), "unknown_pid")
}
