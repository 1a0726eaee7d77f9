package exporter

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Health holds the agent's degraded states: a writer that cannot write (a
// full disk, a closed pipe, a read-only directory) marks its SinkHealth
// failing with the reason, counts what it could not write, and clears the
// mark when it writes again. /healthz says so in its body (and stays 200:
// a full disk must not restart the pod), /readyz answers 503, and the
// collector exports pqwatch_sink_degraded{sink} and what was lost.
type Health struct {
	mu      sync.Mutex
	sinks   []*SinkHealth
	watched []watched
}

// watched is a writer that keeps its own state (the Kafka spool): asked
// when health is read.
type watched struct {
	name    string
	failing func() (reason string, ok bool)
}

// Watch adds a writer that reports its own state: failing is called on
// every read of /healthz, /readyz and the metrics, and must be cheap.
func (h *Health) Watch(name string, failing func() (reason string, ok bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watched = append(h.watched, watched{name, failing})
}

// SinkHealth is one writer's state. Its methods are safe for concurrent
// use, and a nil *SinkHealth (a writer without health reporting: analyze's)
// does nothing.
type SinkHealth struct {
	name        string
	reason      atomic.Pointer[string]
	lostRecords atomic.Uint64
	lostBytes   atomic.Uint64
	episodes    atomic.Uint64
}

// Sink returns the state of the writer called name (jsonl, kafka_spool,
// state_dir), registering it on first use.
func (h *Health) Sink(name string) *SinkHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sinks {
		if s.name == name {
			return s
		}
	}
	s := &SinkHealth{name: name}
	h.sinks = append(h.sinks, s)
	return s
}

// Fail marks the writer failing for reason. It reports whether this
// starts an episode (the writer was healthy), so the caller logs once.
func (s *SinkHealth) Fail(reason string) bool {
	if s == nil {
		return false
	}
	first := s.reason.Swap(&reason) == nil
	if first {
		s.episodes.Add(1)
	}
	return first
}

// OK clears the mark. It reports whether an episode ended.
func (s *SinkHealth) OK() bool {
	return s != nil && s.reason.Swap(nil) != nil
}

// Failing returns the reason while the writer fails.
func (s *SinkHealth) Failing() (string, bool) {
	if s == nil {
		return "", false
	}
	if r := s.reason.Load(); r != nil {
		return *r, true
	}
	return "", false
}

// Lost counts records and bytes the writer could not write.
func (s *SinkHealth) Lost(records, bytes int) {
	if s == nil {
		return
	}
	s.lostRecords.Add(uint64(records))
	s.lostBytes.Add(uint64(bytes))
}

// LostTotals returns what Lost counted.
func (s *SinkHealth) LostTotals() (records, bytes uint64) {
	if s == nil {
		return 0, 0
	}
	return s.lostRecords.Load(), s.lostBytes.Load()
}

// Degraded returns "sink: reason" for every failing writer, sorted.
func (h *Health) Degraded() []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, s := range h.sinks {
		if r, ok := s.Failing(); ok {
			out = append(out, s.name+": "+r)
		}
	}
	for _, w := range h.watched {
		if r, ok := w.failing(); ok {
			out = append(out, w.name+": "+r)
		}
	}
	slices.Sort(out)
	return out
}

var (
	sinkDegradedDesc = prometheus.NewDesc("pqwatch_sink_degraded",
		"1 while the writer cannot write (a full disk, a read-only directory, a closed pipe): what it cannot write is counted in pqwatch_sink_lost_records_total and pqwatch_sink_lost_bytes_total; 0 when it writes.",
		[]string{"sink"}, nil)
	sinkLostRecordsDesc = prometheus.NewDesc("pqwatch_sink_lost_records_total",
		"Records (for state_dir: offset saves) the writer could not write and dropped.",
		[]string{"sink"}, nil)
	sinkLostBytesDesc = prometheus.NewDesc("pqwatch_sink_lost_bytes_total",
		"Bytes the writer could not write and dropped.",
		[]string{"sink"}, nil)
	sinkEpisodesDesc = prometheus.NewDesc("pqwatch_sink_degraded_episodes_total",
		"Times the writer went from writing to failing.",
		[]string{"sink"}, nil)
)

// Describe implements prometheus.Collector.
func (h *Health) Describe(ch chan<- *prometheus.Desc) {
	ch <- sinkDegradedDesc
	ch <- sinkLostRecordsDesc
	ch <- sinkLostBytesDesc
	ch <- sinkEpisodesDesc
}

// Collect implements prometheus.Collector.
func (h *Health) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	sinks, ws := slices.Clone(h.sinks), slices.Clone(h.watched)
	h.mu.Unlock()
	for _, w := range ws {
		d := 0.0
		if _, ok := w.failing(); ok {
			d = 1
		}
		ch <- prometheus.MustNewConstMetric(sinkDegradedDesc, prometheus.GaugeValue, d, w.name)
	}
	for _, s := range sinks {
		d := 0.0
		if _, ok := s.Failing(); ok {
			d = 1
		}
		recs, bytes := s.LostTotals()
		ch <- prometheus.MustNewConstMetric(sinkDegradedDesc, prometheus.GaugeValue, d, s.name)
		ch <- prometheus.MustNewConstMetric(sinkLostRecordsDesc, prometheus.CounterValue, float64(recs), s.name)
		ch <- prometheus.MustNewConstMetric(sinkLostBytesDesc, prometheus.CounterValue, float64(bytes), s.name)
		ch <- prometheus.MustNewConstMetric(sinkEpisodesDesc, prometheus.CounterValue, float64(s.episodes.Load()), s.name)
	}
}
