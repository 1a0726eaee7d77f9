package logjoin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// clientView is what the test's own TLS client saw of one request.
type clientView struct {
	local   netip.AddrPort
	ts      time.Time
	group   string // IANA name of the negotiated group (ConnectionState.CurveID)
	version uint16
	pid     int // the worker pid from the X-Pid/X-Req response header
	path    string
	ua      string
}

var goCurveIANA = map[tls.CurveID]string{
	tls.X25519: "x25519", tls.CurveP256: "secp256r1", tls.CurveP384: "secp384r1", tls.CurveP521: "secp521r1",
	tls.X25519MLKEM768: "X25519MLKEM768",
}

// writeSelfSigned writes a fresh ECDSA P-256 certificate for localhost.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

const nginxConfTmpl = `
worker_processes 2;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log info;
daemon off;
master_process on;
events { worker_connections 128; }
http {
    client_body_temp_path {{dir}}/tmp/body;
    proxy_temp_path {{dir}}/tmp/proxy;
    fastcgi_temp_path {{dir}}/tmp/fastcgi;
    uwsgi_temp_path {{dir}}/tmp/uwsgi;
    scgi_temp_path {{dir}}/tmp/scgi;
    log_format pq '$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher $ssl_curve $ssl_curves $pid $connection "$request" $status "$http_user_agent" "$host"';
    access_log {{dir}}/pq.log pq;
    access_log {{dir}}/combined.log;
    server {
        listen 127.0.0.1:{{port}} ssl;
        server_name localhost;
        ssl_certificate {{cert}};
        ssl_certificate_key {{key}};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ecdh_curve X25519:prime256v1:secp384r1;
        keepalive_requests 100;
        add_header X-Pid $pid always;
        location / { return 200 "ok\n"; }
    }
}
`

// TestRealNginx runs Debian's nginx on a loopback port with the recommended
// log format and combined, drives Go crypto/tls clients with different
// groups and versions (some connections carry several requests), and checks
// that every logged line parses and matches the client's own view (port,
// worker pid from X-Pid, group), that the join with the port joins every
// connection correctly with zero $ssl_curve mismatches, and that the
// address-only join of the combined log never joins wrongly.
func TestRealNginx(t *testing.T) {
	const bin = "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("nginx not installed at %s", bin)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	cert, key := writeSelfSigned(t, dir)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port), "{{cert}}", cert, "{{key}}", key).Replace(nginxConfTmpl)
	if os.Geteuid() == 0 {
		conf = "user root;\n" + conf
	}
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", dir, "-c", confFile, "-e", filepath.Join(dir, "error.log"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start nginx: %v", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(os.Interrupt) // fast shutdown, flushes logs
			cmd.Wait()
		}
	}
	defer stop()
	if !waitListen(fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second) {
		stop()
		el, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		t.Fatalf("nginx did not listen: %s\n%s", stderr.String(), el)
	}

	// Clients: each configuration opens connections; some send three
	// requests on one connection (keep-alive).
	type clientCfg struct {
		curves []tls.CurveID
		maxVer uint16
		reqs   int
	}
	cfgs := []clientCfg{
		{[]tls.CurveID{tls.X25519MLKEM768, tls.X25519}, tls.VersionTLS13, 1}, // the server's OpenSSL 3.0 has no ML-KEM
		{[]tls.CurveID{tls.X25519}, tls.VersionTLS13, 3},
		{[]tls.CurveID{tls.CurveP256}, tls.VersionTLS13, 1},
		{[]tls.CurveID{tls.CurveP384}, tls.VersionTLS13, 2},
		{[]tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12, 1}, // TLS 1.2: the groups also cover the ECDSA P-256 certificate
		{[]tls.CurveID{tls.CurveP256}, tls.VersionTLS12, 2},
	}
	var views []clientView
	var conns [][]int // indexes into views per connection
	for round := range 5 {
		for ci, c := range cfgs {
			var idx []int
			// Each connection from its own loopback address, so that the
			// address-only join has unambiguous cases too.
			src := net.IPv4(127, 0, 1, byte(1+len(conns)))
			vs := driveConn(t, src, port, c.curves, c.maxVer, c.reqs, fmt.Sprintf("r%dc%d", round, ci))
			for _, v := range vs {
				idx = append(idx, len(views))
				views = append(views, v)
			}
			conns = append(conns, idx)
		}
	}
	stop()

	// The log formats come from the same nginx.conf, as -nginx-conf does.
	formats, err := logparse.ParseNginxConf([]byte(conf))
	if err != nil {
		t.Fatalf("ParseNginxConf: %v", err)
	}
	pqf, combined := formats[filepath.Join(dir, "pq.log")], formats[filepath.Join(dir, "combined.log")]
	if pqf == nil || pqf.Name != "pq" || combined != logparse.Combined {
		t.Fatalf("formats by path: pq=%v combined=%v", pqf, combined)
	}

	byPath := map[string]clientView{}
	for _, v := range views {
		byPath[v.path] = v
	}
	var pqLines, combLines []Line
	var nl logparse.NginxLine
	readLines(t, filepath.Join(dir, "pq.log"), func(raw []byte) {
		if err := pqf.Parse(raw, &nl); err != nil {
			t.Errorf("pq line does not parse: %v\n%s", err, raw)
			return
		}
		v, ok := byPath[string(nl.URI)]
		if !ok {
			t.Errorf("line for unknown request %q", nl.URI)
			return
		}
		if nl.RemotePort != v.local.Port() || string(nl.RemoteAddr) != v.local.Addr().String() || nl.PID != v.pid ||
			IANAGroupName(string(nl.SSLCurve)) != v.group || string(nl.UserAgent) != v.ua || nl.Status != 200 ||
			string(nl.Host) != "localhost" || nl.Time.Before(v.ts.Add(-time.Second)) {
			t.Errorf("line disagrees with the client: line port=%d pid=%d curve=%s ua=%s; client %+v\n%s",
				nl.RemotePort, nl.PID, nl.SSLCurve, nl.UserAgent, v, raw)
		}
		wantProto := map[uint16]string{tls.VersionTLS12: "TLSv1.2", tls.VersionTLS13: "TLSv1.3"}[v.version]
		if string(nl.SSLProtocol) != wantProto || len(nl.SSLCipher) == 0 {
			t.Errorf("ssl_protocol %q cipher %q, want %s", nl.SSLProtocol, nl.SSLCipher, wantProto)
		}
		l, ok := FromNginx(&nl)
		if !ok {
			t.Errorf("FromNginx failed for %s", raw)
		}
		pqLines = append(pqLines, l)
	})
	var cl logparse.NginxLine
	readLines(t, filepath.Join(dir, "combined.log"), func(raw []byte) {
		if err := combined.Parse(raw, &cl); err != nil {
			t.Errorf("combined line does not parse: %v\n%s", err, raw)
			return
		}
		if _, ok := byPath[string(cl.URI)]; !ok {
			t.Errorf("combined line for unknown request %q", cl.URI)
		}
		l, _ := FromNginx(&cl)
		combLines = append(combLines, l)
	})
	if len(pqLines) != len(views) || len(combLines) != len(views) {
		t.Fatalf("%d requests, %d pq lines, %d combined lines", len(views), len(pqLines), len(combLines))
	}

	// Records as a capture would produce them, from the client's view of
	// each connection (the first request's time and group).
	mkRecords := func() []*record.Handshake {
		var recs []*record.Handshake
		for _, idx := range conns {
			v := views[idx[0]]
			recs = append(recs, &record.Handshake{
				TS: v.ts, Transport: record.TransportTCP, Client: v.local.String(), Outcome: record.OutcomeOK,
				Group: v.group, ClientAddr: v.local.Addr().As16(), ClientPort: v.local.Port(), SNI: v.path,
			})
		}
		return recs
	}
	recs := mkRecords()
	st := Batch(recs, pqLines, Options{})
	for _, h := range recs {
		if h.Log == nil {
			t.Errorf("connection %s not joined", h.ClientText())
			continue
		}
		if h.Log.Path != h.SNI || h.Log.PID != byPath[h.SNI].pid {
			t.Errorf("wrong join: %s got %+v", h.SNI, h.Log)
		}
	}
	if st.Joined != uint64(len(recs)) || st.CurveChecked != uint64(len(recs)) || st.CurveMismatch != 0 ||
		st.Sources[SourceNginx].Extra != uint64(len(views)-len(recs)) {
		t.Errorf("pq join stats: %+v", st)
	}
	t.Logf("pq: %d connections, %d requests: joined %d, curve checked %d mismatches %d, extra %d",
		len(recs), len(views), st.Joined, st.CurveChecked, st.CurveMismatch, st.Sources[SourceNginx].Extra)

	recs = mkRecords()
	st = Batch(recs, combLines, Options{Window: 2 * time.Second}) // $time_local has 1 s resolution: the default 2 s skew covers it
	wrong := 0
	for _, h := range recs {
		if h.Log != nil && !strings.HasPrefix(h.Log.Path, h.SNI[:strings.LastIndexByte(h.SNI, '/')+1]) {
			wrong++
		}
	}
	single := 0
	for _, idx := range conns {
		if len(idx) == 1 {
			single++
		}
	}
	// One request per connection from its own address is unambiguous;
	// several requests on one connection leave several candidate lines.
	if wrong != 0 || st.Joined != uint64(single) || st.AmbiguousHandshakes != uint64(len(recs)-single) {
		t.Errorf("combined: %d wrong joins, stats %+v (want %d joined)", wrong, st, single)
	}
	t.Logf("combined (address only): joined %d, ambiguous handshakes %d, ambiguous lines %d",
		st.Joined, st.AmbiguousHandshakes, st.Sources[SourceNginx].Ambiguous)
}

// driveConn opens one TLS connection and sends reqs requests on it.
func driveConn(t *testing.T, src net.IP, port int, curves []tls.CurveID, maxVer uint16, reqs int, tag string) []clientView {
	t.Helper()
	start := time.Now()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	raw, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(raw, &tls.Config{ServerName: "localhost", InsecureSkipVerify: true, CurvePreferences: curves, MaxVersion: maxVer})
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake %v max %x: %v", curves, maxVer, err)
	}
	cs := c.ConnectionState()
	local := raw.LocalAddr().(*net.TCPAddr).AddrPort()
	br := bufio.NewReader(c)
	var out []clientView
	for r := range reqs {
		path := fmt.Sprintf("/%s/%d", tag, r)
		ua := "pqwatch-test/" + tag
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: %s\r\n\r\n", path, ua)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pid, _ := strconv.Atoi(resp.Header.Get("X-Pid"))
		out = append(out, clientView{local: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), ts: start,
			group: goCurveIANA[cs.CurveID], version: cs.Version, pid: pid, path: path, ua: ua})
	}
	return out
}

func waitListen(addr string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func readLines(t *testing.T, name string, fn func([]byte)) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(l) > 0 {
			fn(l)
		}
	}
}
