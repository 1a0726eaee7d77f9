package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/deploy"
	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// clientGroup makes one TLS connection from ns and returns the group the
// client negotiated ("" when the handshake failed).
func clientGroup(ns, addr string, curves []tls.CurveID, maxVer uint16) string {
	c, err := testenv.Dial(ns, addr, 5*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test", CurvePreferences: curves, MaxVersion: maxVer})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if tc.Handshake() != nil {
		return ""
	}
	g := tlsparse.Group(tc.ConnectionState().CurveID).String()
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: pqwatch.test\r\nConnection: close\r\n\r\n")
	io.Copy(io.Discard, tc)
	return g
}

// scrape returns the metrics text and the handshakes_total sum by group
// for outcome ok, and the count of failed outcomes.
func scrape(t *testing.T, base string) (string, map[string]float64, float64) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	groups := map[string]float64{}
	failed := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "pqwatch_handshakes_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		labels := line[len("pqwatch_handshakes_total{"):strings.IndexByte(line, '}')]
		m := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				m[k] = strings.Trim(val, `"`)
			}
		}
		if m["outcome"] == "ok" {
			groups[m["group"]] += v
		} else {
			failed += v
		}
	}
	return string(body), groups, failed
}

// TestLiveAgentNamespaces: real nginx from Debian and a Go hybrid server in
// one namespace, real clients in another, pqwatch capturing on the veth.
// The counts per group on /metrics equal what the clients report; promtool
// accepts the scrape; a real Prometheus scraping pqwatch computes the PQ
// share with the shipped recording rule.
func TestLiveAgentNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	pair := testenv.NewPair(t, 1500)
	ngx := testenv.StartNginx(t, testenv.NginxOptions{NS: pair.S, Listen: "443", ECDHCurve: "X25519:prime256v1"})
	logFormat, err := logparse.ParseLogFormat(strings.Trim(testenv.RecommendedLogFormat, "'"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.GoServer(t, pair.S, ":8443", nil)

	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var recs = make(chan *record.Handshake, 1000)
	// A Kafka feed to an in-process broker (kfake, on the root namespace's
	// loopback) that creates the topic, so the Kafka panels have data.
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var a *agent.Agent
	// The capture sockets are made inside the server namespace.
	err = testenv.InNS(pair.S, func() (err error) {
		a, err = agent.New(agent.Config{
			Ifaces: []string{pair.SIf}, Ports: []uint16{443, 8443}, Workers: 2, Listener: ml, TrackProcesses: true,
			NginxLogs: []agent.NginxLog{{Path: ngx.AccessLog, Format: logFormat}},
			// Records are recycled, as in pqwatch run: the sink keeps copies.
			RecycleRecords: true,
			OnRecord:       func(r *record.Handshake) { c := *r; recs <- &c },
			Kafka:          &exporter.KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "pqwatch.handshakes"},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	base := "http://" + ml.Addr().String()

	// A real Prometheus scraping pqwatch every second with the shipped rules.
	promBase := startPrometheus(t, ml.Addr().String())
	if promBase != "" {
		// Two scrapes of the all-zero series before any traffic, so rate()
		// sees every increase.
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if v, ok := promQuery(t, promBase, "count_over_time(pqwatch_flows_active[1m])"); ok && v >= 2 {
				break
			}
		}
	}

	want := map[string]float64{}
	wantFailed := 0.0
	nginx, gosrv := net.JoinHostPort(pair.SAddr, "443"), net.JoinHostPort(pair.SAddr, "8443")
	kinds := []struct {
		curves []tls.CurveID
		maxVer uint16
	}{{nil, 0}, {[]tls.CurveID{tls.X25519}, 0}, {[]tls.CurveID{tls.CurveP256}, 0}, {[]tls.CurveID{tls.X25519MLKEM768}, 0}, {nil, tls.VersionTLS12}}
	for round := range 6 {
		for _, srv := range []string{nginx, gosrv} {
			for _, k := range kinds {
				g := clientGroup(pair.C, srv, k.curves, k.maxVer)
				if g == "" {
					wantFailed++
				} else {
					want[g]++
				}
			}
		}
		_ = round
	}
	var total float64
	for _, v := range want {
		total += v
	}
	var groups map[string]float64
	var failed float64
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		body, groups, failed = scrape(t, base)
		var sum float64
		for _, v := range groups {
			sum += v
		}
		if sum >= total && failed >= wantFailed {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for g, n := range want {
		if groups[g] != n {
			t.Errorf("group %s: /metrics says %v, clients negotiated %v", g, groups[g], n)
		}
	}
	for g, n := range groups {
		if want[g] == 0 && n != 0 {
			t.Errorf("group %s: /metrics says %v, no client negotiated it", g, n)
		}
	}
	if failed != wantFailed {
		t.Errorf("failed handshakes: /metrics %v, clients %v", failed, wantFailed)
	}
	t.Logf("clients: %v failed %v; metrics: %v failed %v", want, wantFailed, groups, failed)

	// promtool check metrics on the scrape.
	if pt, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(pt, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	// The recording rule's PQ share equals the clients' share.
	if promBase != "" {
		wantShare := want["X25519MLKEM768"] / total
		var got float64
		ok := false
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			if v, found := promQuery(t, promBase, "pqwatch:pq_share:ratio_rate5m"); found {
				got, ok = v, true
				if math.Abs(got-wantShare) < 1e-6 {
					break
				}
			}
		}
		if !ok {
			v, found := promQuery(t, promBase, "sum(rate(pqwatch_handshakes_total[5m]))")
			up, _ := promQuery(t, promBase, "up")
			t.Errorf("Prometheus never evaluated pqwatch:pq_share:ratio_rate5m (rate of handshakes: %v %v, up %v)", v, found, up)
		} else if math.Abs(got-wantShare) > 1e-6 {
			t.Errorf("recording rule PQ share %v, clients %v", got, wantShare)
		} else {
			t.Logf("Prometheus recording rule pqwatch:pq_share:ratio_rate5m = %v (clients: %v)", got, wantShare)
		}
	}
	if promBase != "" {
		evalDeployPromQL(t, promBase)
		if v, ok := promQuery(t, promBase, "pqwatch_kafka_up"); !ok || v != 1 {
			t.Errorf("pqwatch_kafka_up = %v (%v), want 1: the Kafka feed to kfake failed", v, ok)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(recs)
	// As root on a kernel with BTF the kernel's accept events attribute
	// (issue 16): each nginx record names the worker nginx logged as $pid.
	ebpf := strings.Contains(body, `pqwatch_attribution_source_info{source="ebpf"} 1`)
	t.Logf("attribution from accept events: %v", ebpf)
	n, joined, nginxOK, attributed, byPid := 0, 0, 0, 0, 0
	for r := range recs {
		n++
		if r.Transport != record.TransportTCP || r.ClientText() == "" {
			t.Errorf("bad record %+v", r)
		}
		if r.Generation != nil {
			attributed++
		}
		if !strings.HasSuffix(r.Server, ":443") || r.Outcome != record.OutcomeOK {
			continue
		}
		nginxOK++
		if r.Log == nil {
			t.Errorf("nginx handshake %s not joined to its access-log line", r.ClientText())
			continue
		}
		joined++
		if g := logjoin.IANAGroupName(r.Log.SSLCurve); g != r.Group {
			t.Errorf("%s: nginx logged $ssl_curve %q, the wire says %s", r.ClientText(), r.Log.SSLCurve, r.Group)
		}
		if r.Log.Status != 200 || r.Log.PID == 0 {
			t.Errorf("%s: joined line %+v", r.ClientText(), r.Log)
		}
		if ebpf {
			if r.Generation == nil || r.Generation.WorkerPID != r.Log.PID {
				t.Errorf("%s: generation %+v, nginx logged $pid %d", r.ClientText(), r.Generation, r.Log.PID)
			} else {
				byPid++
			}
		}
	}
	if ebpf {
		st := a.Processes().Stats()
		t.Logf("%d of %d joined nginx records name the $pid worker; attribution stats %+v", byPid, joined, st)
		if st.ByAccept+st.ByAcceptQuiet < uint64(nginxOK) {
			t.Errorf("%d records attributed by accept events, %d by the quiet generation, %d completed nginx handshakes", st.ByAccept, st.ByAcceptQuiet, nginxOK)
		}
	}
	t.Logf("records %d, nginx completed %d, joined %d, attributed to a generation %d; join stats %+v", n, nginxOK, joined, attributed, a.JoinStats())
	if attributed == 0 {
		t.Error("no record attributed to a server generation")
	}
	if float64(n) != total+wantFailed {
		t.Errorf("%d records, %v client connections", n, total+wantFailed)
	}
}

// evalDeployPromQL evaluates every PromQL expression of the shipped rules
// and dashboards against the Prometheus that scraped this test's load: none
// may fail, every recording rule and panel must return data (alerts are
// expected to be quiet), and each
// panel's unit must fit the metrics it reads (their types as this
// Prometheus scraped them) and the values it computed.
func evalDeployPromQL(t *testing.T, base string) {
	exprs, err := deploy.PromQL(filepath.Join("..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	// The metric types as this Prometheus scraped them, for the units.
	types := map[string]string{}
	if resp, err := http.Get(base + "/api/v1/metadata"); err == nil {
		var md struct {
			Data map[string][]struct {
				Type string `json:"type"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		for name, ms := range md.Data {
			if len(ms) > 0 {
				types[name] = ms[0].Type
			}
		}
	}
	if os.Getenv("PQWATCH_DEBUG_PROMQL") != "" {
		t.Logf("metadata %v", types)
	}
	if len(types) < 20 || types["pqwatch_kafka_up"] != "gauge" {
		t.Errorf("Prometheus metadata: %d metrics, kafka_up %q", len(types), types["pqwatch_kafka_up"])
	}
	var noData []string
	withData, unitsChecked := 0, 0
	// A panel on a recording rule lags the raw series by an evaluation or
	// two: queries without data are retried, 10 s in all.
	retryUntil := time.Now().Add(10 * time.Second)
	for _, e := range exprs {
		type result struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		var r result
		for {
			resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(e.Query))
			if err != nil {
				t.Fatal(err)
			}
			r = result{}
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if r.Status != "success" || len(r.Data.Result) > 0 || e.Kind == "alert" || e.Kind == "annotation" || time.Now().After(retryUntil) {
				break
			}
			time.Sleep(time.Second)
		}
		if r.Status != "success" {
			t.Errorf("%s: %s: %s", e.Where, r.Error, e.Query)
			continue
		}
		if len(r.Data.Result) > 0 {
			withData++
			if e.Kind == "panel" {
				// The panel's unit against the metrics it reads and the
				// values this Prometheus computed.
				var values []float64
				for _, s := range r.Data.Result {
					str, _ := s.Value[1].(string)
					v, err := strconv.ParseFloat(str, 64)
					if err != nil {
						t.Errorf("%s: value %v", e.Where, s.Value)
					}
					values = append(values, v)
				}
				for _, p := range deploy.UnitProblems(e, values, types) {
					t.Error(p)
				}
				unitsChecked++
			}
			continue
		}
		// Every series a record or panel reads exists at zero from the
		// start or comes from this load (the Kafka feed, nginx's
		// generation, the access log), so each must return data.
		if e.Kind == "record" || e.Kind == "panel" {
			t.Errorf("%s: no data from this load: %s", e.Where, e.Query)
			noData = append(noData, e.Where)
		}
	}
	t.Logf("deploy PromQL: %d expressions evaluated without error, %d with data (%d panel queries' units checked); without data (alerts, quiet under this load): %d", len(exprs), withData, unitsChecked, len(exprs)-withData)
	t.Logf("records and panels without data: %q", noData)
	if os.Getenv("PQWATCH_DEBUG_PROMQL") != "" {
		for _, q := range []string{"instance_generation:pqwatch_pq_share:ratio_rate5m", "pqwatch_generation_info"} {
			resp, _ := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%s => %s", q, b)
		}
	}
}

// startPrometheus runs the Debian prometheus against target with the
// shipped rules; "" when prometheus is not installed.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Log("prometheus not installed: recording-rule check skipped")
		return ""
	}
	dir := t.TempDir()
	// The shipped rules, evaluated every second instead of every 30s so the
	// test does not wait.
	shipped, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yml")
	os.WriteFile(rules, []byte(strings.ReplaceAll(string(shipped), "interval: 30s", "interval: 1s")), 0o644)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: pqwatch
    static_configs:
      - targets: [%q]
`, rules, target)
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	for range 100 {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("prometheus did not become ready")
	return ""
}

// promQuery evaluates an instant query and returns the first sample.
func promQuery(t *testing.T, base, q string) (float64, bool) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.Result) == 0 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && !math.IsNaN(v)
}
