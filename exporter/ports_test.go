package exporter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/record"
)

// TestPortHandshakes: pqwatch_port_handshakes_total counts each record under
// its server's listening port, by pq and outcome; a port outside -ports is
// "other"; the completed series of every port exist at zero.
func TestPortHandshakes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, WithPorts([]uint16{8443, 443, 443}))
	at := func(h *record.Handshake, port uint16) *record.Handshake {
		h.ServerPort = port
		return h
	}
	fromJSON := classicalRecord() // no ServerPort: the port of Server
	fromJSON.Server = "[2001:db8::1]:8443"
	noPort := classicalRecord()
	noPort.Server = "somewhere"
	failed := &record.Handshake{Transport: record.TransportQUIC, Outcome: record.OutcomeTimeout, ServerPort: 443}
	for _, h := range []*record.Handshake{
		at(sampleRecord(), 443), at(sampleRecord(), 443), at(classicalRecord(), 443),
		at(sampleRecord(), 8443), fromJSON, failed,
		at(sampleRecord(), 9000), noPort, // not in -ports; no port at all
	} {
		m.Write(h)
	}
	const want = `
# HELP pqwatch_port_handshakes_total Handshake attempts by the server's listening port (one of -ports, at most 100; any other port is other; TCP and QUIC together), PQ and outcome.
# TYPE pqwatch_port_handshakes_total counter
pqwatch_port_handshakes_total{outcome="ok",port="443",pq="false"} 1
pqwatch_port_handshakes_total{outcome="ok",port="443",pq="true"} 2
pqwatch_port_handshakes_total{outcome="timeout",port="443",pq="false"} 1
pqwatch_port_handshakes_total{outcome="ok",port="8443",pq="false"} 1
pqwatch_port_handshakes_total{outcome="ok",port="8443",pq="true"} 1
pqwatch_port_handshakes_total{outcome="ok",port="other",pq="false"} 1
pqwatch_port_handshakes_total{outcome="ok",port="other",pq="true"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "pqwatch_port_handshakes_total"); err != nil {
		t.Error(err)
	}
	// The same records on pqwatch_handshakes_total: the port split adds up.
	var hs, ports float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			switch mf.GetName() {
			case "pqwatch_handshakes_total":
				hs += mm.GetCounter().GetValue()
			case "pqwatch_port_handshakes_total":
				ports += mm.GetCounter().GetValue()
			}
		}
	}
	if hs != 8 || ports != 8 {
		t.Errorf("handshakes_total sums to %v, port_handshakes_total to %v; want 8 and 8", hs, ports)
	}
}

// TestPortHandshakesBounded: however many server ports the records name,
// the port label takes at most MaxPortLabels numbers and "other"; with
// -ports fixed, only those.
func TestPortHandshakesBounded(t *testing.T) {
	ports := func(reg *prometheus.Registry) map[string]bool {
		out := map[string]bool{}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "pqwatch_port_handshakes_total" {
				continue
			}
			for _, mm := range mf.GetMetric() {
				for _, l := range mm.GetLabel() {
					if l.GetName() == "port" {
						out[l.GetValue()] = true
					}
				}
			}
		}
		return out
	}
	// Every port (no -ports, as `pqwatch run` passes it): the first
	// MaxPortLabels seen completing a handshake. A scan before them, forged
	// hello starts at 5,000 other ports, takes no label.
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, WithPorts(nil))
	h := sampleRecord()
	scan := sampleRecord()
	scan.Outcome = record.OutcomeIncomplete
	for p := 10000; p < 15000; p++ {
		scan.ServerPort = uint16(p)
		m.Write(scan)
	}
	if got := ports(reg); len(got) != 1 || !got["other"] {
		t.Errorf("after a scan of incomplete hellos: port labels %v, want only other", got)
	}
	for p := 1; p <= 5000; p++ {
		h.ServerPort = uint16(p)
		m.Write(h)
	}
	got := ports(reg)
	if len(got) != MaxPortLabels+1 || !got["other"] || !got["1"] || !got[strconv.Itoa(MaxPortLabels)] || got[strconv.Itoa(MaxPortLabels+1)] {
		t.Errorf("%d port label values (want %d numbers and other): %v", len(got), MaxPortLabels, got)
	}
	if o := testutil.ToFloat64(m.ports.vec.WithLabelValues("other", "true", "ok")); o != 5000-MaxPortLabels {
		t.Errorf("other = %v, want %d", o, 5000-MaxPortLabels)
	}
	// More -ports than the bound: the first MaxPortLabels.
	var many []uint16
	for p := 1000; p < 1200; p++ {
		many = append(many, uint16(p))
	}
	reg = prometheus.NewRegistry()
	m = NewMetrics(reg, WithPorts(many))
	for p := 1; p <= 5000; p++ {
		h.ServerPort = uint16(p)
		m.Write(h)
	}
	if got := ports(reg); len(got) != MaxPortLabels+1 || !got["1000"] || got["1100"] || got["1"] {
		t.Errorf("with %d -ports: %d port label values: %v", len(many), len(got), got)
	}
}

func TestPortHandshakesAllocs(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	h := sampleRecord()
	h.ServerPort = 0 // parsed from Server
	m.Write(h)
	if a := testing.AllocsPerRun(1000, func() { m.Write(h) }); a != 0 {
		t.Errorf("Write with a parsed server port allocates %v times", a)
	}
}
