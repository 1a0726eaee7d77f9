package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	// Empty values are ignored, so a deployment can pass -nginx-log=$(VAR)
	// with VAR unset.
	if v != "" {
		*l = append(*l, v)
	}
	return nil
}

// commonFlags are the flags shared by analyze and run.
type commonFlags struct {
	nginxLogs     listFlag
	caddyLogs     listFlag
	nginxConf     string
	nginxLogFmt   string
	nginxErrorLog string
	format        string
	out           string
	ports         string
	maxFlows      int
	forecast      string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.nginxLogs, "nginx-log", "nginx access log `FILE` to join (repeatable)")
	fs.Var(&c.caddyLogs, "caddy-log", "Caddy JSON access log `FILE` to join (repeatable)")
	fs.StringVar(&c.nginxConf, "nginx-conf", "", "nginx.conf `FILE` whose log_format definitions describe the access log")
	fs.StringVar(&c.nginxLogFmt, "nginx-log-format", "", "nginx log_format `definition` of the access log (default: combined, or from -nginx-conf)")
	fs.StringVar(&c.nginxErrorLog, "nginx-error-log", "", "nginx error log `FILE` ([emerg]/[alert]/[crit] lines)")
	fs.StringVar(&c.format, "format", "text", "output `format`: text, jsonl or json")
	fs.StringVar(&c.out, "o", "-", "output `FILE` (- for stdout)")
	fs.StringVar(&c.ports, "ports", "", "only TCP/UDP `ports` (comma-separated) are examined; TLS is found by content on any port by default")
	fs.IntVar(&c.maxFlows, "max-flows", 65536, "cap on tracked TCP flows, least recently active evicted (run: per capture worker)")
	fs.StringVar(&c.forecast, "forecast-groups", "", "server `groups` in preference order for the migration forecast, e.g. X25519MLKEM768,x25519,secp256r1 (prefix go=, openssl3.5= or openssl3.0= for the selection rule; / separates OpenSSL 3.5 tuples; default: OpenSSL 3.5's default policy)")
}

func (c *commonFlags) validate() error {
	switch c.format {
	case "text", "jsonl", "json":
	default:
		return fmt.Errorf("-format must be text, jsonl or json, not %q", c.format)
	}
	return nil
}

func openOut(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func cmdAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("analyze", "usage: pqwatch analyze [flags] FILE...\n\nRead pcap/pcapng captures (plain or gzip) and report every TLS/QUIC handshake.", stderr)
	var cf commonFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if err := cf.validate(); err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "pqwatch analyze: no capture files given")
		fs.Usage()
		return exitUsage
	}
	ports, err := parsePorts(cf.ports)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitUsage
	}
	out, closeOut, err := openOut(cf.out, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitFailure
	}
	a, err := newAnalysis(&cf, out)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitUsage
	}
	sn := sniffer.New(sniffer.Config{MaxFlows: cf.maxFlows, Ports: ports, OnRecord: a.record})
	progress := newProgress(stderr)
	failed := false
	for _, path := range fs.Args() {
		if ctx.Err() != nil {
			break
		}
		st, err := sniffer.ReadFile(path, sn, progress.fn(path))
		progress.done()
		fi := report.FileInfo{Path: path, Format: st.Format, Packets: st.Packets}
		switch {
		case err != nil:
			fmt.Fprintln(stderr, "pqwatch analyze:", err)
			fi.Error = err.Error()
			failed = true
			a.sum.Errors["unreadable_file"]++
		case st.Err != nil:
			fmt.Fprintln(stderr, "pqwatch analyze: warning:", st.Err)
			fi.Error = st.Err.Error()
			a.sum.Errors[fileErrReason(st.Err)]++
		}
		a.sum.Files = append(a.sum.Files, fi)
	}
	sn.Flush()
	stats := sn.Stats()
	if err := a.finish(stats); err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitFailure
	}
	if err := closeOut(); err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitFailure
	}
	if failed && a.sum.Handshakes == 0 && stats.Packets == 0 {
		return exitFailure
	}
	return exitOK
}

func fileErrReason(err error) string {
	switch {
	case errors.Is(err, sniffer.ErrTruncated):
		return "truncated_file"
	case errors.Is(err, sniffer.ErrCorruptEntry):
		return "corrupt_file"
	}
	return "file_error"
}

// analysis collects records and renders the chosen format.
type analysis struct {
	format string
	out    *bufio.Writer
	jsonl  *exporter.JSONL
	sum    *report.Summary
	recs   []*record.Handshake
	join   *logJoin
	fc     *forecast.Report
}

func newAnalysis(cf *commonFlags, out io.Writer) (*analysis, error) {
	a := &analysis{format: cf.format, out: bufio.NewWriterSize(out, 64<<10), sum: report.New()}
	j, err := newLogJoin(cf)
	if err != nil {
		return nil, err
	}
	a.join = j
	policy := forecast.DefaultPolicy
	if cf.forecast != "" {
		if policy, err = forecast.ParsePolicy(cf.forecast); err != nil {
			return nil, fmt.Errorf("-forecast-groups: %w", err)
		}
	}
	a.fc = forecast.NewReport(policy)
	if a.format == "jsonl" {
		a.jsonl = exporter.NewJSONL(a.out)
	}
	return a, nil
}

func (a *analysis) record(r *record.Handshake) {
	if a.join != nil {
		// Records wait for the join, which needs every log line.
		a.recs = append(a.recs, r)
		return
	}
	a.emit(r)
}

func (a *analysis) emit(r *record.Handshake) {
	a.sum.Add(r)
	a.fc.Add(r)
	if a.jsonl != nil {
		_ = a.jsonl.Write(r)
	}
}

func (a *analysis) finish(st sniffer.Stats) error {
	if a.join != nil {
		a.join.run(a.recs, a.sum)
		for _, r := range a.recs {
			a.emit(r)
		}
	}
	a.sum.Packets = st.Packets
	for k, v := range st.Errors {
		a.sum.Errors[k] += v
	}
	for k, v := range st.QUIC {
		if isQUICDrop(k) && v > 0 {
			a.sum.Errors["quic_"+k] += v
		}
	}
	if st.FlowsEvicted > 0 {
		a.sum.Errors["flows_evicted"] += st.FlowsEvicted
	}
	a.sum.Forecast = a.fc
	a.sum.Finish()
	var err error
	if a.format == "jsonl" {
		err = a.jsonl.Flush()
	} else {
		err = a.sum.Write(a.out, a.format)
	}
	if err != nil {
		return err
	}
	return a.out.Flush()
}

// isQUICDrop tells which QUIC tracker counters are drops or errors (not
// totals such as "conns").
func isQUICDrop(k string) bool {
	switch k {
	case "decrypt_failed", "frame_error", "unexpected_frame", "malformed", "crypto_overflow", "bad_handshake", "evicted":
		return true
	}
	return false // totals and normal events: datagrams, conns, retry, skipped packets...
}
