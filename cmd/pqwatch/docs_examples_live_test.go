package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

// example is one run, loadgen or demo command line of a doc.
type example struct {
	doc, cmd string
	args     []string
	span     bool // an inline code span of prose, not a line of a shell block
	text     string
}

// docExamples are the distinct run, loadgen and demo command lines of
// README.md and docs/*.md.
func docExamples(t *testing.T) []example {
	var out []example
	seen := map[string]bool{}
	for _, doc := range userDocs(t) {
		fences, rest := splitFences(readRepo(t, doc))
		add := func(code string, span bool) {
			cmd, args, _, ok := commandLine(code)
			if !ok || cmd == "analyze" {
				return
			}
			k := cmd + " " + strings.Join(args, " ")
			if seen[k] {
				return
			}
			seen[k] = true
			out = append(out, example{doc: doc, cmd: cmd, args: args, span: span, text: strings.TrimSpace(code)})
		}
		for _, f := range fences {
			if isShell(f.lang) {
				for _, l := range codeLines(f.body) {
					add(l, false)
				}
			}
		}
		for _, s := range spans(rest) {
			add(s.text, true)
		}
	}
	return out
}

// exampleEnv holds what the examples run against, started when first
// needed: a crypto/tls server on loopback, a real nginx (with its conf and
// logs), an in-process Kafka broker.
type exampleEnv struct {
	t      *testing.T
	goAddr string
	goPort int
	ngx    *testenv.Nginx
	ngAddr string
	ngPort int
	kafka  *kfake.Cluster
}

func (e *exampleEnv) goServer() (string, int) {
	if e.goAddr == "" {
		e.goAddr, _ = goTLSServer(e.t)
		_, p, _ := strings.Cut(e.goAddr, ":")
		e.goPort, _ = strconv.Atoi(p)
	}
	return e.goAddr, e.goPort
}

func (e *exampleEnv) nginx(t *testing.T) (string, int) {
	if e.ngx == nil {
		testenv.NeedBin(t, "nginx")
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		e.ngPort, e.ngAddr = port, fmt.Sprintf("127.0.0.1:%d", port)
		e.ngx = testenv.StartNginx(e.t, testenv.NginxOptions{Listen: e.ngAddr, ECDHCurve: "X25519:prime256v1"})
	}
	return e.ngAddr, e.ngPort
}

// brokers starts a fresh Kafka broker for one example.
func (e *exampleEnv) brokers(t *testing.T) string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, exporter.DefaultKafkaTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.kafka = c
	return strings.Join(c.ListenAddrs(), ",")
}

// kafkaCount reads the records the example's broker holds (up to want+1,
// for at most 10 s).
func kafkaCount(t *testing.T, e *exampleEnv, want int) int {
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.ListenAddrs(), Topic: exporter.DefaultKafkaTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for n <= want {
		if _, err := rd.ReadMessage(ctx); err != nil {
			break
		}
		n++
		if n == want {
			// One more would be a duplicate: wait a little for it.
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
	}
	cancel()
	return n
}

// flagValue is the value of -name in args ("" and false when absent).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "-"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// substitute rewrites an example's arguments for a test: every value that
// names the operator's machine (interface, ports, server, files, brokers)
// becomes the test's own, durations and rates shrink, and flags that bound
// the run (-iface lo, -ports, a loopback -metrics-addr) are added where the
// example leaves them to their defaults. It returns why the example cannot
// run in a test instead, if so.
func (e *exampleEnv) substitute(t *testing.T, ex example) (argv []string, useNginx bool, why string) {
	args := slices.Clone(ex.args)
	for i, a := range args {
		if strings.HasPrefix(a, "[") {
			if a == "[flags]" {
				return nil, false, "a synopsis (`[flags]`), not a command line"
			}
			args[i] = strings.Trim(a, "[]") // an optional part: run it
		}
		if strings.Contains(a, "$(") {
			return nil, false, "Kubernetes container args: $(VAR) come from the pod's environment (deploy/ renders and checks them)"
		}
	}
	if len(args) == 0 && ex.span && ex.cmd != "demo" {
		return nil, false, "names the command in prose"
	}
	if ex.span && len(args) > 0 && strings.HasPrefix(args[len(args)-1], "-") && args[len(args)-1] != "-h" {
		return nil, false, "names a flag in prose (no value given)"
	}
	if slices.Contains(args, "-h") {
		return append([]string{ex.cmd}, args...), false, ""
	}
	for _, f := range []string{"nginx-conf", "nginx-log", "nginx-error-log", "nginx-log-as", "nginx-log-format"} {
		if _, ok := flagValue(args, f); ok {
			useNginx = true
		}
	}
	if v, _ := flagValue(args, "server-name"); v == "nginx" {
		useNginx = true
	}
	var addr string
	var port int
	if useNginx {
		addr, port = e.nginx(t)
	} else {
		addr, port = e.goServer()
	}
	dir := t.TempDir()
	set := map[string]string{
		"iface": "lo", "ports": strconv.Itoa(port), "metrics-addr": "127.0.0.1:0", "target": addr,
		"state-dir": filepath.Join(dir, "state"), "kafka-spool-dir": filepath.Join(dir, "spool"),
		"out": filepath.Join(dir, "out"), "trials": "1",
	}
	switch ex.cmd {
	case "loadgen":
		set["duration"], set["warmup"] = "0.3", "0.1"
	case "demo":
		set["duration"] = "1s"
	}
	if e.ngx != nil && useNginx {
		set["nginx-conf"], set["nginx-log"], set["nginx-error-log"] = filepath.Join(e.ngx.Dir, "nginx.conf"), e.ngx.AccessLog, e.ngx.ErrorLog
	}
	if v, ok := flagValue(args, "o"); ok && v != "-" {
		set["o"] = filepath.Join(dir, filepath.Base(v))
	}
	if _, ok := flagValue(args, "kafka-brokers"); ok {
		set["kafka-brokers"] = e.brokers(t)
	}
	if v, ok := flagValue(args, "rates"); ok {
		var r []string
		for range strings.Split(v, ",") {
			r = append(r, strconv.Itoa(20*(len(r)+1))) // 20, 40, ...: handshakes per second
		}
		set["rates"] = strings.Join(r, ",")
	}
	for i := 0; i < len(args); i++ {
		name, inline, _ := strings.Cut(strings.TrimPrefix(args[i], "-"), "=")
		v, ok := set[name]
		if !ok || !strings.HasPrefix(args[i], "-") {
			continue
		}
		delete(set, name)
		if strings.Contains(args[i], "=") || inline != "" {
			args[i] = "-" + name + "=" + v
		} else if i+1 < len(args) {
			args[i+1] = v
			i++
		}
		if name == "iface" || name == "ports" || name == "metrics-addr" {
			continue
		}
	}
	// Bounds the example leaves to defaults.
	add := map[string][]string{
		"run":     {"iface", "ports", "metrics-addr"},
		"demo":    {"duration", "metrics-addr"},
		"loadgen": {"target", "duration", "warmup"},
	}[ex.cmd]
	for _, name := range add {
		if v, ok := set[name]; ok {
			args = append(args, "-"+name, v)
		}
	}
	if ex.cmd == "loadgen" && !slices.Contains(args, "-insecure") {
		args = append(args, "-insecure") // the test's server has a self-signed certificate
	}
	if ex.cmd == "loadgen" {
		if _, ok := flagValue(args, "rates"); !ok {
			args = append(args, "-rates", "20")
		}
		if _, ok := flagValue(args, "trials"); !ok {
			args = append(args, "-trials", "1")
		}
		// A shared test machine cannot keep a schedule: no trial is judged
		// invalid for lag or shortfall (loadgen then exits 1), the command
		// line is what is tested here, not the load.
		args = append(args, "-max-send-lag", "10s", "-max-shortfall", "1", "-max-error-rate", "1")
	}
	return append([]string{ex.cmd}, args...), useNginx, ""
}

// TestDocExamplesLive runs every run, loadgen and demo command line of
// README.md and docs/*.md (TestDocExamples runs the analyze ones) as a
// test can: as root on loopback against a server the test starts (a
// crypto/tls server, or a real nginx when the example names nginx's conf,
// logs or process), with its files, ports and Kafka broker substituted,
// loadgen's trials cut to one of 0.3 s at 20-60 handshakes a second (no
// trial invalid for the machine's lag), the
// demo to 1 s, and `run` stopped (as by SIGTERM) after 4 handshakes.
// What each must show: run exits 0 with every handshake in its JSONL
// (joined to the access log when it tails one) or its summary, and in
// Kafka when it feeds one; loadgen exits 0 with results.json in -out;
// the demo's report has a PQ share. Examples a test cannot run say why.
func TestDocExamplesLive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs live capture, load and the demo; skipped with -short")
	}
	testenv.NeedRoot(t)
	env := &exampleEnv{t: t}
	ran := 0
	for _, ex := range docExamples(t) {
		t.Run(ex.doc+": "+ex.text, func(t *testing.T) {
			argv, useNginx, why := env.substitute(t, ex)
			if why != "" {
				t.Skip(why)
			}
			ran++
			switch ex.cmd {
			case "run":
				exampleRun(t, env, argv, useNginx)
			case "loadgen":
				var stdout, stderr bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				code := runMain(ctx, argv, &stdout, &stderr)
				if code == exitFailure && starvedOnly(stderr.String()) {
					// loadgen did its job: it ran the example and said the
					// machine starved every trial of an arm, which makes
					// the run exit 1 by design (docs/loadgen.md).
					t.Logf("`pqwatch %s`: every trial of an arm was starved by this machine (exit 1, as designed):\n%s", strings.Join(argv, " "), stderr.String())
					code = exitOK
				}
				if code != exitOK {
					t.Fatalf("`pqwatch %s` exits %d:\n%s\n%s", strings.Join(argv, " "), code, stderr.String(), stdout.String())
				}
				if out, ok := flagValue(argv, "out"); ok {
					if _, err := os.Stat(filepath.Join(out, "results.json")); err != nil {
						t.Errorf("`pqwatch %s`: %v", strings.Join(argv, " "), err)
					}
				}
			case "demo":
				code, stdout, stderr := run(t, argv...)
				if code != exitOK || !strings.Contains(stdout, "PQ share") {
					t.Errorf("`pqwatch %s` exits %d:\n%s\n%s", strings.Join(argv, " "), code, stdout, stderr)
				}
			}
		})
	}
	if ran < 8 {
		t.Errorf("only %d run/loadgen/demo examples ran: the test no longer finds them", ran)
	}
}

// starvedOnly reports whether loadgen's stderr says it found no valid
// trial and every trial it judged invalid was so only because this machine
// could not keep the schedule or take its CPU readings on time (send_lag,
// sample_late), not because requests failed.
func starvedOnly(stderr string) bool {
	if !strings.Contains(stderr, "no valid trial") {
		return false
	}
	seen := false
	for l := range strings.SplitSeq(stderr, "\n") {
		_, why, ok := strings.Cut(l, ") invalid: ")
		if !ok {
			continue
		}
		seen = true
		for r := range strings.SplitSeq(why, "; ") {
			if !strings.HasPrefix(r, "sample_late:") && !strings.HasPrefix(r, "send_lag:") && !strings.HasPrefix(r, "loadgen's threads") {
				return false
			}
		}
	}
	return seen
}

// exampleRun runs a `pqwatch run` example until 4 handshakes are done,
// then stops it as SIGTERM does and checks what it wrote.
func exampleRun(t *testing.T, env *exampleEnv, argv []string, useNginx bool) {
	if slices.Contains(argv, "-h") {
		// docs/contract.md: run -h prints its flags on stderr and exits 2.
		code, _, stderr := run(t, argv...)
		if code != exitUsage || !strings.Contains(stderr, "-iface") {
			t.Fatalf("`pqwatch %s` exits %d:\n%s", strings.Join(argv, " "), code, stderr)
		}
		return
	}
	addr, _ := env.goServer()
	if useNginx {
		addr, _ = env.nginx(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runMain(ctx, argv, &stdout, &stderr) }()
	time.Sleep(700 * time.Millisecond) // capture and tails started
	const n = 4
	ok := 0
	for range n {
		if handshake(t, addr, []tls.CurveID{tls.X25519}) != "" {
			ok++
		}
	}
	time.Sleep(1500 * time.Millisecond) // log lines written and read, records delivered
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("`pqwatch %s` exits %d:\n%s", strings.Join(argv, " "), code, stderr.String())
	}
	if ok != n {
		t.Fatalf("%d of %d handshakes completed", ok, n)
	}
	format, _ := flagValue(argv, "format")
	// With the conf, pqwatch knows the log's format and joins every
	// handshake by port. Without it (README's agent line) the log is read
	// as combined: the test's nginx writes another format, so nothing
	// joins, and run says so on stderr when it stops.
	_, joins := flagValue(argv, "nginx-conf")
	if useNginx && !joins && !strings.Contains(stderr.String(), "access log matches badly") {
		t.Errorf("the access log was read in the wrong format, and stderr does not say so:\n%s", stderr.String())
	}
	out := stdout.String()
	if o, ok := flagValue(argv, "o"); ok && o != "-" {
		b, err := os.ReadFile(o)
		if err != nil {
			t.Fatal(err)
		}
		out = string(b)
	}
	switch format {
	case "jsonl":
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != n {
			t.Errorf("%d records for %d handshakes:\n%s", len(lines), n, out)
		}
		for _, l := range lines {
			if !strings.Contains(l, `"group":"x25519"`) || joins && !strings.Contains(l, `"log":{"source":"nginx"`) {
				t.Errorf("record: %s", l)
			}
		}
	case "json":
		if !strings.Contains(out, fmt.Sprintf(`"handshakes": %d,`, n)) {
			t.Errorf("summary:\n%s", out)
		}
	default:
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^handshakes +%d `, n)).MatchString(out) {
			t.Errorf("summary:\n%s", out)
		}
		if joins && !regexp.MustCompile(fmt.Sprintf(`(?m)^joined to logs +%d of %d`, n, n)).MatchString(out) {
			t.Errorf("summary does not say %d joined:\n%s", n, out)
		}
	}
	if _, ok := flagValue(argv, "kafka-brokers"); ok {
		if got := kafkaCount(t, env, n); got != n {
			t.Errorf("Kafka has %d records of %d", got, n)
		}
	}
}

func TestStarvedOnly(t *testing.T) {
	starved := "loadgen: warning: trial 0 (arm hybrid at 20/s, trial 1) invalid: sample_late: a CPU reading at the window's edge was taken 7.0 ms late (limit 5 ms): x\n" +
		"loadgen: warning: trial 2 (arm hybrid at 40/s, trial 1) invalid: send_lag: p99 send lag 12.0 ms over 10 ms (max 15.0 ms): y; loadgen's threads waited 40 ms for a CPU in the 0.3 s window\n" +
		"loadgen: no valid trial: arm hybrid (trial 0: sample_late: ...)\n"
	failed := starved + "loadgen: warning: trial 3 (arm classical at 40/s, trial 1) invalid: errors: 5 of 6 requests failed (83.33%, 0 timeouts; limit 0.1%): handshake_error 5\n"
	if !starvedOnly(starved) {
		t.Error("a run starved by the machine is not recognised")
	}
	if starvedOnly(failed) || starvedOnly("loadgen: no valid trial: arm hybrid") || starvedOnly("") {
		t.Error("a run whose requests failed, or with no judged trial, counts as starved")
	}
}
