package exporter

import (
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// MaxPortLabels bounds the port label of pqwatch_port_handshakes_total: at
// most this many listening ports keep their number, any other is "other".
// It is also the most -ports `pqwatch run` accepts.
const MaxPortLabels = 100

// WithPorts names the servers' listening ports (`pqwatch run -ports`): each
// keeps its number in the port label of pqwatch_port_handshakes_total, a
// handshake to any other port counts as "other". Past MaxPortLabels ports
// the rest are "other" too. Without it, or with no ports (capture on every
// port), the first MaxPortLabels distinct server ports to complete a
// handshake keep their number.
func WithPorts(ports []uint16) MetricsOption {
	return func(c *metricsConfig) {
		c.ports = slices.Clone(ports)
	}
}

// portCounters are the counters of one port label value, by pq and outcome,
// resolved on first use.
type portCounters struct {
	port  uint16
	label string
	c     [2 * 7]atomic.Pointer[prometheus.Counter] // [pq*nOutcome + outcome]
}

// portMetric is pqwatch_port_handshakes_total. Lookups read an immutable
// sorted table (no lock, no allocation); a new port, while the table is
// not fixed and below MaxPortLabels, copies it under mu.
type portMetric struct {
	vec   *prometheus.CounterVec
	table atomic.Pointer[[]*portCounters] // sorted by port
	other *portCounters
	fixed bool
	mu    sync.Mutex
}

// newPortMetric: with ports named, the table is fixed to them.
func newPortMetric(ports []uint16) *portMetric {
	fixed := len(ports) > 0
	if len(portCounters{}.c) != 2*nOutcome {
		panic("exporter: portCounters.c must hold 2 * len(outcomeValues) counters")
	}
	pm := &portMetric{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "port_handshakes_total",
			Help: "Handshake attempts by the server's listening port (one of -ports, at most 100; any other port is other; TCP and QUIC together), PQ and outcome.",
		}, []string{"port", "pq", "outcome"}),
		fixed: fixed,
	}
	pm.other = pm.newEntry(0, labelOther)
	var table []*portCounters
	for _, p := range ports {
		if p == 0 || len(table) == MaxPortLabels || slices.ContainsFunc(table, func(e *portCounters) bool { return e.port == p }) {
			continue
		}
		table = append(table, pm.newEntry(p, strconv.Itoa(int(p))))
	}
	slices.SortFunc(table, func(a, b *portCounters) int { return int(a.port) - int(b.port) })
	pm.table.Store(&table)
	return pm
}

// newEntry makes a port's entry with its completed series at zero, so that
// the PQ share of the port exists before its first PQ handshake.
func (pm *portMetric) newEntry(port uint16, label string) *portCounters {
	e := &portCounters{port: port, label: label}
	for pq := range 2 {
		pm.counter(e, pq, 0)
	}
	return e
}

func (pm *portMetric) counter(e *portCounters, pq, oi int) prometheus.Counter {
	i := pq*nOutcome + oi
	if c := e.c[i].Load(); c != nil {
		return *c
	}
	c := pm.vec.WithLabelValues(e.label, boolValues[pq], outcomeValues[oi])
	e.c[i].CompareAndSwap(nil, &c)
	return c
}

// entry returns the counters of a server port, adding it when the table
// may still grow and the handshake completed: a scan or forged
// ClientHellos at unknown ports (reset, incomplete) cannot take the labels
// before the server's real ports have served.
func (pm *portMetric) entry(port uint16, completed bool) *portCounters {
	if port == 0 {
		return pm.other
	}
	if e := find(*pm.table.Load(), port); e != nil {
		return e
	}
	if pm.fixed || !completed {
		return pm.other
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	old := *pm.table.Load()
	if e := find(old, port); e != nil {
		return e
	}
	if len(old) >= MaxPortLabels {
		return pm.other
	}
	e := pm.newEntry(port, strconv.Itoa(int(port)))
	table := make([]*portCounters, 0, len(old)+1)
	table = append(append(table, old...), e)
	slices.SortFunc(table, func(a, b *portCounters) int { return int(a.port) - int(b.port) })
	pm.table.Store(&table)
	return e
}

func find(table []*portCounters, port uint16) *portCounters {
	i, ok := slices.BinarySearchFunc(table, port, func(e *portCounters, p uint16) int { return int(e.port) - int(p) })
	if ok {
		return table[i]
	}
	return nil
}

func (pm *portMetric) write(h *record.Handshake) {
	pm.counter(pm.entry(serverPort(h), h.Outcome == record.OutcomeOK), b2i(h.PQ), outcomeIdx(h.Outcome)).Inc()
}

// serverPort is the record's server port: the sniffer's, else the port of
// its server address (records read back from JSON); 0 when neither says.
func serverPort(h *record.Handshake) uint16 {
	if h.ServerPort != 0 {
		return h.ServerPort
	}
	if ap, err := netip.ParseAddrPort(h.Server); err == nil {
		return ap.Port()
	}
	return 0
}
