package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/memlimit"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// defaultPodLogs is kubelet's pod log directory, -pod-logs's default.
const defaultPodLogs = "/var/log/pods"

// runFlags are `pqwatch run`'s flags beyond the common ones.
type runFlags struct {
	commonFlags
	kafka       kafkaFlags
	node        string
	ifaces      string
	metricsAddr string
	workers     int
	blockTO     time.Duration
	stateDir    string
	procRoot    string
	podLogs     string
	noProcs     bool
	logLevel    string
	pprofAddr   string
	webConfig   string
	maxConns    int
	captureAll  bool
	lineBuf     bool
	budget      byteSize
	noAccept    bool
	allAccept   bool
}

func (rf *runFlags) register(fs *flag.FlagSet) {
	rf.commonFlags.register(fs)
	fs.StringVar(&rf.ifaces, "iface", "", "interfaces to capture: comma-separated `names` or any (default: every interface that is up, following link changes)")
	fs.StringVar(&rf.metricsAddr, "metrics-addr", ":9810", "`address` for /metrics and /healthz (empty: none)")
	rf.kafka.register(fs)
	fs.StringVar(&rf.node, "node", "", "`name` of this node in every record's node field (default: $NODE_NAME, the Kubernetes node name from the downward API, else the host name)")
	fs.IntVar(&rf.workers, "workers", 0, "capture workers, and as many Go processors unless GOMAXPROCS is set (0: 1, or GOMAXPROCS when it is set; at most the CPU limit's processors)")
	fs.DurationVar(&rf.blockTO, "block-timeout", capture.DefaultBlockTimeout, "longest a captured packet waits in a partly filled ring block before pqwatch reads it (1ms to 1m): shorter shows records sooner, longer wakes pqwatch less often; full blocks are read at once")
	fs.StringVar(&rf.stateDir, "state-dir", "", "`dir` for log tail offsets, to resume after a restart (empty: start at the end of each log)")
	fs.StringVar(&rf.procRoot, "proc-root", "/proc", "`path` of the host's /proc (hostPID in Kubernetes)")
	fs.StringVar(&rf.podLogs, "pod-logs", defaultPodLogs, "kubelet's pod log `dir`: names the pod of a server in one, and its containers' nginx and Caddy access logs are found, tailed and joined (no directory there: none; empty: off)")
	fs.BoolVar(&rf.noProcs, "no-process-tracking", false, "do not attribute handshakes to server processes")
	fs.BoolVar(&rf.noAccept, "no-accept-events", false, "attribute from /proc (sockets, listeners, the access log's $pid) without the kernel's accept events (eBPF), even where they are allowed")
	fs.BoolVar(&rf.allAccept, "all-accept-events", false, "have the kernel report every accept, the busiest server generation's too: worker_pid on every record, for about 1.4 µs of kernel time per accept (by default that generation's accepts are only counted outside swaps, and its records take worker_pid from the access log's $pid when it has several workers)")
	fs.StringVar(&rf.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&rf.pprofAddr, "pprof-addr", "", "serve Go profiling under /debug/pprof/ on this loopback `address` (e.g. 127.0.0.1:6060; a listener of its own; empty: off)")
	fs.StringVar(&rf.webConfig, "web.config.file", "", "`file` with TLS and basic-auth settings of the metrics endpoint (Prometheus exporter-toolkit format, as node_exporter)")
	fs.IntVar(&rf.maxConns, "metrics-max-conns", 64, "cap on open connections to the metrics endpoint; at the cap a new one closes the oldest idle one")
	fs.BoolVar(&rf.lineBuf, "line-buffered", false, "with -format jsonl, write every record through at once (default: at once when the output is a pipe or terminal, else within half a second)")
	fs.Var(&rf.budget, "buffer-budget", "memory `size` for unfinished handshakes (TCP reassembly and QUIC CRYPTO buffers) over all workers, e.g. 64MiB; when full, the oldest unfinished flow is evicted and counted (default: a quarter of the memory limit, GOMEMLIMIT or the cgroup's, at most 64MiB per worker)")
	fs.BoolVar(&rf.captureAll, "capture-all", false, "keep every frame (default: pure ACKs and TLS application-data segments are dropped in the kernel)")
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// agentConfig turns run flags into an agent.Config.
func (rf *runFlags) agentConfig(stdout io.Writer, logger *slog.Logger) (agent.Config, func() error, error) {
	cfg := agent.Config{
		MetricsAddr: rf.metricsAddr, Workers: rf.workers, BlockTimeout: rf.blockTO, StateDir: rf.stateDir,
		GCFloor: memlimit.DefaultGCFloor, RecycleRecords: true,
		ProcRoot: rf.procRoot, PodLogs: rf.podLogs, TrackProcesses: !rf.noProcs, Logger: logger,
		CaddyLogs: rf.caddyLogs, Sniffer: sniffer.Config{MaxFlows: rf.maxFlows}, BufferBudget: int64(rf.budget), NoAcceptEvents: rf.noAccept, AllAcceptEvents: rf.allAccept, PprofAddr: rf.pprofAddr, WebConfigFile: rf.webConfig, MaxHTTPConns: rf.maxConns, Version: version(), CaptureAll: rf.captureAll,
	}
	if rf.nginxErrorLog != "" {
		cfg.NginxErrorLogs = []string{rf.nginxErrorLog}
	}
	cfg.SymlinkDirs = rf.symlinkDirList()
	closeOut := func() error { return nil }
	if rf.ifaces != "" {
		for _, s := range strings.Split(rf.ifaces, ",") {
			if s = strings.TrimSpace(s); s != "" {
				cfg.Ifaces = append(cfg.Ifaces, s)
			}
		}
	}
	ports, err := parsePorts(rf.ports)
	if err != nil {
		return cfg, nil, err
	}
	if len(ports) > capture.MaxPorts {
		return cfg, nil, fmt.Errorf("-ports: %d ports, at most %d (the kernel filter's limit; TLS is found on any port without -ports)", len(ports), capture.MaxPorts)
	}
	if rf.blockTO != 0 && (rf.blockTO < time.Millisecond || rf.blockTO > time.Minute) {
		return cfg, nil, fmt.Errorf("-block-timeout %v: must be from 1ms to 1m", rf.blockTO)
	}
	workers := max(rf.workers, 1)
	if least := byteSize(max(1<<20, workers*agent.MinWorkerBudget)); rf.budget != 0 && rf.budget < least {
		return cfg, nil, fmt.Errorf("-buffer-budget %v: at least %v for %d capture workers (1MiB, and 256KiB a worker: a flood's eviction needs room)", &rf.budget, &least, workers)
	}
	cfg.Ports = ports
	if len(rf.nginxLogs)+len(rf.nginxLogsAs) > 0 {
		// A DaemonSet runs one configuration on every node: a node without
		// nginx has no nginx.conf, and its nginx logs never appear. The
		// agent runs on (analyze stops: its files are all there).
		if rf.nginxConf != "" {
			if _, err := os.Stat(rf.nginxConf); errors.Is(err, iofs.ErrNotExist) {
				logger.Warn("-nginx-conf does not exist: nginx logs are read in the formats their lines parse in (combined and the built-in ones), not the conf's", "path", rf.nginxConf)
				rf.nginxConf = ""
			}
		}
		if cfg.NginxLogs, err = nginxLogs(&rf.commonFlags, true); err != nil {
			return cfg, nil, err
		}
	}
	if rf.commonFlags.forecast != "" {
		p, err := rf.policy()
		if err != nil {
			return cfg, nil, err
		}
		cfg.Forecast = &p
	}
	es, err := expectations(rf.expect)
	if err != nil {
		return cfg, nil, err
	}
	addPolicyMetric(&cfg, es)
	if cfg.Kafka, err = rf.kafka.config(os.Getenv, logger); err != nil {
		return cfg, nil, err
	}
	cfg.Node = nodeName(rf.node, os.Getenv)
	if rf.streams() {
		out, c, err := openAppend(rf.out, stdout)
		if err != nil {
			return cfg, nil, err
		}
		cfg.JSONL, closeOut = out, c
		cfg.JSONLOptions.Name = rf.out
		cfg.JSONLOptions.EachLine = rf.lineBuf || isPipe(out)
		cfg.JSONLOptions.Encode = rf.encoder()
	}
	return cfg, closeOut, nil
}

// goProcs sets the Go scheduler's processors for the agent to its capture
// workers (workers; 0: one) and returns the workers, unless GOMAXPROCS is
// set in the environment (then workers 0 means GOMAXPROCS, as before).
// The runtime's default processors (the CPU limit, at least 2) cap both.
// One busy goroutine at a time is the agent's usual state: a worker that
// wakes for a ring block, then idles. With a second processor idle, each
// such wake has the scheduler wake a second thread to look for more work,
// which finds none and sleeps again: on the test VM 0.5–1.5 µs of the
// agent's 6–8 µs a handshake (make bench, GOMAXPROCS=1 against the
// default of 2). The log join, Kafka and metrics run between batches on
// the same processor.
func goProcs(workers int, envSet bool) int {
	limit := runtime.GOMAXPROCS(0) // the environment's, else the CPU limit's
	if envSet {
		if workers <= 0 {
			workers = limit
		}
		return workers
	}
	workers = max(workers, 1)
	runtime.GOMAXPROCS(min(workers, limit))
	return workers
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "usage: pqwatch run [flags]\n\nLive agent: capture TLS/QUIC handshakes, serve /metrics, stream records.", stderr)
	var rf runFlags
	rf.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pqwatch run: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if err := rf.validate(); err != nil {
		fmt.Fprintln(stderr, "pqwatch run:", err)
		return exitUsage
	}
	logger, err := newLogger(rf.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch run:", err)
		return exitUsage
	}
	rf.workers = goProcs(rf.workers, os.Getenv("GOMAXPROCS") != "")
	logger.Info("go processors", "gomaxprocs", runtime.GOMAXPROCS(0), "capture_workers", rf.workers)
	// Without GOMEMLIMIT, a soft limit below the cgroup's: the collector
	// works harder before the kernel's OOM killer would act.
	if limit, src := memlimit.SetSoftLimit(0.9); src != memlimit.None {
		logger.Info("memory limit", "bytes", limit, "from", string(src))
	}
	cfg, closeOut, err := rf.agentConfig(stdout, logger)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch run:", err)
		return exitUsage
	}
	// -format text or json: a summary of everything seen, written at
	// shutdown (jsonl streams records as they come).
	var sum *report.Summary
	if !rf.streams() {
		policy := forecast.DefaultPolicy
		if cfg.Forecast != nil {
			policy = *cfg.Forecast
		}
		sum = report.New(policy)
		es, _ := expectations(rf.expect) // parsed in agentConfig
		sum.Policy = policyCheck(es)
		cfg.Sinks = append(cfg.Sinks, sum)
	}
	if hard := hardStop(ctx); hard != nil {
		cfg.Abort = hard.Done()
	}
	a, err := agent.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch run:", err)
		return exitFailure
	}
	defer sayStopping(ctx, logger)()
	start := time.Now()
	err = a.Run(ctx)
	if sum != nil && err == nil {
		out, c, oerr := openOut(rf.out, stdout)
		if oerr != nil {
			err = oerr
		} else {
			a.Result().Finish(sum)
			err = sum.Render(out, rf.format)
			if cerr := c(); err == nil {
				err = cerr
			}
		}
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch run:", err)
		return exitFailure
	}
	logger.Info("stopped", "uptime", time.Since(start).Round(time.Second).String())
	_ = os.Stdout.Sync()
	return exitOK
}

// isPipe reports whether w is a pipe or a terminal: a reader waits on the
// other end, so records go through one by one. Another character device
// (/dev/null) is not: one write per record there is work for nothing.
func isPipe(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	if st.Mode()&os.ModeNamedPipe != 0 {
		return true
	}
	if st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	tty := false
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { tty = term.IsTerminal(int(fd)) })
	}
	return tty
}

// openAppend opens the agent's -o: a restarted agent (a DaemonSet's pod, a
// service after a crash) appends to what the last one wrote.
func openAppend(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}
