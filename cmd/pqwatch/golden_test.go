package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestAnalyzeGolden pins the output of analyze, every -format, on the
// testdata capture with and without logs, policies, filters and damage:
// refactorings keep it byte-identical (go test -run TestAnalyzeGolden
// -update rewrites testdata/golden/*.golden after an intended change).
func TestAnalyzeGolden(t *testing.T) {
	capture := filepath.Join("..", "..", "testdata", "handshakes.pcap")
	g := func(name string) string { return filepath.Join("testdata", "golden", name) }
	good, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	trunc := filepath.Join(tmp, "trunc.pcap")
	if err := os.WriteFile(trunc, good[:len(good)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	edge := `$remote_addr $remote_port $msec "$request" $status "$http_user_agent" $ssl_curve $pid`
	logs := []string{"-nginx-log", g("access.log"), "-nginx-log-format", edge, "-caddy-log", g("caddy.log"), "-nginx-error-log", g("error.log")}
	cases := []struct {
		name string
		args []string
	}{
		{"text", nil},
		{"json", []string{"-format", "json"}},
		{"jsonl", []string{"-format", "jsonl"}},
		{"ecs-jsonl", []string{"-format", "ecs-jsonl"}},
		{"policy-go", []string{"-format", "json", "-forecast-groups", "go=X25519MLKEM768,x25519"}},
		{"policy-openssl30-text", []string{"-forecast-groups", "openssl3.0=x25519,secp256r1"}},
		{"ports-none", []string{"-ports", "8443"}},
		{"ports-json", []string{"-format", "json", "-ports", "443"}},
		{"joined-text", logs},
		{"joined-json", append([]string{"-format", "json"}, logs...)},
		{"joined-jsonl", append([]string{"-format", "jsonl"}, logs...)},
		{"joined-ecs-jsonl", append([]string{"-format", "ecs-jsonl"}, logs...)},
		{"conf-json", []string{"-format", "json", "-nginx-conf", g("nginx.conf"), "-nginx-log", g("access.log")}},
		{"two-files-json", []string{"-format", "json", capture}},
		{"truncated-text", []string{trunc}},
		{"truncated-json", []string{"-format", "json", trunc}},
		{"missing-json", []string{"-format", "json", filepath.Join(tmp, "missing.pcap")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"analyze"}, c.args...)
			if !strings.Contains(c.name, "truncated") && !strings.Contains(c.name, "missing") {
				args = append(args, capture)
			}
			code, out, errs := run(t, args...)
			got := fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", code, out, errs)
			got = strings.ReplaceAll(got, tmp, "$TMP")
			path := g(c.name + ".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("analyze %s differs from %s (run with -update after an intended change):\n%s", strings.Join(c.args, " "), path, got)
			}
		})
	}
}

// TestAnalyzeGoldenGenerated pins analyze's records (and, for the demo's
// mix, its summary) on captures pcapgen writes afresh for the test: the
// demo's server against its client mix at two MSS values (a ClientHello
// in one segment and in several), Go's default server, a server that
// prefers P-256, and connections that carry bulk data after the
// handshake. The server's certificate is pcapgen.FixedCertificate, so
// every message has one size and the records are the same bytes in every
// run (go test -run TestAnalyzeGoldenGenerated -update rewrites
// testdata/golden/gen-*.golden after an intended change).
func TestAnalyzeGoldenGenerated(t *testing.T) {
	cert, err := pcapgen.FixedCertificate("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	bulk := pcapgen.DefaultClients(5)
	for i := range bulk {
		bulk[i].BulkBytes = 40 << 10
	}
	cases := []struct {
		name string
		cfg  pcapgen.Config
		args []string
	}{
		{"gen-demo-jsonl", pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(10)}, []string{"-format", "jsonl"}},
		{"gen-demo-json", pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(10)}, []string{"-format", "json", "-forecast-groups", "go"}},
		{"gen-demo-mss536-jsonl", pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(10), MSS: 536}, []string{"-format", "jsonl"}},
		{"gen-go-default-jsonl", pcapgen.Config{Clients: pcapgen.DefaultClients(10)}, []string{"-format", "jsonl"}},
		{"gen-p256-first-jsonl", pcapgen.Config{ServerCurves: []tls.CurveID{tls.CurveP256, tls.X25519}, Clients: pcapgen.DefaultClients(10)}, []string{"-format", "jsonl"}},
		{"gen-bulk-jsonl", pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: bulk}, []string{"-format", "jsonl"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Certificate = &cert
			var buf bytes.Buffer
			if _, err := pcapgen.Generate(context.Background(), &buf, c.cfg); err != nil {
				t.Fatal(err)
			}
			capture := filepath.Join(t.TempDir(), "gen.pcap")
			if err := os.WriteFile(capture, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errs := run(t, append(append([]string{"analyze"}, c.args...), capture)...)
			got := fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", code, out, errs)
			got = strings.ReplaceAll(got, capture, "$CAPTURE")
			path := filepath.Join("testdata", "golden", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("analyze %s of the generated capture differs from %s (run with -update after an intended change):\n%s", strings.Join(c.args, " "), path, got)
			}
		})
	}
}

// TestMetricsGoldenGenerated pins the Prometheus exposition of the demo's
// capture (pcapgen, FixedCertificate) through the sniffer, the metrics
// tap and the forecast tap: the metrics a refactoring leaves unchanged
// (pqwatch_build_info, which names the toolchain, left out; -update
// rewrites testdata/golden/gen-demo-metrics.golden).
func TestMetricsGoldenGenerated(t *testing.T) {
	cert, err := pcapgen.FixedCertificate("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cfg := pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(10), Certificate: &cert}
	if _, err := pcapgen.Generate(context.Background(), &buf, cfg); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(t.TempDir(), "gen.pcap")
	if err := os.WriteFile(capture, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := exporter.NewMetrics(reg)
	fc := exporter.ForecastSink(m, forecast.GoPolicy)
	s := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) {
		_ = m.Write(r)
		_ = fc.Write(r)
	}})
	if _, err := sniffer.ReadFile(capture, s, nil); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got strings.Builder
	for line := range strings.Lines(rec.Body.String()) {
		if !strings.Contains(line, "pqwatch_build_info") {
			got.WriteString(line)
		}
	}
	path := filepath.Join("testdata", "golden", "gen-demo-metrics.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got.String() != string(want) {
		t.Errorf("the metrics of the generated capture differ from %s (run with -update after an intended change):\n%s", path, got.String())
	}
}
