package logjoin

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// TestUpstreamInfoJoin: ingress-nginx's default log (upstreaminfo, no
// client port, $time_local) read from a CRI container log: a client with
// one connection in the window joins its line by address and time; two
// connections of one address within the window and their two lines stay
// unjoined, counted ambiguous, never joined crosswise.
func TestUpstreamInfoJoin(t *testing.T) {
	base := time.Date(2026, 12, 5, 8, 58, 45, 0, time.UTC)
	lineAt := func(addr string, at time.Time, path string) []byte {
		return []byte(fmt.Sprintf(`2026-12-05T08:58:45.419141256Z stdout F %s - - [%s] "GET %s HTTP/1.1" 200 615 "-" "Go-http-client/1.1" 78 0.002 [default-web-443] [] 10.199.0.2:8443 615 0.002 200 6f5c0c3a1f1e4a0e9b1d2c3e4f5a6b7c`,
			addr, at.Format("02/Jan/2006:15:04:05 -0700"), path))
	}
	hsAt := func(client string, at time.Time) *record.Handshake {
		ap := netip.MustParseAddrPort(client)
		return &record.Handshake{TS: at, Transport: record.TransportTCP, Client: client, Server: "10.199.0.2:8443", Outcome: record.OutcomeOK,
			ClientAddr: ap.Addr().As16(), ClientPort: ap.Port()}
	}
	var out []*record.Handshake
	j := New(Options{Emit: func(h *record.Handshake) { out = append(out, h) }})
	lr := NewNginxReader(logparse.UpstreamInfo)
	lr.SetPath("/var/log/pods/ingress-nginx_controller-0_3f8a2c1e-5b7d-4e9a-8c6f-0123456789ab/controller/0.log")
	now := time.Now()
	// One client, one connection: joined.
	j.AddHandshake(hsAt("10.198.0.1:40000", base.Add(-20*time.Millisecond)), now)
	// Another client, two connections 300 ms apart, two lines.
	j.AddHandshake(hsAt("10.198.0.7:40001", base), now)
	j.AddHandshake(hsAt("10.198.0.7:40002", base.Add(300*time.Millisecond)), now)
	for _, l := range [][]byte{lineAt("10.198.0.1", base, "/one"), lineAt("10.198.0.7", base, "/a"), lineAt("10.198.0.7", base, "/b")} {
		ln, res, why := lr.ReadWhy(l)
		if res != LineOK || ln.Port != 0 {
			t.Fatalf("line %s: %v %v, port %d", l, res, why, ln.Port)
		}
		j.AddLine(ln, now)
	}
	j.Tick(now.Add(10 * time.Minute))
	j.Flush()
	joined := map[string]string{}
	for _, h := range out {
		if h.Log != nil {
			joined[h.ClientText()] = h.Log.Path
			if h.Pod == nil || h.Pod.Name != "controller-0" {
				t.Errorf("%s: pod %+v", h.ClientText(), h.Pod)
			}
		}
	}
	st := j.Stats()
	if len(out) != 3 || len(joined) != 1 || joined["10.198.0.1:40000"] != "/one" || st.AmbiguousHandshakes != 2 || st.Sources[SourceNginx].Ambiguous != 2 {
		t.Errorf("%d records, joined %v; stats %+v", len(out), joined, st)
	}
}
