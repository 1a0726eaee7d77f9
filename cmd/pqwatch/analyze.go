package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/pipeline"
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
	nginxLogsAs   listFlag
	caddyLogs     listFlag
	nginxConf     string
	nginxLogFmt   string
	nginxErrorLog string
	format        string
	out           string
	ports         string
	maxFlows      int
	forecast      string
	expect        listFlag
	symlinkDirs   string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.nginxLogs, "nginx-log", "nginx access log `FILE` to join (repeatable); its format: -nginx-log-format, else the conf's access_log line for the path, else the conf format its lines parse in, else combined")
	fs.Var(&c.nginxLogsAs, "nginx-log-as", "nginx access log written in a named log_format: `NAME=FILE` (NAME from -nginx-conf, or combined; FILE may contain '='; repeatable)")
	fs.Var(&c.caddyLogs, "caddy-log", "Caddy JSON access log `FILE` to join (repeatable)")
	fs.StringVar(&c.nginxConf, "nginx-conf", "", "nginx.conf `FILE` whose log_format definitions describe the access log")
	fs.StringVar(&c.nginxLogFmt, "nginx-log-format", "", "nginx log_format of the access logs: a `definition`, or the name of a log_format in -nginx-conf")
	fs.StringVar(&c.nginxErrorLog, "nginx-error-log", "", "nginx error log `FILE` ([emerg]/[alert]/[crit] lines)")
	fs.StringVar(&c.format, "format", "text", "output `format`: text, jsonl, ecs-jsonl (the records in Elastic Common Schema names) or json")
	fs.StringVar(&c.out, "o", "-", "output `FILE` (- for stdout)")
	fs.StringVar(&c.ports, "ports", "", "only TCP/UDP `ports` (comma-separated) are examined; TLS is found by content on any port by default")
	fs.IntVar(&c.maxFlows, "max-flows", 65536, "cap on tracked TCP flows, least recently active evicted (run: per capture worker)")
	fs.StringVar(&c.forecast, "forecast-groups", "", "server `groups` in preference order for the migration forecast, e.g. X25519MLKEM768,x25519,secp256r1 (prefix go=, openssl3.5=, openssl3.5-server= or openssl3.0= for the selection rule, or a name: go, caddy, openssl35, openssl30; / separates OpenSSL 3.5 tuples; default: OpenSSL 3.5's default policy)")
	registerExpect(fs, &c.expect)
	fs.StringVar(&c.symlinkDirs, "log-symlink-dirs", "", "comma-separated `dirs` a symbolic link in a log's (or -nginx-conf's) path may lead into (/ allows all; default: a link is followed only while it stays inside the file's own directory, and none on the way to it)")
}

// streams says -format writes records (jsonl, ecs-jsonl), not a summary.
func (c *commonFlags) streams() bool { return c.format == "jsonl" || c.format == "ecs-jsonl" }

// encoder is the record encoder of -format: the record, or its ECS view.
func (c *commonFlags) encoder() func([]byte, *record.Handshake) []byte {
	if c.format == "ecs-jsonl" {
		return exporter.AppendECS
	}
	return exporter.AppendJSON
}

// symlinkDirList is -log-symlink-dirs as a list (logparse.OpenLog).
func (c *commonFlags) symlinkDirList() []string {
	var out []string
	for d := range strings.SplitSeq(c.symlinkDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func (c *commonFlags) validate() error {
	switch c.format {
	case "text", "jsonl", "json", "ecs-jsonl":
	default:
		return fmt.Errorf("-format must be text, jsonl, ecs-jsonl or json, not %q", c.format)
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

// version is the binary's module version, "dev" for a build from a checkout.
func version() string {
	if v, _ := exporter.BuildInfo(); v != "unknown" && v != "(devel)" {
		return v
	}
	return "dev"
}

func cmdAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("analyze", "usage: pqwatch analyze [flags] FILE...\n\nRead pcap/pcapng captures (plain or gzip; - reads one from stdin) and report every TLS/QUIC handshake.", stderr)
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
	files := fs.Args()
	progress := newProgress(stderr)
	pc, sum, err := cf.offline(&pipeline.Files{Paths: files, Stdin: os.Stdin, Progress: progress.fn, Done: progress.done}, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitUsage
	}
	pc.Sniffer.Ports = ports
	bw := bufio.NewWriterSize(out, 64<<10)
	if cf.streams() {
		pc.Sinks = append(pc.Sinks, exporter.NewJSONLWith(bw, exporter.JSONLOptions{Encode: cf.encoder()}))
	}
	res, err := runOffline(ctx, pc, sum)
	if err == nil && res.Failed == len(files) {
		// Nothing could be read (named on stderr above): no report of zeros.
		closeOut()
		return exitFailure
	}
	if err == nil && !cf.streams() {
		err = sum.Render(bw, cf.format)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = closeOut()
	}
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch analyze:", err)
		return exitFailure
	}
	warnPolicyUncovered(stderr, "analyze", sum.Policy)
	if res.Failed > 0 {
		fmt.Fprintf(stderr, "pqwatch analyze: incomplete: %d of %d files could not be read (named above); the report covers the rest\n", res.Failed, len(files))
		return exitFailure
	}
	if why := sum.NothingFound(); why != "" {
		fmt.Fprintf(stderr, "pqwatch analyze: %s: %s\n", strings.Join(files, ", "), why)
		return exitFailure
	}
	return exitOK
}

// offline turns the common flags into an offline pipeline over src: the
// summary first among the sinks, the access logs joined by batch, one
// record per handshake (views merged by capture time: `tcpdump -i any`
// captures give one record per handshake too).
func (c *commonFlags) offline(src *pipeline.Files, stderr io.Writer) (pipeline.Config, *report.Summary, error) {
	policy, err := c.policy()
	if err != nil {
		return pipeline.Config{}, nil, err
	}
	es, err := expectations(c.expect)
	if err != nil {
		return pipeline.Config{}, nil, err
	}
	logs, err := c.logFiles()
	if err != nil {
		return pipeline.Config{}, nil, err
	}
	sum := report.New(policy)
	sum.Policy = policyCheck(es)
	return pipeline.Config{
		Source: src, Sniffer: sniffer.Config{MaxFlows: c.maxFlows}, Merge: &merge.Config{Offline: true},
		Logs: logs, Sinks: []record.Sink{sum}, Stderr: stderr,
	}, sum, nil
}

// runOffline runs an offline pipeline to its end and finishes sum with
// what it saw.
func runOffline(ctx context.Context, pc pipeline.Config, sum *report.Summary) (pipeline.Result, error) {
	p := pipeline.New(pc)
	err := p.Run(ctx)
	if cerr := p.Close(ctx); err == nil {
		err = cerr
	}
	res := p.Result()
	if sum != nil {
		res.Finish(sum)
	}
	return res, err
}

// policy is the -forecast-groups policy (default: forecast.DefaultPolicy).
func (c *commonFlags) policy() (forecast.Policy, error) {
	if c.forecast == "" {
		return forecast.DefaultPolicy, nil
	}
	p, err := forecast.ParsePolicy(c.forecast)
	if err != nil {
		return p, fmt.Errorf("-forecast-groups: %w", err)
	}
	return p, nil
}
