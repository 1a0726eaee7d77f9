package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/pcapgen"
)

// CertE writes a fresh self-signed ECDSA P-256 certificate and key (PEM)
// for pqwatch.test into dir, as cert.pem and key.pem.
func CertE(dir string) (certFile, keyFile string, cert tls.Certificate, err error) {
	c, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		return "", "", tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return "", "", tls.Certificate{}, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	err = errors.Join(
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644),
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	if err != nil {
		return "", "", tls.Certificate{}, err
	}
	return certFile, keyFile, c, nil
}

// GoServerE runs a crypto/tls HTTPS responder on addr inside namespace ns
// ("" = current) with curves as its preference (nil = crypto/tls defaults,
// hybrid first), with a fresh self-signed certificate for pqwatch.test.
// Each connection gets one "200 ok" response and is closed. Closing the
// listener stops it.
func GoServerE(ns, addr string, curves []tls.CurveID) (net.Listener, error) {
	cert, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		return nil, err
	}
	ln, err := Listen(ns, addr)
	if err != nil {
		return nil, err
	}
	go pcapgen.Respond(ln, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: curves, SessionTicketsDisabled: true})
	return ln, nil
}

// Nginx is a running nginx from Debian with its own prefix.
type Nginx struct {
	Dir       string
	AccessLog string
	ErrorLog  string
	PidFile   string
}

// NginxOptions shape the generated nginx.conf.
type NginxOptions struct {
	NS        string // namespace to run in ("" = current)
	Listen    string // e.g. "127.0.0.1:8443" or "443"
	ECDHCurve string // ssl_ecdh_curve value, "" = OpenSSL's default
	LogFormat string // log_format pq definition, "" = the recommended one
	Workers   int
	// Resumption turns session tickets and a shared session cache on
	// (resumption by ticket and by session ID); off by default, so every
	// connection is a full handshake.
	Resumption bool
	Extra      string // extra server-block lines
	HTTP2      bool   // listen with http2 too
}

// RecommendedLogFormat is the access-log format README recommends.
const RecommendedLogFormat = `'$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher $ssl_curve "$ssl_curves" $pid $connection "$request" $status "$http_user_agent" "$host"'`

// StartNginxE writes a certificate and a config into dir, the prefix, and
// starts nginx as a daemon; it returns once the pid file is there. ctx
// bounds the start only. Stop stops it; dir (its logs) is the caller's.
func StartNginxE(ctx context.Context, dir string, o NginxOptions) (*Nginx, error) {
	bin, err := LookBin("nginx")
	if err != nil {
		return nil, err
	}
	certFile, keyFile, _, err := CertE(dir)
	if err != nil {
		return nil, err
	}
	n := &Nginx{Dir: dir, AccessLog: filepath.Join(dir, "access.log"), ErrorLog: filepath.Join(dir, "error.log"), PidFile: filepath.Join(dir, "nginx.pid")}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.LogFormat == "" {
		o.LogFormat = RecommendedLogFormat
	}
	resumption := "ssl_session_tickets off;\n    ssl_session_cache off;"
	if o.Resumption {
		resumption = "ssl_session_tickets on;\n    ssl_session_cache shared:pq:1m;\n    ssl_session_timeout 5m;"
	}
	h2 := ""
	if o.HTTP2 {
		h2 = " http2"
	}
	curve := ""
	if o.ECDHCurve != "" {
		curve = "ssl_ecdh_curve " + o.ECDHCurve + ";"
	}
	conf := fmt.Sprintf(`worker_processes %d;
pid %s;
error_log %s info;
events { worker_connections 512; }
http {
  access_log off;
  log_format pq %s;
  server {
    listen %s ssl%s;
    server_name pqwatch.test;
    ssl_certificate %s;
    ssl_certificate_key %s;
    ssl_protocols TLSv1.2 TLSv1.3;
    %s
    %s
    access_log %s pq;
    keepalive_timeout 0;
    add_header X-Pid $pid always;
    location / { return 200 "ok $pid\n"; }
    %s
  }
}
`, o.Workers, n.PidFile, n.ErrorLog, o.LogFormat, o.Listen, h2, certFile, keyFile, resumption, curve, n.AccessLog, o.Extra)
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := Cmd(ctx, o.NS, bin, "-p", dir, "-c", confFile, "-e", n.ErrorLog, "-g", "daemon on;")
	if out, err := cmd.CombinedOutput(); err != nil {
		n.Stop()
		return nil, fmt.Errorf("nginx: %v: %s", err, out)
	}
	// Wait for the pid file.
	for range 100 {
		if _, err := os.Stat(n.PidFile); err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.Stop()
	return nil, fmt.Errorf("nginx did not start; error log: %s", readFile(n.ErrorLog))
}

// Stop asks nginx to finish (SIGQUIT) and waits up to 2.5 s for it to
// remove its pid file. Without a pid file there is nothing to stop.
func (n *Nginx) Stop() error {
	b, err := os.ReadFile(n.PidFile)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("nginx pid file: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("nginx (pid %d): %w", pid, err)
	}
	for range 50 {
		if _, err := os.Stat(n.PidFile); err != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nginx (pid %d) did not stop within 2.5s", pid)
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

// NginxBuildsE copies the nginx binary at src to two builds under dir,
// dir/sbin/nginx (A) and dir/build-b/nginx (B): B is the same program with
// one byte appended (ELF ignores trailing bytes), so its SHA-256, and with
// it pqwatch's generation id, differ. For live binary-swap tests.
func NginxBuildsE(src, dir string) (a, b string, err error) {
	orig, err := os.ReadFile(src)
	if err != nil {
		return "", "", err
	}
	a, b = filepath.Join(dir, "sbin", "nginx"), filepath.Join(dir, "build-b", "nginx")
	for _, p := range []string{a, b} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", "", err
		}
	}
	if err := os.WriteFile(a, orig, 0o755); err != nil {
		return "", "", err
	}
	return a, b, os.WriteFile(b, append(orig[:len(orig):len(orig)], '\n'), 0o755)
}
