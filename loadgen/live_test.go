package loadgen

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Small, fast loads: the whole package must test in well under a minute on
// two cores.
const (
	abRate     = 200.0
	abDuration = time.Second
	abWarmup   = 300 * time.Millisecond
	abTrials   = 2
)

func mustArms(t testing.TB, specs ...string) []Arm {
	var arms []Arm
	for _, s := range specs {
		a, err := ParseArm(s)
		if err != nil {
			t.Fatal(err)
		}
		arms = append(arms, a)
	}
	return arms
}

// checkAB asserts the Must-show properties of an A/B run: every trial
// valid (sender on schedule, completed within 1% of the schedule, no
// errors) unless the machine starved loadgen (hostStarved: rightly
// invalid, and runAB made sure each arm and rate has a valid trial), each arm's negotiated group as expected for 100% of requests,
// no HRR, and a CPU figure per trial.
func checkAB(t *testing.T, res *Results, want map[string]string, server bool) {
	t.Helper()
	for _, tr := range res.Trials {
		t.Logf("trial %d %s: valid %v %v; completed %d of %d, send lag p99 %.2f ms max %.2f ms", tr.ID, tr.Arm, tr.Valid, tr.InvalidReasons,
			tr.Completed, tr.Requests, tr.SendLagMS.P99, tr.SendLagMS.Max)
		if !tr.Valid && !hostStarved(tr) {
			t.Errorf("trial %d %s invalid: %v", tr.ID, tr.Arm, tr.InvalidReasons)
		}
		if tr.Errors != 0 {
			t.Errorf("trial %d %s: %d errors %v", tr.ID, tr.Arm, tr.Errors, tr.ErrorReasons)
		}
		if len(tr.Groups) != 1 || tr.Groups[want[tr.Arm]] != tr.OK || tr.OK != tr.Requests || tr.OK == 0 {
			t.Errorf("trial %d %s: groups %v of %d requests, want all %s", tr.ID, tr.Arm, tr.Groups, tr.Requests, want[tr.Arm])
		}
		if tr.HRR != 0 {
			t.Errorf("trial %d %s: %d HelloRetryRequests", tr.ID, tr.Arm, tr.HRR)
		}
		if server && (tr.ServerCPUUsPerHandshake == nil || *tr.ServerCPUUsPerHandshake <= 0) {
			t.Errorf("trial %d %s: no server CPU figure", tr.ID, tr.Arm)
		}
	}
	for _, s := range res.Summary {
		srv := "n/a"
		if s.ServerCPUUsPerHandshake != nil {
			srv = fmt.Sprintf("%.1f ± %.1f (min %.1f max %.1f, n=%d)", s.ServerCPUUsPerHandshake.Mean,
				s.ServerCPUUsPerHandshake.StdDev, s.ServerCPUUsPerHandshake.Min, s.ServerCPUUsPerHandshake.Max, s.ServerCPUUsPerHandshake.N)
		}
		t.Logf("arm %-9s @%g/s: completed %.1f/s, groups %v, server CPU µs/hs %s, ceiling %.0f/s, client CPU µs/hs %.1f ± %.1f, ratio %.3f, p50 %.3f p95 %.3f p99 %.3f ms %s",
			s.Arm, s.Rate, s.RateCompleted.Mean, s.Groups, srv, s.CeilingPerSecond, s.ClientCPUUsPerHandshake.Mean,
			s.ClientCPUUsPerHandshake.StdDev, s.CostRatio, s.P50MS, s.P95MS, s.P99MS, s.Note)
	}
}

// runAB is c.Run, retried while the machine starved it (retryLagged).
// Invalid trials are left to checkAB to report.
func runAB(t *testing.T, c *Config, before func()) *Results {
	t.Helper()
	res, err := retryLagged(t, func() (*Results, error) {
		if before != nil {
			before()
		}
		return c.Run(context.Background())
	})
	if err != nil && !errors.Is(err, ErrNoValidTrial) {
		t.Fatal(err)
	}
	return res
}

// mainResult is one run of Main with -out.
type mainResult struct {
	code           int
	stdout, stderr string
	res            *Results
	out            string
}

// runMain runs Main with args and -out DIR, retried while the machine
// starved it (see starved); when the last attempt was starved too, the
// test is skipped. before runs before each attempt.
func runMain(t *testing.T, args []string, before func()) mainResult {
	t.Helper()
	var m mainResult
	for attempt := 1; attempt <= 3; attempt++ {
		if before != nil {
			before()
		}
		var stdout, stderr strings.Builder
		m = mainResult{out: t.TempDir(), res: new(Results)}
		m.code = Main(context.Background(), append(slices.Clip(args), "-out", m.out), &stdout, &stderr)
		m.stdout, m.stderr = stdout.String(), stderr.String()
		b, err := os.ReadFile(filepath.Join(m.out, FileResults))
		if err != nil {
			t.Fatalf("exit %d, no results: %v\n%s", m.code, err, m.stderr)
		}
		if err := json.Unmarshal(b, m.res); err != nil {
			t.Fatal(err)
		}
		if m.code == 0 || !starved(m.res) {
			return m
		}
		t.Logf("attempt %d: the machine starved loadgen (load average %s):\n%s", attempt, loadavg(), m.stderr)
		time.Sleep(time.Duration(attempt) * time.Second)
	}
	skipIfStarved(t, m.res)
	return m
}

func checkOutputs(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{FileResults, FileRequests, FileTrials, FileSummary, FileLatency, FileCPU, FileRate} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	for _, f := range []string{FileLatency, FileCPU, FileRate} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		d := xml.NewDecoder(bytes.NewReader(b))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Errorf("%s is not well-formed XML: %v", f, err)
				break
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, FileResults))
	var v struct {
		Trials []map[string]any `json:"trials"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Trials) == 0 {
		t.Fatalf("results.json: %v", err)
	}
	for _, k := range []string{"arm", "rate", "trial", "rate_target", "rate_achieved", "requests", "errors", "groups", "hrr", "latency_ms", "client_cpu_us_per_handshake"} {
		if _, ok := v.Trials[0][k]; !ok {
			t.Errorf("results.json trial lacks %q", k)
		}
	}
}

func TestABGoServer(t *testing.T) {
	addr, pid, certFile := startHelperServer(t)
	out := t.TempDir()
	c := &Config{
		Target: addr, SNI: "localhost", RootCAs: certPool(t, certFile),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519", "p256=secp256r1"),
		Rates: []float64{abRate}, Duration: abDuration, Warmup: abWarmup, Trials: abTrials,
		ServerPIDs: []int{pid}, OutDir: out, KeepRequests: true,
	}
	res := runAB(t, c, nil)
	checkAB(t, res, map[string]string{"classical": "x25519", "hybrid": "X25519MLKEM768", "p256": "secp256r1"}, true)
	checkOutputs(t, out)
	if d := os.Getenv("LOADGEN_KEEP_OUT"); d != "" {
		_ = os.CopyFS(d, os.DirFS(out))
	}
	if s, _ := os.ReadFile(filepath.Join(out, FileSummary)); !strings.Contains(string(s), "| hybrid |") {
		t.Errorf("summary.md: %s", s)
	}
	for _, r := range res.Requests {
		if r.OK() && r.PID != pid {
			t.Fatalf("X-Pid %d, want %d", r.PID, pid)
		}
	}
}

// TestCoordinatedOmission stalls the server for one second in the middle
// of the window. Open loop: every request due in that second waits, so p99
// is about a second. With one request in flight at most (a closed-loop
// client), only one response is slow, so latency measured from the actual
// send (service_ms) hides the stall in p99, and latency from the intended
// send time must not.
func TestCoordinatedOmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inflight int
	}{
		{"open", 0},
		{"closed-loop sender", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stallAt atomic.Int64
			srv := stallServer(t, &stallAt, time.Second)
			c := &Config{
				Target: srv.Listener.Addr().String(), Insecure: true, Arms: mustArms(t, "c=x25519"),
				Rates: []float64{200}, Duration: 2 * time.Second, Warmup: 200 * time.Millisecond, Trials: 1,
				MaxInFlight: tc.inflight,
			}
			go func() {
				time.Sleep(900 * time.Millisecond)
				stallAt.Store(time.Now().UnixNano())
			}()
			res, err := c.Run(context.Background())
			if err != nil && !errors.Is(err, ErrNoValidTrial) { // a closed-loop sender lags, rightly
				t.Fatal(err)
			}
			tr := res.Trials[0]
			t.Logf("requests %d errors %d; from intended: p50 %.1f p90 %.1f p99 %.1f max %.1f ms; from actual send: p99 %.1f max %.1f ms",
				tr.Requests, tr.Errors, tr.LatencyMS.P50, tr.LatencyMS.P90, tr.LatencyMS.P99, tr.LatencyMS.Max, tr.ServiceMS.P99, tr.ServiceMS.Max)
			if tr.Errors != 0 {
				t.Fatalf("%d errors", tr.Errors)
			}
			if tr.LatencyMS.P99 < 900 {
				t.Errorf("p99 %.1f ms hides a one-second stall", tr.LatencyMS.P99)
			}
			if tc.inflight == 1 && tr.ServiceMS.P99 > 100 {
				t.Errorf("closed-loop service p99 %.1f ms; expected the stall to be hidden there", tr.ServiceMS.P99)
			}
		})
	}
}

func TestABNginx(t *testing.T) {
	n := startNginx(t, "x25519:secp256r1")
	out := t.TempDir()
	c := &Config{
		Target: n.addr(), SNI: "localhost", RootCAs: certPool(t, filepath.Join(n.dir, "cert.pem")),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519", "p256=secp256r1"),
		Rates: []float64{abRate}, Duration: abDuration, Warmup: abWarmup, Trials: abTrials,
		ServerPIDs: []int{n.master}, OutDir: out,
	}
	res := runAB(t, c, nil)
	// Debian's OpenSSL 3.0 has no ML-KEM: the hybrid arm falls back to its
	// x25519 share, without a HelloRetryRequest (and is flagged for it).
	checkAB(t, res, map[string]string{"classical": "x25519", "hybrid": "x25519", "p256": "secp256r1"}, true)
	checkOutputs(t, out)
	for _, tr := range res.Trials {
		if len(tr.ServerPIDs) == 0 || tr.ServerRSSMaxBytes <= 0 {
			t.Errorf("trial %d: X-Pid %v, RSS %d", tr.ID, tr.ServerPIDs, tr.ServerRSSMaxBytes)
		}
	}
	// A second opinion on the groups, where h2load (OpenSSL 3.0: no
	// hybrid) can offer the arm's: h2load's own "Server Temp Key" against
	// the same nginx, next to what loadgen's requests of the arm
	// negotiated.
	const h2load = "/usr/bin/h2load"
	if _, err := os.Stat(h2load); err != nil {
		t.Logf("h2load not installed, no second opinion on the groups: %v", err)
		return
	}
	for _, arm := range c.Arms {
		if arm.Name == "hybrid" {
			continue
		}
		_, ok, _, group, err := RunH2Load(context.Background(), h2load, c.Target, c.SNI, "/", arm.GroupNames(), 20, 20)
		if err != nil || ok != 20 {
			t.Errorf("h2load for %s: %d ok, %v", arm.Name, ok, err)
			continue
		}
		var lg map[string]int
		for _, s := range res.Summary {
			if s.Arm == arm.Name {
				lg = s.Groups
			}
		}
		if len(lg) != 1 || lg[group] == 0 {
			t.Errorf("arm %s: h2load negotiated %q, loadgen's requests %v", arm.Name, group, lg)
		}
		t.Logf("arm %s: h2load says %s, loadgen's requests negotiated %v", arm.Name, group, lg)
	}
}

func TestABCaddy(t *testing.T) {
	cd := startCaddy(t)
	c := &Config{
		Target: cd.addr, SNI: "localhost", RootCAs: certPool(t, cd.cert),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519", "p256=secp256r1"),
		Rates: []float64{abRate}, Duration: abDuration, Warmup: abWarmup, Trials: abTrials,
		ServerPIDs: []int{cd.pid}, OutDir: t.TempDir(),
	}
	res := runAB(t, c, nil)
	checkAB(t, res, map[string]string{"classical": "x25519", "hybrid": "X25519MLKEM768", "p256": "secp256r1"}, true)
}

// TestCaddySelfSigned is what a new user does first: point loadgen at a
// server with a self-signed certificate. Without -insecure or -ca every
// handshake fails, and loadgen must say why (the x509 text), name the flag
// that fixes it, and exit 1; with -insecure the same command succeeds.
func TestCaddySelfSigned(t *testing.T) {
	cd := startCaddy(t)
	args := []string{"-target", cd.addr, "-sni", "localhost", "-rate", "100", "-duration", "1", "-warmup", "0.2", "-trials", "1"}
	var stdout, stderr strings.Builder
	code := Main(context.Background(), args, &stdout, &stderr)
	t.Logf("exit %d\nstderr:\n%s", code, stderr.String())
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"handshake_unknown_authority", "x509: certificate signed by unknown authority", "-ca FILE", "-insecure"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if !strings.Contains(stdout.String(), "## Failures") {
		t.Errorf("summary has no Failures section:\n%s", stdout.String())
	}

	// With -insecure: both arms valid, their groups as configured, and
	// every figure as Caddy's access log and the test's own schedstat
	// reading of Caddy have it. No -server-pid: loadgen finds Caddy as the
	// owner of the listening socket.
	cpu := startSchedSampler(func() []int { return []int{cd.pid} })
	wire := startWireCapture(t, portOf(t, cd.addr))
	m := runMain(t, append(args, "-insecure"), func() { _ = os.Truncate(cd.accessLog, 0) })
	cpu.Stop()
	checkWire(t, m.res, wire.stop(t), wireReqsCSV(t, m.out, m.res), 200*time.Millisecond)
	res := m.res
	if m.code != 0 {
		t.Fatalf("with -insecure: exit %d\n%s\n%s", m.code, m.stdout, m.stderr)
	}
	t.Logf("\n%s", m.stdout)
	want := map[string]string{"classical": "x25519", "hybrid": "X25519MLKEM768"}
	logInvalid(t, res)
	invalid := 0
	for _, tr := range res.Trials {
		if tr.Errors != 0 || tr.OK == 0 || tr.Groups[want[tr.Arm]] != tr.OK || tr.GroupMismatch != "" {
			t.Errorf("trial %d %s: valid %v %v, ok %d errors %d groups %v, want all %s", tr.ID, tr.Arm, tr.Valid, tr.InvalidReasons,
				tr.OK, tr.Errors, tr.Groups, want[tr.Arm])
		}
		invalid += len(tr.InvalidReasons)
	}
	// The warnings name the invalid trials' reasons, and nothing else.
	if len(res.Failures) != 0 || len(res.Warnings) != invalid {
		t.Errorf("failures %v, warnings %q (%d reasons of invalid trials)", res.Failures, res.Warnings, invalid)
	}
	// Caddy does not log the group: counts from its log, groups from the
	// client side only here (TestFiguresNginx checks them against nginx's
	// $ssl_curve).
	checkFigures(t, res, readCaddyLog(t, cd.accessLog), cpu, []int{cd.pid}, nil)
	if s := res.Summary; len(s) != 2 || s[1].CostRatio <= 0 || s[1].ServerCPUUsPerHandshake == nil {
		t.Errorf("summary %+v", s)
	}
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := dialTCP(addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSwapNginx runs nginx's binary upgrade under load: USR2, WINCH, QUIT.
func TestSwapNginx(t *testing.T) {
	n := startNginx(t, "x25519:secp256r1")
	out := t.TempDir()
	c := &Config{
		Target: n.addr(), Insecure: true, Arms: mustArms(t, "classical=x25519"),
		Rates: []float64{200}, Duration: 3 * time.Second, Warmup: 200 * time.Millisecond, Trials: 1,
		ServerPIDs: []int{n.master}, OutDir: out, KeepRequests: true,
		Scenario: Scenario{Kind: ScenarioSwap},
	}
	res, err := c.Run(context.Background())
	for _, e := range res.Events {
		t.Logf("t=%.3fs %-18s pid %d ok=%v %s", e.Offset, e.Step, e.PID, e.OK, e.Detail)
	}
	if err != nil && !errors.Is(err, ErrNoValidTrial) { // the scenario is under test here, not the trial's validity
		t.Fatalf("%v\n%s", err, n.errorLog())
	}
	if res.ScenarioStatus != "ok" || len(res.Events) != 3 {
		t.Fatalf("scenario %q, %d events", res.ScenarioStatus, len(res.Events))
	}
	var failed int
	var pidSeq []int
	for _, r := range res.Requests {
		if !r.OK() {
			failed++
			continue
		}
		if len(pidSeq) == 0 || pidSeq[len(pidSeq)-1] != r.PID {
			pidSeq = append(pidSeq, r.PID)
		}
	}
	if failed != 0 {
		t.Errorf("%d failed requests during the swap", failed)
	}
	t.Logf("worker PID sequence in request order: %v", pidSeq)
	first, last := pidSeq[0], pidSeq[len(pidSeq)-1]
	if first == last {
		t.Errorf("no handover visible in X-Pid: %v", pidSeq)
	}
	sc := res.Scenarios[0]
	if sc.NewMaster == 0 || sc.NewMaster == n.master {
		t.Errorf("new master %d (old %d)", sc.NewMaster, n.master)
	}
	if tr := res.Trials[0]; tr.ServerCPUUsPerHandshake == nil {
		t.Error("no server CPU across the swap")
	}
	if b, _ := os.ReadFile(filepath.Join(out, FileLatency)); !strings.Contains(string(b), "USR2 old master") {
		t.Error("latency chart lacks the event markers")
	}
}

// TestSwapNginxFailed makes the new nginx fail its configuration (OpenSSL
// 3.0 rejects X25519MLKEM768): loadgen must report FAILED, never success,
// and must not send WINCH (which would stop the only working workers).
func TestSwapNginxFailed(t *testing.T) {
	n := startNginx(t, "x25519:secp256r1")
	bad := nginxConf(n.dir, n.port, "X25519MLKEM768:x25519")
	if err := os.WriteFile(n.conf, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Config{
		Target: n.addr(), Insecure: true, Arms: mustArms(t, "classical=x25519"),
		Rates: []float64{100}, Duration: 2 * time.Second, Warmup: 200 * time.Millisecond, Trials: 1,
		ServerPIDs: []int{n.master}, KeepRequests: true, OutDir: t.TempDir(),
		Scenario: Scenario{Kind: ScenarioSwap, At: []time.Duration{300 * time.Millisecond, 1800 * time.Millisecond, 2000 * time.Millisecond}, StepTimeout: time.Second},
	}
	res, err := c.Run(context.Background())
	if !errors.Is(err, ErrScenarioFailed) {
		t.Fatalf("err %v, want ErrScenarioFailed", err)
	}
	t.Logf("reported: %v", err)
	if res.ScenarioStatus != "FAILED" || len(res.Events) != 1 || res.Events[0].OK {
		t.Fatalf("status %q events %+v", res.ScenarioStatus, res.Events)
	}
	if !strings.Contains(n.errorLog(), "[emerg]") {
		t.Errorf("error log lacks [emerg]:\n%s", n.errorLog())
	}
	for _, tr := range res.Trials {
		if tr.Errors != 0 {
			t.Errorf("%d errors: the old nginx must keep serving", tr.Errors)
		}
	}
	if s := SummaryMarkdown(res); !strings.Contains(s, "FAILED") {
		t.Errorf("summary does not say FAILED:\n%s", s)
	}
}

// TestRollbackNginx runs the fast rollback: USR2, WINCH, HUP old, QUIT new.
func TestRollbackNginx(t *testing.T) {
	n := startNginx(t, "x25519:secp256r1")
	c := &Config{
		Target: n.addr(), Insecure: true, Arms: mustArms(t, "classical=x25519"),
		Rates: []float64{100}, Duration: 2500 * time.Millisecond, Warmup: 100 * time.Millisecond, Trials: 1,
		ServerPIDs: []int{n.master}, KeepRequests: true,
		Scenario: Scenario{Kind: ScenarioRollback},
	}
	res, err := c.Run(context.Background())
	for _, e := range res.Events {
		t.Logf("t=%.3fs %-18s pid %d ok=%v %s", e.Offset, e.Step, e.PID, e.OK, e.Detail)
	}
	if err != nil && !errors.Is(err, ErrNoValidTrial) {
		t.Fatal(err)
	}
	if res.Scenarios[0].NewMaster != n.master {
		t.Errorf("after rollback master %d, want the original %d", res.Scenarios[0].NewMaster, n.master)
	}
	if tr := res.Trials[0]; tr.Errors != 0 {
		t.Errorf("%d errors %v", tr.Errors, tr.ErrorReasons)
	}
}

// TestH2LoadCompare sets loadgen's client CPU per handshake next to
// h2load's on the same target and logs the ratio.
func TestH2LoadCompare(t *testing.T) {
	const h2load = "/usr/bin/h2load"
	if _, err := os.Stat(h2load); err != nil {
		t.Skipf("h2load not installed: %v", err)
	}
	addr, _, _ := startHelperServer(t)
	c := &Config{
		Target: addr, Insecure: true, Arms: mustArms(t, "classical=x25519"),
		Rates: []float64{200}, Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond, Trials: 1,
	}
	res := runAB(t, c, nil)
	logInvalid(t, res)
	cmp, err := CompareH2Load(context.Background(), c, res, h2load)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client CPU per handshake: loadgen %.1f µs, h2load %.1f µs (%d/%d ok): ratio %.2f; %s",
		cmp.LoadgenUsPerHS, cmp.H2LoadUsPerHandshake, cmp.Succeeded, cmp.Requests, cmp.Ratio, strings.Join(cmp.Command, " "))
	if cmp.Succeeded != cmp.Requests || cmp.Ratio <= 0 {
		t.Errorf("h2load %d/%d ok, ratio %v", cmp.Succeeded, cmp.Requests, cmp.Ratio)
	}
	// h2load's own reading of the group (OpenSSL's "Server Temp Key")
	// against the group loadgen's requests of the arm negotiated.
	if cmp.Group != "x25519" || len(cmp.LoadgenGroups) != 1 || cmp.LoadgenGroups["x25519"] == 0 {
		t.Errorf("h2load negotiated %q, loadgen %v", cmp.Group, cmp.LoadgenGroups)
	}
}

// TestMainEndToEnd runs the command as the lead wires it, with -out and
// -h2load, and checks the files and the exit code.
func TestMainEndToEnd(t *testing.T) {
	addr, pid, certFile := startHelperServer(t)
	args := []string{"-target", addr, "-sni", "localhost", "-ca", certFile,
		"-arm", "classical=x25519", "-arm", "hybrid=X25519MLKEM768,x25519",
		"-rates", "100", "-duration", "1", "-warmup", "0.1", "-trials", "1", "-arrival", "poisson",
		"-server-pid", fmt.Sprint(pid), "-fail-on-errors"}
	if _, err := os.Stat("/usr/bin/h2load"); err == nil {
		args = append(args, "-h2load", "/usr/bin/h2load")
	}
	m := runMain(t, args, nil)
	if m.code != 0 {
		t.Fatalf("exit %d: %s", m.code, m.stderr)
	}
	checkOutputs(t, m.out)
	if !strings.Contains(m.stdout, "| hybrid |") {
		t.Fatalf("stdout: %s", m.stdout)
	}
	t.Log("\n" + m.stdout + m.stderr)
}

// checkFigures checks the figures of res against readings loadgen did not
// make: the server's access log (lines per trial, window and warm-up apart,
// and the group when the server logs it), and the test's own schedstat
// reading of the server's processes (serverPIDs) for its CPU.
func checkFigures(t *testing.T, res *Results, log []accessLine, cpu *schedSampler, serverPIDs []int, client *schedSampler) {
	t.Helper()
	lt := byTrial(t, log)
	for _, tr := range res.Trials {
		l := lt[tr.ID]
		if l == nil {
			t.Errorf("trial %d: not in the access log", tr.ID)
			continue
		}
		if l.window != tr.OK {
			t.Errorf("trial %d %s: ok %d, the access log has %d window requests", tr.ID, tr.Arm, tr.OK, l.window)
		}
		if len(l.groups) > 0 {
			if fmt.Sprint(l.groups) != fmt.Sprint(tr.Groups) {
				t.Errorf("trial %d %s: groups %v, the access log says %v", tr.ID, tr.Arm, tr.Groups, l.groups)
			}
		}
		// completed: OK responses that ended in the window; the server
		// logs a request just before the client reads its end.
		inWindow := 0
		for _, line := range log {
			if strings.HasPrefix(line.Req, fmt.Sprintf("t%d ", tr.ID)) && !line.At.Before(tr.WindowStart) && line.At.Before(tr.WindowEnd) {
				inWindow++
			}
		}
		// (A lagging client reads the end late: only a valid trial's count
		// must agree.)
		if d := inWindow - tr.Completed; tr.Valid && (d < -2 || d > 2) {
			t.Errorf("trial %d %s: completed %d, the access log has %d requests logged in the window", tr.ID, tr.Arm, tr.Completed, inWindow)
		}
		if cpu != nil {
			if tr.ServerCPUUs == nil {
				t.Errorf("trial %d: no server CPU", tr.ID)
				continue
			}
			// Over the span loadgen's readings covered (the window,
			// unless they were late: sample_late).
			got := time.Duration(*tr.ServerCPUUs) * time.Microsecond
			want := cpu.between(tr.CPUSampledFrom, tr.CPUSampledTo)
			if diff := (got - want).Abs(); diff > want/20+2*time.Millisecond {
				t.Errorf("trial %d %s: server CPU %v, the test's schedstat reading %v", tr.ID, tr.Arm, got, want)
			}
			t.Logf("trial %d %s: server CPU %v (test's reading %v), %.1f µs/handshake; completed %d (log: %d in window), ok %d (log %d), groups %v (log %v)",
				tr.ID, tr.Arm, got, want, *tr.ServerCPUUsPerHandshake, tr.Completed, inWindow, tr.OK, l.window, tr.Groups, l.groups)
			if fmt.Sprint(tr.ServerCPUPIDs) != fmt.Sprint(serverPIDs) {
				t.Errorf("trial %d: measured PIDs %v, the server's are %v", tr.ID, tr.ServerCPUPIDs, serverPIDs)
			}
			// The server's peak resident memory in the trial, against the
			// test's VmRSS readings over the same span.
			if own := cpu.rssMax(tr.Start, tr.WindowEnd); math.Abs(float64(tr.ServerRSSMaxBytes)-own) > 0.1*own {
				t.Errorf("trial %d %s: server RSS max %d bytes, the test's VmRSS reading %.0f", tr.ID, tr.Arm, tr.ServerRSSMaxBytes, own)
			}
		}
		// Loadgen's own CPU (getrusage) against the test's schedstat
		// reading of its process (loadgen runs in the test's process; the
		// test's samplers are counted in both).
		if client != nil && tr.Completed > 0 {
			got := time.Duration(tr.ClientCPUUsPerHandshake * float64(tr.Completed) * 1e3)
			want := client.between(tr.CPUSampledFrom, tr.CPUSampledTo)
			if diff := (got - want).Abs(); diff > want/20+2*time.Millisecond {
				t.Errorf("trial %d %s: client CPU %v, the test's schedstat reading of its process %v", tr.ID, tr.Arm, got, want)
			}
			t.Logf("trial %d %s: client CPU %v (test's reading %v), %.1f µs/handshake", tr.ID, tr.Arm, got.Round(time.Microsecond),
				want.Round(time.Microsecond), tr.ClientCPUUsPerHandshake)
		}
	}
	if res.Server == nil || fmt.Sprint(res.Server.PIDs) != fmt.Sprint(serverPIDs) {
		t.Errorf("results list server PIDs %+v, the server's are %v", res.Server, serverPIDs)
	}
}

// TestFiguresNginx runs against one nginx (OpenSSL 3.0) while a second,
// unrelated nginx runs on the host. By default loadgen measures the
// processes that own the target's listening socket: the target's master
// and worker and nothing of the other nginx, with -server-name nginx too.
// Every figure is checked against nginx's access log ($ssl_curve, the
// request header) and the test's own schedstat reading; the hybrid arm,
// which OpenSSL 3.0 cannot serve, is flagged and gets no ratio.
func TestFiguresNginx(t *testing.T) {
	decoy := startNginx(t, "x25519")
	n := startNginx(t, "x25519:secp256r1")
	_, pids := n.ours()
	slices.Sort(pids)
	_, decoyPIDs := decoy.ours()
	cpu := startSchedSampler(func() []int { return pids })
	self := startSchedSampler(func() []int { return []int{os.Getpid()} })
	wire := startWireCapture(t, n.port)
	c := &Config{
		Target: n.addr(), SNI: "localhost", RootCAs: certPool(t, filepath.Join(n.dir, "cert.pem")),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519"),
		Rates: []float64{100}, Duration: abDuration, Warmup: abWarmup, Trials: abTrials, KeepRequests: true,
	}
	res := runAB(t, c, func() { _ = os.Truncate(filepath.Join(n.dir, "access.log"), 0) })
	cpu.Stop()
	self.Stop()
	checkWire(t, res, wire.stop(t), wireReqs(res), c.Warmup)
	logInvalid(t, res)
	checkFigures(t, res, readNginxLog(t, filepath.Join(n.dir, "access.log")), cpu, pids, self)
	if res.Server.SelectedBy != "listening socket" || len(res.Server.Listen) != 1 {
		t.Errorf("server %+v", res.Server)
	}
	for _, p := range decoyPIDs {
		if slices.Contains(res.Server.PIDs, p) {
			t.Errorf("measured the other nginx's %d", p)
		}
	}
	hy := res.Summary[1]
	if hy.Arm != "hybrid" || hy.GroupMismatch == "" || hy.CostRatio != 0 || !strings.Contains(strings.Join(res.Warnings, "\n"), "not X25519MLKEM768") {
		t.Errorf("hybrid on OpenSSL 3.0: %+v; warnings %q", hy, res.Warnings)
	}
	if cl := res.Summary[0]; cl.CostRatio != 1 || cl.GroupMismatch != "" {
		t.Errorf("classical: %+v", cl)
	}
	if st := res.Study; len(st) != 2 || st[1].VsBaseline != nil || !strings.Contains(st[1].Note, "not X25519MLKEM768") || st[0].VsBaseline == nil {
		t.Errorf("study: %+v", st)
	}
	t.Logf("warnings: %q", res.Warnings)

	// -server-name nginx narrows the socket's owners; it no longer sums
	// every nginx on the host.
	c2 := *c
	c2.ServerNames, c2.Arms, c2.Trials, c2.Duration = []string{"nginx"}, c.Arms[:1], 1, 300*time.Millisecond
	res2, _ := c2.Run(context.Background())
	if res2 == nil || fmt.Sprint(res2.Server.PIDs) != fmt.Sprint(pids) {
		t.Errorf("-server-name nginx measured %+v, want %v", res2.Server, pids)
	}
}

// TestOverloadInvalid asks for a rate this two-core machine cannot sustain
// (5000 full handshakes per second, client and server on the same cores).
// Every trial must be marked invalid with its reason in every output, no
// ratio or ceiling drawn, and the run must exit 1.
func TestOverloadInvalid(t *testing.T) {
	addr, _, certFile := startHelperServer(t)
	out := t.TempDir()
	args := []string{"-target", addr, "-sni", "localhost", "-ca", certFile, "-rate", "5000", "-duration", "1", "-warmup", "0.2",
		"-trials", "1", "-timeout", "2s", "-out", out}
	var stdout, stderr strings.Builder
	code := Main(context.Background(), args, &stdout, &stderr)
	t.Logf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "no valid trial") {
		t.Errorf("stderr does not say there is no valid trial")
	}
	var res Results
	b, _ := os.ReadFile(filepath.Join(out, FileResults))
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 2 {
		t.Fatalf("%d trials", len(res.Trials))
	}
	for _, tr := range res.Trials {
		if tr.Valid || len(tr.InvalidReasons) == 0 {
			t.Errorf("trial %d %s at 5000/s is valid: completed %.0f/s, send lag p99 %.1f ms, errors %d", tr.ID, tr.Arm,
				tr.RateCompleted, tr.SendLagMS.P99, tr.Errors)
		}
		t.Logf("trial %d %s: completed %.0f/s (sent OK %.0f/s) of 5000/s, send lag p99 %.0f ms, %d errors (%d timeouts): %q",
			tr.ID, tr.Arm, tr.RateCompleted, tr.RateAchieved, tr.SendLagMS.P99, tr.Errors, tr.Timeouts, tr.InvalidReasons)
	}
	for _, s := range res.Summary {
		if s.ValidTrials != 0 || s.CostRatio != 0 || s.CeilingPerSecond != 0 || s.ServerCPUUsPerHandshake != nil {
			t.Errorf("a figure drawn from invalid trials: %+v", s)
		}
	}
	md := stdout.String()
	if !strings.Contains(md, "**INVALID**") || !strings.Contains(md, "no valid trial") || strings.Contains(md, "| 1.000 |") {
		t.Errorf("summary does not show the trials invalid, or draws a ratio")
	}
	csv, _ := os.ReadFile(filepath.Join(out, FileTrials))
	if !strings.Contains(string(csv), ",false,") {
		t.Errorf("trials.csv does not mark the trials invalid:\n%s", csv)
	}
	for _, f := range []string{FileCPU, FileRate} {
		if svg, _ := os.ReadFile(filepath.Join(out, f)); !strings.Contains(string(svg), "invalid trial, not in the mean") {
			t.Errorf("%s does not mark the invalid trials", f)
		}
	}
	if svg, _ := os.ReadFile(filepath.Join(out, FileRate)); !strings.Contains(string(svg), "completed handshakes/s") || !strings.Contains(string(svg), "sent OK/s") {
		t.Errorf("rate.svg does not say what it plots")
	}
}

// soak reports whether the heavy cases run at full size (make soak).
func soak() bool { return os.Getenv("PQWATCH_SOAK") != "" }

// TestLadderCaddy runs the nginx live-swap study's method on Caddy: both
// arms over a rate ladder, several trials each, and checks the per-arm
// table (CPU per full handshake, ceiling, flat or not, spread) against the
// trials it is drawn from, and the trials against Caddy's access log and
// the test's own schedstat reading. Scaled down here (two rates, two 1 s
// trials: at least 100 requests a window, so that one late send is not the
// p99); full size (three rates up to 400/s, five 10 s trials) with
// PQWATCH_SOAK=1 (make soak).
func TestLadderCaddy(t *testing.T) {
	cd := startCaddy(t)
	c := &Config{
		Target: cd.addr, SNI: "localhost", RootCAs: certPool(t, cd.cert),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519"),
		Rates: []float64{100, 200}, Duration: time.Second, Warmup: 200 * time.Millisecond, Trials: 2, KeepRequests: true,
	}
	if soak() {
		c.Rates, c.Duration, c.Warmup, c.Trials = []float64{100, 200, 400}, 10*time.Second, 2*time.Second, 5
	}
	cpu := startSchedSampler(func() []int { return []int{cd.pid} })
	self := startSchedSampler(func() []int { return []int{os.Getpid()} })
	wire := startWireCapture(t, portOf(t, cd.addr))
	res := runAB(t, c, func() { _ = os.Truncate(cd.accessLog, 0) })
	cpu.Stop()
	self.Stop()
	checkWire(t, res, wire.stop(t), wireReqs(res), c.Warmup)
	checkAB(t, res, map[string]string{"classical": "x25519", "hybrid": "X25519MLKEM768"}, true)
	checkFigures(t, res, readCaddyLog(t, cd.accessLog), cpu, []int{cd.pid}, self)
	if len(res.Study) != 2 {
		t.Fatalf("study %+v", res.Study)
	}
	for _, r := range res.Study {
		// The table's columns, computed here from the valid trials (each
		// checked above against Caddy's log and the test's schedstat
		// reading): the mean over every rate, the ceiling on the cores,
		// the mean per rate, the pooled within-rate sd and the widest
		// within-rate range, and flat: the per-rate means within 5% of
		// the mean or within twice that sd.
		var xs []float64
		var ss, df, rng float64
		var means []float64
		for _, rate := range c.Rates {
			var at []float64
			for _, tr := range res.Trials {
				if tr.Arm == r.Arm && tr.Valid && tr.Rate == rate {
					at = append(at, *tr.ServerCPUUsPerHandshake)
				}
			}
			var m float64
			for _, x := range at {
				m += x / float64(len(at))
			}
			for _, x := range at {
				ss += (x - m) * (x - m)
			}
			df += float64(len(at) - 1)
			rng = max(rng, slices.Max(at)-slices.Min(at))
			means = append(means, m)
			xs = append(xs, at...)
		}
		var mean float64
		for _, x := range xs {
			mean += x / float64(len(xs))
		}
		sd := 0.0
		if df > 0 {
			sd = math.Sqrt(ss / df)
		}
		flat := slices.Max(means)-slices.Min(means) <= 0.05*mean || slices.Max(means)-slices.Min(means) <= 2*sd
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
		if !near(r.ServerCPUUsPerHandshake.Mean, mean) || r.ValidTrials != len(xs) || len(r.ByRate) != len(c.Rates) ||
			!near(r.CeilingPerSecond, float64(res.Cores)*1e6/mean) || !near(r.SpreadUs, sd) || !near(r.RangeUs, rng) ||
			r.Flat == nil || *r.Flat != flat {
			t.Errorf("study row %+v; from the trials: mean %.3f, ceiling %.1f, sd %.3f, range %.3f, per rate %v, flat %v",
				r, mean, float64(res.Cores)*1e6/mean, sd, rng, means, flat)
		}
		for i, br := range r.ByRate {
			if br.Rate != c.Rates[i] || !near(br.Mean, means[i]) {
				t.Errorf("%s by rate %+v, from the trials %.3f at %g/s", r.Arm, br, means[i], c.Rates[i])
			}
		}
		t.Logf("%s: %.1f ± %.1f µs per full handshake (n=%d), ceiling %.0f/s on %d cores, by rate %+v; %s; spread sd %.1f µs, range %.1f µs",
			r.Arm, r.ServerCPUUsPerHandshake.Mean, r.ServerCPUUsPerHandshake.StdDev, r.ValidTrials, r.CeilingPerSecond, res.Cores,
			r.ByRate, r.Flatness, r.SpreadUs, r.RangeUs)
	}
	if hy := res.Study[1]; hy.VsBaseline == nil {
		t.Errorf("no hybrid vs classical figure: %+v", hy)
	} else {
		t.Logf("hybrid vs classical: %+.1f%% server CPU per full handshake", 100**hy.VsBaseline)
	}
}

// TestIdleSessions holds idle TLS sessions open (handshake done, no
// request) while the load runs, against nginx (OpenSSL 3.0, its
// worker_rlimit_nofile raised) and Caddy, and checks them against the
// test's own readings: the socket descriptors the server holds during the
// window, and its resident memory (VmRSS of /proc/PID/status, summed over
// its processes) before the run and with the sessions open. 300 sessions here, 2,000 with PQWATCH_SOAK=1.
func TestIdleSessions(t *testing.T) {
	n := 300
	if soak() {
		n = 2000
	}
	for _, server := range []string{"nginx", "caddy"} {
		t.Run(server, func(t *testing.T) {
			// Each attempt gets a server of its own: resident memory is a
			// high-water mark, and a server that held an earlier attempt's
			// sessions reuses that memory for the next ones.
			var (
				pids     []int
				cpu      *schedSampler
				connMu   sync.Mutex
				connAt   []time.Time
				conns    []int
				baseline int64 // the test's own reading before the run's first idle session
				res      *Results
			)
			for attempt := 1; attempt <= 3; attempt++ {
				var addr string
				var roots *x509.CertPool
				switch server {
				case "nginx":
					ng := startNginx(t, "x25519:secp256r1")
					addr, roots = ng.addr(), certPool(t, filepath.Join(ng.dir, "cert.pem"))
					_, pids = ng.ours()
					slices.Sort(pids)
				case "caddy":
					cd := startCaddy(t)
					addr, roots, pids = cd.addr, certPool(t, cd.cert), []int{cd.pid}
				}
				these := pids
				cpu = startSchedSampler(func() []int { return these })
				connMu.Lock()
				connAt, conns = nil, nil
				connMu.Unlock()
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						c, now := socketFDs(these), time.Now()
						connMu.Lock()
						connAt, conns = append(connAt, now), append(conns, c)
						connMu.Unlock()
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
						}
					}
				}()
				c := &Config{
					Target: addr, SNI: "localhost", RootCAs: roots,
					Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519"),
					Rates: []float64{100}, Duration: time.Second, Warmup: 200 * time.Millisecond, Trials: 1,
					IdleSessions: n, Timeout: 5 * time.Second,
				}
				baseline = vmRSS(pids)
				var err error
				res, err = c.Run(context.Background())
				close(stop)
				<-done
				cpu.Stop()
				if err != nil && !errors.Is(err, ErrNoValidTrial) {
					t.Fatal(err)
				}
				if !starved(res) {
					break
				}
				t.Logf("attempt %d starved (load average %s): %v", attempt, loadavg(), res.Warnings)
				time.Sleep(time.Duration(attempt) * time.Second)
			}
			skipIfStarved(t, res)
			logInvalid(t, res)
			for _, tr := range res.Trials {
				if !tr.Valid && !hostStarved(tr) || tr.IdleSessions != n || tr.IdleSessionsOpened != n || tr.ServerRSSPerIdleSessionBytes == nil {
					t.Errorf("trial %d %s: valid %v %v, idle %d/%d/%d, per session %v", tr.ID, tr.Arm, tr.Valid, tr.InvalidReasons,
						tr.IdleSessionsWanted, tr.IdleSessionsOpened, tr.IdleSessions, tr.ServerRSSPerIdleSessionBytes)
					continue
				}
				// The test's count of the server's connections in the window.
				least := -1
				connMu.Lock()
				for i, at := range connAt {
					if !at.Before(tr.WindowStart) && at.Before(tr.WindowEnd) && (least < 0 || conns[i] < least) {
						least = conns[i]
					}
				}
				connMu.Unlock()
				if least < n {
					t.Errorf("trial %d %s: the server held %d sockets at least in the window, want >= %d idle", tr.ID, tr.Arm, least, n)
				}
				// The test's own reading of the server's memory growth:
				// VmRSS summed over the server's processes before the run
				// (baseline) and just before the trial's load began, its
				// sessions open (loadgen reads between the two, from
				// /proc/PID/stat), over the sessions held.
				with := cpu.rssAt(tr.Start)
				own := (with - float64(baseline)) / float64(n)
				got := *tr.ServerRSSPerIdleSessionBytes
				if d := math.Abs(float64(tr.ServerRSSWithIdleBytes) - with); d > 0.05*with {
					t.Errorf("trial %d %s: server RSS with the sessions %d bytes, the test's VmRSS reading %.0f", tr.ID, tr.Arm,
						tr.ServerRSSWithIdleBytes, with)
				}
				if math.Abs(got-own) > 0.10*math.Abs(own)+512 {
					t.Errorf("trial %d %s: %.0f bytes per idle session, the test's VmRSS reading %.0f (%d -> %.0f bytes)", tr.ID, tr.Arm,
						got, own, baseline, with)
				}
				t.Logf("%s trial %d %s: %d idle sessions held (the server held >= %d sockets in the window); RSS %d -> %d bytes: %.0f bytes per idle session (the test's VmRSS %d -> %.0f: %.0f); load %.0f/s completed, p99 %.1f ms",
					server, tr.ID, tr.Arm, tr.IdleSessions, least, tr.ServerRSSBaselineBytes, tr.ServerRSSWithIdleBytes, got,
					baseline, with, own, tr.RateCompleted, tr.LatencyMS.P99)
			}
			for _, s := range res.Summary {
				if s.ServerRSSPerIdleSessionBytes == nil || s.ServerRSSWithIdleBytes == nil || s.IdleSessions != n {
					t.Errorf("summary %s: %+v", s.Arm, s)
				}
			}
		})
	}
}

// TestResumption runs an arm that resumes half of its handshakes (TLS 1.3
// tickets, PSK with ECDHE) next to one that resumes none, against Caddy and
// against nginx with session tickets on. The resumed counts must be what
// the server's access log says (Caddy's tls.resumed, nginx's
// $ssl_session_reused), per trial.
func TestResumption(t *testing.T) {
	for _, server := range []string{"nginx", "caddy"} {
		t.Run(server, func(t *testing.T) {
			var addr, logFile string
			var pids []int
			var roots *x509.CertPool
			var readLog func(testing.TB, string) []accessLine
			switch server {
			case "nginx":
				ng := startNginxConf(t, func(dir string, port int) string { return nginxConfTickets(dir, port, "x25519") })
				addr, roots, logFile, readLog = ng.addr(), certPool(t, filepath.Join(ng.dir, "cert.pem")), filepath.Join(ng.dir, "access.log"), readNginxLog
				_, pids = ng.ours()
				slices.Sort(pids)
			case "caddy":
				cd := startCaddy(t)
				addr, roots, pids, logFile, readLog = cd.addr, certPool(t, cd.cert), []int{cd.pid}, cd.accessLog, readCaddyLog
			}
			cpu := startSchedSampler(func() []int { return pids })
			c := &Config{
				Target: addr, SNI: "localhost", RootCAs: roots,
				Arms:  mustArms(t, "full=x25519", "resumed=x25519;resume=0.5"),
				Rates: []float64{100}, Duration: time.Second, Warmup: 200 * time.Millisecond, Trials: 1, KeepRequests: true,
			}
			res := runAB(t, c, func() { _ = os.Truncate(logFile, 0) })
			cpu.Stop()
			checkAB(t, res, map[string]string{"full": "x25519", "resumed": "x25519"}, true)
			log := readLog(t, logFile)
			checkFigures(t, res, log, cpu, pids, nil)
			// What each client reported (requests.csv's resumed, the
			// client's DidResume) sums to the trial's count.
			perReq := map[int]int{}
			for _, r := range res.Requests {
				if r.OK() && !r.Warmup && r.Resumed {
					perReq[r.TrialID]++
				}
			}
			lt := byTrial(t, log)
			var fullCPU, resumedCPU float64
			for _, tr := range res.Trials {
				l := lt[tr.ID]
				if l == nil {
					continue
				}
				if tr.Resumed != l.resumed || tr.Resumed != perReq[tr.ID] {
					t.Errorf("trial %d %s: %d resumed, the server's log says %d, the clients %d", tr.ID, tr.Arm, tr.Resumed, l.resumed, perReq[tr.ID])
				}
				switch tr.Arm {
				case "full":
					fullCPU = *tr.ServerCPUUsPerHandshake
					if tr.Resumed != 0 || tr.ResumeAttempts != 0 {
						t.Errorf("full arm resumed %d of %d", tr.Resumed, tr.ResumeAttempts)
					}
				case "resumed":
					resumedCPU = *tr.ServerCPUUsPerHandshake
					if tr.ResumeAttempts < tr.OK/2-1 || tr.ResumeAttempts > tr.OK/2+1 || tr.Resumed != tr.ResumeAttempts {
						t.Errorf("resumed arm: %d attempts, %d resumed, of %d", tr.ResumeAttempts, tr.Resumed, tr.OK)
					}
				}
				t.Logf("%s trial %d %s: %d of %d resumed (%d attempts; the server's log: %d), %.1f µs server CPU per handshake",
					server, tr.ID, tr.Arm, tr.Resumed, tr.OK, tr.ResumeAttempts, l.resumed, *tr.ServerCPUUsPerHandshake)
			}
			// PSK with ECDHE still does the key exchange; it saves the
			// certificate and its signature: a few percent, within the
			// trial-to-trial spread of a one-second trial, so logged only.
			t.Logf("%s: server CPU per handshake, half resumed %.1f µs vs all full %.1f µs (%+.1f%%)", server, resumedCPU, fullCPU,
				100*(resumedCPU/fullCPU-1))
			if st := res.Study; len(st) != 2 || !strings.Contains(st[1].Note, "offer a ticket") {
				t.Errorf("study %+v", st)
			}
		})
	}
}

// TestMaxRateSearch searches Caddy's maximum handshake rate per arm after
// a one-rate ladder, and checks the search's own bookkeeping: the rate
// reported is the highest that passed, a higher one failed with its
// reasons, and the comparison with the ladder's implied ceiling agrees
// within 25% or says why not. Scaled down (0.5 s steps, one bisection);
// full size (5 s steps, four bisections) with PQWATCH_SOAK=1.
func TestMaxRateSearch(t *testing.T) {
	cd := startCaddy(t)
	c := &Config{
		Target: cd.addr, SNI: "localhost", RootCAs: certPool(t, cd.cert),
		Arms:  mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519"),
		Rates: []float64{200}, Duration: 500 * time.Millisecond, Warmup: 200 * time.Millisecond, Trials: 1,
		Timeout: 2 * time.Second, MaxRateSearch: true, Search: Search{Start: 200, Steps: 1},
	}
	if soak() {
		c.Rates, c.Duration, c.Warmup, c.Trials, c.Search.Steps = []float64{100, 200, 400}, 5*time.Second, time.Second, 3, 4
	}
	res, err := c.Run(context.Background())
	if err != nil && !errors.Is(err, ErrNoValidTrial) {
		t.Fatal(err)
	}
	skipIfStarved(t, res)
	t.Logf("\n%s", maxRateMarkdown(res))
	if len(res.MaxRates) != 2 {
		t.Fatalf("%d searches", len(res.MaxRates))
	}
	for _, m := range res.MaxRates {
		best, lowestFail := 0.0, math.Inf(1)
		for _, st := range m.Steps {
			if st.Pass {
				best = max(best, st.Rate)
			} else {
				lowestFail = math.Min(lowestFail, st.Rate)
				if len(st.Why) == 0 {
					t.Errorf("%s: step at %g/s failed without a reason", m.Arm, st.Rate)
				}
			}
		}
		if m.Rate != best || math.IsInf(lowestFail, 1) || len(m.LimitedBy) == 0 || len(m.Steps) > c.Search.MaxTrials {
			t.Errorf("%s: max %v, best passing step %v, lowest failing %v, limited by %q, %d steps", m.Arm, m.Rate, best, lowestFail, m.LimitedBy, len(m.Steps))
		}
		// The search's rate agrees within 25% with the ceiling the ladder
		// implies (loadgen's CPU added: it shares the cores), or the note
		// says why not, and the reason holds: above it, the ceiling at the
		// max rate's own cost per handshake (computed here from its step)
		// agrees within 25%; below it, a failing step says what failed.
		switch dev := m.Rate/m.SharedCeiling - 1; {
		case math.Abs(dev) <= 0.25:
			if !m.Agrees {
				t.Errorf("%s: %.0f/s within 25%% of %.0f/s, not said to agree: %s", m.Arm, m.Rate, m.SharedCeiling, m.Note)
			}
		case !strings.Contains(m.Note, "disagree"):
			t.Errorf("%s: %.0f/s vs %.0f/s (%+.0f%%) and no reason: %s", m.Arm, m.Rate, m.SharedCeiling, 100*dev, m.Note)
		case dev > 0:
			var own float64
			for _, st := range m.Steps {
				if st.Pass && st.Rate == m.Rate && st.ServerCPUUsPerHandshake != nil {
					own = float64(res.Cores) * 1e6 / (*st.ServerCPUUsPerHandshake + st.ClientCPUUsPerHandshake)
				}
			}
			d := m.Rate/own - 1
			switch {
			case math.Abs(d) > 0.25 && len(m.LimitedBy) > 0 && strings.HasPrefix(m.LimitedBy[0], InvalidSendLag) &&
				strings.Contains(m.Note, "loadgen lagged first"):
				// The search stopped when loadgen fell behind its
				// schedule (this shared host), before the cores were
				// saturated, and the note says so.
				t.Logf("%s: %.0f/s at its own cost, %+.0f%% from the search, which stopped when loadgen lagged: %s", m.Arm, own, 100*d, m.Note)
			case math.Abs(d) > 0.25:
				t.Errorf("%s: %.0f/s, and %.0f/s at its own cost (%+.0f%%): the note's reason does not hold: %s", m.Arm, m.Rate, own, 100*d, m.Note)
			default:
				t.Logf("%s: at the max rate's own cost per handshake the ceiling is %.0f/s, %+.0f%% from the search", m.Arm, own, 100*d)
			}
		case len(m.LimitedBy) == 0:
			t.Errorf("%s: below the ceiling, with no failing step's reason: %s", m.Arm, m.Note)
		}
		t.Logf("%s: max %.0f/s; %s", m.Arm, m.Rate, m.Note)
	}
}
