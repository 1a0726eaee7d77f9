package exporter

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHealthEndpoints: a degraded writer leaves /healthz at 200 (a full
// disk must not restart the pod) and says so in its body; /readyz answers
// 503; pqwatch_sink_degraded follows; all clear again when it writes.
func TestHealthEndpoints(t *testing.T) {
	var h Health
	reg := prometheus.NewRegistry()
	reg.MustRegister(&h)
	js, st := h.Sink("jsonl"), h.Sink("state_dir")
	srv := httptest.NewServer(Handler(reg, &h))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, b := get("/healthz"); c != 200 || b != "ok\n" {
		t.Errorf("/healthz = %d %q", c, b)
	}
	if c, b := get("/readyz"); c != 200 || b != "ready\n" {
		t.Errorf("/readyz = %d %q", c, b)
	}
	if !js.Fail("write x: no space left on device") || js.Fail("again") {
		t.Error("Fail reports the start of an episode once")
	}
	js.Lost(3, 300)
	if c, b := get("/healthz"); c != 200 || b != "degraded: jsonl: again\n" {
		t.Errorf("/healthz = %d %q", c, b)
	}
	if c, b := get("/readyz"); c != 503 || !strings.Contains(b, "degraded: jsonl") {
		t.Errorf("/readyz = %d %q", c, b)
	}
	want := `
# HELP pqwatch_sink_degraded 1 while the writer cannot write (a full disk, a read-only directory, a closed pipe): what it cannot write is counted in pqwatch_sink_lost_records_total and pqwatch_sink_lost_bytes_total; 0 when it writes.
# TYPE pqwatch_sink_degraded gauge
pqwatch_sink_degraded{sink="jsonl"} 1
pqwatch_sink_degraded{sink="state_dir"} 0
# HELP pqwatch_sink_lost_records_total Records (for state_dir: offset saves) the writer could not write and dropped.
# TYPE pqwatch_sink_lost_records_total counter
pqwatch_sink_lost_records_total{sink="jsonl"} 3
pqwatch_sink_lost_records_total{sink="state_dir"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pqwatch_sink_degraded", "pqwatch_sink_lost_records_total"); err != nil {
		t.Error(err)
	}
	if !js.OK() || js.OK() || st.OK() {
		t.Error("OK reports the end of an episode once")
	}
	if c, b := get("/readyz"); c != 200 || b != "ready\n" {
		t.Errorf("/readyz after = %d %q", c, b)
	}
}
