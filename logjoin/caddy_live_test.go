package logjoin

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

const caddyConfTmpl = `{
  "admin": {"disabled": true},
  "storage": {"module": "file_system", "root": "{{dir}}/data"},
  "logging": {"logs": {
    "default": {"level": "ERROR", "writer": {"output": "file", "filename": "{{dir}}/caddy.log"}},
    "access": {"writer": {"output": "file", "filename": "{{dir}}/access.log"}, "encoder": {"format": "json"}, "include": ["http.log.access.acc"]}
  }},
  "apps": {
    "http": {"servers": {"s": {
      "listen": ["127.0.0.1:{{port}}"],
      "protocols": ["h1", "h2"],
      "automatic_https": {"disable_redirects": true},
      "tls_connection_policies": [{}],
      "logs": {"default_logger_name": "acc"},
      "routes": [{"handle": [{"handler": "static_response", "status_code": 200, "body": "ok\n"}]}]
    }}},
    "tls": {
      "certificates": {"automate": ["localhost"]},
      "automation": {"policies": [{"subjects": ["localhost"], "issuers": [{"module": "internal"}]}]}
    },
    "pki": {"certificate_authorities": {"local": {"install_trust": false}}}
  }
}`

// TestRealCaddy runs Caddy (testenv.LookBin: on PATH or in ~/go/bin,
// where .ci/run builds it from the Go module proxy) with a loopback listener, "tls
// internal" and a JSON access log, drives Go crypto/tls clients, and checks
// that every line parses, matches the client's view, and joins by port.
func TestRealCaddy(t *testing.T) {
	cd := testenv.StartCaddy(t, caddyConfTmpl, 0)
	port := cd.Port

	var views []clientView
	for i := range 12 {
		curves := [][]tls.CurveID{{tls.X25519MLKEM768, tls.X25519}, {tls.X25519}, {tls.CurveP256}}[i%3]
		views = append(views, driveConn(t, net.IPv4(127, 0, 2, byte(1+i)), port, curves, tls.VersionTLS13, 1, fmt.Sprintf("caddy%d", i))...)
	}
	// Caddy writes its access log synchronously per request; give the
	// file a moment, then stop it so the log is complete.
	time.Sleep(200 * time.Millisecond)
	cd.Stop()

	byPath := map[string]clientView{}
	for _, v := range views {
		byPath[v.path] = v
	}
	var lines []Line
	var cl logparse.CaddyLine
	readLines(t, filepath.Join(cd.Dir, "access.log"), func(raw []byte) {
		if err := logparse.ParseCaddyLine(raw, &cl); err != nil {
			t.Errorf("caddy line does not parse: %v\n%s", err, raw)
			return
		}
		v, ok := byPath[string(cl.URI)]
		if !ok {
			t.Errorf("line for unknown request %q", cl.URI)
			return
		}
		if cl.RemotePort != v.local.Port() || string(cl.RemoteIP) != v.local.Addr().String() || cl.Status != 200 ||
			!cl.HasTLS || cl.TLS.Version != v.version || string(cl.UserAgent) != v.ua || cl.Time.Before(v.ts.Add(-time.Second)) {
			t.Errorf("line disagrees with the client %+v:\n%s", v, raw)
		}
		l, ok := FromCaddy(&cl)
		if !ok {
			t.Errorf("FromCaddy failed: %s", raw)
		}
		lines = append(lines, l)
	})
	if len(lines) != len(views) {
		t.Fatalf("%d requests, %d lines", len(views), len(lines))
	}
	var recs []*record.Handshake
	for _, v := range views {
		recs = append(recs, &record.Handshake{TS: v.ts, Transport: record.TransportTCP, Client: v.local.String(),
			Outcome: record.OutcomeOK, Group: v.group, ClientAddr: v.local.Addr().As16(), ClientPort: v.local.Port(), SNI: v.path})
	}
	st := Batch(recs, lines, Options{})
	for _, h := range recs {
		if h.Log == nil || h.Log.Path != h.SNI || h.Log.Source != SourceCaddy {
			t.Errorf("%s joined %+v", h.SNI, h.Log)
		}
	}
	groups := map[string]int{}
	for _, v := range views {
		groups[v.group]++
	}
	t.Logf("caddy: %d requests joined %d; groups seen by the clients %v", len(views), st.Joined, groups)
}
