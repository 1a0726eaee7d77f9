package logjoin

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the joiner's memory and evictions:
// pqwatch_log_join_pending_bytes and pqwatch_log_join_evictions_total.
func (j *Joiner) Collector() prometheus.Collector { return joinCollector{j} }

var (
	descPendingBytes = prometheus.NewDesc("pqwatch_log_join_pending_bytes",
		"Memory of the log join's waiting handshakes and lines and its evidence of ambiguity, as counted against its budget (an eighth of the memory limit, at most 64 MiB).", nil, nil)
	descEvictions = prometheus.NewDesc("pqwatch_log_join_evictions_total",
		"Entries evicted, oldest first, from the log join's full store: a waiting handshake goes on unjoined, a waiting line is dropped (both also count as unmatched).", nil, nil)
)

type joinCollector struct{ j *Joiner }

func (c joinCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPendingBytes
	ch <- descEvictions
}

func (c joinCollector) Collect(ch chan<- prometheus.Metric) {
	c.j.mu.Lock()
	bytes, evicted := c.j.bytes, c.j.st.Evicted
	c.j.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descPendingBytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(evicted))
}
