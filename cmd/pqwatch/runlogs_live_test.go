package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// TestRunSummaryLogs: `pqwatch run -format json` tailing a real nginx's
// access log says at SIGTERM what it read, as analyze does for a file:
// log_lines is the access log's own line count (nginx wrote one per
// request; two lines that are no access-log line are appended by hand),
// log_unmatched, joins (every completed handshake joined, $ssl_curve
// checked) and logs[] (the format found in the conf, the first bad line).
func TestRunSummaryLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ngx := testenv.StartNginx(t, testenv.NginxOptions{Listen: addr, ECDHCurve: "X25519:prime256v1"})
	conf := filepath.Join(ngx.Dir, "nginx.conf")
	out := filepath.Join(t.TempDir(), "summary.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"run", "-iface", "lo", "-ports", strconv.Itoa(port), "-metrics-addr", "",
			"-format", "json", "-o", out, "-nginx-conf", conf, "-nginx-log", ngx.AccessLog,
			"-no-process-tracking", "-log-level", "warn"}, &stderr, &stderr)
	}()
	time.Sleep(700 * time.Millisecond) // capture and tail started
	const n = 9
	ok := 0
	for i := range n {
		if handshake(t, addr, [][]tls.CurveID{nil, {tls.CurveP256}, {tls.X25519}}[i%3]) != "" {
			ok++
		}
	}
	time.Sleep(300 * time.Millisecond) // nginx writes the line at request end
	f, err := os.OpenFile(ngx.AccessLog, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "not an access-log line\nnor this\n")
	f.Close()
	logText, err := os.ReadFile(ngx.AccessLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(logText), "\n")
	// The tailer reads the new lines within its poll interval.
	time.Sleep(1500 * time.Millisecond)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var sum summaryJSON
	if err := json.Unmarshal(data, &sum); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	if ok != n || lines != n+2 {
		t.Fatalf("%d of %d handshakes completed, access log has %d lines", ok, n, lines)
	}
	if sum.LogLines["nginx"] != lines || sum.LogUnmatched["nginx"] != 0 {
		t.Errorf("log_lines %v, log_unmatched %v; the access log has %d lines, every request's joined", sum.LogLines, sum.LogUnmatched, lines)
	}
	if sum.Completed != n || sum.Joined != n || sum.Joins == nil || sum.Joins.Joined != n || sum.Joins.CurveChecked != n ||
		sum.Joins.CurveMismatch != 0 || sum.Joins.Malformed["nginx"] != 2 {
		t.Errorf("completed %d, joined %d, joins %+v; want %d joined and checked, 2 malformed", sum.Completed, sum.Joined, sum.Joins, n)
	}
	if len(sum.Logs) != 1 || sum.Logs[0].Path != ngx.AccessLog || sum.Logs[0].Format != "pq" || sum.Logs[0].Lines != lines ||
		sum.Logs[0].Joinable != n || sum.Logs[0].FirstBad != n+1 {
		t.Errorf("logs %+v; want %s read as pq, %d lines, %d joinable, first bad %d", sum.Logs, ngx.AccessLog, lines, n, n+1)
	}
	if t.Failed() {
		t.Logf("summary: %s\nstderr: %s\naccess log:\n%s", data, stderr.String(), logText)
	}
}
