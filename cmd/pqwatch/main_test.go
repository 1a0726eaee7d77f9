package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/report"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain lets a test run pqwatch as a process of its own (to kill it):
// with PQWATCH_TEST_MAIN set to a JSON list of arguments, the test binary
// is pqwatch.
func TestMain(m *testing.M) {
	if v := os.Getenv("PQWATCH_TEST_MAIN"); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			panic(err)
		}
		if n, err := strconv.ParseUint(os.Getenv("PQWATCH_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				panic(err)
			}
		}
		// PQWATCH_TEST_PLAN_REFERENCE=1: plan reads records with
		// encoding/json only (the benchmarks' reference).
		planReferenceDecoder = os.Getenv("PQWATCH_TEST_PLAN_REFERENCE") == "1"
		// Signals as main handles them: the first stops cleanly, a second
		// at once.
		ctx, stop := signalContext()
		code := runMain(ctx, args, os.Stdout, os.Stderr)
		stop()
		if path := os.Getenv("PQWATCH_TEST_PEAK_RSS"); path != "" {
			writePeakRSS(path)
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// writePeakRSS writes this process's peak RSS in KiB (VmHWM) to path. A
// parent cannot take it from wait4's ru_maxrss: os/exec starts the child
// on the parent's memory (CLONE_VM), and the exec records that memory's
// high-water mark as the child's, so a test process larger than the child
// would be measured instead.
func writePeakRSS(path string) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if err := os.WriteFile(path, []byte(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))), 0o644); err != nil {
				panic(err)
			}
			return
		}
	}
	panic("no VmHWM in /proc/self/status")
}

// pqwatchProcess starts the test binary as `pqwatch ARGS...`.
func pqwatchProcess(t *testing.T, stderr io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	return pqwatchProcessEnv(t, stderr, nil, args...)
}

// pqwatchProcessEnv is pqwatchProcess with extra environment (e.g.
// PQWATCH_TEST_NOFILE=N lowers its file descriptor limit).
func pqwatchProcessEnv(t *testing.T, stderr io.Writer, env []string, args ...string) *exec.Cmd {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env...), "PQWATCH_TEST_MAIN="+string(js))
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// summaryJSON reads the -format json object, the forecast section as a
// generic object.
type summaryJSON struct {
	*report.Summary
	Forecast map[string]any `json:"forecast"`
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":      {},
		"unknown":         {"frobnicate"},
		"no files":        {"analyze"},
		"bad format":      {"analyze", "-format", "xml", "x.pcap"},
		"bad flag":        {"analyze", "-nope", "x.pcap"},
		"bad ports":       {"analyze", "-ports", "99999", "x.pcap"},
		"loadgen no arm":  {"loadgen", "-bogus"},
		"log format name": {"analyze", "-nginx-log-format", "edge", "-nginx-log", "a.log", "x.pcap"},
		"log-as no name":  {"analyze", "-nginx-log-as", "nosuch=a.log", "x.pcap"},
		"log-as syntax":   {"analyze", "-nginx-log-as", "a.log", "x.pcap"},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _, _ := run(t, args...); code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
		})
	}
}

// TestRunRejectsBadCaptureFlags: -ports beyond the kernel filter's limit
// and a -block-timeout out of range are usage errors, before any capture.
func TestRunRejectsBadCaptureFlags(t *testing.T) {
	var many []string
	for p := 1; p <= 101; p++ {
		many = append(many, strconv.Itoa(p))
	}
	for name, args := range map[string][]string{
		"101 ports":     {"run", "-ports", strings.Join(many, ",")},
		"block timeout": {"run", "-block-timeout", "2m"},
		"tiny budget":   {"run", "-buffer-budget", "64KiB"},
		"budget/worker": {"run", "-buffer-budget", "1MiB", "-workers", "8"},
		"bad budget":    {"run", "-buffer-budget", "lots"},
	} {
		if code, _, stderr := run(t, args...); code != exitUsage || !strings.Contains(stderr, args[1]) {
			t.Errorf("%s: exit %d, stderr %q", name, code, stderr)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "65536": 65536, "65536B": 65536, "64KiB": 64 << 10, "64MiB": 64 << 20,
		"1GiB": 1 << 30, "1kB": 1000, "256MB": 256e6, "2GB": 2e9, " 8 MiB ": 8 << 20,
	} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "1.5GiB", "1TiB", "99999999999GiB", "MiB"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
	for _, n := range []byteSize{0, 1000, 64 << 10, 64 << 20, 3 << 30} {
		var back byteSize
		if err := back.Set(n.String()); err != nil || back != n {
			t.Errorf("byteSize %d prints %q, which reads back as %d, %v", n, n.String(), back, err)
		}
	}
}

// TestAnalyzeTestdata: the shipped capture (real crypto/tls handshakes,
// written by internal/gencap) gives the golden text report and a JSON
// summary that agrees with the JSONL records.
func TestAnalyzeTestdata(t *testing.T) {
	capture := filepath.Join("..", "..", "testdata", "handshakes.pcap")
	code, text, stderr := run(t, "analyze", capture)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden := filepath.Join("testdata", "handshakes.txt")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, []byte(text), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Errorf("text report differs from %s (run with -update):\n%s", golden, text)
	}
	_, js, _ := run(t, "analyze", "-format", "json", capture)
	var sum summaryJSON
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatal(err)
	}
	_, jl, _ := run(t, "analyze", "-format", "jsonl", capture)
	lines := strings.Split(strings.TrimSpace(jl), "\n")
	if len(lines) != sum.Handshakes || sum.Handshakes != 20 {
		t.Errorf("%d JSONL records, summary says %d handshakes, want 20", len(lines), sum.Handshakes)
	}
	pq := 0
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad JSONL line %q: %v", l, err)
		}
		if r["pq"] == true {
			pq++
		}
		for _, k := range []string{"ts", "transport", "client", "server", "outcome", "ja4", "client_hello_bytes"} {
			if _, ok := r[k]; !ok {
				t.Errorf("record lacks %q: %s", k, l)
			}
		}
	}
	if pq != sum.PQ || sum.PQ == 0 {
		t.Errorf("records say %d PQ, summary %d", pq, sum.PQ)
	}
	if sum.Forecast["handshakes"] == nil {
		t.Errorf("no forecast object in the JSON summary: %v", sum.Forecast)
	}
	if sum.HRR == 0 || sum.Failures["alert:handshake_failure"] == 0 {
		t.Errorf("the demo mix should show HRRs and a handshake_failure: %+v", sum)
	}
}

// TestAnalyzeBadInput: damaged captures are read up to the damage and
// counted; garbage files are a clean error; never a panic.
func TestAnalyzeBadInput(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.pcap")
	os.WriteFile(trunc, good[:len(good)*2/3], 0o644)
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, bytes.Repeat([]byte("not a capture "), 100), 0o644)
	corrupt := filepath.Join(dir, "corrupt.pcap")
	c := append([]byte(nil), good...)
	// Break the 5th record header's length fields.
	copy(c[24+16+len(good)/100:], []byte{0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f})
	os.WriteFile(corrupt, c, 0o644)

	code, js, stderr := run(t, "analyze", "-format", "json", trunc)
	if code != 0 {
		t.Fatalf("truncated: exit %d: %s", code, stderr)
	}
	var sum summaryJSON
	json.Unmarshal([]byte(js), &sum)
	if sum.Errors["truncated_file"] != 1 || sum.Handshakes == 0 {
		t.Errorf("truncated capture: errors %v, %d handshakes", sum.Errors, sum.Handshakes)
	}
	if code, _, stderr := run(t, "analyze", garbage); code != exitFailure || !strings.Contains(stderr, "not a pcap") {
		t.Errorf("garbage: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := run(t, "analyze", corrupt); code != 0 {
		t.Errorf("corrupt: exit %d", code)
	}
	if code, _, _ := run(t, "analyze", filepath.Join(dir, "missing.pcap")); code != exitFailure {
		t.Errorf("missing file: exit %d", code)
	}
	// A good file next to a bad one is still analyzed; the bad one is
	// named and the exit code says the run was incomplete.
	code, js, stderr = run(t, "analyze", "-format", "json", garbage, filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	json.Unmarshal([]byte(js), &sum)
	if code != exitFailure || sum.Handshakes != 20 || !strings.Contains(stderr, garbage) || !strings.Contains(stderr, "incomplete") {
		t.Errorf("good file after a bad one: exit %d, %d handshakes, stderr %q", code, sum.Handshakes, stderr)
	}
	// One file that is not a capture: an error and no report.
	if code, out, stderr := run(t, "analyze", "-format", "json", garbage); code != exitFailure || out != "" || !strings.Contains(stderr, garbage) {
		t.Errorf("garbage alone: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestAnalyzeStdin: `tcpdump -w - | pqwatch analyze -` reads the capture
// from stdin, plain or gzip.
func TestAnalyzeStdin(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.Write(good); w.Close() }()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	code, js, stderr := run(t, "analyze", "-format", "json", "-")
	var sum summaryJSON
	if err := json.Unmarshal([]byte(js), &sum); err != nil || code != 0 || sum.Handshakes != 20 {
		t.Errorf("stdin: exit %d, %d handshakes, %v: %s", code, sum.Handshakes, err, stderr)
	}
}

// TestAnalyzeNothingFound: -ports that miss the capture's TLS print why,
// and the run exits non-zero.
func TestAnalyzeNothingFound(t *testing.T) {
	code, out, stderr := run(t, "analyze", "-ports", "8443", filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if code != exitFailure || !strings.Contains(stderr, "252 packets were outside -ports") || !strings.Contains(out, "packets skipped") {
		t.Errorf("exit %d, stderr %q, report:\n%s", code, stderr, out)
	}
}

// TestAnalyzeSpanAndPortsTshark: the capture's time span and the packets
// -ports skipped, against tshark's reading of the same file.
func TestAnalyzeSpanAndPortsTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("needs tshark (installed by .ci/run)")
	}
	capture := filepath.Join("..", "..", "testdata", "handshakes.pcap")
	out, err := exec.Command(tshark, "-r", capture, "-T", "fields", "-e", "frame.time_epoch").Output()
	if err != nil {
		t.Fatal(err)
	}
	times := strings.Fields(string(out))
	outside, err := exec.Command(tshark, "-r", capture, "-Y", "not tcp.port==40000 and not udp.port==40000").Output()
	if err != nil {
		t.Fatal(err)
	}
	nOutside := strings.Count(string(outside), "\n")
	code, js, stderr := run(t, "analyze", "-format", "json", "-ports", "40000", capture)
	var sum summaryJSON
	if err := json.Unmarshal([]byte(js), &sum); err != nil || code != 0 || sum.Span == nil {
		t.Fatalf("exit %d, %v: %s", code, err, stderr)
	}
	epoch := func(ts time.Time) string { return fmt.Sprintf("%d.%09d", ts.Unix(), ts.Nanosecond()) }
	if first, last := epoch(sum.Span.First), epoch(sum.Span.Last); first != times[0] || last != times[len(times)-1] {
		t.Errorf("span %s..%s, tshark %s..%s", first, last, times[0], times[len(times)-1])
	}
	if int(sum.PacketsOutsidePorts) != nOutside || nOutside == 0 {
		t.Errorf("packets outside -ports %d, tshark %d", sum.PacketsOutsidePorts, nOutside)
	}
}
