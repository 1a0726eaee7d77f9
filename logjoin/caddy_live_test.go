package logjoin

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestRealCaddy runs Caddy (built from the Go module proxy into
// /root/go/bin/caddy, or found on PATH) with a loopback listener, "tls
// internal" and a JSON access log, drives Go crypto/tls clients, and checks
// that every line parses, matches the client's view, and joins by port.
func TestRealCaddy(t *testing.T) {
	bin := "/root/go/bin/caddy"
	if _, err := os.Stat(bin); err != nil {
		p, err := exec.LookPath("caddy")
		if err != nil {
			t.Skip("caddy binary not found at /root/go/bin/caddy or on PATH")
		}
		bin = p
	}
	dir := t.TempDir()
	port := freePort(t)
	conf := strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port)).Replace(caddyConfTmpl)
	confFile := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--config", confFile)
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start caddy: %v", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		}
	}
	defer stop()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if !waitTLS(addr, 20*time.Second) {
		stop()
		t.Fatalf("caddy did not serve TLS on %s:\n%s", addr, out.String())
	}

	var views []clientView
	for i := range 12 {
		curves := [][]tls.CurveID{{tls.X25519MLKEM768, tls.X25519}, {tls.X25519}, {tls.CurveP256}}[i%3]
		views = append(views, driveConn(t, net.IPv4(127, 0, 2, byte(1+i)), port, curves, tls.VersionTLS13, 1, fmt.Sprintf("caddy%d", i))...)
	}
	// Caddy writes its access log synchronously per request; give the
	// file a moment, then stop it so the log is complete.
	time.Sleep(200 * time.Millisecond)
	stop()

	byPath := map[string]clientView{}
	for _, v := range views {
		byPath[v.path] = v
	}
	var lines []Line
	var cl logparse.CaddyLine
	readLines(t, filepath.Join(dir, "access.log"), func(raw []byte) {
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

func waitTLS(addr string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 500 * time.Millisecond}, "tcp", addr,
			&tls.Config{ServerName: "localhost", InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
