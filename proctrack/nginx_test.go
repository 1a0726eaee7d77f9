package proctrack

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
	"log/slog"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

const debianNginx = "/usr/sbin/nginx"

// nginxLab is one nginx installation in a temporary prefix: a binary at a
// fixed path (replaced by rename, like a package upgrade), one active
// configuration file, and an error log the test tails for [emerg] lines.
type nginxLab struct {
	t      *testing.T
	dir    string
	bin    string // the path nginx runs and re-executes on USR2
	binB   string // a different build (one byte appended)
	conf   string
	errLog string
	pid    string
	port   int
	pool   *x509.CertPool
}

func requireNginx(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: nginx binds, reads other processes' /proc/PID/fd and sock_diag")
	}
	if _, err := os.Stat(debianNginx); err != nil {
		t.Skipf("needs nginx at %s: %v", debianNginx, err)
	}
	if testing.Short() {
		t.Skip("live nginx test skipped in -short mode")
	}
}

func newNginxLab(t *testing.T) *nginxLab {
	t.Helper()
	requireNginx(t)
	dir := t.TempDir()
	l := &nginxLab{t: t, dir: dir, bin: filepath.Join(dir, "sbin", "nginx"), binB: filepath.Join(dir, "build-b", "nginx"),
		conf: filepath.Join(dir, "conf", "nginx.conf"), errLog: filepath.Join(dir, "logs", "error.log"),
		pid: filepath.Join(dir, "logs", "nginx.pid")}
	for _, d := range []string{"sbin", "build-b", "conf", "logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.bin, l.binB = testenv.NginxBuilds(t, debianNginx, dir)
	l.pool = writeCert(t, filepath.Join(dir, "conf"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	t.Cleanup(l.stopAll)
	return l
}

func writeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// writeConf makes curves the active ssl_ecdh_curve.
func (l *nginxLab) writeConf(curves string) {
	l.t.Helper()
	conf := fmt.Sprintf(`daemon on;
master_process on;
worker_processes 2;
pid %[1]s/logs/nginx.pid;
error_log %[1]s/logs/error.log info;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
    server {
        listen 127.0.0.1:%[2]d ssl;
        ssl_certificate %[1]s/conf/cert.pem;
        ssl_certificate_key %[1]s/conf/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ecdh_curve %[3]s;
        keepalive_timeout 5s;
        add_header X-Pid $pid always;
        location / { return 200 "ok\n"; }
    }
}
`, l.dir, l.port, curves)
	if err := os.WriteFile(l.conf, []byte(conf), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// installB replaces the binary at l.bin with build B by rename, as a package
// upgrade does (the running master keeps the old, now deleted, inode).
func (l *nginxLab) installB() {
	l.t.Helper()
	b, err := os.ReadFile(l.binB)
	if err != nil {
		l.t.Fatal(err)
	}
	tmp := l.bin + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, l.bin); err != nil {
		l.t.Fatal(err)
	}
}

// start runs nginx (daemon on) and returns its master PID.
func (l *nginxLab) start() int {
	l.t.Helper()
	cmd := exec.Command(l.bin, "-p", l.dir+"/", "-c", l.conf, "-e", l.errLog)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nginx start: %v: %s", err, out)
	}
	var pid int
	waitFor(l.t, 5*time.Second, "nginx pid file", func() bool {
		pid = readPid(l.pid)
		return pid > 0
	})
	return pid
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (l *nginxLab) signal(pid int, sig syscall.Signal) {
	l.t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		l.t.Fatalf("kill -%v %d: %v", sig, pid, err)
	}
}

// stopAll stops the masters this lab started (found through its pid files).
func (l *nginxLab) stopAll() {
	// Both pids first: when a USR2's new master exits, the old one
	// renames its .oldbin back, so reading it afterwards finds nothing.
	pids := []int{readPid(l.pid), readPid(l.pid + ".oldbin")}
	for _, pid := range pids {
		if pid > 0 && isNginxMaster(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && isNginxMaster(pid) {
				time.Sleep(20 * time.Millisecond)
			}
			if isNginxMaster(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func isNginxMaster(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.HasPrefix(b, []byte("nginx: master"))
}

// tailEmerg feeds [emerg] lines of the error log to tr.NoteEmerg, as the
// log tailer of the live agent does.
func tailEmerg(ctx context.Context, path string, tr *Tracker) {
	tailEmergEvery(ctx, path, tr, 20*time.Millisecond)
}

// tailEmergEvery is tailEmerg reading the log every interval (the agent's
// tailer reads every 200 ms: the process that logged is gone by then).
func tailEmergEvery(ctx context.Context, path string, tr *Tracker, interval time.Duration) {
	var off int64
	var partial []byte
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(off, io.SeekStart); err == nil {
			b, _ := io.ReadAll(f)
			off += int64(len(b))
			partial = append(partial, b...)
		}
		f.Close()
		for {
			i := bytes.IndexByte(partial, '\n')
			if i < 0 {
				break
			}
			line := string(partial[:i])
			partial = partial[i+1:]
			// 2026/01/27 10:00:00 [emerg] 1234#1234: message
			if len(line) < 20 || !strings.Contains(line, " [emerg] ") {
				continue
			}
			ts, _ := time.ParseInLocation("2006/01/02 15:04:05", line[:19], time.Local)
			rest := line[strings.Index(line, " [emerg] ")+9:]
			pidStr, msg, _ := strings.Cut(rest, ": ")
			pidStr, _, _ = strings.Cut(pidStr, "#")
			pid, err := strconv.Atoi(pidStr)
			if err != nil || ts.IsZero() {
				continue // a continuation of a multi-line message
			}
			tr.NoteEmergIn(path, ts, pid, msg)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// served is one handshake seen by the load generator.
type served struct {
	at     time.Time
	xpid   int
	curve  tls.CurveID
	gen    *record.Generation
	ok     bool
	closed bool // the server closed the connection before answering
	// quiet is AttributeQuiet's answer, asked once the scan after the
	// handshake completed (nil answer: not a quiet period).
	quiet chan *record.Generation
}

// load runs bounded handshakes at ~rate/s against the lab until stop is
// closed, attributing each connection while it is open.
type load struct {
	mu      sync.Mutex
	results []served
	errs    []error
	done    chan struct{}
}

func runLoad(t *testing.T, l *nginxLab, tr *Tracker, rate int, stop <-chan struct{}) *load {
	ld := &load{done: make(chan struct{})}
	server := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(l.port))
	cfg := &tls.Config{RootCAs: l.pool, ServerName: "localhost"}
	go func() {
		defer close(ld.done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for range 60 * rate { // bounded: at most 60 s of load
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s, err := oneHandshake(server, cfg, tr)
			ld.mu.Lock()
			if err != nil {
				ld.errs = append(ld.errs, err)
			} else {
				ld.results = append(ld.results, s)
			}
			ld.mu.Unlock()
		}
	}()
	return ld
}

func oneHandshake(server netip.AddrPort, cfg *tls.Config, tr *Tracker) (served, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	dialAt := time.Now()
	c, err := tls.DialWithDialer(d, "tcp", server.String(), cfg)
	if err != nil {
		return served{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	s := served{at: time.Now(), curve: c.ConnectionState().CurveID, quiet: make(chan *record.Generation, 1)}
	// The agent's quiet path, asked as the agent asks it: after the next
	// scan, for a connection accepted between dialAt and now.
	go func(done time.Time) {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			last, next := tr.LastScan()
			if last.After(done) {
				g, _ := tr.AttributeQuiet(server, dialAt, done)
				s.quiet <- g
				return
			}
			select {
			case <-next:
			case <-time.After(time.Second):
			}
		}
		s.quiet <- nil
	}(s.at)
	client := c.LocalAddr().(*net.TCPAddr).AddrPort()
	// Right after the handshake, as the capture pipeline does: the server
	// socket exists and is owned by the worker that accepted it.
	for range 20 {
		if s.gen, s.ok = tr.Attribute(client, server); s.ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.ok {
		tr.ObserveHandshake(s.gen, curveName(s.curve))
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		s.closed = true
		return s, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		// A worker shutting down (WINCH, QUIT, HUP) closes connections
		// that wait for a request: no X-Pid to check against.
		s.closed = true
		return s, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.xpid, _ = strconv.Atoi(resp.Header.Get("X-Pid"))
	return s, nil
}

func curveName(c tls.CurveID) string {
	switch c {
	case tls.X25519:
		return "x25519"
	case tls.CurveP256:
		return "secp256r1"
	case tls.X25519MLKEM768:
		return "X25519MLKEM768"
	}
	return fmt.Sprintf("0x%04x", uint16(c))
}

func (ld *load) snapshot() ([]served, []error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return slices.Clone(ld.results), slices.Clone(ld.errs)
}

func startTracker(t *testing.T) (*Tracker, context.CancelFunc) {
	t.Helper()
	tr, err := New(Config{
		ScanInterval: 100 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; tr.Close() })
	return tr, cancel
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// genByMaster waits for the generation of a master PID with want live workers.
func genByMaster(t *testing.T, tr *Tracker, pid, want int) GenerationInfo {
	t.Helper()
	var gi GenerationInfo
	waitFor(t, 5*time.Second, fmt.Sprintf("generation of master %d with %d workers", pid, want), func() bool {
		for _, g := range tr.Generations() {
			if g.MasterPID == pid && g.Alive && len(g.Workers) == want {
				gi = g
				return true
			}
		}
		return false
	})
	return gi
}

// eventsFor returns the events about or naming one of the ids.
func eventsFor(tr *Tracker, kind string, ids ...string) []Event {
	var out []Event
	for _, e := range tr.Events() {
		if e.Kind != kind {
			continue
		}
		for _, id := range ids {
			if e.Generation == id || strings.Contains(e.Other, id) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

func waitEvent(t *testing.T, tr *Tracker, d time.Duration, kind string, ids ...string) Event {
	t.Helper()
	var ev Event
	waitFor(t, d, kind+" event", func() bool {
		evs := eventsFor(tr, kind, ids...)
		if len(evs) == 0 {
			return false
		}
		ev = evs[0]
		return true
	})
	return ev
}

// checkAttribution verifies every handshake was attributed to the
// generation whose worker served it (X-Pid), and returns handshakes per id.
func checkAttribution(t *testing.T, tr *Tracker, res []served, workersOf map[int]string) map[string]int {
	t.Helper()
	per := map[string]int{}
	bad, closed, quiet := 0, 0, 0
	for _, s := range res {
		if s.closed {
			closed++
			if s.ok {
				per[s.gen.ID]++
			}
			continue
		}
		if !s.ok {
			bad++
			t.Errorf("handshake served by %d at %v not attributed", s.xpid, s.at.Format(time.StampMilli))
			continue
		}
		if s.gen.WorkerPID != s.xpid {
			bad++
			t.Errorf("attributed to worker %d (%s), X-Pid says %d", s.gen.WorkerPID, s.gen.ID, s.xpid)
			continue
		}
		if id, ok := workersOf[s.xpid]; ok && id != s.gen.ID {
			bad++
			t.Errorf("worker %d belongs to %s, attributed to %s", s.xpid, id, s.gen.ID)
		}
		per[s.gen.ID]++
		// The quiet path answers only when it cannot be wrong.
		if q := <-s.quiet; q != nil {
			quiet++
			if q.ID != s.gen.ID || (q.WorkerPID != 0 && q.WorkerPID != s.xpid) {
				bad++
				t.Errorf("quiet attribution %s worker %d, exact %s worker %d", q.ID, q.WorkerPID, s.gen.ID, s.xpid)
			}
		}
	}
	t.Logf("%d handshakes, %d misattributed, %d closed by a draining worker before the request, %d attributed in a quiet period, per generation %v", len(res), bad, closed, quiet, per)
	if quiet == 0 {
		t.Error("no handshake attributed in a quiet period")
	}
	if closed > len(res)/10 {
		t.Errorf("%d of %d connections closed before the request", closed, len(res))
	}
	return per
}

// workerIndex records which generation each worker PID belonged to while
// the test runs (workers exit during the test).
type workerIndex struct {
	mu sync.Mutex
	m  map[int]string
}

func watchWorkers(tr *Tracker, stop <-chan struct{}) *workerIndex {
	wi := &workerIndex{m: map[int]string{}}
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 2000 {
			for _, g := range tr.Generations() {
				wi.mu.Lock()
				for _, w := range append(g.Workers, g.Draining...) {
					wi.m[w] = g.ID
				}
				wi.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return wi
}

func (wi *workerIndex) snapshot() map[int]string {
	wi.mu.Lock()
	defer wi.mu.Unlock()
	return maps.Clone(wi.m)
}

func TestNginxSwapUnderLoad(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	masterA := l.start()
	tr, _ := startTracker(t)
	genA := genByMaster(t, tr, masterA, 2)
	t.Logf("generation A: %s exe=%s openssl=%q rss=%d", genA.ID, genA.Exe, genA.OpenSSL, genA.RSSBytes)
	if genA.Exe != l.bin || genA.ExeSHA256 == "" || !strings.HasPrefix(genA.OpenSSL, "OpenSSL 3.") {
		t.Errorf("identity of A: exe %q sha %q openssl %q", genA.Exe, genA.ExeSHA256, genA.OpenSSL)
	}
	if genA.Config != l.conf || genA.PidFile != l.pid {
		t.Errorf("config %q pid %q, want %q %q", genA.Config, genA.PidFile, l.conf, l.pid)
	}

	stop := make(chan struct{})
	wi := watchWorkers(tr, stop)
	ld := runLoad(t, l, tr, 50, stop)
	time.Sleep(700 * time.Millisecond)

	// Upgrade: new binary on disk, new configuration, USR2.
	l.writeConf("secp256r1")
	l.installB()
	usr2At := time.Now()
	l.signal(masterA, syscall.SIGUSR2)
	ev := waitEvent(t, tr, 5*time.Second, KindUSR2, genA.ID)
	t.Logf("usr2 seen after %v: %s", time.Since(usr2At).Round(time.Millisecond), ev.Message)
	var masterB int
	waitFor(t, 5*time.Second, "new pid file", func() bool { masterB = readPid(l.pid); return masterB > 0 && masterB != masterA })
	genB := genByMaster(t, tr, masterB, 2)
	if genB.ExeSHA256 == genA.ExeSHA256 || genB.Parent != genA.ID || ev.Generation != genB.ID {
		t.Errorf("generation B %+v, event %+v", genB, ev)
	}
	// Overlap: both generations run and their memory is visible.
	a, _ := tr.Generation(genA.ID)
	if !a.Alive || a.RSSBytes == 0 || genB.RSSBytes == 0 || !a.ExeDeleted {
		t.Errorf("overlap: A alive=%v rss=%d deleted=%v, B rss=%d", a.Alive, a.RSSBytes, a.ExeDeleted, genB.RSSBytes)
	}
	t.Logf("overlap: A rss=%d workers=%v, B rss=%d workers=%v", a.RSSBytes, a.Workers, genB.RSSBytes, genB.Workers)
	time.Sleep(700 * time.Millisecond)

	l.signal(masterA, syscall.SIGWINCH)
	waitEvent(t, tr, 5*time.Second, KindWINCH, genA.ID)
	time.Sleep(500 * time.Millisecond)
	quitAt := time.Now()
	l.signal(masterA, syscall.SIGQUIT)
	waitEvent(t, tr, 5*time.Second, KindQUIT, genA.ID)
	time.Sleep(700 * time.Millisecond)
	close(stop)
	<-ld.done

	res, errs := ld.snapshot()
	if len(errs) > 0 {
		t.Errorf("%d handshake errors, first: %v", len(errs), errs[0])
	}
	per := checkAttribution(t, tr, res, wi.snapshot())
	if per[genA.ID] == 0 || per[genB.ID] == 0 {
		t.Errorf("want handshakes on both generations, got %v", per)
	}
	for _, s := range res {
		if !s.ok {
			continue
		}
		switch {
		case s.gen.ID == genA.ID && s.curve != tls.X25519:
			t.Errorf("A (x25519) negotiated %v", s.curve)
		case s.gen.ID == genB.ID && s.curve != tls.CurveP256:
			t.Errorf("B (secp256r1) negotiated %v", s.curve)
		case s.at.Before(usr2At) && s.gen.ID != genA.ID:
			t.Errorf("handshake before USR2 attributed to %s", s.gen.ID)
		case s.at.After(quitAt.Add(200*time.Millisecond)) && s.gen.ID != genB.ID:
			t.Errorf("handshake after QUIT attributed to %s", s.gen.ID)
		}
	}
	if n := len(eventsFor(tr, KindFailed, genA.ID, genB.ID)) + len(eventsFor(tr, KindRollback, genA.ID, genB.ID)); n != 0 {
		t.Errorf("%d false failed/rollback events", n)
	}
	a, _ = tr.Generation(genA.ID)
	if a.Alive || a.CPUSeconds < 0 {
		t.Errorf("A after QUIT: %+v", a)
	}
	b, _ := tr.Generation(genB.ID)
	if b.Handshakes["secp256r1"] == 0 || a.Handshakes["x25519"] == 0 {
		t.Errorf("handshake counters: A %v B %v", a.Handshakes, b.Handshakes)
	}
	t.Logf("A cpu=%.2fs handshakes=%v; B cpu=%.2fs handshakes=%v", a.CPUSeconds, a.Handshakes, b.CPUSeconds, b.Handshakes)
}

func TestNginxReloadUnderLoad(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	master := l.start()
	tr, _ := startTracker(t)
	gen := genByMaster(t, tr, master, 2)
	stop := make(chan struct{})
	wi := watchWorkers(tr, stop)
	ld := runLoad(t, l, tr, 50, stop)
	time.Sleep(500 * time.Millisecond)

	l.writeConf("secp256r1")
	out, err := exec.Command(l.bin, "-p", l.dir+"/", "-c", l.conf, "-e", l.errLog, "-s", "reload").CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -s reload: %v: %s", err, out)
	}
	ev := waitEvent(t, tr, 5*time.Second, KindReload, gen.ID)
	t.Logf("reload: %s", ev.Message)
	var after GenerationInfo
	waitFor(t, 5*time.Second, "two new workers", func() bool {
		after, _ = tr.Generation(gen.ID)
		return len(after.Workers) == 2 && !slices.ContainsFunc(after.Workers, func(w int) bool { return slices.Contains(gen.Workers, w) })
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-ld.done
	res, errs := ld.snapshot()
	if len(errs) > 0 {
		t.Errorf("%d handshake errors, first: %v", len(errs), errs[0])
	}
	per := checkAttribution(t, tr, res, wi.snapshot())
	if len(per) != 1 || per[gen.ID] != len(res) {
		t.Errorf("all handshakes should belong to %s: %v", gen.ID, per)
	}
	curves := map[tls.CurveID]int{}
	for _, s := range res {
		curves[s.curve]++
	}
	if curves[tls.X25519] == 0 || curves[tls.CurveP256] == 0 {
		t.Errorf("want both configurations served, curves %v", curves)
	}
	for _, k := range []string{KindUSR2, KindWINCH, KindQUIT, KindRollback, KindFailed} {
		if n := len(eventsFor(tr, k, gen.ID)); n != 0 {
			t.Errorf("false %s event(s): %d", k, n)
		}
	}
	if n := len(eventsFor(tr, KindReload, gen.ID)); n != 1 {
		t.Errorf("%d reload events, want 1", n)
	}
}

// TestQuietPeriodPerPort: one nginx in a binary swap (two generations
// alive, sharing its listener) does not end the quiet period of another
// nginx on another port: handshakes with the quiet one are still attributed
// without a lookup, those with the swapping one are not. Its owner changing
// (a reload replacing its workers) starts the port's period anew.
func TestQuietPeriodPerPort(t *testing.T) {
	quietLab, swapLab := newNginxLab(t), newNginxLab(t)
	quietLab.writeConf("x25519")
	swapLab.writeConf("x25519")
	mq, ms := quietLab.start(), swapLab.start()
	tr, _ := startTracker(t)
	gq := genByMaster(t, tr, mq, 2)
	gs := genByMaster(t, tr, ms, 2)
	swapLab.signal(ms, syscall.SIGUSR2)
	waitEvent(t, tr, 5*time.Second, KindUSR2, gs.ID)
	// The new master's pid file: the lab stops both masters through them.
	waitFor(t, 5*time.Second, "the new master's pid file", func() bool { p := readPid(swapLab.pid); return p > 0 && p != ms })
	if _, swapping := tr.QuietSince(); !swapping {
		t.Fatal("the host should be in a swap")
	}
	quietAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(quietLab.port))
	swapAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(swapLab.port))
	cfgQ := &tls.Config{RootCAs: quietLab.pool, ServerName: "localhost"}
	cfgS := &tls.Config{RootCAs: swapLab.pool, ServerName: "localhost"}
	answered := 0
	for range 10 {
		s, err := oneHandshake(quietAddr, cfgQ, tr)
		if err != nil {
			t.Fatal(err)
		}
		if s.xpid == 0 {
			t.Fatal("no X-Pid from the quiet nginx")
		}
		if q := <-s.quiet; q != nil {
			answered++
			if q.ID != gq.ID {
				t.Errorf("quiet answer %s, want %s", q.ID, gq.ID)
			}
		}
		s, err = oneHandshake(swapAddr, cfgS, tr)
		if err != nil {
			t.Fatal(err)
		}
		if q := <-s.quiet; q != nil {
			t.Errorf("quiet answer %s for the nginx in a swap (served by %d)", q.ID, s.xpid)
		}
	}
	if answered == 0 {
		t.Error("no handshake with the quiet nginx attributed by its quiet period while the other swapped")
	}
	t.Logf("%d of 10 handshakes with the quiet nginx answered during the other's swap", answered)
	// What the agent asks per record, whether to wait for the quiet path:
	// yes for the quiet port, no for the swapping one.
	if _, quiet, known := tr.ix.listeners.portQuietSince(quietAddr, false); !known || !quiet {
		t.Errorf("quiet port: known %v quiet %v", known, quiet)
	}
	if _, quiet, known := tr.ix.listeners.portQuietSince(swapAddr, false); !known || quiet {
		t.Errorf("swapping port: known %v quiet %v", known, quiet)
	}
	// A gone connection on the quiet port is answered by its listener;
	// on the swapping port it is not.
	if g, ok := tr.Attribute(netip.MustParseAddrPort("127.0.0.1:1"), quietAddr); !ok || g.ID != gq.ID || g.WorkerPID != 0 {
		t.Errorf("listener answer on the quiet port: %+v %v", g, ok)
	}
	if g, ok := tr.Attribute(netip.MustParseAddrPort("127.0.0.1:1"), swapAddr); ok {
		t.Errorf("listener answer on the swapping port: %+v", g)
	}

	// The quiet nginx reloads: its workers change, so its port's period
	// starts again; a connection begun before is not answered.
	before := time.Now()
	quietLab.writeConf("secp256r1")
	if out, err := exec.Command(quietLab.bin, "-p", quietLab.dir+"/", "-c", quietLab.conf, "-e", quietLab.errLog, "-s", "reload").CombinedOutput(); err != nil {
		t.Fatalf("nginx -s reload: %v: %s", err, out)
	}
	waitEvent(t, tr, 5*time.Second, KindReload, gq.ID)
	waitFor(t, 5*time.Second, "a scan after the reload's workers", func() bool {
		g, _ := tr.Generation(gq.ID)
		last, _ := tr.LastScan()
		return len(g.Workers) == 2 && !slices.ContainsFunc(g.Workers, func(w int) bool { return slices.Contains(gq.Workers, w) }) && last.After(time.Now().Add(-50*time.Millisecond))
	})
	if g, ok := tr.AttributeQuiet(quietAddr, before, before); ok {
		t.Errorf("a connection begun before the reload answered by the quiet period: %+v", g)
	}
}

func TestNginxFailedSwapAndRollback(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	masterA := l.start()
	tr, _ := startTracker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tailEmerg(ctx, l.errLog, tr)
	genA := genByMaster(t, tr, masterA, 2)
	stop := make(chan struct{})
	wi := watchWorkers(tr, stop)
	ld := runLoad(t, l, tr, 50, stop)
	time.Sleep(300 * time.Millisecond)

	// The trap: a PQ group this OpenSSL 3.0 does not know, loaded by USR2.
	l.writeConf("X25519MLKEM768:x25519")
	l.installB()
	usr2At := time.Now()
	l.signal(masterA, syscall.SIGUSR2)
	// Reported at the first scan after the new binary exits, or after
	// FailedSwapTimeout (3 s) when a scan saw it alive as a candidate
	// master: the wait covers both on a loaded machine; the time is logged.
	ev := waitEvent(t, tr, 5*time.Second, KindFailed, genA.ID)
	t.Logf("failed swap reported after %v: %s", time.Since(usr2At).Round(time.Millisecond), ev.Message)
	if !strings.Contains(ev.Message, genA.ID+" still serves") && !strings.Contains(ev.Message, genA.ID) {
		t.Errorf("event does not say %s still serves: %s", genA.ID, ev.Message)
	}
	if got := tr.FailedSwaps(); got < 1 {
		t.Errorf("FailedSwaps = %d", got)
	}
	if a, _ := tr.Generation(genA.ID); !a.Alive || len(a.Workers) != 2 {
		t.Errorf("A should still serve: %+v", a)
	}

	// A good upgrade, then the fast rollback: HUP old, QUIT new.
	l.writeConf("secp256r1")
	l.signal(masterA, syscall.SIGUSR2)
	waitEvent(t, tr, 5*time.Second, KindUSR2, genA.ID)
	var masterB int
	waitFor(t, 5*time.Second, "new pid file", func() bool { masterB = readPid(l.pid); return masterB > 0 && masterB != masterA })
	genB := genByMaster(t, tr, masterB, 2)
	l.signal(masterA, syscall.SIGWINCH)
	waitEvent(t, tr, 5*time.Second, KindWINCH, genA.ID)
	time.Sleep(300 * time.Millisecond)
	l.writeConf("x25519") // what the old master re-reads on HUP
	l.signal(masterA, syscall.SIGHUP)
	genByMaster(t, tr, masterA, 2)
	l.signal(masterB, syscall.SIGQUIT)
	ev = waitEvent(t, tr, 5*time.Second, KindRollback, genB.ID)
	t.Logf("rollback: %s", ev.Message)
	if ev.Other != genA.ID {
		t.Errorf("rollback names %q as serving, want %s", ev.Other, genA.ID)
	}
	rollbackAt := time.Now()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-ld.done
	res, errs := ld.snapshot()
	if len(errs) > 0 {
		t.Errorf("%d handshake errors, first: %v", len(errs), errs[0])
	}
	per := checkAttribution(t, tr, res, wi.snapshot())
	if per[genA.ID] == 0 || per[genB.ID] == 0 {
		t.Errorf("want handshakes on both generations: %v", per)
	}
	for _, s := range res {
		if s.ok && s.at.After(rollbackAt) && s.gen.ID != genA.ID {
			t.Errorf("after rollback served by %s", s.gen.ID)
		}
	}
	if n := len(eventsFor(tr, KindFailed, genA.ID, genB.ID)); n != 1 {
		t.Errorf("%d failed events, want 1", n)
	}
	if n := len(eventsFor(tr, KindQUIT, genA.ID, genB.ID)); n != 0 {
		t.Errorf("%d quit events, want 0 (it was a rollback)", n)
	}
}

// TestProbeWatch: after a scan, the probe learns of a master's or a
// server's exit from its pidfd and of a pid file's rename from an inotify
// watch, without reading their /proc files; what they report is a change.
func TestProbeWatch(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	master := l.start()
	// A server that is not nginx: a child process holding a listener
	// (this test binary, run as TestHelperListener).
	srv := exec.Command(os.Args[0], "-test.run=^TestHelperListener$")
	srv.Env = append(os.Environ(), "PQWATCH_TEST_LISTENER=1")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := srv.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = srv.Process.Kill(); _ = srv.Wait() })
	var port int
	if _, err := fmt.Fscan(out, &port); err != nil || port == 0 {
		t.Fatalf("helper listener: port %d, %v", port, err)
	}
	tr := quietTracker(t, Config{ScanInterval: 100 * time.Millisecond, ListenerRescan: time.Millisecond, ServerPorts: []uint16{uint16(port)}})
	var mk, sk procKey
	waitFor(t, 5*time.Second, "the master and the server tracked", func() bool {
		if err := tr.Scan(); err != nil {
			t.Fatal(err)
		}
		tr.mu.RLock()
		defer tr.mu.RUnlock()
		for pid, p := range tr.st.procs {
			switch {
			case pid == master && p.role == roleMaster:
				mk = p.key
			case pid == srv.Process.Pid && p.server:
				sk = p.key
			}
		}
		return mk.pid != 0 && sk.pid != 0
	})
	w := tr.rd.watch
	if w == nil {
		t.Skip("no children files: the probe is not used")
	}
	if !w.coversProc(mk) || !w.coversProc(sk) || !w.coversPidFile(mk) {
		t.Fatalf("watch covers master %v server %v pid file %v", w.coversProc(mk), w.coversProc(sk), w.coversPidFile(mk))
	}
	if !tr.Probe() {
		t.Fatal("probe saw a change where none was")
	}
	// Another file in the pid file's directory is no change.
	if err := os.WriteFile(l.pid+".unrelated", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !tr.Probe() {
		t.Error("a file beside the pid file counted as a change")
	}
	// The pid file renamed to .oldbin (what USR2 does first), and back.
	if err := os.Rename(l.pid, l.pid+".oldbin"); err != nil {
		t.Fatal(err)
	}
	if tr.Probe() {
		t.Error("probe missed the pid file renamed to .oldbin")
	}
	if err := os.Rename(l.pid+".oldbin", l.pid); err != nil {
		t.Fatal(err)
	}
	if tr.Probe() {
		t.Error("probe missed the .oldbin renamed back")
	}
	if !tr.Probe() {
		t.Error("a change reported twice")
	}
	// The server exits: its pidfd says so.
	_ = srv.Process.Kill()
	_ = srv.Wait()
	if tr.Probe() {
		t.Error("probe missed the server's exit")
	}
	if err := tr.Scan(); err != nil {
		t.Fatal(err)
	}
	if w.coversProc(sk) {
		t.Error("the exited server is still watched after a scan")
	}
	if !tr.Probe() {
		t.Error("probe saw a change after the scan that took the exit in")
	}
}

// TestHelperListener is TestProbeWatch's server process: with
// PQWATCH_TEST_LISTENER=1 it listens on loopback, prints its port and holds
// the listener until its stdin closes.
func TestHelperListener(t *testing.T) {
	if os.Getenv("PQWATCH_TEST_LISTENER") != "1" {
		t.Skip("a helper process of TestProbeWatch")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
