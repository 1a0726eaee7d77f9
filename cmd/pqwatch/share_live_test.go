package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/report"
)

// TestShareByServerAndSNILive checks the report's PQ share per server and
// per SNI against the clients' own ground truth: three Go TLS servers on
// loopback with different preferences, clients with different SNIs and
// preferences, captured with tcpdump; every client knows which server it
// dialled, which SNI it sent and which group it negotiated
// (ConnectionState.CurveID). analyze's pq_share_by_server and
// pq_share_by_sni must equal the clients' tallies, row for row.
func TestShareByServerAndSNILive(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "tcpdump")
	servers := map[string][]tls.CurveID{
		"hybrid":    nil, // crypto/tls defaults: X25519MLKEM768 first
		"classical": {tls.X25519, tls.CurveP256},
		"p256first": {tls.CurveP256, tls.X25519MLKEM768, tls.X25519},
	}
	var addrs []string
	var ports []string
	for _, name := range []string{"hybrid", "classical", "p256first"} {
		a := testenv.GoServer(t, "", "127.0.0.1:0", servers[name])
		addrs = append(addrs, a.String())
		_, p, _ := net.SplitHostPort(a.String())
		ports = append(ports, "tcp port "+p)
	}
	clients := []struct {
		sni    string
		curves []tls.CurveID
	}{
		{"a.example", nil}, // Go's defaults: offers X25519MLKEM768 with a share
		{"b.example", []tls.CurveID{tls.X25519}},
		{"c.example", []tls.CurveID{tls.CurveP256, tls.X25519MLKEM768}}, // a P-256 share only
		{"a.example", []tls.CurveID{tls.X25519MLKEM768, tls.X25519}},
	}
	capt := testenv.StartCapture(t, "", "lo", strings.Join(ports, " or "))
	type row struct{ completed, pq int }
	byServer, bySNI := map[string]*row{}, map[string]*row{}
	tally := func(m map[string]*row, k string, pq bool) {
		if m[k] == nil {
			m[k] = &row{}
		}
		m[k].completed++
		if pq {
			m[k].pq++
		}
	}
	for round := range 3 {
		for _, addr := range addrs {
			for _, c := range clients {
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
					&tls.Config{InsecureSkipVerify: true, ServerName: c.sni, CurvePreferences: c.curves})
				if err != nil {
					t.Fatalf("round %d, %s with %s: %v", round, addr, c.sni, err)
				}
				cs := conn.ConnectionState()
				conn.Close()
				pq := cs.CurveID == tls.X25519MLKEM768
				tally(byServer, addr, pq)
				tally(bySNI, c.sni, pq)
			}
		}
	}
	capt.Stop()
	code, js, stderr := run(t, "analyze", "-format", "json", capt.File)
	if code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, stderr)
	}
	var sum report.Summary
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatal(err)
	}
	compare := func(what string, got map[string]*report.ShareRow, want map[string]*row) {
		if len(got) != len(want) {
			t.Errorf("%s: %d rows, the clients %d: %v", what, len(got), len(want), fmtRows(got))
		}
		for k, w := range want {
			g := got[k]
			if g == nil || g.Completed != w.completed || g.PQ != w.pq ||
				fmt.Sprintf("%.6f", g.PQShare) != fmt.Sprintf("%.6f", float64(w.pq)/float64(w.completed)) {
				t.Errorf("%s %s: report %+v, the clients: %d completed, %d PQ", what, k, g, w.completed, w.pq)
			}
		}
	}
	compare("server", sum.ByServer, byServer)
	compare("SNI", sum.BySNI, bySNI)
	t.Logf("by server %v; by SNI %v", fmtRows(sum.ByServer), fmtRows(sum.BySNI))
}

func fmtRows(m map[string]*report.ShareRow) string {
	var b strings.Builder
	for k, r := range m {
		fmt.Fprintf(&b, "%s=%d/%d ", k, r.PQ, r.Completed)
	}
	return b.String()
}
