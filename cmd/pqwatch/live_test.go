package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// goTLSServer serves TLS with crypto/tls defaults on a loopback port.
func goTLSServer(t *testing.T) (string, uint16) {
	t.Helper()
	a := testenv.GoServer(t, "", "127.0.0.1:0", nil)
	return a.String(), uint16(a.(*net.TCPAddr).Port)
}

// handshake makes one TLS connection and returns the negotiated group.
func handshake(t *testing.T, addr string, curves []tls.CurveID) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, CurvePreferences: curves})
	if err != nil {
		return ""
	}
	defer c.Close()
	g := tlsparse.Group(c.ConnectionState().CurveID).String()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	io.Copy(io.Discard, c)
	return g
}

// TestRunCommand: `pqwatch run` as a user types it — live capture on
// loopback (narrowed to the test's port), the JSONL stream to a file and the
// Kafka feed to a real Kafka wire protocol (an in-process kfake broker),
// stopped by its context like SIGINT: every handshake arrives in both, with
// the group the client negotiated.
func TestRunCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pqwatch.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "127.0.0.1:0",
			"-format", "jsonl", "-o", out, "-kafka-brokers", strings.Join(cluster.ListenAddrs(), ","), "-kafka-topic", "pqwatch.test",
			"-no-process-tracking", "-log-level", "warn"}, io.Discard, &stderr)
	}()
	time.Sleep(500 * time.Millisecond)
	want := map[string]int{}
	for i := range 12 {
		var curves []tls.CurveID
		if i%3 == 1 {
			curves = []tls.CurveID{tls.X25519}
		}
		want[handshake(t, addr, curves)]++
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r struct{ Group string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad JSONL %q: %v", l, err)
		}
		got[r.Group]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("JSONL groups %v, clients negotiated %v", got, want)
	}
	// Kafka: the same records, each with the schema header.
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: cluster.ListenAddrs(), Topic: "pqwatch.test", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	kgot := map[string]int{}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	for n := 0; n < 12; n++ {
		m, err := rd.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("kafka: %d messages, then %v", n, err)
		}
		var r struct{ Group string }
		json.Unmarshal(m.Value, &r)
		kgot[r.Group]++
		if len(m.Headers) == 0 || m.Headers[0].Key != "schema_version" {
			t.Errorf("message without schema_version header: %v", m.Headers)
		}
	}
	if fmt.Sprint(kgot) != fmt.Sprint(want) {
		t.Errorf("Kafka groups %v, clients negotiated %v", kgot, want)
	}
}

// TestAnalyzeJoinsNginxLogs: a capture of real nginx traffic analysed with
// its access log (format read from the nginx.conf) and error log: every
// completed handshake joined, nginx's $ssl_curve agrees with the wire.
func TestAnalyzeJoinsNginxLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx", "tcpdump")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ngx := testenv.StartNginx(t, testenv.NginxOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port), ECDHCurve: "X25519:prime256v1"})
	capt := testenv.StartCapture(t, "", "lo", fmt.Sprintf("tcp port %d", port))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ok := 0
	for i := range 10 {
		curves := [][]tls.CurveID{nil, {tls.CurveP256}, {tls.X25519MLKEM768}}[i%3]
		if handshake(t, addr, curves) != "" {
			ok++
		}
	}
	time.Sleep(300 * time.Millisecond) // nginx writes the log line at request end
	capt.Stop()
	var sum summaryJSON
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), []string{"analyze", "-format", "json", "-nginx-conf", filepath.Join(ngx.Dir, "nginx.conf"),
		"-nginx-log", ngx.AccessLog, "-nginx-error-log", ngx.ErrorLog, capt.File}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("analyze exited %d: %s", code, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Completed != ok || sum.Joined != ok || sum.Joins == nil || sum.Joins.Joined != ok {
		t.Errorf("completed %d, joined %d (%+v); clients completed %d", sum.Completed, sum.Joined, sum.Joins, ok)
	}
	if sum.Joins != nil && (sum.Joins.CurveChecked != ok || sum.Joins.CurveMismatch != 0) {
		t.Errorf("$ssl_curve self-check: %+v", sum.Joins)
	}
	if sum.LogLines["nginx"] != ok || sum.LogUnmatched["nginx"] != 0 {
		t.Errorf("log lines %v unmatched %v", sum.LogLines, sum.LogUnmatched)
	}

	// The same log copied off the server (its path is not the conf's):
	// its format is found from its lines and it joins exactly as before,
	// silently; by name (-nginx-log-as, -nginx-log-format NAME) too. A log
	// read in the wrong format joins nothing and says so on stderr.
	logText, err := os.ReadFile(ngx.AccessLog)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "edge01=access.log")
	if err := os.WriteFile(copied, logText, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(ngx.Dir, "nginx.conf")
	for name, args := range map[string][]string{
		"found":             {"-nginx-conf", conf, "-nginx-log", copied},
		"-nginx-log-as":     {"-nginx-conf", conf, "-nginx-log-as", "pq=" + copied},
		"-nginx-log-format": {"-nginx-conf", conf, "-nginx-log-format", "pq", "-nginx-log", copied},
	} {
		var out, errb bytes.Buffer
		code := runMain(context.Background(), append(append([]string{"analyze", "-format", "json"}, args...), capt.File), &out, &errb)
		var s2 summaryJSON
		if err := json.Unmarshal(out.Bytes(), &s2); code != 0 || err != nil {
			t.Fatalf("%s: exit %d, %v: %s", name, code, err, errb.String())
		}
		if s2.Joined != sum.Joined || s2.Joins == nil || s2.Joins.Joined != sum.Joins.Joined || s2.Joins.CurveChecked != sum.Joins.CurveChecked || errb.Len() != 0 {
			t.Errorf("%s: joined %d (%+v), at the conf path %d; stderr %q", name, s2.Joined, s2.Joins, sum.Joined, errb.String())
		}
		if len(s2.Logs) != 1 || s2.Logs[0].Format != "pq" || s2.Logs[0].Path != copied {
			t.Errorf("%s: summary says the log was read as %+v", name, s2.Logs)
		}
	}
	var out, errb bytes.Buffer
	runMain(context.Background(), []string{"analyze", "-format", "json", "-nginx-log-as", "combined=" + copied, capt.File}, &out, &errb)
	for _, want := range []string{"warning", copied, `"combined"`, "first failing line 1", "-nginx-log-as NAME="} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("a log read in the wrong format: stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if t.Failed() {
		var recs bytes.Buffer
		runMain(context.Background(), []string{"analyze", "-format", "jsonl", capt.File}, &recs, io.Discard)
		t.Logf("records:\n%s\naccess log:\n%s\ntcpdump: %q", recs.String(), logText, capt.Stderr)
	}
}

// TestDemo: `pqwatch demo` live (as root) and its no-privilege fallback
// both end with a report showing hybrid, classical, HRR and a refusal.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real handshakes for seconds; skipped with -short")
	}
	modes := [][]string{{"-offline"}}
	if os.Geteuid() == 0 {
		modes = append(modes, nil)
	}
	for _, extra := range modes {
		args := append([]string{"demo", "-duration", "2s", "-rate", "10", "-metrics-addr", "127.0.0.1:0"}, extra...)
		var stdout, stderr bytes.Buffer
		if code := runMain(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"PQ share", "X25519MLKEM768", "secp384r1", "alert:handshake_failure", "migration forecast"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: report lacks %q:\n%s", args, want, out)
			}
		}
	}
}

// TestDemoWithoutPrivilege: run by a user who may not capture, the demo
// says so and falls back to a generated capture of the same handshakes.
func TestDemoWithoutPrivilege(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	testenv.NeedRoot(t) // to drop to an unprivileged user
	setpriv := testenv.NeedBin(t, "setpriv")
	bin := filepath.Join(t.TempDir(), "pqwatch")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for d := filepath.Dir(bin); d != os.TempDir() && len(d) > 1; d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // nobody must reach the binary
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "demo", "-duration", "1s", "-metrics-addr", "127.0.0.1:0")
	cmd.Dir = os.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo as nobody: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "CAP_NET_RAW") || !strings.Contains(stderr.String(), "generating a capture") {
		t.Errorf("the demo did not say why it cannot capture:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "PQ share") || !strings.Contains(stdout.String(), "offline") {
		t.Errorf("no offline report:\n%s", stdout.String())
	}
}

// TestRunKilledKeepsJSONL: `pqwatch run -format jsonl -o FILE` killed with
// SIGKILL (an OOM kill is one) has every record it finished more than a
// second before on disk.
func TestRunKilledKeepsJSONL(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	var stderr testenv.Buffer
	cmd := pqwatchProcess(t, &stderr, "run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-format", "jsonl", "-o", out, "-metrics-addr", "", "-no-process-tracking")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "capture starting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // rings up
	const n = 20
	ok := 0
	for range n {
		if handshake(t, addr, nil) != "" {
			ok++
		}
	}
	// A record reaches the sink within one ring block timeout (1 s); it is
	// on disk DefaultJSONLFlush later. Wait past both, with margin.
	time.Sleep(2500 * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	b, _ := os.ReadFile(out)
	if lines := strings.Count(string(b), "\n"); lines != ok || ok != n {
		t.Errorf("after SIGKILL: %d records on disk, clients completed %d of %d; agent log:\n%s", lines, ok, n, stderr.String())
	}
}

// TestRunMetricsUnderIdleFlood: 2,000 idle connections to the metrics port
// of an agent under a 1,024 file descriptor limit: /healthz and /metrics
// keep answering within the liveness probe's 5 s, and process tracking
// keeps its descriptors.
func TestRunMetricsUnderIdleFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	maddr := l.Addr().String()
	l.Close()
	var stderr testenv.Buffer
	pqwatchProcessEnv(t, &stderr, []string{"PQWATCH_TEST_NOFILE=1024"}, "run", "-iface", "lo", "-ports", "1", "-metrics-addr", maddr, "-format", "jsonl", "-o", os.DevNull)
	// A new connection per request, as a probe makes (a kept-alive one
	// would not need the agent to accept).
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) error {
		resp, err := client.Get("http://" + maddr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("/healthz") != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 2000 {
		c, err := net.DialTimeout("tcp", maddr, 2*time.Second)
		if err != nil {
			continue // the listen backlog may be full for a moment
		}
		idle = append(idle, c)
	}
	for _, path := range []string{"/healthz", "/metrics", "/healthz"} {
		start := time.Now()
		if err := get(path); err != nil {
			t.Errorf("%s with %d idle connections open: %v (after %v)", path, len(idle), err, time.Since(start))
		}
	}
	time.Sleep(1500 * time.Millisecond) // a process scan or two
	if strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the agent ran out of file descriptors:\n%s", stderr.String())
	}
}
