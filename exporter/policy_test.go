package exporter

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// TestPolicyMetrics: every series exists at zero; a violation is counted
// under its server port (a declared one) or other, and its kind; a correct
// handshake and one of a server without a declared policy are not.
func TestPolicyMetrics(t *testing.T) {
	var es report.Expectations
	for _, s := range []string{"127.0.0.1:8443=go", ":9443=caddy"} {
		e, err := report.ParseExpectation(s)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	reg := prometheus.NewRegistry()
	m := NewPolicyMetrics(reg, append(es.Ports(), 8443))
	if n := testutil.CollectAndCount(reg, "pqwatch_policy_violations_total"); n != 3*len(report.ViolationKinds) {
		t.Fatalf("%d series at start, want %d", n, 3*len(report.ViolationKinds))
	}
	rec := func(server string, port uint16, group string) *record.Handshake {
		return &record.Handshake{Server: server, ServerPort: port, Outcome: record.OutcomeOK, Version: "TLS1.3", Group: group, GroupID: record.GroupCode(group),
			JA4: "t13d0101h1_000000000000_000000000000", ClientHelloBytes: 300,
			OfferedIDs: []uint16{0x11ec, 0x001d}, KeyShareIDs: []uint16{0x11ec, 0x001d}}
	}
	sink := PolicySink(m, es)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			sink.Write(rec("127.0.0.1:8443", 8443, "x25519"))         // violation
			sink.Write(rec("127.0.0.1:8443", 8443, "X25519MLKEM768")) // correct
			sink.Write(rec("127.0.0.1:7443", 7443, "x25519"))         // no declared policy
		})
	}
	wg.Wait()
	e, _ := report.ParseExpectation("go")
	PolicySink(m, report.Expectations{e}).Write(rec("127.0.0.1:7443", 7443, "x25519")) // undeclared port: other
	got := map[string]float64{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, mt := range mf.Metric {
			var l []string
			for _, lp := range mt.Label {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			if v := mt.Counter.GetValue(); v != 0 {
				got[strings.Join(l, ",")] = v
			}
		}
	}
	if len(got) != 2 || got["reason=classical_instead_of_pq,server_port=8443"] != 4 || got["reason=classical_instead_of_pq,server_port=other"] != 1 {
		t.Errorf("non-zero series %v", got)
	}
}
