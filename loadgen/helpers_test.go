package loadgen

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/tlsparse"
)

const helperEnv = "LOADGEN_TEST_HELPER_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelperServer()
		return
	}
	os.Exit(m.Run())
}

func osGetpid() int { return os.Getpid() }

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func freePort(t testing.TB) int {
	ln := listenLoopback(t)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// writeCert writes a self-signed ECDSA P-256 certificate for localhost and
// 127.0.0.1 into dir and returns the file names.
func writeCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func certPool(t testing.TB, certFile string) *x509.CertPool {
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("no cert")
	}
	return p
}

func okHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Pid", strconv.Itoa(os.Getpid()))
	io.WriteString(w, "ok\n")
}

// runHelperServer is the test binary re-executed as a separate Go
// crypto/tls HTTPS server process, so its CPU can be measured apart from
// the load generator's. It prints its address and exits when stdin closes.
func runHelperServer() {
	cert, err := tls.LoadX509KeyPair(os.Getenv("LOADGEN_CERT"), os.Getenv("LOADGEN_KEY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(okHandler),
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{
			Certificates:           []tls.Certificate{cert},
			MinVersion:             tls.VersionTLS13,
			SessionTicketsDisabled: true,
		},
	}
	srv.SetKeepAlivesEnabled(false)
	fmt.Println(ln.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = srv.ServeTLS(ln, "", "")
}

// startHelperServer starts runHelperServer in a child process.
func startHelperServer(t testing.TB) (addr string, pid int, certFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "LOADGEN_CERT="+certFile, "LOADGEN_KEY="+keyFile, "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper server: %v", err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid, certFile
}

// stallServer is an in-process HTTPS server whose handler holds every
// request that arrives in [stallAt, stallAt+stall) until stallAt+stall:
// a one-off server pause.
func stallServer(t testing.TB, stallAt *atomic.Int64, stall time.Duration) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if at := stallAt.Load(); at != 0 {
			start := time.Unix(0, at)
			if now := time.Now(); !now.Before(start) && now.Before(start.Add(stall)) {
				time.Sleep(time.Until(start.Add(stall)))
			}
		}
		okHandler(w, r)
	}))
	srv.EnableHTTP2 = false
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	srv.Config.SetKeepAlivesEnabled(false)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// nginxConf renders a minimal TLS 1.3 nginx configuration under dir.
func nginxConf(dir string, port int, curves string) string {
	return fmt.Sprintf(`worker_processes 1;
worker_rlimit_nofile 16384;
daemon on;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log notice;
events { worker_connections 4096; }
http {
    log_format lg escape=json '{"msec":"$msec","curve":"$ssl_curve","req":"$http_x_loadgen_request","status":"$status","pid":"$pid","reused":"$ssl_session_reused"}';
    access_log %[1]s/access.log lg;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen 127.0.0.1:%[2]d ssl;
        ssl_certificate %[1]s/cert.pem;
        ssl_certificate_key %[1]s/key.pem;
        ssl_protocols TLSv1.3;
        ssl_ecdh_curve %[3]s;
        ssl_session_tickets off;
        ssl_session_cache off;
        keepalive_timeout 0;
        location / {
            add_header X-Pid $pid always;
            return 200 "ok\n";
        }
    }
}
`, dir, port, curves)
}

const nginxBin = "/usr/sbin/nginx"

// nginxServer is a daemonized nginx started by a test.
type nginxServer struct {
	dir, conf string
	port      int
	master    int
}

// startNginx starts nginx (daemon on, so binary upgrades work) and
// registers a cleanup that stops every nginx process whose master command
// line names this test's configuration, and only those.
func startNginx(t testing.TB, curves string) *nginxServer {
	t.Helper()
	return startNginxConf(t, func(dir string, port int) string { return nginxConf(dir, port, curves) })
}

// nginxConfTickets is nginxConf with TLS 1.3 session tickets on.
func nginxConfTickets(dir string, port int, curves string) string {
	return strings.Replace(nginxConf(dir, port, curves), "ssl_session_tickets off;", "ssl_session_tickets on;", 1)
}

// startNginxConf is startNginx with the configuration conf renders.
func startNginxConf(t testing.TB, conf func(dir string, port int) string) *nginxServer {
	t.Helper()
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skipf("nginx not installed: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("starting nginx with its default user switch needs root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeCert(t, dir)
	n := &nginxServer{dir: dir, conf: filepath.Join(dir, "nginx.conf"), port: freePort(t)}
	if err := os.WriteFile(n.conf, []byte(conf(dir, n.port)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNginx(t, n) })
	out, err := exec.Command(nginxBin, "-p", dir, "-c", n.conf, "-e", filepath.Join(dir, "error.log")).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx: %v: %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, "nginx.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				n.master = pid
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n.master == 0 {
		t.Fatal("nginx wrote no pid file")
	}
	// Wait until it accepts, and until the master has set its title and
	// started its workers: the listening socket is open (and connections
	// are queued) before the daemonized master rewrites its title, and the
	// scenarios find the master by that title.
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", n.addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		if tab, err := snapshot("/proc"); err == nil &&
			strings.Contains(tab.cmdline(n.master), "master process") && len(tab.workers(n.master)) > 0 {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("nginx does not accept, or its master has no title or no workers")
	return nil
}

func (n *nginxServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// ours lists the nginx processes of this test: masters whose command line
// names n.conf and their children.
func (n *nginxServer) ours() (masters, all []int) {
	tab, err := snapshot("/proc")
	if err != nil {
		return nil, nil
	}
	for pid, p := range tab.all {
		if p.Comm == "nginx" && strings.Contains(tab.cmdline(pid), n.conf) {
			masters = append(masters, pid)
		}
	}
	all = append(all, masters...)
	for pid, p := range tab.all {
		for _, m := range masters {
			if p.PPID == m && p.Comm == "nginx" {
				all = append(all, pid)
			}
		}
	}
	return masters, all
}

func stopNginx(t testing.TB, n *nginxServer) {
	masters, _ := n.ours()
	for _, m := range masters {
		_ = syscall.Kill(m, syscall.SIGQUIT)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, all := n.ours(); len(all) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, all := n.ours()
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(all) > 0 {
		t.Logf("nginx did not stop in time; killed %v", all)
	}
}

func (n *nginxServer) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	return string(b)
}

var _ = context.Background

const caddyBin = "/root/go/bin/caddy"

// caddyServer is a Caddy started by a test, with a self-signed certificate
// and a JSON access log.
type caddyServer struct {
	addr, dir, cert, accessLog string
	pid                        int
}

// startCaddy runs Caddy (GOMAXPROCS=1) on a free loopback port serving
// "ok" over TLS 1.3 with a self-signed certificate for localhost, and logs
// every request as JSON to accessLog.
func startCaddy(t testing.TB) *caddyServer {
	t.Helper()
	if _, err := os.Stat(caddyBin); err != nil {
		t.Skipf("caddy not built at %s: %v", caddyBin, err)
	}
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir)
	port := freePort(t)
	cd := &caddyServer{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, cert: certFile,
		accessLog: filepath.Join(dir, "access.log")}
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}
https://localhost:%d {
	bind 127.0.0.1
	tls %s %s {
		protocols tls1.3
	}
	log {
		output file %s
		format json
	}
	header X-Server caddy
	respond "ok" 200
}
`, port, certFile, keyFile, cd.accessLog)
	cf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cf, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "run", "--config", cf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "GOMAXPROCS=1")
	logf, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cd.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	if err := waitTCP(cd.addr, 10*time.Second); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
		t.Fatalf("caddy: %v\n%s", err, b)
	}
	return cd
}

func dialTCP(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }

// accessLine is one request as the server logged it.
type accessLine struct {
	At      time.Time
	Curve   string // nginx $ssl_curve; Caddy does not log the group
	Req     string // the X-Loadgen-Request header
	Status  int
	Resumed bool
}

// readNginxLog reads the JSON access log of nginxConf.
func readNginxLog(t testing.TB, path string) []accessLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []accessLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var v struct{ Msec, Curve, Req, Status, Reused string }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("nginx log line %q: %v", l, err)
		}
		ms, _ := strconv.ParseFloat(v.Msec, 64)
		st, _ := strconv.Atoi(v.Status)
		out = append(out, accessLine{At: time.UnixMilli(int64(math.Round(ms * 1000))), Curve: v.Curve, Req: v.Req, Status: st, Resumed: v.Reused == "r"})
	}
	return out
}

// readCaddyLog reads Caddy's JSON access log.
func readCaddyLog(t testing.TB, path string) []accessLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []accessLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var v struct {
			TS      float64 `json:"ts"`
			Status  int     `json:"status"`
			Request struct {
				Headers map[string][]string `json:"headers"`
				TLS     struct {
					Resumed bool `json:"resumed"`
				} `json:"tls"`
			} `json:"request"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("caddy log line %q: %v", l, err)
		}
		req := ""
		if h := v.Request.Headers[RequestHeader]; len(h) > 0 {
			req = h[0]
		}
		out = append(out, accessLine{At: time.Unix(0, int64(v.TS*1e9)), Req: req, Status: v.Status, Resumed: v.Request.TLS.Resumed})
	}
	return out
}

// logTrial is what a server's access log says of one trial.
type logTrial struct {
	window, warmup, resumed int
	groups                  map[string]int // by IANA name, window only
}

// byTrial groups the access log lines by the X-Loadgen-Request header.
func byTrial(t testing.TB, lines []accessLine) map[int]*logTrial {
	t.Helper()
	out := map[int]*logTrial{}
	for _, l := range lines {
		var id, seq int
		var part string
		if _, err := fmt.Sscanf(l.Req, "t%d s%d %s", &id, &seq, &part); err != nil {
			t.Fatalf("log line without a loadgen request header: %+v", l)
		}
		lt := out[id]
		if lt == nil {
			lt = &logTrial{groups: map[string]int{}}
			out[id] = lt
		}
		if part == "warmup" {
			lt.warmup++
			continue
		}
		lt.window++
		if l.Resumed {
			lt.resumed++
		}
		if l.Curve != "" {
			g, ok := tlsparse.ParseGroup(l.Curve)
			if !ok {
				t.Fatalf("nginx logged unknown curve %q", l.Curve)
			}
			lt.groups[g.String()]++
		}
	}
	return out
}

// schedSampler is the test's own reading of a server's CPU: every 10 ms
// the run time of every thread of the processes pids() returns, from
// /proc/PID/task/TID/schedstat, parsed here and not by loadgen.
type schedSampler struct {
	mu      sync.Mutex
	at      []time.Time
	ns      []float64
	rss     []float64 // bytes, VmRSS from /proc/PID/status
	stop    chan struct{}
	stopped chan struct{}
}

func startSchedSampler(pids func() []int) *schedSampler {
	s := &schedSampler{stop: make(chan struct{}), stopped: make(chan struct{})}
	read := func() (float64, float64) {
		var total float64
		rss := float64(vmRSS(pids()))
		for _, pid := range pids() {
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
			for _, f := range tasks {
				b, err := os.ReadFile(f)
				if err != nil {
					continue
				}
				if fs := strings.Fields(string(b)); len(fs) == 3 {
					v, _ := strconv.ParseFloat(fs[0], 64)
					total += v
				}
			}
		}
		return total, rss
	}
	go func() {
		defer close(s.stopped)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			v, rss := read()
			now := time.Now()
			s.mu.Lock()
			s.at, s.ns, s.rss = append(s.at, now), append(s.ns, v), append(s.rss, rss)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

func (s *schedSampler) Stop() { close(s.stop); <-s.stopped }

// vmRSS sums the resident memory of the processes, in bytes, from the
// VmRSS line of /proc/PID/status (loadgen reads /proc/PID/stat).
func vmRSS(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				f := strings.Fields(v)
				if len(f) == 2 && f[1] == "kB" {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					sum += kb << 10
				}
			}
		}
	}
	return sum
}

// between returns the run time in [a, b), interpolated between samples.
func (s *schedSampler) between(a, b time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.interp(s.ns, b) - s.interp(s.ns, a))
}

// rssAt returns the resident memory at x, from the last sample before it.
func (s *schedSampler) rssAt(x time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(x) })
	return s.rss[max(i-1, 0)]
}

// rssMax returns the highest resident memory sampled in [a, b].
func (s *schedSampler) rssMax(a, b time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0.0
	for i, at := range s.at {
		if !at.Before(a) && !at.After(b) {
			m = max(m, s.rss[i])
		}
	}
	return m
}

func (s *schedSampler) interp(v []float64, x time.Time) float64 {
	i := sort.Search(len(s.at), func(i int) bool { return !s.at[i].Before(x) })
	switch {
	case i == 0:
		return v[0]
	case i == len(s.at):
		return v[len(v)-1]
	}
	f := float64(x.Sub(s.at[i-1])) / float64(s.at[i].Sub(s.at[i-1]))
	return v[i-1] + f*(v[i]-v[i-1])
}

// socketFDs counts the socket descriptors the processes hold (the
// server's side of its open connections, and its listening sockets), from
// /proc/PID/fd. (Not /proc/net/tcp: with the tens of thousands of
// TIME_WAIT sockets a test run leaves, reading it costs 100 ms of CPU.)
func socketFDs(pids []int) int {
	n := 0
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
				n++
			}
		}
	}
	return n
}

// hostStarved reports whether tr is invalid only because this shared
// machine starved loadgen of CPU: it lagged its schedule, read the last
// responses of the window late, or took its CPU readings at the window's
// edges late, while its threads (summed) waited for a CPU for more than a
// tenth of the window, 100 ms a second. That is weak evidence on this
// two-core machine, where the server shares loadgen's cores: valid trials
// at 200/s waited 130-240 ms a second (TestABGoServer, load average 2).
// So a lagging trial is excused (retried, then skipped saying why), and a
// regression that made loadgen lag would show as skips, not failures;
// TestJudge and TestOverloadInvalid check the verdicts themselves. The
// trial is rightly invalid (the load
// was not what was asked), and that says nothing of the code under test;
// failed requests are never excused.
func hostStarved(tr *TrialResult) bool {
	if tr.Valid || tr.ClientRunqueueWaitMS <= 100*windowSeconds(tr) {
		return false
	}
	for _, r := range tr.InvalidReasons {
		if !strings.HasPrefix(r, InvalidSendLag+":") && !strings.HasPrefix(r, InvalidShort+":") && !strings.HasPrefix(r, InvalidSampleLate+":") {
			return false
		}
	}
	return true
}

// starved reports whether res has an arm and rate without a valid trial,
// and every invalid trial is invalid because the machine starved loadgen
// (hostStarved): nothing is left to check there. An arm and rate with a
// valid trial next to starved ones is checked on its valid trials; the
// starved ones must be marked invalid, and left out of every figure.
func starved(res *Results) bool {
	valid := map[string]bool{}
	for _, tr := range res.Trials {
		if !tr.Valid && !hostStarved(tr) {
			return false
		}
		k := fmt.Sprint(tr.Arm, "@", tr.Rate)
		valid[k] = valid[k] || tr.Valid
	}
	for _, ok := range valid {
		if !ok {
			return true
		}
	}
	return false
}

// logInvalid logs the trials the machine starved (see hostStarved) and
// fails the test on any other invalid trial.
func logInvalid(t testing.TB, res *Results) {
	t.Helper()
	for _, tr := range res.Trials {
		switch {
		case tr.Valid:
		case hostStarved(tr):
			t.Logf("trial %d %s at %g/s invalid, rightly: the machine starved loadgen (load average %s): %v", tr.ID, tr.Arm, tr.Rate,
				loadavg(), tr.InvalidReasons)
		default:
			t.Errorf("trial %d %s at %g/s invalid: %v", tr.ID, tr.Arm, tr.Rate, tr.InvalidReasons)
		}
	}
}

// retryLagged runs run up to 3 times while it was starved (see starved:
// an arm and rate without a valid trial; the test machine is shared and
// has two cores) and returns the last attempt; when that one was starved
// too, the test is skipped.
func retryLagged(t testing.TB, run func() (*Results, error)) (*Results, error) {
	t.Helper()
	var res *Results
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		res, err = run()
		if res == nil || !starved(res) {
			return res, err
		}
		for _, tr := range res.Trials {
			if !tr.Valid {
				t.Logf("attempt %d: trial %d %s invalid: %v (load average %s)", attempt, tr.ID, tr.Arm, tr.InvalidReasons, loadavg())
			}
		}
		time.Sleep(time.Duration(attempt) * time.Second)
	}
	skipIfStarved(t, res)
	return res, err
}

// skipIfStarved skips the test when res was starved.
func skipIfStarved(t testing.TB, res *Results) {
	t.Helper()
	if !starved(res) {
		return
	}
	for _, tr := range res.Trials {
		if !tr.Valid {
			t.Skipf("this machine is overloaded: an arm and rate has no valid trial (load average %s): in trial %d loadgen's threads waited %.0f ms for a CPU in a %.1f s window: %v",
				loadavg(), tr.ID, tr.ClientRunqueueWaitMS, windowSeconds(tr), tr.InvalidReasons)
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
