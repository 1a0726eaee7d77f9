// Package agent is the live pqwatch daemon, the live source of the one
// record pipeline (package pipeline): AF_PACKET capture (package capture)
// fanned out to one Sniffer per worker; each record is counted in the
// metrics (a tap), attributed to the server generation that accepted it
// (proctrack.Attribution), joined with tailed access logs (package logjoin),
// and delivered to the sinks (package exporter): JSONL, Kafka and any the
// caller adds (the run summary, the demo's).
//
// Shutdown order: capture stops, open flows are flushed as records, the
// stages flush, the sinks drain with a deadline, the HTTP server last.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/memlimit"
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/pipeline"
	"github.com/pqwatch/pqwatch/proctrack"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// NginxLog is an nginx access log to tail and the format it is written in.
type NginxLog = logjoin.NginxLog

// Config is everything the agent needs. Zero values take defaults.
type Config struct {
	Ifaces  []string // names or "any"; nil = every interface that is up
	Ports   []uint16 // narrow the capture (kernel BPF); nil = all
	Workers int      // capture workers (fanout); 0 = GOMAXPROCS (the CPU limit)
	// BlockTimeout: how long a packet may wait in a partly filled ring
	// block (0 = capture.DefaultBlockTimeout).
	BlockTimeout time.Duration

	Sniffer sniffer.Config // bounds for each worker's sniffer (OnRecord is set by the agent)
	// BufferBudget, when above 0, is the memory budget in bytes for TCP
	// reassembly and QUIC CRYPTO buffers across all workers, shared equally
	// (at least MinWorkerBudget each: run refuses a smaller budget); it
	// overrides Sniffer.MaxBufferedBytes.
	// 0: each worker's default (sniffer.Config.MaxBufferedBytes).
	BufferBudget int64

	MetricsAddr string // "" = no HTTP server
	// Listener, when set, is used instead of MetricsAddr (tests, demo).
	Listener net.Listener

	NginxLogs      []NginxLog
	CaddyLogs      []string
	NginxErrorLogs []string
	StateDir       string // tail offsets; "" = start at the end of each log
	// SymlinkDirs: directories a symbolic link in a log's path may lead
	// into (logparse.TailOptions.SymlinkDirs, logparse.OpenLog's rule).
	SymlinkDirs []string

	JSONL io.Writer // nil = no JSONL stream
	// JSONLOptions: FlushAfter 0 takes DefaultJSONLFlush (a SIGKILL loses
	// at most that); EachLine writes every record through at once.
	JSONLOptions exporter.JSONLOptions
	Kafka        *exporter.KafkaConfig

	// Node names the node in every record (record.Handshake.Node); ""
	// takes the host name. Every record also gets an ID unique across
	// nodes and restarts (record.Handshake.ID).
	Node string

	// DrainTimeout bounds how long the sinks may take to deliver what is
	// queued when Run's context ends (default 30s); closing Abort cuts it
	// short (a second signal): Kafka then spools what it can at once.
	DrainTimeout time.Duration
	Abort        <-chan struct{}

	TrackProcesses bool   // attribute handshakes to server generations
	ProcRoot       string // /proc, or /host/proc in Kubernetes
	// PodLogs is kubelet's pod log directory (/var/log/pods), "" for
	// none: it names the pod of a server in one (see PodLogConfig).
	PodLogs string
	// NginxComms are the process names tracked as nginx masters and
	// workers (default {"nginx"}; an nginx fork may go by another name).
	NginxComms []string
	// NoAcceptEvents attributes without the kernel's accept events (eBPF):
	// process scans, socket lookups and the access log's $pid only.
	NoAcceptEvents bool
	// AllAcceptEvents has the kernel report every accept, the busiest
	// generation's too (proctrack.Config.AllAcceptEvents): worker_pid on
	// every record, for some 1.4 µs of kernel time per accept.
	AllAcceptEvents bool

	Forecast *forecast.Policy // nil = forecast.DefaultPolicy

	// Sinks receive every finished record (after attribution and join),
	// after JSONL and Kafka.
	Sinks []record.Sink
	// OnRecord, when set, is one more sink.
	OnRecord func(*record.Handshake)
	// RecycleRecords reuses a record's memory for a later TCP record once
	// every sink has had it, instead of leaving it to the collector: Sinks
	// and OnRecord must then not keep the *record.Handshake past the call
	// (copy it; what it points to is never reused), as record.Sink asks.
	// pqwatch run sets it.
	RecycleRecords bool

	// WebConfigFile: TLS and basic auth of the metrics endpoint
	// (exporter-toolkit's web configuration). MaxHTTPConns caps its
	// connections (0: exporter.DefaultMaxConns).
	WebConfigFile string
	MaxHTTPConns  int
	// PprofAddr, when set, serves net/http/pprof on this loopback address,
	// a listener of its own (it exposes internals).
	PprofAddr string

	Version string // pqwatch_build_info{version}

	// CaptureAll keeps every frame: without it pure ACKs and segments
	// starting with a TLS application-data record are dropped in the kernel.
	CaptureAll bool

	// GCFloor: while the live heap is small, GOGC is raised so that the
	// collector aims at about this many bytes (memlimit.GCFloor; pqwatch
	// run gives memlimit.DefaultGCFloor). 0 = GOGC as it is; GOGC set in
	// the environment always stands.
	GCFloor int64

	Logger   *slog.Logger
	Registry *prometheus.Registry // nil = a new one
}

// DefaultJSONLFlush bounds how long a record waits in the JSONL buffer: a
// record the agent finished more than a second ago is on disk when it is
// killed.
const DefaultJSONLFlush = 500 * time.Millisecond

// joinBudget is the log join's memory for waiting lines and handshakes:
// an eighth of the memory limit (the sniffers take a quarter), at most
// logjoin.DefaultMaxPendingBytes.
func joinBudget() int {
	if lim, _ := memlimit.Limit(); lim > 0 {
		return int(max(1<<20, min(lim/8, logjoin.DefaultMaxPendingBytes)))
	}
	return logjoin.DefaultMaxPendingBytes
}

// MinWorkerBudget is the least Config.BufferBudget gives one worker: room
// for a few hybrid ClientHellos in reassembly.
const MinWorkerBudget = 256 << 10

// Agent is a running pqwatch daemon.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *exporter.Metrics
	health  *exporter.Health // writers' degraded states: /healthz, /readyz, pqwatch_sink_degraded
	capt    *capture.Capture
	procs   *proctrack.Tracker
	attrib  *proctrack.Attribution
	joiner  *logjoin.Joiner
	podLogs *podLogs // nil: no -pod-logs directory
	pipe    *pipeline.Pipeline
	lines   logparse.LineCounters

	logMu    sync.Mutex
	logFiles []*logFile // the access logs tailed, for LogResult

	stateFailing atomic.Int32 // tailers whose last offset save failed

	memReturn memReturn // when returnMemory gives memory back

	// The housekeeping second (Run sets hk): run by its timer, or by a
	// capture worker at the end of a batch once hkEarly has passed since
	// the last run, which puts the timer off. While traffic flows the
	// batches come often enough that the timer never fires: one wakeup a
	// second less (and the runtime's sysmon thread, which wakes for every
	// timer, with it). hkBusy keeps runs apart.
	hk      func(now time.Time, batch bool)
	hkBusy  atomic.Bool
	hkLast  atomic.Int64 // UnixNano of the last run
	hkTimer *time.Timer
}

// hkEarly is how soon after the last housekeeping run a batch's end runs
// the next: runs are between hkEarly and a second apart.
const hkEarly = 600 * time.Millisecond

// New builds an agent; nothing runs until Run. On error it closes what it
// opened.
func New(cfg Config) (a *Agent, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, reg: cfg.Registry}
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	policy := forecast.DefaultPolicy
	if cfg.Forecast != nil {
		policy = *cfg.Forecast
	}
	a.health = &exporter.Health{}
	a.reg.MustRegister(a.health)
	a.metrics = exporter.NewMetrics(a.reg, exporter.WithParseErrorReasons(parseReasons()...), exporter.WithBuildInfo(cfg.Version, revision()), exporter.WithPorts(cfg.Ports))
	n := cfg.Workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0) // follows the cgroup's CPU limit, not the host's cores
	}
	// SkipNoise: pure ACKs and application-data segments are dropped in
	// the kernel; they carry nothing a handshake record needs.
	capt, err := capture.New(capture.Config{Ifaces: cfg.Ifaces, Ports: cfg.Ports, Workers: n, BlockTimeout: cfg.BlockTimeout, SkipNoise: !cfg.CaptureAll, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.capt = capt
	opened := a // a is nil in a failed return when the deferred call runs
	defer func() {
		if err != nil {
			opened.closeOpened()
		}
	}()
	// The one path (package pipeline): the rings' packets -> one sniffer
	// per worker -> ids -> one handshake once (its views on several
	// interfaces, before and after the node's NAT, are one record before
	// the metrics count it) -> the metrics -> attribution -> the log join
	// -> the $pid correction and the join's check -> JSONL, Kafka, the
	// caller's sinks.
	sc := cfg.Sniffer
	sc.Ports = nil // the kernel filter already narrowed
	if cfg.BufferBudget > 0 {
		sc.MaxBufferedBytes = int(max(cfg.BufferBudget/int64(n), MinWorkerBudget))
	}
	pc := pipeline.Config{
		Source: &pipeline.Rings{Capture: capt, BatchEnd: a.batchEnd}, Sniffer: sc,
		IDs: pipeline.NewIDs(cfg.Node), Merge: &merge.Config{HoldNow: multiView(cfg.Ifaces), Hold: mergeHold(cfg.Ifaces, n, cfg.BlockTimeout)},
		Taps:    []record.Sink{a.metrics, exporter.ForecastSink(a.metrics, policy)},
		Recycle: cfg.RecycleRecords, Logger: cfg.Logger,
	}
	var logPID *proctrack.LogPID // $pid attribution after the log join
	if cfg.TrackProcesses {
		pt, err := proctrack.New(proctrack.Config{ProcRoot: cfg.ProcRoot, Logger: cfg.Logger, ServerPorts: cfg.Ports, NginxComms: cfg.NginxComms, NoAcceptEvents: cfg.NoAcceptEvents, AllAcceptEvents: cfg.AllAcceptEvents, PodLogs: cfg.PodLogs})
		if err != nil {
			a.log.Warn("process tracking disabled", "err", err)
		} else {
			a.procs = pt
			logPID = proctrack.NewLogPID(pt)
			a.reg.MustRegister(pt.Collector(), logPID)
			pc.Attribution = func(next func(*record.Handshake)) pipeline.Stage {
				a.attrib = proctrack.NewAttribution(pt, next)
				return a.attrib
			}
		}
	}
	a.podLogs = newPodLogs(a, cfg.PodLogs) // access logs found under -pod-logs (podlogs.go)
	if len(cfg.NginxLogs)+len(cfg.CaddyLogs) > 0 || a.podLogs != nil {
		pc.Join = func(next func(*record.Handshake)) pipeline.Stage {
			a.joiner = logjoin.New(logjoin.Options{Emit: next, MaxPendingBytes: joinBudget()})
			return a.joiner
		}
		if lp := logPID; lp != nil {
			pc.AfterJoin = append(pc.AfterJoin, func(next func(*record.Handshake)) pipeline.Stage { return lp.Then(next) })
		}
		pc.AfterJoin = append(pc.AfterJoin, func(next func(*record.Handshake)) pipeline.Stage {
			return exporter.NewJoinCheck(a.metrics, a.log, next)
		})
	}
	if cfg.JSONL != nil {
		jo := cfg.JSONLOptions
		if jo.FlushAfter <= 0 {
			jo.FlushAfter = DefaultJSONLFlush
		}
		jo.Health, jo.Logger = a.health.Sink("jsonl"), a.log
		pc.Sinks = append(pc.Sinks, exporter.NewJSONLWith(cfg.JSONL, jo))
	}
	if cfg.Kafka != nil {
		kc := *cfg.Kafka
		if kc.Metrics == nil {
			kc.Metrics = a.metrics
		}
		if kc.Logger == nil {
			kc.Logger = cfg.Logger
		}
		k, err := exporter.NewKafka(kc)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.reg.MustRegister(k.Collector())
		if kc.SpoolDir != "" {
			a.health.Watch("kafka_spool", k.SpoolDegraded)
		}
		pc.Sinks = append(pc.Sinks, k)
	}
	pc.Sinks = append(pc.Sinks, cfg.Sinks...)
	if cfg.OnRecord != nil {
		pc.Sinks = append(pc.Sinks, record.SinkFunc(cfg.OnRecord))
	}
	a.pipe = pipeline.New(pc)
	a.metrics.HandshakeViewsFrom(func() exporter.ViewStats {
		st := a.pipe.Merge().Stats()
		return exporter.ViewStats{Merged: st.Merged, Late: st.Late, OverflowHeld: st.OverflowHeld, OverflowRemembered: st.OverflowRemembered}
	})
	a.reg.MustRegister(exporter.NewCaptureCollector(a.captureStats),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	a.metrics.ParseErrorsFrom(a.parseErrors)
	a.metrics.LogLinesFrom(a.tooLongLines)
	if a.joiner != nil {
		a.metrics.LogJoinsFrom(a.joinCounts)
		a.reg.MustRegister(a.joiner.Collector())
	}
	return a, nil
}

// Close releases what New opened, for an agent whose Run is never called
// (Run releases it itself).
func (a *Agent) Close() { a.closeOpened() }

// closeOpened closes the capture rings and the process tracker's files
// (New failed, or Run is done).
func (a *Agent) closeOpened() {
	if a.capt != nil {
		a.capt.Close()
	}
	if a.procs != nil {
		a.procs.Close()
	}
}

// Registry is the agent's metrics registry.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Processes is the process tracker, nil when tracking is off.
func (a *Agent) Processes() *proctrack.Tracker { return a.procs }

// revision is the VCS revision the binary was built from, "" if unknown.
func revision() string {
	if _, r := exporter.BuildInfo(); r != "unknown" {
		return r
	}
	return ""
}

func parseReasons() []string {
	r := append([]string(nil), sniffer.ErrorReasons()...)
	for _, q := range pipeline.QUICErrors {
		r = append(r, "quic_"+q)
	}
	return append(r, "panic")
}

// JoinStats reports the access-log join (zero when no logs are tailed).
func (a *Agent) JoinStats() logjoin.Stats {
	if a.joiner == nil {
		return logjoin.Stats{}
	}
	return a.joiner.Stats()
}

// Run captures until ctx ends, then drains. It returns the capture's error,
// if any, after the drain.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	srv, err := a.startHTTP()
	if err != nil {
		a.closeOpened()
		return err
	}
	if a.attrib != nil {
		go a.attrib.Run()
	}
	tailCtx, stopTails := context.WithCancel(context.Background())
	var tails sync.WaitGroup
	a.prepareStateDir()
	a.startTails(tailCtx, &tails)

	// Housekeeping, once a second: the process probe or scan, then flow
	// expiry (flows idle in quiet periods still time out) and counters. One
	// wakeup for all, and none while traffic flows (a capture batch's end
	// runs it, see hk): on a small VM waking an idle process costs more
	// CPU than the work itself.
	scan := func(first bool) {
		if a.procs == nil {
			return
		}
		var err error
		if first {
			err = a.procs.Scan()
		} else {
			err = a.procs.Tick() // a cheap probe, a scan when needed
		}
		if err != nil {
			a.log.Warn("process scan failed", "err", err)
		}
	}
	scan(true)
	// Loading the eBPF programs parsed the kernel's BTF: megabytes of
	// garbage that would otherwise wait for the first collection under
	// traffic, and stay resident until then.
	debug.FreeOSMemory()
	gcFloor := memlimit.NewGCFloor(a.cfg.GCFloor)
	if gcFloor != nil {
		gcFloor.Adjust()
		a.log.Info("collector held back on a small heap", "gc_floor_bytes", gcFloor.Floor(), "gogc", gcFloor.Percent(),
			"why", "fewer collections of a small live heap; GOGC in the environment turns this off")
	}
	a.hk = func(now time.Time, batch bool) {
		scan(false)
		// From a batch's end, a worker busy with its own batch is left
		// alone (its sniffer expires flows as its packets come): waiting
		// for it would put this worker to sleep and wake it again.
		with := func(w *pipeline.Worker, f func(*sniffer.Sniffer)) bool {
			if batch {
				return w.TryWith(f)
			}
			w.With(f)
			return true
		}
		for _, w := range a.pipe.Workers() {
			with(w, func(sn *sniffer.Sniffer) { sn.Expire(now) })
		}
		if a.joiner != nil {
			a.joiner.Tick(now)
		}
		a.returnMemory(with)
		gcFloor.Adjust()
	}
	a.hkLast.Store(time.Now().UnixNano())
	a.hkTimer = time.NewTimer(time.Second)
	defer a.hkTimer.Stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-bg.Done():
				return
			case now := <-a.hkTimer.C:
				a.housekeep(now, false)
			}
		}
	}()

	budget, from := 0, "default: a quarter of the memory limit per worker, at most 64 MiB each"
	if a.cfg.BufferBudget > 0 {
		from = "-buffer-budget"
	}
	for _, w := range a.pipe.Workers() {
		budget += w.Budget()
	}
	a.log.Info("capture starting", "interfaces", a.cfg.Ifaces, "workers", len(a.pipe.Workers()),
		"buffer_budget_bytes", budget, "buffer_budget_from", from)
	// Capture until ctx ends; the sniffers' open flows are then records.
	capErr := a.pipe.Run(ctx)

	// Drain: capture has stopped; logs, then stages and sinks.
	stopTails()
	tails.Wait()
	a.judgeShortLogs()
	// The stages flush in order (attribution, log join), then the sinks
	// flush and close (Kafka within its deadline, or at once on Abort).
	kctx, cancel := a.drainContext(cmp.Or(a.cfg.DrainTimeout, 30*time.Second))
	if err := a.pipe.Close(kctx); err != nil {
		a.log.Error("closing the record sinks", "err", err)
	}
	cancel()
	stopBG()
	wg.Wait()
	a.closeOpened()
	sctx, cancel := a.drainContext(5 * time.Second)
	srv.shutdown(sctx)
	cancel()
	if capErr != nil && !errors.Is(capErr, context.Canceled) {
		return fmt.Errorf("agent: capture: %w", capErr)
	}
	return nil
}

// drainContext ends after d, or when Abort is closed.
func (a *Agent) drainContext(d time.Duration) (context.Context, context.CancelFunc) {
	base, abort := context.WithCancelCause(context.Background())
	ctx, cancel := context.WithTimeoutCause(base, d, fmt.Errorf("agent: the %v drain deadline passed", d))
	if a.cfg.Abort != nil {
		go func() {
			select {
			case <-a.cfg.Abort:
				abort(errAborted)
			case <-ctx.Done():
			}
		}()
	}
	return ctx, func() { cancel(); abort(nil) }
}

// errAborted is the cause of a drain cut short by Config.Abort.
var errAborted = errors.New("agent: stopped at once")

// batchEnd follows worker i's batch, its lock released: the housekeeping
// second runs from here while traffic flows.
func (a *Agent) batchEnd(int) {
	if a.hk != nil {
		// A full process scan is left to the timer's goroutine: its
		// system calls, made while this worker goes on, would keep the
		// runtime's sysmon thread polling every 20 µs meanwhile.
		// Nor does it wait for a run under way (a scan holds the
		// tracker's lock for milliseconds).
		if now := time.Now(); !a.hkBusy.Load() && now.UnixNano()-a.hkLast.Load() >= int64(hkEarly) && (a.procs == nil || !a.procs.ScanDue()) {
			a.housekeep(now, true)
		}
	}
}

// housekeep runs the housekeeping second, unless a run is under way, and
// puts its timer off by a second.
func (a *Agent) housekeep(now time.Time, batch bool) {
	if !a.hkBusy.CompareAndSwap(false, true) {
		return
	}
	defer a.hkBusy.Store(false)
	a.hk(now, batch)
	a.hkLast.Store(now.UnixNano())
	a.hkTimer.Reset(time.Second)
}

// parseErrors reports, at scrape time, the workers' sniffer errors by
// reason (QUIC drops as quic_REASON) and the packet-path panics the capture
// recovered, as pqwatch_parse_errors_total: the counters stay where they
// are kept, nothing is copied.
func (a *Agent) parseErrors(add func(n uint64, labels ...string)) {
	for _, w := range a.pipe.Workers() {
		pipeline.SnifferErrors(w.Stats(), func(n uint64, reason string) {
			if reason != "flows_evicted" { // pqwatch_flows_evicted_total has them
				add(n, reason)
			}
		})
	}
	add(a.capt.Panics(), "panic")
}

// joinCounts reports the joiner's ambiguous handshakes as
// pqwatch_log_joins_total{result="ambiguous"}.
func (a *Agent) joinCounts(add func(n uint64, labels ...string)) {
	add(a.joiner.Stats().AmbiguousHandshakes, exporter.JoinAmbiguous)
}

// tooLongLines reports the tailers' over-long lines as
// pqwatch_log_lines_total{source="other",result="skipped"}.
func (a *Agent) tooLongLines(add func(n uint64, labels ...string)) {
	add(a.lines.TooLong.Load(), "other", exporter.LogLineSkipped)
}

func (a *Agent) captureStats() exporter.CaptureStats {
	cs := a.capt.Stats()
	out := exporter.CaptureStats{Packets: cs.Packets, Drops: cs.Drops, Interfaces: map[string]exporter.IfaceStats{}, Filter: a.capt.Filter()}
	for name, s := range cs.Interfaces {
		out.Interfaces[name] = exporter.IfaceStats{Packets: s.Packets, Drops: s.Drops}
	}
	for _, w := range a.pipe.Workers() {
		st := w.Stats()
		out.FlowsEvicted += st.FlowsEvicted // the cap at work; idle expiry is normal
		out.FlowsActive += st.FlowsActive
		out.QUICConnsActive += int(st.QUIC["conns"])
		out.BufferedBytes += st.BufferedBytes
		out.BufferBudget += w.Budget()
	}
	return out
}

// httpServers are the metrics endpoint and, when asked for, the profiling
// one.
type httpServers struct {
	metrics *exporter.Server
	pprof   *http.Server
}

func (h httpServers) shutdown(ctx context.Context) {
	if h.metrics != nil {
		_ = h.metrics.Shutdown(ctx)
	}
	if h.pprof != nil {
		_ = h.pprof.Shutdown(ctx)
	}
}

func (a *Agent) startHTTP() (httpServers, error) {
	var hs httpServers
	ln := a.cfg.Listener
	if ln == nil && a.cfg.MetricsAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", a.cfg.MetricsAddr); err != nil {
			return hs, fmt.Errorf("agent: metrics listener: %w", err)
		}
	}
	if ln != nil {
		srv, err := exporter.StartServer(exporter.ServerConfig{Listener: ln, Handler: exporter.Handler(a.reg, a.health),
			WebConfigFile: a.cfg.WebConfigFile, MaxConns: a.cfg.MaxHTTPConns, Logger: a.log})
		if err != nil {
			ln.Close()
			return hs, fmt.Errorf("agent: %w", err)
		}
		hs.metrics = srv
		a.log.Info("serving metrics", "addr", ln.Addr().String(), "web_config", a.cfg.WebConfigFile)
	}
	if a.cfg.PprofAddr != "" {
		pl, err := listenLoopback(a.cfg.PprofAddr)
		if err != nil {
			hs.shutdown(context.Background())
			return hs, fmt.Errorf("agent: -pprof-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", boundedSeconds(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", boundedSeconds(pprof.Trace))
		hs.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
		go func() {
			if err := hs.pprof.Serve(pl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("pprof server", "err", err)
			}
		}()
		a.log.Info("serving pprof", "addr", pl.Addr().String())
	}
	return hs, nil
}

// maxProfileSeconds bounds ?seconds= of a CPU profile or trace.
const maxProfileSeconds = 60

// boundedSeconds refuses profiles longer than maxProfileSeconds.
func boundedSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); v != "" {
			if n, err := strconv.ParseFloat(v, 64); err != nil || n > maxProfileSeconds || n < 0 {
				http.Error(w, fmt.Sprintf("seconds must be 0..%d", maxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	}
}

// listenLoopback listens on addr, which must be a loopback address: the
// profiler shows the agent's internals.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s is not a loopback address (profiling is served on localhost only)", addr)
	}
	return net.Listen("tcp", addr)
}

// Memory held for flows since the last return to the OS, and when to give
// it back: after a flood the flows expire, but an idle agent allocates too
// little to start a collection, so the freed buffers would stay resident
// for minutes (the runtime's forced collection comes every 2 minutes).
// A flood is a peak of 4 MiB held by the sniffers (flows and their
// buffers; some 4,900 flows without buffers): ordinary traffic ebbing and
// flowing below that is not worth a forced collection and a scavenge of
// the whole heap, with a page fault for each page given back once the heap
// grows into it again; a busy node's table of a few hundred flows halves
// between housekeeping runs all the time.
const (
	floodHeld       = 4 << 20 // bytes held at the peak that make a flood
	returnMinPeriod = 30 * time.Second
)

// returnMemory gives freed flow memory back to the OS once a flood is over:
// when the bytes the sniffers hold have fallen below half their peak since
// the last return, and the peak was a flood's (at most every 30 s: a full
// collection costs a few milliseconds). Called by each housekeeping run;
// lock takes a worker's lock (from a batch's end, only if it is free: a
// busy worker makes this run count nothing).
func (a *Agent) returnMemory(with func(*pipeline.Worker, func(*sniffer.Sniffer)) bool) {
	held := 0
	for _, w := range a.pipe.Workers() {
		if !with(w, func(sn *sniffer.Sniffer) {
			f, b := sn.Held()
			held += f*sniffer.FlowBytes + b
		}) {
			return // a worker is busy: the next run counts them all
		}
	}
	if peak, due := a.memReturn.due(held, time.Now()); due {
		for _, w := range a.pipe.Workers() {
			w.With(func(sn *sniffer.Sniffer) { sn.Shrink() })
		}
		debug.FreeOSMemory()
		a.log.Debug("flood over: memory returned", "peak_held_bytes", peak, "held_bytes", held)
	}
}

// memReturn decides when a flood is over: the peak of the bytes held since
// the last return, and that return's time.
type memReturn struct {
	peak int
	last time.Time
}

// due reports whether memory should be given back now that the sniffers
// hold held bytes, with the peak it judged by; a return starts a new peak.
func (m *memReturn) due(held int, now time.Time) (peak int, ok bool) {
	m.peak = max(m.peak, held)
	if m.peak < floodHeld || held*2 > m.peak || now.Sub(m.last) < returnMinPeriod {
		return m.peak, false
	}
	peak, m.peak, m.last = m.peak, held, now
	return peak, true
}

// SnifferStats sums the workers' sniffer counters.
func (a *Agent) SnifferStats() sniffer.Stats { return a.pipe.SnifferStats() }

// Result is what the run saw (after Run): the pipeline's counters, the
// tailed logs' join and the swap events; Result.Finish completes a summary
// with it.
func (a *Agent) Result() pipeline.Result {
	r := a.pipe.Result()
	if a.joiner != nil { // logs named by flag or found under -pod-logs
		lr := a.LogResult()
		r.Log = &lr
	}
	if a.procs != nil {
		for _, e := range a.procs.Events() {
			r.SwapEvents = append(r.SwapEvents, report.SwapEvent(e))
		}
	}
	return r
}

// mergeHold is how long a record waits for its twins (merge.Config.Hold).
// With one ring (one interface, or "any", and one worker) the views of a
// handshake come in capture order: merge.Hold. With several (a ring per
// interface, or several workers, each handing its packets over a ring
// block at a time), a quiet ring's block waits up to the block timeout
// while a busy one's views go ahead: the hold covers that, or the view
// released first would be the one kept whichever it is.
func mergeHold(ifaces []string, workers int, blockTimeout time.Duration) time.Duration {
	if len(ifaces) == 1 && workers <= 1 {
		return merge.Hold
	}
	return cmp.Or(blockTimeout, capture.DefaultBlockTimeout) + merge.Hold
}

// multiView says whether a handshake may be seen twice from the start: a
// capture on several interfaces (any, or none named: every one) of a host
// that forwards packets (a Kubernetes node, a router, a container host),
// where a ClientHello crosses the uplink and, after a DNAT, a bridge and a
// veth. The merge then holds records from the first; elsewhere it holds
// them only once a handshake was seen twice.
func multiView(ifaces []string) bool {
	if len(ifaces) == 1 && ifaces[0] != capture.Any {
		return false
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	return err == nil && len(b) > 0 && b[0] == '1'
}
