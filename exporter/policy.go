package exporter

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// PolicyMetrics is pqwatch_policy_violations_total{server_port,reason}:
// handshakes whose server did not choose what its declared policy
// (-expect-policy) predicts. server_port is one of a fixed set of ports
// (those the declarations and -ports name), else "other"; reason is a
// report.Violation* kind. Every series exists at zero from the start.
type PolicyMetrics struct {
	counters map[uint16]map[string]prometheus.Counter // port 0: "other"
}

// NewPolicyMetrics registers the metric with reg; ports are the
// server_port label values kept as they are.
func NewPolicyMetrics(reg prometheus.Registerer, ports []uint16) *PolicyMetrics {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "policy_violations_total",
		Help: "Handshakes whose server chose another group (or HRR or not) than its declared -expect-policy predicts for the ClientHello, by server port (the declared and -ports ports, else other) and kind: classical_instead_of_pq, pq_instead_of_classical, other_group, unexpected_hrr, missing_hrr, group_outside_policy, tls_version.",
	}, []string{"server_port", "reason"})
	reg.MustRegister(vec)
	m := &PolicyMetrics{counters: map[uint16]map[string]prometheus.Counter{}}
	for _, p := range append([]uint16{0}, ports...) {
		if _, dup := m.counters[p]; dup {
			continue
		}
		label := labelOther
		if p != 0 {
			label = strconv.Itoa(int(p))
		}
		m.counters[p] = resolveCounters(vec.MustCurryWith(prometheus.Labels{"server_port": label}), report.ViolationKinds)
	}
	return m
}

// Observe counts one violation of kind on port.
func (m *PolicyMetrics) Observe(port uint16, kind string) {
	byKind, ok := m.counters[port]
	if !ok {
		byKind = m.counters[0]
	}
	if c, ok := byKind[kind]; ok {
		c.Inc()
	}
}

// PolicySink returns a sink that checks each record against es
// (report.CheckPolicy) and counts its violations in m. Safe for
// concurrent use.
func PolicySink(m *PolicyMetrics, es report.Expectations) record.Sink {
	return record.SinkFunc(func(h *record.Handshake) {
		if res := report.CheckPolicy(es, h); res.Kind != "" {
			m.Observe(h.ServerPort, res.Kind)
		}
	})
}
