// Command benchlive is `make bench`'s live figures (issue 4):
//
//  1. pqwatch's own CPU time per observed handshake while real handshakes
//     run against nginx from Debian on a loopback port, next to nginx's CPU
//     time per handshake (pqwatch loadgen reads it from /proc for nginx's
//     processes), as a ratio. The aim is pqwatch under 2% of the server.
//
//  2. A replay of a large capture of real handshakes with bulk traffic
//     (package pcapgen) with tcpreplay onto a veth whose peer, in another
//     network namespace, pqwatch captures: a packet-rate ladder, stopping at
//     the first step that loses packets; the highest rate with zero drops,
//     and whether every connection of the capture was counted.
//
//     go run ./internal/benchlive -pqwatch bin/pqwatch
//
// It needs root (AF_PACKET, namespaces), nginx, ip and tcpreplay; without
// them it says what is missing and exits 0. Everything it starts (nginx,
// pqwatch, namespaces, temp files) is stopped and removed when it ends, on
// SIGINT/SIGTERM too, and the whole run is bounded (-timeout).
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/vishvananda/netns"
)

type options struct {
	bin      string
	rate     float64
	duration time.Duration
	warmup   time.Duration
	conns    int
	bulk     int
	ladder   []int // packets per second; 0 = --topspeed
	timeout  time.Duration
	only     string
	loop     int
	verbose  bool
	arms     string
	trials   int
}

func main() {
	// -ticker: the reference process of the idle figure (see cpuFigure).
	if len(os.Args) == 2 && os.Args[1] == "-ticker" {
		for range time.Tick(time.Second) {
		}
	}
	var o options
	var ladder string
	flag.StringVar(&o.bin, "pqwatch", "bin/pqwatch", "pqwatch `binary`")
	flag.Float64Var(&o.rate, "rate", 300, "handshakes per second of the live load")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured window of the live load")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "loadgen warm-up before the window (pqwatch's CPU counts it too)")
	flag.IntVar(&o.conns, "conns", 2000, "connections in the replayed capture")
	flag.IntVar(&o.bulk, "bulk", 32<<10, "bytes of application data per replayed connection")
	flag.StringVar(&ladder, "pps", "50000,100000,200000,400000,top", "replay packet-rate ladder (top = --topspeed); stops at the first step that loses packets")
	flag.DurationVar(&o.timeout, "timeout", 240*time.Second, "bound on the whole run")
	flag.StringVar(&o.only, "only", "", "run only one part: cpu or replay")
	flag.IntVar(&o.loop, "loop", 1, "replay the capture this many times per step (the same connections again: pqwatch should count each time)")
	flag.BoolVar(&o.verbose, "v", false, "show the subprocesses' output")
	flag.IntVar(&o.trials, "trials", 3, "runs of each CPU arm, interleaved; the median is shown")
	flag.StringVar(&o.arms, "arms", "|-no-process-tracking", "pqwatch run variants for the CPU figure, separated by |: extra flags, and NAME=value words set in its environment (GOMAXPROCS=1)")
	flag.Parse()
	for _, s := range strings.Split(ladder, ",") {
		s = strings.TrimSpace(s)
		if s == "top" || s == "topspeed" {
			o.ladder = append(o.ladder, 0)
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "benchlive: -pps: bad step %q\n", s)
			os.Exit(2)
		}
		o.ladder = append(o.ladder, n)
	}
	os.Exit(run(o))
}

// cleanups run in reverse order, once, at exit or on a signal.
var cleanups struct {
	sync.Mutex
	fns []func()
	ran bool
}

func atExit(fn func()) {
	cleanups.Lock()
	defer cleanups.Unlock()
	cleanups.fns = append(cleanups.fns, fn)
}

func runCleanups() {
	cleanups.Lock()
	defer cleanups.Unlock()
	for i := len(cleanups.fns) - 1; i >= 0; i-- {
		cleanups.fns[i]()
	}
	cleanups.fns = nil
}

func skip(format string, args ...any) int {
	fmt.Printf("benchlive: skipped: "+format+"\n", args...)
	return 0
}

func run(o options) int {
	if runtime.GOOS != "linux" {
		return skip("needs Linux (AF_PACKET, network namespaces)")
	}
	if os.Geteuid() != 0 {
		return skip("needs root (AF_PACKET capture, network namespaces); CI runs as root")
	}
	if _, err := os.Stat(o.bin); err != nil {
		fmt.Fprintf(os.Stderr, "benchlive: pqwatch binary: %v (make build)\n", err)
		return 1
	}
	if abs, err := filepath.Abs(o.bin); err == nil {
		o.bin = abs
	}
	needCPU := []string{"nginx"}
	needReplay := []string{"ip", "tcpreplay"}
	doCPU, doReplay := o.only != "replay", o.only != "cpu"
	if m := missing(needCPU); doCPU && m != "" {
		fmt.Printf("benchlive: CPU figure skipped: needs %s (installed by .ci/run)\n", m)
		doCPU = false
	}
	if m := missing(needReplay); doReplay && m != "" {
		fmt.Printf("benchlive: replay figure skipped: needs %s (installed by .ci/run)\n", m)
		doReplay = false
	}
	if !doCPU && !doReplay {
		return 0
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	defer runCleanups()
	// First signal: cancel, let the deferred cleanups run. Second signal, or
	// the cleanups hanging past the bound: clean up now and leave.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "benchlive: interrupted, cleaning up")
		cancel()
		select {
		case <-sigs:
		case <-time.After(15 * time.Second):
		}
		runCleanups()
		os.Exit(1)
	}()
	watchdog := time.AfterFunc(o.timeout+20*time.Second, func() {
		fmt.Fprintln(os.Stderr, "benchlive: watchdog: run exceeded its bound, cleaning up")
		runCleanups()
		os.Exit(1)
	})
	defer watchdog.Stop()

	tmp, err := os.MkdirTemp("", "pqwatch-benchlive-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchlive:", err)
		return 1
	}
	atExit(func() { os.RemoveAll(tmp) })

	status := 0
	if doCPU {
		// The default agent, and the same without process tracking (its
		// /proc scans and socket attribution) to show what that part costs.
		// Each arm runs o.trials times, interleaved (a machine that gets
		// busier affects every arm alike); the trial with the median
		// ratio is printed, with the range of all.
		arms := strings.Split(o.arms, "|")
		all := make([][]*cpuResult, len(arms))
	trials:
		for t := range max(o.trials, 1) {
			for i, arm := range arms {
				if ctx.Err() != nil {
					break trials
				}
				r, err := cpuFigure(ctx, o, filepath.Join(tmp, fmt.Sprintf("cpu%d-%d", i, t)), strings.Fields(arm)...)
				if err != nil {
					fmt.Fprintln(os.Stderr, "benchlive: CPU figure:", err)
					status = 1
					break trials
				}
				all[i] = append(all[i], r)
			}
		}
		var rs []*cpuResult
		var spread []string
		for _, runs := range all {
			if len(runs) == 0 {
				continue
			}
			slices.SortFunc(runs, func(a, b *cpuResult) int { return cmp.Compare(a.preciseRatio(), b.preciseRatio()) })
			rs = append(rs, runs[len(runs)/2])
			spread = append(spread, fmt.Sprintf("%.2f%%–%.2f%%", runs[0].preciseRatio(), runs[len(runs)-1].preciseRatio()))
		}
		if len(rs) > 0 {
			printCPU(o, rs, spread)
		}
	}
	if doReplay && ctx.Err() == nil {
		steps, conns, err := replayFigure(ctx, o, filepath.Join(tmp, "replay"))
		if steps != nil {
			printReplay(steps, conns*max(o.loop, 1))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchlive: replay figure:", err)
			status = 1
		}
	}
	if ctx.Err() != nil && status == 0 {
		fmt.Fprintln(os.Stderr, "benchlive:", ctx.Err())
		status = 1
	}
	return status
}

func missing(bins []string) string {
	var m []string
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			m = append(m, b)
		}
	}
	return strings.Join(m, ", ")
}

// ---------------------------------------------------------------- processes

// proc is a started subprocess in its own process group; stop ends the
// group (SIGTERM, then SIGKILL) and is safe to call twice.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
	once sync.Once
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	w  io.Writer // echo (-v) or nil
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		s.w.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail is the last n bytes of the output, for error messages.
func (s *syncBuf) tail(n int) string {
	t := s.String()
	if len(t) > n {
		t = "…" + t[len(t)-n:]
	}
	return strings.TrimSpace(t)
}

// startProc starts name args in a new process group; ns != "" runs it in
// that network namespace (ip netns exec keeps the pid: it execs). The
// process dies with benchlive (Pdeathsig) and is stopped at exit.
func startProc(o options, ns string, env []string, name string, args ...string) (*proc, error) {
	if ns != "" {
		args = append([]string{"netns", "exec", ns, name}, args...)
		name = "ip"
	}
	p := &proc{cmd: exec.Command(name, args...), out: &syncBuf{}, done: make(chan struct{})}
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if o.verbose {
		p.out.w = os.Stderr
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(p.cmd); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	atExit(p.stop)
	return p, nil
}

// Pdeathsig fires when the *thread* that forked the child exits, and Go ends
// a thread whose goroutine exits while locked to it (inNS does that). So
// every child is forked from one goroutine locked for good to its thread.
var spawnReq = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for fn := range spawnReq {
			fn()
		}
	}()
}

// spawn starts cmd from the spawner thread.
func spawn(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	spawnReq <- func() { errc <- cmd.Start() }
	return <-errc
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	p.once.Do(func() {
		pg := -p.cmd.Process.Pid
		syscall.Kill(pg, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		syscall.Kill(pg, syscall.SIGKILL) // stragglers of the group (nginx workers)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	})
}

// schedNs is the CPU time pid's threads (and, with kids, its children's
// threads) have run, from /proc/PID/task/TID/schedstat: nanoseconds, exact,
// where utime+stime are 10 ms ticks charged by sampling.
func schedNs(pid int, kids bool) uint64 {
	var total uint64
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseUint(f[0], 10, 64)
			total += v
		}
		if kids {
			cb, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
			for _, c := range strings.Fields(string(cb)) {
				if cp, err := strconv.Atoi(c); err == nil {
					total += schedNs(cp, true)
				}
			}
		}
	}
	return total
}

// cpuTicks is utime+stime of pid from /proc/PID/stat, in clock ticks
// (USER_HZ = 100 on Linux).
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	s, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
}

const tickUs = 10_000

// ---------------------------------------------------------------- metrics

// scraper reads pqwatch's /metrics, dialing inside ns when set.
type scraper struct {
	url string
	hc  *http.Client
}

func newScraper(ns, addr string) *scraper {
	tr := &http.Transport{DisableKeepAlives: true}
	if ns != "" {
		tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
			var c net.Conn
			err := inNS(ns, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, a)
				return
			})
			return c, err
		}
	}
	return &scraper{url: "http://" + addr, hc: &http.Client{Transport: tr, Timeout: 3 * time.Second}}
}

// inNS runs fn on an OS thread switched into namespace ns; the thread stays
// locked and dies with the goroutine so the namespace never leaks.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// sample is one scrape: metric name → label string → value.
type sample map[string]map[string]float64

func (s sample) sum(name string) float64 {
	t := 0.0
	for _, v := range s[name] {
		t += v
	}
	return t
}

// sumWhere sums the series of name whose labels contain sub.
func (s sample) sumWhere(name, sub string) float64 {
	t := 0.0
	for l, v := range s[name] {
		if strings.Contains(l, sub) {
			t += v
		}
	}
	return t
}

func (sc *scraper) scrape(ctx context.Context) (sample, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", sc.url+"/metrics", nil)
	resp, err := sc.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := sample{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		key := line[:sp]
		name, labels := key, ""
		if i := strings.IndexByte(key, '{'); i >= 0 {
			name, labels = key[:i], key[i:]
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][labels] += v
	}
	return out, s.Err()
}

// startPqwatch runs `pqwatch run` capturing iface (in ns when set) and
// waits until /metrics answers and shows iface's ring counters.
func startPqwatch(ctx context.Context, o options, ns, iface, metricsAddr string, extra ...string) (*proc, *scraper, error) {
	args := []string{"run", "-iface", iface, "-metrics-addr", metricsAddr, "-log-level", "warn"}
	var env []string
	for _, w := range extra {
		if k, _, ok := strings.Cut(w, "="); ok && k != "" && !strings.HasPrefix(k, "-") {
			env = append(env, w)
			continue
		}
		args = append(args, w)
	}
	p, err := startProc(o, ns, env, o.bin, args...)
	if err != nil {
		return nil, nil, err
	}
	sc := newScraper(ns, metricsAddr)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.exited() {
			return nil, nil, fmt.Errorf("pqwatch run exited: %s", p.out.tail(600))
		}
		if s, err := sc.scrape(ctx); err == nil {
			if _, ok := s["pqwatch_capture_packets_total"][`{iface="`+iface+`"}`]; ok {
				return p, sc, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop()
	return nil, nil, fmt.Errorf("pqwatch run did not serve %s's capture counters within 10s: %s", iface, p.out.tail(600))
}

// ---------------------------------------------------------------- part 1

type cpuResult struct {
	extra                []string // pqwatch run flags beyond the defaults
	port                 int
	nginxWorkers         int
	observed             float64 // handshakes pqwatch counted during the load
	observedOK           float64
	clientOK, clientSent int // loadgen: completed requests / all requests (warm-up included)
	pqwatchTicks         uint64
	pqNs, ngxNs          uint64        // schedstat run time over the load window
	loadFor              time.Duration // wall time over which pqwatchTicks were counted
	idleNs               uint64        // schedstat run time with no traffic
	refNs                uint64        // the same, of a Go process that only wakes once a second
	idleFor              time.Duration
	serverUs             float64 // nginx CPU µs per handshake (loadgen, measured window)
	groups               map[string]int
	rateAchieved         float64
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// writeCert writes a fresh self-signed ECDSA P-256 certificate and key.
func writeCert(dir string) (certFile, keyFile string, err error) {
	c, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	err = errors.Join(
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644),
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile, err
}

// startNginx runs nginx in the foreground (daemon off) with a throwaway
// prefix in dir, one worker, listening on 127.0.0.1:port.
func startNginx(ctx context.Context, o options, dir string, port int) (*proc, error) {
	certFile, keyFile, err := writeCert(dir)
	if err != nil {
		return nil, err
	}
	errLog := filepath.Join(dir, "error.log")
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %s;
error_log %s warn;
events { worker_connections 4096; }
http {
  access_log off;
  server {
    listen 127.0.0.1:%d ssl;
    server_name pqwatch.test;
    ssl_certificate %s;
    ssl_certificate_key %s;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets off;
    ssl_session_cache off;
    keepalive_timeout 0;
    location / { return 200 "ok\n"; }
  }
}
`, filepath.Join(dir, "nginx.pid"), errLog, port, certFile, keyFile)
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startProc(o, "", nil, "nginx", "-p", dir, "-c", confFile, "-e", errLog)
	if err != nil {
		return nil, err
	}
	// Ready when a TLS handshake succeeds.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.exited() {
			b, _ := os.ReadFile(errLog)
			return nil, fmt.Errorf("nginx exited: %s %s", p.out.tail(400), b)
		}
		if handshake(port) == nil {
			return p, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("nginx did not accept TLS on port %d within 10s", port)
}

func handshake(port int) error {
	d := &net.Dialer{Timeout: time.Second}
	c, err := tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: "pqwatch.test", InsecureSkipVerify: true})
	if err != nil {
		return err
	}
	return c.Close()
}

func cpuFigure(ctx context.Context, o options, dir string, extra ...string) (*cpuResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &cpuResult{extra: extra}
	var err error
	if r.port, err = freePort(); err != nil {
		return nil, err
	}
	ngx, err := startNginx(ctx, o, dir, r.port)
	if err != nil {
		return nil, err
	}
	defer ngx.stop()
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	pq, sc, err := startPqwatch(ctx, o, "", "lo", fmt.Sprintf("127.0.0.1:%d", mport), append([]string{"-ports", strconv.Itoa(r.port)}, extra...)...)
	if err != nil {
		return nil, err
	}
	defer pq.stop()

	// The capture is live once a probe handshake is counted.
	s0, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	live := false
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		handshake(r.port)
		time.Sleep(100 * time.Millisecond)
		if s, err := sc.scrape(ctx); err == nil && s.sum("pqwatch_handshakes_total") > s0.sum("pqwatch_handshakes_total") {
			live = true
			break
		}
	}
	if !live {
		return nil, fmt.Errorf("pqwatch counted none of the probe handshakes on lo port %d", r.port)
	}
	time.Sleep(1500 * time.Millisecond) // let the probes' flows end

	// Idle cost: pqwatch with nothing to capture (process scans, timers),
	// next to a reference measured in the same window: a Go process that
	// does nothing but wake once a second. On a VM the cost of a wakeup
	// moves with the host's load (1 to 4 ms/s for that reference was seen
	// within an hour here), and every figure below moves with it.
	var ref *proc
	if self, err := os.Executable(); err == nil {
		if ref, err = startProc(o, "", nil, self, "-ticker"); err == nil {
			defer ref.stop()
			time.Sleep(200 * time.Millisecond) // past its start-up
		}
	}
	var ref0 uint64
	if ref != nil {
		ref0 = schedNs(ref.pid(), false)
	}
	idle0, idleStart := schedNs(pq.pid(), false), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(3 * time.Second):
	}
	r.idleNs, r.idleFor = schedNs(pq.pid(), false)-idle0, time.Since(idleStart)
	if ref != nil {
		r.refNs = schedNs(ref.pid(), false) - ref0
		ref.stop()
	}

	before, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "loadgen")
	args := []string{"loadgen", "-target", fmt.Sprintf("127.0.0.1:%d", r.port), "-sni", "pqwatch.test", "-insecure",
		"-arm", "hybrid=X25519MLKEM768,x25519", "-rate", fmt.Sprint(o.rate),
		"-duration", o.duration.String(), "-warmup", o.warmup.String(), "-trials", "1",
		"-server-pid", strconv.Itoa(ngx.pid()), "-out", out}
	lctx, lcancel := context.WithTimeout(ctx, o.warmup+o.duration+30*time.Second)
	defer lcancel()
	lg := exec.CommandContext(lctx, o.bin, args...)
	lg.Cancel = func() error { return lg.Process.Signal(syscall.SIGTERM) }
	lg.WaitDelay = 5 * time.Second
	lg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var lout syncBuf
	if o.verbose {
		lout.w = os.Stderr
	}
	lg.Stdout, lg.Stderr = &lout, &lout
	p0, err := cpuTicks(pq.pid())
	if err != nil {
		return nil, err
	}
	pqNs0, ngxNs0 := schedNs(pq.pid(), false), schedNs(ngx.pid(), true)
	loadStart := time.Now()
	if err = spawn(lg); err == nil {
		err = lg.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("loadgen: %v: %s", err, lout.tail(800))
	}
	// Handshakes are counted at ServerHello time; give the last ones time
	// to be handed over from the ring (a partly filled block waits up to
	// the block timeout), then stop the clock.
	time.Sleep(blockTimeout(extra) + 500*time.Millisecond)
	p1, err := cpuTicks(pq.pid())
	if err != nil {
		return nil, err
	}
	r.pqNs, r.ngxNs = schedNs(pq.pid(), false)-pqNs0, schedNs(ngx.pid(), true)-ngxNs0
	after, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.pqwatchTicks, r.loadFor = p1-p0, time.Since(loadStart)
	r.observed = after.sum("pqwatch_handshakes_total") - before.sum("pqwatch_handshakes_total")
	r.observedOK = after.sumWhere("pqwatch_handshakes_total", `outcome="ok"`) - before.sumWhere("pqwatch_handshakes_total", `outcome="ok"`)
	r.nginxWorkers = 1

	var res struct {
		Trials []struct {
			RateAchieved            float64        `json:"rate_achieved"`
			ServerCPUUsPerHandshake *float64       `json:"server_cpu_us_per_handshake"`
			Groups                  map[string]int `json:"groups"`
		} `json:"trials"`
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("results.json: %w", err)
	}
	if len(res.Trials) == 0 || res.Trials[0].ServerCPUUsPerHandshake == nil {
		return nil, fmt.Errorf("results.json: no server_cpu_us_per_handshake (loadgen did not find nginx's processes)")
	}
	r.serverUs = *res.Trials[0].ServerCPUUsPerHandshake
	r.groups = res.Trials[0].Groups
	r.rateAchieved = res.Trials[0].RateAchieved

	f, err := os.Open(filepath.Join(out, "requests.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("requests.csv: %w", err)
	}
	col := map[string]int{}
	if len(rows) > 0 {
		for i, h := range rows[0] {
			col[h] = i
		}
	}
	ei, ok1 := col["error"]
	si, ok2 := col["status"]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("requests.csv: no error/status columns")
	}
	for _, row := range rows[1:] {
		r.clientSent++
		if row[ei] == "" && row[si] == "200" {
			r.clientOK++
		}
	}
	return r, nil
}

// blockTimeout is the ring block timeout of a pqwatch run with these flags.
func blockTimeout(flags []string) time.Duration {
	d := capture.DefaultBlockTimeout
	for i, f := range flags {
		v, ok := strings.CutPrefix(strings.TrimLeft(f, "-"), "block-timeout")
		if !ok {
			continue
		}
		if v == "" && i+1 < len(flags) {
			v = flags[i+1]
		}
		if x, err := time.ParseDuration(strings.TrimPrefix(v, "=")); err == nil {
			d = x
		}
	}
	return d
}

// preciseRatio is pqwatch's run time over nginx's, in percent (schedstat).
func (r *cpuResult) preciseRatio() float64 {
	if r.ngxNs == 0 {
		return 0
	}
	return 100 * float64(r.pqNs) / float64(r.ngxNs)
}

func printCPU(o options, rs []*cpuResult, spread []string) {
	fmt.Printf("\nlive CPU: nginx %s (1 worker, ECDSA P-256 cert) on a loopback port, pqwatch run -iface lo -ports PORT,\n"+
		"  loadgen -arm hybrid=X25519MLKEM768,x25519 at %g/s for %s (+%s warm-up; pqwatch's CPU counts it too)\n",
		nginxVersion(), o.rate, o.duration, o.warmup)
	row := func(label string, f func(r *cpuResult) string) {
		fmt.Printf("  %-38s", label)
		for _, r := range rs {
			fmt.Printf(" %18s", f(r))
		}
		fmt.Println()
	}
	row("pqwatch run flags", func(r *cpuResult) string {
		if len(r.extra) == 0 {
			return "(defaults)"
		}
		return strings.Join(r.extra, " ")
	})
	row("client requests completed / sent", func(r *cpuResult) string { return fmt.Sprintf("%d/%d", r.clientOK, r.clientSent) })
	row("negotiated groups (measured window)", func(r *cpuResult) string {
		var gs []string
		for g, n := range r.groups {
			gs = append(gs, fmt.Sprintf("%s=%d", g, n))
		}
		return strings.Join(gs, " ")
	})
	row("handshakes pqwatch observed", func(r *cpuResult) string { return fmt.Sprintf("%.0f", r.observed) })
	row("  of them outcome=ok", func(r *cpuResult) string { return fmt.Sprintf("%.0f", r.observedOK) })
	row("pqwatch CPU ms (utime+stime)", func(r *cpuResult) string { return fmt.Sprintf("%.0f", float64(r.pqwatchTicks*tickUs)/1000) })
	row("pqwatch idle CPU ms/s (no traffic)", func(r *cpuResult) string { return fmt.Sprintf("%.1f", r.idleMsPerS()) })
	row("  reference: Go process, 1 wakeup/s", func(r *cpuResult) string {
		return fmt.Sprintf("%.1f", float64(r.refNs)/1e6/r.idleFor.Seconds())
	})
	row("pqwatch µs CPU per handshake", func(r *cpuResult) string { return fmt.Sprintf("%.1f", r.pqUs()) })
	row("nginx µs CPU per handshake", func(r *cpuResult) string { return fmt.Sprintf("%.1f", r.serverUs) })
	row("pqwatch / nginx (aim < 2%)", func(r *cpuResult) string {
		ratio := 100 * r.pqUs() / r.serverUs
		v := "ok"
		if ratio >= 2 {
			v = "OVER"
		}
		return fmt.Sprintf("%.2f%% %s", ratio, v)
	})
	row("  same, idle cost taken out", func(r *cpuResult) string {
		return fmt.Sprintf("%.2f%%", 100*r.pqUsMarginal()/r.serverUs)
	})
	row("precise (schedstat): pqwatch µs/handshake", func(r *cpuResult) string { return fmt.Sprintf("%.1f", float64(r.pqNs)/1000/r.observed) })
	row("precise (schedstat): nginx µs/handshake", func(r *cpuResult) string { return fmt.Sprintf("%.1f", float64(r.ngxNs)/1000/r.observed) })
	row("precise (schedstat): pqwatch / nginx", func(r *cpuResult) string {
		return fmt.Sprintf("%.2f%%", r.preciseRatio())
	})
	if o.trials > 1 {
		i := 0
		row(fmt.Sprintf("  range over %d trials (median shown)", o.trials), func(r *cpuResult) string {
			i++
			return spread[i-1]
		})
	}
	for _, r := range rs {
		if int(r.observed) != r.clientOK {
			fmt.Printf("  note (%s): pqwatch observed %.0f handshakes, the client completed %d\n",
				strings.Join(r.extra, " "), r.observed, r.clientOK)
		}
	}
}

func (r *cpuResult) pqUs() float64 { return float64(r.pqwatchTicks*tickUs) / r.observed }

func (r *cpuResult) idleMsPerS() float64 {
	return float64(r.idleNs) / 1e6 / r.idleFor.Seconds()
}

// pqUsMarginal is pqwatch's CPU per handshake above its idle rate
// (schedstat), over the load.
func (r *cpuResult) pqUsMarginal() float64 {
	idleNs := r.idleMsPerS() * 1e6 * r.loadFor.Seconds()
	return max(float64(r.pqNs)-idleNs, 0) / 1000 / r.observed
}

func nginxVersion() string {
	out, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// ---------------------------------------------------------------- part 2

type replayStep struct {
	pps        int // target; 0 = topspeed
	sent       uint64
	secs       float64
	achieved   float64 // packets/s tcpreplay reports
	captured   uint64  // ring packets (pqwatch_capture_packets_total, drops included)
	drops      uint64  // ring drops (pqwatch_capture_drops_total)
	rxDropped  uint64  // veth-s rx_dropped: lost before any packet tap
	handshakes float64
	ok         float64
	cpuMs      float64
}

func (s replayStep) lost() uint64 {
	l := s.drops
	if s.sent > s.captured {
		l += s.sent - s.captured
	}
	return l
}

// pair is two namespaces joined by a veth: S holds veth-s, C veth-c.
type pair struct{ s, c string }

func newPair(id int) (*pair, error) {
	p := &pair{s: fmt.Sprintf("pqwb%d-s", id), c: fmt.Sprintf("pqwb%d-c", id)}
	tmp := fmt.Sprintf("pqb%d", id)
	atExit(func() {
		exec.Command("ip", "netns", "del", p.s).Run()
		exec.Command("ip", "netns", "del", p.c).Run()
		exec.Command("ip", "link", "del", tmp+"a").Run() // only if the move failed
	})
	for _, c := range [][]string{
		{"netns", "add", p.s},
		{"netns", "add", p.c},
		{"link", "add", tmp + "a", "type", "veth", "peer", "name", tmp + "b"},
		{"link", "set", tmp + "a", "netns", p.s},
		{"link", "set", tmp + "b", "netns", p.c},
		{"-n", p.s, "link", "set", tmp + "a", "name", "veth-s"},
		{"-n", p.c, "link", "set", tmp + "b", "name", "veth-c"},
		{"-n", p.s, "link", "set", "veth-s", "mtu", "1500", "up"},
		{"-n", p.c, "link", "set", "veth-c", "mtu", "1500", "up"},
		{"-n", p.s, "link", "set", "lo", "up"},
		{"-n", p.c, "link", "set", "lo", "up"},
		{"-n", p.s, "addr", "add", "10.79.0.1/24", "dev", "veth-s"},
		{"-n", p.c, "addr", "add", "10.79.0.2/24", "dev", "veth-c"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	if _, err := exec.LookPath("ethtool"); err == nil {
		exec.Command("ip", "netns", "exec", p.s, "ethtool", "-K", "veth-s", "gro", "off").Run()
	}
	return p, nil
}

// rxDropped reads the rx_dropped counter of dev in ns.
func rxDropped(ns, dev string) uint64 {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+dev+"/statistics/rx_dropped").Output()
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	return v
}

func genCapture(ctx context.Context, file string, conns, bulk int) (int, error) {
	f, err := os.Create(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	clients := pcapgen.DefaultClients(conns)
	for i := range clients {
		clients[i].BulkBytes = bulk
	}
	res, err := pcapgen.Generate(ctx, w, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients})
	if err != nil {
		return 0, err
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return len(res), f.Close()
}

var (
	reActual = regexp.MustCompile(`Actual: (\d+) packets \((\d+) bytes\) sent in ([0-9.]+) seconds`)
	reRated  = regexp.MustCompile(`Rated: [0-9.]+ Bps, [0-9.]+ Mbps, ([0-9.]+) pps`)
)

func replayFigure(ctx context.Context, o options, dir string) ([]replayStep, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	file := filepath.Join(dir, "replay.pcap")
	gstart := time.Now()
	conns, err := genCapture(ctx, file, o.conns, o.bulk)
	if err != nil {
		return nil, 0, fmt.Errorf("generating the capture: %w", err)
	}
	st, _ := os.Stat(file)
	fmt.Printf("\nreplay: %d connections, %d B bulk each, %.1f MB capture (generated in %.1fs)\n",
		conns, o.bulk, float64(st.Size())/1e6, time.Since(gstart).Seconds())

	pr, err := newPair(os.Getpid())
	if err != nil {
		return nil, conns, err
	}
	const maddr = "127.0.0.1:9810" // inside the server namespace
	var steps []replayStep
	for _, pps := range o.ladder {
		if ctx.Err() != nil {
			return steps, conns, ctx.Err()
		}
		// A fresh agent per step: clean counters and an empty flow table.
		// -capture-all: every frame reaches the ring, so "captured" can be
		// compared with what tcpreplay sent.
		pq, sc, err := startPqwatch(ctx, o, pr.s, "veth-s", maddr, "-capture-all")
		if err != nil {
			return steps, conns, err
		}
		step, err := replayOnce(ctx, pr, pq, sc, file, pps, o.loop)
		pq.stop()
		if err != nil {
			return steps, conns, err
		}
		steps = append(steps, step)
		if step.lost() > 0 {
			break
		}
	}
	return steps, conns, nil
}

func replayOnce(ctx context.Context, pr *pair, pq *proc, sc *scraper, file string, pps, loop int) (replayStep, error) {
	s := replayStep{pps: pps}
	before, err := sc.scrape(ctx)
	if err != nil {
		return s, err
	}
	rx0 := rxDropped(pr.s, "veth-s")
	c0, err := cpuTicks(pq.pid())
	if err != nil {
		return s, err
	}
	rate := "--topspeed"
	if pps > 0 {
		rate = fmt.Sprintf("--pps=%d", pps)
	}
	rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, "ip", "netns", "exec", pr.c, "tcpreplay", "-q", "-i", "veth-c", rate, fmt.Sprintf("--loop=%d", max(loop, 1)), file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 3 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err = spawn(cmd); err == nil {
		err = cmd.Wait()
	}
	out := buf.Bytes()
	if err != nil {
		return s, fmt.Errorf("tcpreplay %s: %v: %s", rate, err, out)
	}
	m := reActual.FindSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("tcpreplay: no summary in %q", out)
	}
	s.sent, _ = strconv.ParseUint(string(m[1]), 10, 64)
	s.secs, _ = strconv.ParseFloat(string(m[3]), 64)
	if m := reRated.FindSubmatch(out); m != nil {
		s.achieved, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	// Let the rings drain and the last handshakes be counted: the ring's
	// packet counter moves at once, the last partly filled block reaches
	// pqwatch only when its timeout expires.
	time.Sleep(capture.DefaultBlockTimeout + 250*time.Millisecond)
	var after sample
	for i := 0; i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		a, err := sc.scrape(ctx)
		if err != nil {
			return s, err
		}
		done := after != nil && a.sum("pqwatch_handshakes_total") == after.sum("pqwatch_handshakes_total") &&
			a.sum("pqwatch_capture_packets_total") == after.sum("pqwatch_capture_packets_total")
		after = a
		if done {
			break
		}
	}
	c1, err := cpuTicks(pq.pid())
	if err != nil {
		return s, err
	}
	s.cpuMs = float64((c1-c0)*tickUs) / 1000
	d := func(name string) float64 { return after.sum(name) - before.sum(name) }
	s.captured = uint64(d("pqwatch_capture_packets_total"))
	s.drops = uint64(d("pqwatch_capture_drops_total"))
	s.handshakes = d("pqwatch_handshakes_total")
	s.ok = after.sumWhere("pqwatch_handshakes_total", `outcome="ok"`) - before.sumWhere("pqwatch_handshakes_total", `outcome="ok"`)
	s.rxDropped = rxDropped(pr.s, "veth-s") - rx0
	return s, nil
}

func printReplay(steps []replayStep, conns int) {
	fmt.Printf("  %-10s %9s %7s %10s %9s %9s %7s %7s %10s %8s\n",
		"target", "sent", "s", "pps", "captured", "ringdrop", "rxdrop", "lost", "handshakes", "cpu ms")
	best := -1
	for i, s := range steps {
		t := "top"
		if s.pps > 0 {
			t = strconv.Itoa(s.pps)
		}
		fmt.Printf("  %-10s %9d %7.2f %10.0f %9d %9d %7d %7d %10.0f %8.0f\n",
			t, s.sent, s.secs, s.achieved, s.captured, s.drops, s.rxDropped, s.lost(), s.handshakes, s.cpuMs)
		if s.lost() == 0 {
			best = i
		}
	}
	if best < 0 {
		fmt.Println("  no step without loss")
	} else {
		fmt.Printf("  highest rate with zero drops: %.0f packets/s\n", steps[best].achieved)
	}
	for _, s := range steps {
		if s.lost() == 0 && int(s.handshakes) != conns {
			fmt.Printf("  MISMATCH at %.0f pps: pqwatch counted %.0f handshakes (%.0f ok), the capture holds %d connections\n",
				s.achieved, s.handshakes, s.ok, conns)
		}
	}
	if best >= 0 && int(steps[best].handshakes) == conns {
		fmt.Printf("  handshakes counted = capture's connections (%d) at every lossless step\n", conns)
	}
	fmt.Println("  (captured: ring packets incl. ring drops; rxdrop: lost at veth-s before any tap; lost = ringdrop + sent-captured)")
}
