// Part 1 (see the package comment): pqwatch's CPU time per handshake
// next to nginx's.

package main

import (
	"context"
	"crypto/tls"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

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

// startNginx runs nginx in the foreground (daemon off) with a throwaway
// prefix in dir, one worker, listening on 127.0.0.1:port. It is not
// testenv.StartNginxE, which starts a daemon with an access log: this nginx
// is a child of benchlive (its process group, Pdeathsig, its pid for the CPU
// figures), and its config leaves out what the figures should not count.
func startNginx(ctx context.Context, o options, dir string, port int) (*proc, error) {
	certFile, keyFile, _, err := testenv.CertE(dir)
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
	if r.port, err = testenv.FreePort(); err != nil {
		return nil, err
	}
	ngx, err := startNginx(ctx, o, dir, r.port)
	if err != nil {
		return nil, err
	}
	defer ngx.stop()
	mport, err := testenv.FreePort()
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
