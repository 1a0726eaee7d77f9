package exporter

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

func classicalRecord() *record.Handshake {
	h := sampleRecord()
	h.PQOffered, h.PQ = false, false
	h.SetGroup(tlsparse.GroupX25519)
	h.OfferedGroups = []string{"x25519", "secp256r1"}
	h.KeyShares = []record.KeyShare{{Group: "x25519", Bytes: 32}}
	h.ClientHelloBytes, h.ServerHelloBytes = 517, 122
	h.ClientHelloSegments = 1
	h.HandshakeRTTMicros = 300
	return h
}

func TestMetricsWrite(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, WithBuildInfo("v1.2.3", "abc123"))

	recs := []*record.Handshake{sampleRecord(), sampleRecord(), classicalRecord()}
	hrr := sampleRecord()
	hrr.HRR = true
	hrr.SetHRRGroup(tlsparse.GroupX25519MLKEM768)
	weird := classicalRecord()
	weird.SetGroup(0x1234)
	weird.Version, weird.Transport, weird.Outcome = "SSL3.0", "sctp", "exploded"
	failed := &record.Handshake{Transport: record.TransportQUIC, Outcome: record.OutcomeTimeout, ClientHelloBytes: 1250, PQOffered: true}
	recs = append(recs, hrr, weird, failed)
	for _, h := range recs {
		if err := m.Write(h); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name   string
		labels []string // transport, version, group, pq, hrr, outcome
		want   float64
	}{
		{"hybrid", []string{"tcp", "TLS1.3", "X25519MLKEM768", "true", "false", "ok"}, 2},
		{"hybrid after HRR", []string{"tcp", "TLS1.3", "X25519MLKEM768", "true", "true", "ok"}, 1},
		{"classical", []string{"tcp", "TLS1.3", "x25519", "false", "false", "ok"}, 1},
		{"out-of-set values", []string{"other", "other", "other", "false", "false", "other"}, 1},
		{"QUIC timeout before ServerHello", []string{"quic", "none", "none", "false", "false", "timeout"}, 1},
		{"initialised at zero", []string{"quic", "TLS1.3", "SecP256r1MLKEM768", "true", "false", "ok"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testutil.ToFloat64(m.handshakes.WithLabelValues(tc.labels...)); got != tc.want {
				t.Errorf("pqwatch_handshakes_total%v = %v, want %v", tc.labels, got, tc.want)
			}
		})
	}

	const want = `
# HELP pqwatch_pq_offered_total Handshakes whose ClientHello listed a PQ or hybrid group in supported_groups.
# TYPE pqwatch_pq_offered_total counter
pqwatch_pq_offered_total 4
# HELP pqwatch_client_hello_segments TCP segments or QUIC packets that carried the first ClientHello, as captured.
# TYPE pqwatch_client_hello_segments histogram
pqwatch_client_hello_segments_bucket{le="1"} 2
pqwatch_client_hello_segments_bucket{le="2"} 5
pqwatch_client_hello_segments_bucket{le="3"} 5
pqwatch_client_hello_segments_bucket{le="4"} 5
pqwatch_client_hello_segments_bucket{le="6"} 5
pqwatch_client_hello_segments_bucket{le="8"} 5
pqwatch_client_hello_segments_bucket{le="12"} 5
pqwatch_client_hello_segments_bucket{le="16"} 5
pqwatch_client_hello_segments_bucket{le="+Inf"} 5
pqwatch_client_hello_segments_sum 8
pqwatch_client_hello_segments_count 5
# HELP pqwatch_build_info A metric with constant value 1 labelled by the pqwatch version, VCS revision and Go version.
# TYPE pqwatch_build_info gauge
`
	buildLine := `pqwatch_build_info{goversion="` + goVersion() + `",revision="abc123",version="v1.2.3"} 1` + "\n"
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want+buildLine),
		"pqwatch_pq_offered_total", "pqwatch_client_hello_segments", "pqwatch_build_info"); err != nil {
		t.Error(err)
	}

	// The ClientHello histogram splits by pq_offered; the ServerHello one
	// by bounded group.
	if n := testutil.CollectAndCount(reg, "pqwatch_client_hello_bytes"); n != 2 {
		t.Errorf("client_hello_bytes series = %d, want 2", n)
	}
	if got := testutil.ToFloat64(m.kafka[KafkaDropped]); got != 0 {
		t.Errorf("kafka dropped = %v", got)
	}
}

func goVersion() string {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "pqwatch_build_info" {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				if l.GetName() == "goversion" {
					return l.GetValue()
				}
			}
		}
	}
	return ""
}

func TestMetricsLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	before := testutil.CollectAndCount(reg, "pqwatch_handshakes_total")
	h := classicalRecord()
	for i := range 5000 {
		h.SetGroup(tlsparse.Group(0x7000 + i)) // unregistered codepoints
		h.Version = "v" + strconv.Itoa(i)
		h.Outcome = "o" + strconv.Itoa(i)
		_ = m.Write(h)
		m.ParseError("reason-" + strconv.Itoa(i))
		m.LogLine("src"+strconv.Itoa(i), "r"+strconv.Itoa(i))
		m.LogJoin("j" + strconv.Itoa(i))
		m.ObserveForecast("f" + strconv.Itoa(i))
		m.KafkaMessages("k"+strconv.Itoa(i), 1)
	}
	if after := testutil.CollectAndCount(reg, "pqwatch_handshakes_total"); after != before+1 {
		t.Errorf("handshakes_total series %d -> %d, want one more (all \"other\")", before, after)
	}
	for name, want := range map[string]int{
		"pqwatch_parse_errors_total":        len(DefaultParseErrorReasons) + 1,
		"pqwatch_log_lines_total":           len(logSourceValues) * len(logResultValues),
		"pqwatch_log_joins_total":           len(joinValues),
		"pqwatch_forecast_handshakes_total": len(forecastValues),
		"pqwatch_kafka_messages_total":      len(kafkaValues),
		"pqwatch_server_hello_bytes":        5, // 4 common groups + other
	} {
		if got := testutil.CollectAndCount(reg, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	if got := m.parseErrors.totals()[len(DefaultParseErrorReasons)]; got != 5000 {
		t.Errorf("parse errors other = %v", got)
	}
}

func TestMetricsAgentCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, WithParseErrorReasons("truncated", "bad_client_hello"))
	m.ParseError("truncated")
	m.ParseError("truncated")
	m.ParseError("nonsense")
	m.LogLine(LogSourceNginx, LogLineOK)
	m.LogLine(LogSourceCaddy, LogLineMalformed)
	m.LogLine(LogSourceCaddy, "weird")
	m.LogJoin(JoinJoined)
	m.LogJoin(JoinAmbiguous)
	m.ObserveForecast(ForecastHRR)
	m.KafkaMessages(KafkaDelivered, 10)
	m.KafkaMessages(KafkaDropped, 2)
	const want = `
# HELP pqwatch_parse_errors_total Captured input that could not be parsed, by reason.
# TYPE pqwatch_parse_errors_total counter
pqwatch_parse_errors_total{reason="bad_client_hello"} 0
pqwatch_parse_errors_total{reason="other"} 1
pqwatch_parse_errors_total{reason="truncated"} 2
# HELP pqwatch_log_joins_total Attempts to join a handshake record with an access-log line, by result.
# TYPE pqwatch_log_joins_total counter
pqwatch_log_joins_total{result="ambiguous"} 1
pqwatch_log_joins_total{result="joined"} 1
pqwatch_log_joins_total{result="mismatch"} 0
pqwatch_log_joins_total{result="unmatched"} 0
# HELP pqwatch_forecast_handshakes_total Handshakes by what they would become under the forecast server policy: pq, hrr (a HelloRetryRequest would be needed), classical, loses_pq (a PQ group today, a classical one under the policy), or fail (no group in common).
# TYPE pqwatch_forecast_handshakes_total counter
pqwatch_forecast_handshakes_total{outcome="classical"} 0
pqwatch_forecast_handshakes_total{outcome="fail"} 0
pqwatch_forecast_handshakes_total{outcome="hrr"} 1
pqwatch_forecast_handshakes_total{outcome="loses_pq"} 0
pqwatch_forecast_handshakes_total{outcome="pq"} 0
# HELP pqwatch_kafka_messages_total Kafka messages by result: delivered, failed (attempt failed, kept for retry), spooled (to disk), dropped (lost).
# TYPE pqwatch_kafka_messages_total counter
pqwatch_kafka_messages_total{result="delivered"} 10
pqwatch_kafka_messages_total{result="dropped"} 2
pqwatch_kafka_messages_total{result="failed"} 0
pqwatch_kafka_messages_total{result="spooled"} 0
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want),
		"pqwatch_parse_errors_total", "pqwatch_log_joins_total", "pqwatch_forecast_handshakes_total", "pqwatch_kafka_messages_total"); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		source, result string
		want           float64
	}{
		{"nginx", "ok", 1}, {"caddy", "malformed", 1}, {"caddy", "other", 1}, {"nginx_error", "skipped", 0},
	} {
		if got := float64(m.logLines.totals()[m.logLines.find([]string{tc.source, tc.result})]); got != tc.want {
			t.Errorf("log_lines{%s,%s} = %v, want %v", tc.source, tc.result, got, tc.want)
		}
	}
}

// TestForecastSink: every forecast Kind but unknown is a label value,
// there at zero from the start, and a client that negotiates a PQ group
// today and a classical one under the policy counts as loses_pq, not
// classical.
func TestForecastSink(t *testing.T) {
	for _, k := range forecast.Kinds {
		if k != forecast.Unknown && !slices.Contains(forecastValues, k.String()) {
			t.Errorf("forecast kind %q is not an outcome label value", k)
		}
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	sink := ForecastSink(m, forecast.DefaultPolicy)
	pq := sampleRecord()
	pq.OfferedIDs, pq.KeyShareIDs = []uint16{0x11ec, 0x001d, 0x0017}, []uint16{0x11ec, 0x001d}
	kyber := sampleRecord() // Chrome 124-130, served by a server that still speaks the draft
	kyber.OfferedGroups, kyber.OfferedIDs = []string{"X25519Kyber768Draft00", "x25519"}, []uint16{0x6399, 0x001d}
	kyber.KeyShares, kyber.KeyShareIDs = []record.KeyShare{{Group: "X25519Kyber768Draft00", Bytes: 1216}, {Group: "x25519", Bytes: 32}}, []uint16{0x6399, 0x001d}
	kyber.SetGroup(tlsparse.GroupX25519Kyber768Draft00)
	classical := classicalRecord()
	classical.OfferedIDs, classical.KeyShareIDs = []uint16{0x001d, 0x0017}, []uint16{0x001d}
	for _, h := range []*record.Handshake{pq, kyber, kyber, classical} {
		if err := sink.Write(h); err != nil {
			t.Fatal(err)
		}
	}
	const want = `
# HELP pqwatch_forecast_handshakes_total Handshakes by what they would become under the forecast server policy: pq, hrr (a HelloRetryRequest would be needed), classical, loses_pq (a PQ group today, a classical one under the policy), or fail (no group in common).
# TYPE pqwatch_forecast_handshakes_total counter
pqwatch_forecast_handshakes_total{outcome="classical"} 1
pqwatch_forecast_handshakes_total{outcome="fail"} 0
pqwatch_forecast_handshakes_total{outcome="hrr"} 0
pqwatch_forecast_handshakes_total{outcome="loses_pq"} 2
pqwatch_forecast_handshakes_total{outcome="pq"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "pqwatch_forecast_handshakes_total"); err != nil {
		t.Error(err)
	}
}

// TestHandshakesGroupMissing: a completed handshake without a group is
// counted under its group_missing reason, never under "none", which stays
// for handshakes that did not complete; the reasons exist at zero.
func TestHandshakesGroupMissing(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for _, reason := range []string{"resumed", "no_key_exchange", "unknown"} {
		if got := testutil.ToFloat64(m.handshakes.WithLabelValues("tcp", "TLS1.2", reason, "false", "false", "ok")); got != 0 {
			t.Errorf("%s before any handshake: %v", reason, got)
		}
	}
	tls12 := func(missing string, resumed bool) *record.Handshake {
		h := classicalRecord()
		h.Version, h.Group, h.GroupID, h.GroupMissing, h.Resumed = "TLS1.2", "", 0, missing, resumed
		return h
	}
	resumed13 := sampleRecord()
	resumed13.Resumed = true
	reset := &record.Handshake{Transport: record.TransportTCP, Outcome: record.OutcomeReset}
	for _, h := range []*record.Handshake{
		tls12(record.GroupMissingResumed, true), tls12(record.GroupMissingResumed, true),
		tls12(record.GroupMissingNoKeyExchange, false), tls12(record.GroupMissingUnknown, false),
		tls12("", false), // a record from before group_missing: unknown, not none
		resumed13, reset,
	} {
		if err := m.Write(h); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"tcp", "TLS1.2", "resumed", "false", "false", "ok"}, 2},
		{[]string{"tcp", "TLS1.2", "no_key_exchange", "false", "false", "ok"}, 1},
		{[]string{"tcp", "TLS1.2", "unknown", "false", "false", "ok"}, 2},
		{[]string{"tcp", "TLS1.2", "none", "false", "false", "ok"}, 0},
		{[]string{"tcp", "TLS1.3", "X25519MLKEM768", "true", "false", "ok"}, 1}, // resumed with psk_dhe_ke: its group
		{[]string{"tcp", "none", "none", "false", "false", "reset"}, 1},
	} {
		if got := testutil.ToFloat64(m.handshakes.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("pqwatch_handshakes_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	_ = m.Write(sampleRecord())
	reg.MustRegister(NewCaptureCollector(func() CaptureStats { return CaptureStats{Packets: 1} }))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	// CollectAndLint on the collectors individually, as the testutil docs show.
	if problems, err := testutil.CollectAndLint(m.handshakes); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint handshakes: %v %v", problems, err)
	}
}

func TestMetricsWriteAllocs(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	recs := []*record.Handshake{sampleRecord(), classicalRecord()}
	for _, h := range recs {
		_ = m.Write(h) // resolve the label combinations
	}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, h := range recs {
			_ = m.Write(h)
		}
	})
	if allocs != 0 {
		t.Errorf("Metrics.Write allocates %v times per call", allocs)
	}
}

func TestCaptureCollector(t *testing.T) {
	stats := CaptureStats{
		Interfaces:   map[string]IfaceStats{"eth0": {Packets: 100, Drops: 2}, "veth1": {Packets: 7}},
		FlowsEvicted: 3, FlowsActive: 12, QUICConnsActive: 4, BufferedBytes: 5000, BufferBudget: 64 << 20,
	}
	c := NewCaptureCollector(func() CaptureStats { return stats })
	const want = `
# HELP pqwatch_buffer_budget_bytes The memory budget for TCP reassembly and QUIC CRYPTO buffers, over all capture workers (-buffer-budget, or a quarter of the memory limit).
# TYPE pqwatch_buffer_budget_bytes gauge
pqwatch_buffer_budget_bytes 6.7108864e+07
# HELP pqwatch_buffered_bytes Bytes of TCP reassembly and QUIC CRYPTO buffers held now (unfinished handshakes), kept within pqwatch_buffer_budget_bytes by evicting the oldest unfinished flow.
# TYPE pqwatch_buffered_bytes gauge
pqwatch_buffered_bytes 5000
# HELP pqwatch_capture_drops_total Packets dropped by the kernel before the capture read them, by interface.
# TYPE pqwatch_capture_drops_total counter
pqwatch_capture_drops_total{iface="eth0"} 2
pqwatch_capture_drops_total{iface="veth1"} 0
# HELP pqwatch_capture_packets_total Packets received by the capture, by interface.
# TYPE pqwatch_capture_packets_total counter
pqwatch_capture_packets_total{iface="eth0"} 100
pqwatch_capture_packets_total{iface="veth1"} 7
# HELP pqwatch_flows_active Flow-table entries currently tracked.
# TYPE pqwatch_flows_active gauge
pqwatch_flows_active 12
# HELP pqwatch_flows_evicted_total Flow-table entries evicted because the table was full (flows that went idle expire normally and are not counted).
# TYPE pqwatch_flows_evicted_total counter
pqwatch_flows_evicted_total 3
# HELP pqwatch_quic_conns_active QUIC connections currently tracked.
# TYPE pqwatch_quic_conns_active gauge
pqwatch_quic_conns_active 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	stats = CaptureStats{Packets: 5, Drops: 1}
	const wantAny = `
# HELP pqwatch_capture_packets_total Packets received by the capture, by interface.
# TYPE pqwatch_capture_packets_total counter
pqwatch_capture_packets_total{iface="any"} 5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantAny), "pqwatch_capture_packets_total"); err != nil {
		t.Error(err)
	}
}

// scrape serves reg through Handler and returns the /metrics body.
func scrape(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	srv := httptest.NewServer(Handler(reg, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return body
}

func TestHandlerPromtoolCheckMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	reg.MustRegister(NewCaptureCollector(func() CaptureStats {
		return CaptureStats{Interfaces: map[string]IfaceStats{"lo": {Packets: 42}}, FlowsActive: 1}
	}))
	for _, h := range []*record.Handshake{sampleRecord(), classicalRecord()} {
		_ = m.Write(h)
	}
	m.ParseError("truncated")
	body := scrape(t, reg)
	for _, name := range []string{
		"pqwatch_handshakes_total{", "pqwatch_client_hello_bytes_bucket{", "pqwatch_server_hello_bytes_bucket{",
		"pqwatch_client_hello_segments_bucket{", "pqwatch_handshake_rtt_seconds_bucket{", "pqwatch_pq_offered_total ",
		"pqwatch_forecast_handshakes_total{", "pqwatch_parse_errors_total{", "pqwatch_log_lines_total{",
		"pqwatch_log_joins_total{", "pqwatch_kafka_messages_total{", "pqwatch_build_info{",
		"pqwatch_capture_packets_total{", "pqwatch_capture_drops_total{", "pqwatch_flows_evicted_total ", "pqwatch_flows_active ",
	} {
		if !bytes.Contains(body, []byte(name)) {
			t.Errorf("scrape lacks %s", name)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus): ", err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func BenchmarkMetricsWrite(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	h := sampleRecord()
	_ = m.Write(h)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Write(h)
	}
}

func BenchmarkMetricsWriteParallel(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	h := sampleRecord()
	_ = m.Write(h)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = m.Write(h)
		}
	})
}
