package exporter

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// IfaceStats are the capture counters of one interface.
type IfaceStats struct {
	Packets uint64 // packets the ring delivered
	Drops   uint64 // packets the kernel dropped because the ring was full
}

// CaptureStats is a snapshot of the capture side of the agent, read at scrape
// time. Counters are cumulative since start.
type CaptureStats struct {
	// Packets and Drops are the totals; they are exported under iface="any"
	// only when Interfaces is empty, so that sums over iface never double
	// count.
	Packets uint64
	Drops   uint64
	// Interfaces holds per-interface counters, keyed by interface name.
	Interfaces map[string]IfaceStats

	FlowsEvicted    uint64 // flow-table entries evicted because the table was full (idle expiry is not counted)
	FlowsActive     int    // flow-table entries now
	QUICConnsActive int    // tracked QUIC connections now
	BufferedBytes   int    // bytes of TCP reassembly and QUIC CRYPTO buffers held now
	BufferBudget    int    // the budget BufferedBytes is kept within
	// Filter is the kernel filter in use, "classic" or "ebpf" ("" when
	// unknown: no pqwatch_capture_filter_info).
	Filter string
}

// CaptureFilters are the label values of pqwatch_capture_filter_info.
var CaptureFilters = []string{"classic", "ebpf"}

var (
	descCapturePackets = prometheus.NewDesc(namespace+"_capture_packets_total",
		"Packets received by the capture, by interface.", []string{"iface"}, nil)
	descCaptureDrops = prometheus.NewDesc(namespace+"_capture_drops_total",
		"Packets dropped by the kernel before the capture read them, by interface.", []string{"iface"}, nil)
	descFlowsEvicted = prometheus.NewDesc(namespace+"_flows_evicted_total",
		"Flow-table entries evicted because the table was full (flows that went idle expire normally and are not counted).", nil, nil)
	descFlowsActive = prometheus.NewDesc(namespace+"_flows_active",
		"Flow-table entries currently tracked.", nil, nil)
	descQUICConnsActive = prometheus.NewDesc(namespace+"_quic_conns_active",
		"QUIC connections currently tracked.", nil, nil)
	descBufferedBytes = prometheus.NewDesc(namespace+"_buffered_bytes",
		"Bytes of TCP reassembly and QUIC CRYPTO buffers held now (unfinished handshakes), kept within pqwatch_buffer_budget_bytes by evicting the oldest unfinished flow.", nil, nil)
	descCaptureFilter = prometheus.NewDesc(namespace+"_capture_filter_info",
		"1 for the kernel filter the capture runs (classic, the default, or ebpf: PQWATCH_CAPTURE_FILTER=ebpf where the kernel allows it), 0 for the other.", []string{"filter"}, nil)
	descBufferBudget = prometheus.NewDesc(namespace+"_buffer_budget_bytes",
		"The memory budget for TCP reassembly and QUIC CRYPTO buffers, over all capture workers (-buffer-budget, or a quarter of the memory limit).", nil, nil)
)

// captureCollector mirrors the capture's own counters as const metrics.
type captureCollector struct {
	stats func() CaptureStats
}

// NewCaptureCollector returns a Collector that calls stats at every scrape
// and exports pqwatch_capture_packets_total{iface},
// pqwatch_capture_drops_total{iface}, pqwatch_flows_evicted_total,
// pqwatch_flows_active, pqwatch_quic_conns_active, pqwatch_buffered_bytes,
// pqwatch_buffer_budget_bytes and pqwatch_capture_filter_info{filter}. stats must be safe to
// call concurrently with the capture.
func NewCaptureCollector(stats func() CaptureStats) prometheus.Collector {
	return &captureCollector{stats: stats}
}

// Describe implements prometheus.Collector.
func (c *captureCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCapturePackets
	ch <- descCaptureDrops
	ch <- descFlowsEvicted
	ch <- descFlowsActive
	ch <- descQUICConnsActive
	ch <- descBufferedBytes
	ch <- descBufferBudget
	ch <- descCaptureFilter
}

// Collect implements prometheus.Collector.
func (c *captureCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	if len(s.Interfaces) == 0 {
		ch <- prometheus.MustNewConstMetric(descCapturePackets, prometheus.CounterValue, float64(s.Packets), "any")
		ch <- prometheus.MustNewConstMetric(descCaptureDrops, prometheus.CounterValue, float64(s.Drops), "any")
	} else {
		names := make([]string, 0, len(s.Interfaces))
		for name := range s.Interfaces {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			is := s.Interfaces[name]
			ch <- prometheus.MustNewConstMetric(descCapturePackets, prometheus.CounterValue, float64(is.Packets), name)
			ch <- prometheus.MustNewConstMetric(descCaptureDrops, prometheus.CounterValue, float64(is.Drops), name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descFlowsEvicted, prometheus.CounterValue, float64(s.FlowsEvicted))
	ch <- prometheus.MustNewConstMetric(descFlowsActive, prometheus.GaugeValue, float64(s.FlowsActive))
	ch <- prometheus.MustNewConstMetric(descQUICConnsActive, prometheus.GaugeValue, float64(s.QUICConnsActive))
	ch <- prometheus.MustNewConstMetric(descBufferedBytes, prometheus.GaugeValue, float64(s.BufferedBytes))
	ch <- prometheus.MustNewConstMetric(descBufferBudget, prometheus.GaugeValue, float64(s.BufferBudget))
	if s.Filter != "" {
		for _, f := range CaptureFilters {
			v := 0.0
			if f == s.Filter {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descCaptureFilter, prometheus.GaugeValue, v, f)
		}
	}
}
