package exporter

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// TestJoinCheckWarnsOnce: a log whose $ssl_curve disagrees with the wire on
// every handshake is counted every time and said once (within a minute).
func TestJoinCheckWarnsOnce(t *testing.T) {
	var logs bytes.Buffer
	m := NewMetrics(prometheus.NewRegistry())
	passed := 0
	c := NewJoinCheck(m, slog.New(slog.NewTextHandler(&logs, nil)), func(*record.Handshake) { passed++ })
	for range 100 {
		c.Process(&record.Handshake{Outcome: record.OutcomeOK, Group: "X25519MLKEM768", Log: &record.Log{SSLCurve: "X25519"}})
	}
	if n := strings.Count(logs.String(), "disagrees with the wire"); n != 1 || passed != 100 || c.mismatches.Load() != 100 {
		t.Errorf("%d warnings, %d passed on, %d mismatches counted; want 1, 100, 100:\n%s", n, passed, c.mismatches.Load(), logs.String())
	}
}
