package exporter

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics from reg (and counts its own scrape errors there),
// /healthz and /readyz. /healthz is the liveness probe: it answers 200 while
// the process serves HTTP, with "ok" or "degraded: SINK: REASON" lines in
// its body (a full disk must not restart the pod). /readyz answers 503
// while a writer of health is degraded, 200 "ready" otherwise. health may
// be nil.
func Handler(reg *prometheus.Registry, health *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(healthBody(health.Degraded(), "ok")))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		d := health.Degraded()
		if len(d) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(healthBody(d, "ready")))
	})
	return mux
}

func healthBody(degraded []string, ok string) string {
	if len(degraded) == 0 {
		return ok + "\n"
	}
	var b strings.Builder
	for _, d := range degraded {
		b.WriteString("degraded: " + d + "\n")
	}
	return b.String()
}
