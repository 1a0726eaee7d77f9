package exporter

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

func startTestServer(t *testing.T, cfg ServerConfig) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	cfg.Listener, cfg.Handler = ln, Handler(reg, nil)
	s, err := StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return s, ln.Addr().String()
}

// TestServerConnCap: idle connections (opened and never used, the
// slowloris kind) beyond the cap are closed oldest first, so the liveness
// probe and a scrape still answer at once.
func TestServerConnCap(t *testing.T) {
	s, addr := startTestServer(t, ServerConfig{MaxConns: 16})
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s with 200 idle connections open: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	if s.Evicted() < 200-16 {
		t.Errorf("evicted %d idle connections, want at least %d", s.Evicted(), 200-16)
	}
}

// TestServerWebConfig: with an exporter-toolkit web configuration (TLS and
// basic auth) unauthenticated scrapes are refused, authenticated ones
// answered; a real Prometheus scrapes with the credentials.
func TestServerWebConfig(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _, err := testenv.CertE(dir)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	os.WriteFile(webCfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prom: %s\n", certFile, keyFile, hash), 0o600)
	_, addr := startTestServer(t, ServerConfig{WebConfigFile: webCfg})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", c)
	}
	if c := get("prom", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", c)
	}
	if c := get("prom", "s3cret"); c != 200 {
		t.Errorf("credentials: %d, want 200", c)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		// Plain HTTP to a TLS port gets a 400 from net/http, not metrics.
		resp, _ := http.Get("http://" + addr + "/metrics")
		if resp != nil && resp.StatusCode == 200 {
			t.Errorf("plain HTTP scrape answered 200")
		}
	}
	if _, err := StartServer(ServerConfig{Listener: nil, WebConfigFile: filepath.Join(dir, "missing.yml")}); err == nil {
		t.Errorf("a missing web config was accepted")
	}
	scrapeWithPrometheus(t, addr, dir)
}

// scrapeWithPrometheus runs the Debian prometheus against addr over TLS
// with basic auth and waits for up == 1.
func scrapeWithPrometheus(t *testing.T, addr, dir string) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Log("prometheus not installed: real-scrape check skipped")
		return
	}
	pw := filepath.Join(dir, "password")
	os.WriteFile(pw, []byte("s3cret"), 0o600)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: pqwatch
    scheme: https
    tls_config: {insecure_skip_verify: true}
    basic_auth: {username: prom, password_file: %q}
    static_configs:
      - targets: [%q]
`, pw, addr)
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	paddr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+paddr, "--log.level=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + paddr + "/api/v1/query?query=up%7Bjob%3D%22pqwatch%22%7D")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"value":[`) && strings.Contains(string(b), `,"1"]`) {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("prometheus did not scrape the TLS + basic-auth endpoint (up != 1)")
}
