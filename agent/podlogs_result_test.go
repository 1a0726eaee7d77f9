package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// TestResultPodLogsOnly: with -pod-logs and no -nginx-log or -caddy-log,
// the run's summary still has the logs discovery took and left (the log
// result is the joiner's, however its logs were named).
func TestResultPodLogsOnly(t *testing.T) {
	testenv.NeedRoot(t)
	pods := t.TempDir()
	const uid = "3f8a2c1e-5b7d-4e9a-8c6f-0123456789ab"
	cri := func(l string) string { return "2026-12-05T08:58:45.419141256Z stdout F " + l + "\n" }
	ingress := filepath.Join(pods, "ingress-nginx_controller-x_"+uid, "controller", "0.log")
	app := filepath.Join(pods, "app_api-0_"+uid, "api", "0.log")
	for p, s := range map[string]string{
		ingress: cri(`10.198.0.1 - - [05/Dec/2026:08:58:45 +0000] "GET /p HTTP/1.1" 200 615 "-" "Go-http-client/1.1" 78 0.002 [default-web-443] [] 10.199.0.2:8443 615 0.002 200 6f5c0c3a1f1e4a0e9b1d2c3e4f5a6b7c`),
		app:     cri("listening on :8080") + cri("ready"),
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := report.New(forecast.DefaultPolicy)
	a, err := New(Config{Ifaces: []string{"lo"}, Ports: []uint16{1}, Workers: 1, PodLogs: pods, Sinks: []record.Sink{sum}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	a.Result().Finish(sum)
	if len(sum.Logs) != 1 || sum.Logs[0].Path != ingress || len(sum.LogsNotTaken) != 1 || sum.LogsNotTaken[0].Path != app || sum.Joins == nil {
		t.Errorf("summary logs %+v, not taken %+v, joins %+v: want the ingress log taken, the app's left, the join's figures", sum.Logs, sum.LogsNotTaken, sum.Joins)
	}
}
