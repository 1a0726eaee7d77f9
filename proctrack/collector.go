package proctrack

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// Collector exports the tracker's generations and swap events as const
// metrics built at scrape time. Register it with a prometheus.Registerer.
type Collector struct {
	t *Tracker

	info, cpu, rss, workers, handshakes, events, failed, attrib *prometheus.Desc

	source, accepts, acceptEvictions, ringDrops, acceptQuiet *prometheus.Desc
}

// Collector returns the Prometheus collector of t.
func (t *Tracker) Collector() *Collector {
	return &Collector{
		t: t,
		info: prometheus.NewDesc("pqwatch_generation_info",
			"Identity of a server process generation (one master and its workers, one binary), and the Kubernetes pod it runs in (empty outside one, or where not known).",
			[]string{"generation", "exe", "exe_sha256", "openssl", "master_pid", "pod_namespace", "pod_name", "pod_container"}, nil),
		cpu: prometheus.NewDesc("pqwatch_generation_cpu_seconds_total",
			"User and system CPU seconds of the generation's own processes, exited workers included.",
			[]string{"generation"}, nil),
		rss: prometheus.NewDesc("pqwatch_generation_resident_bytes",
			"Resident memory of the generation's live processes (shared pages counted per process).",
			[]string{"generation"}, nil),
		workers: prometheus.NewDesc("pqwatch_generation_workers",
			"Live workers (not shutting down) of the generation.",
			[]string{"generation"}, nil),
		handshakes: prometheus.NewDesc("pqwatch_generation_handshakes_total",
			"Handshakes served by the generation, by negotiated group.",
			[]string{"generation", "group"}, nil),
		events: prometheus.NewDesc("pqwatch_swap_events_total",
			"Binary swap and reload events observed, by kind.",
			[]string{"kind"}, nil),
		failed: prometheus.NewDesc("pqwatch_swap_failed_total",
			"Swaps that failed: .oldbin or [emerg] without a new master running in time.",
			nil, nil),
		attrib: prometheus.NewDesc("pqwatch_attributions_total",
			"TCP handshakes by how their server process was found: accept (the kernel's accept event named the process), accept_quiet (the kernel reported every accept but the quiet generation's, and none for this connection: that generation accepted it), quiet (one generation alone served throughout, no lookup), socket (the connection's socket), listener (the connection was gone; one generation holds the listener), none (not found), skipped (the attribution queue was full).",
			[]string{"method"}, nil),
		source: prometheus.NewDesc("pqwatch_attribution_source_info",
			"1 for the source attribution uses: ebpf (the kernel's accept events first), fallback (process scans and socket lookups only: eBPF unavailable or switched off; the start log says why).",
			[]string{"source"}, nil),
		accepts: prometheus.NewDesc("pqwatch_accept_events_total",
			"Accept events read from the kernel (every process's accept of a TCP connection).",
			nil, nil),
		acceptEvictions: prometheus.NewDesc("pqwatch_accept_index_evictions_total",
			"Accept events evicted from the bounded index, oldest first, to make room.",
			nil, nil),
		ringDrops: prometheus.NewDesc("pqwatch_accept_ringbuf_drops_total",
			"Accept events the kernel dropped because the ring buffer was full.",
			nil, nil),
		acceptQuiet: prometheus.NewDesc("pqwatch_accept_quiet_total",
			"Accepts of the quiet generation's processes, counted by the kernel and not reported (outside swaps, the generation serving the most handshakes).",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.cpu, c.rss, c.workers, c.handshakes, c.events, c.failed, c.attrib, c.source, c.accepts, c.acceptEvictions, c.ringDrops, c.acceptQuiet} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	t := c.t
	if src, _ := t.AttributionSource(); src != "" {
		for _, v := range []string{SourceEBPF, SourceFallback} {
			ch <- prometheus.MustNewConstMetric(c.source, prometheus.GaugeValue, b2f(v == src), v)
		}
	}
	as := t.AcceptStats() // before t.mu: reads the kernel's counters
	ch <- prometheus.MustNewConstMetric(c.accepts, prometheus.CounterValue, float64(as.Events))
	ch <- prometheus.MustNewConstMetric(c.acceptEvictions, prometheus.CounterValue, float64(as.Evictions))
	ch <- prometheus.MustNewConstMetric(c.ringDrops, prometheus.CounterValue, float64(as.RingDrops))
	ch <- prometheus.MustNewConstMetric(c.acceptQuiet, prometheus.CounterValue, float64(as.Quiet))
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, g := range t.st.order {
		id := g.id
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue,
			float64(g.exitedTicks+g.liveTicks)/float64(t.cfg.ClockTicks), id)
		for group, n := range g.handshakes {
			ch <- prometheus.MustNewConstMetric(c.handshakes, prometheus.CounterValue, float64(n), id, group)
		}
		if !g.alive {
			continue
		}
		var pod record.Pod
		if g.rec.Pod != nil {
			pod = *g.rec.Pod
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
			id, g.rec.Exe, g.rec.ExeSHA256, g.rec.OpenSSL, strconv.Itoa(g.rec.MasterPID), pod.Namespace, pod.Name, pod.Container)
		ch <- prometheus.MustNewConstMetric(c.rss, prometheus.GaugeValue, float64(g.rssBytes), id)
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(len(g.live)), id)
	}
	for _, k := range Kinds {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(t.counts[k]), k)
	}
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(t.failed))
	n := &t.ix.n
	for _, m := range []struct {
		method string
		n      uint64
	}{{"accept", n.byAccept.Load()}, {"accept_quiet", n.byQuiet.Load()}, {"quiet", n.quiet.Load()}, {"socket", n.bySocket.Load()}, {"listener", n.byListener.Load()}, {"none", n.unattributed.Load()}, {"skipped", n.skipped.Load()}} {
		ch <- prometheus.MustNewConstMetric(c.attrib, prometheus.CounterValue, float64(m.n), m.method)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
