// Package agent is the live pqwatch daemon: AF_PACKET capture (package
// capture) fanned out to one Sniffer per worker, records attributed to the
// server generation that accepted them (package proctrack), joined with
// tailed access logs (packages logparse and join), forecast (package
// forecast), and delivered to the sinks (package exporter): Prometheus,
// JSONL and Kafka.
//
// Shutdown order: capture stops, open flows are flushed as records, the
// joiner flushes, the sinks drain with a deadline, the HTTP server last.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/join"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/proctrack"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// NginxLog is an nginx access log to tail and the format it is written in.
type NginxLog struct {
	Path   string
	Format *logparse.Format
}

// Config is everything the agent needs. Zero values take defaults.
type Config struct {
	Ifaces  []string // names or "any"; nil = every interface that is up
	Ports   []uint16 // narrow the capture (kernel BPF); nil = all
	Workers int      // capture workers (fanout); 0 = one per CPU
	// BlockTimeout: how long a packet may wait in a partly filled ring
	// block (0 = capture.DefaultBlockTimeout).
	BlockTimeout time.Duration

	Sniffer sniffer.Config // bounds for each worker's sniffer (OnRecord is set by the agent)

	MetricsAddr string // "" = no HTTP server
	// Listener, when set, is used instead of MetricsAddr (tests, demo).
	Listener net.Listener

	NginxLogs      []NginxLog
	CaddyLogs      []string
	NginxErrorLogs []string
	StateDir       string // tail offsets; "" = start at the end of each log

	JSONL io.Writer // nil = no JSONL stream
	Kafka *exporter.KafkaConfig

	TrackProcesses bool   // attribute handshakes to server generations
	ProcRoot       string // /proc, or /host/proc in Kubernetes
	// NginxComms are the process names tracked as nginx masters and
	// workers (default {"nginx"}; an nginx fork may go by another name).
	NginxComms []string

	Forecast *forecast.Policy // nil = forecast.DefaultPolicy

	// OnRecord sees every finished record (after join and attribution).
	OnRecord func(*record.Handshake)

	// Pprof serves net/http/pprof under /debug/pprof/ on the metrics
	// listener (off by default: it exposes internals).
	Pprof bool

	Version string // pqwatch_build_info{version}

	// CaptureAll keeps every frame: without it pure ACKs and segments
	// starting with a TLS application-data record are dropped in the kernel.
	CaptureAll bool

	Logger   *slog.Logger
	Registry *prometheus.Registry // nil = a new one
}

// Agent is a running pqwatch daemon.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *exporter.Metrics
	capt    *capture.Capture
	workers []*worker
	procs   *proctrack.Tracker
	joiner  *join.Joiner
	jsonl   *exporter.JSONL
	kafka   *exporter.Kafka
	policy  forecast.Policy
	lines   logparse.LineCounters

	recordsOut  atomic.Uint64
	lastPanics  uint64      // mirrorPanics' previous reading
	jsonlFailed atomic.Bool // the JSONL output failed (logged once)

	// Attribution runs off the capture path: a process lookup may wait on
	// netlink and /proc, and the rings must keep draining meanwhile.
	attribQ     chan attribItem
	attribNudge chan struct{} // wakes the attribution goroutine
	attribDone  chan struct{}
	attribSkip  atomic.Uint64 // queue full: records passed on unattributed
	attribIdle  atomic.Bool   // the attribution goroutine sleeps with nothing pending

	lastAmbiguous, lastTooLong uint64 // mirrorJoinCounters' previous readings
}

// worker owns one Sniffer; mu serialises packets and the expiry ticker.
type worker struct {
	mu   sync.Mutex
	sn   *sniffer.Sniffer
	last sniffer.Stats
}

// New builds an agent; nothing runs until Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, reg: cfg.Registry}
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	a.policy = forecast.DefaultPolicy
	if cfg.Forecast != nil {
		a.policy = *cfg.Forecast
	}
	a.metrics = exporter.NewMetrics(a.reg, exporter.WithParseErrorReasons(parseReasons()...), exporter.WithBuildInfo(cfg.Version, buildRevision()))
	n := cfg.Workers
	if n <= 0 {
		n = runtime.NumCPU()
	}
	// SkipNoise: pure ACKs and application-data segments are dropped in
	// the kernel; they carry nothing a handshake record needs.
	capt, err := capture.New(capture.Config{Ifaces: cfg.Ifaces, Ports: cfg.Ports, Workers: n, BlockTimeout: cfg.BlockTimeout, SkipNoise: !cfg.CaptureAll, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.capt = capt
	for range n {
		w := &worker{}
		sc := cfg.Sniffer
		sc.Ports = nil // the kernel filter already narrowed
		sc.OnRecord = a.handle
		w.sn = sniffer.New(sc)
		a.workers = append(a.workers, w)
	}
	if cfg.TrackProcesses {
		pt, err := proctrack.New(proctrack.Config{ProcRoot: cfg.ProcRoot, Logger: cfg.Logger, ServerPorts: cfg.Ports, NginxComms: cfg.NginxComms})
		if err != nil {
			a.log.Warn("process tracking disabled", "err", err)
		} else {
			a.procs = pt
			a.reg.MustRegister(pt.Collector())
			a.attribQ = make(chan attribItem, 8192)
			a.attribNudge = make(chan struct{}, 1)
			a.attribDone = make(chan struct{})
		}
	}
	if len(cfg.NginxLogs)+len(cfg.CaddyLogs) > 0 {
		a.joiner = join.New(join.Options{Emit: a.deliver})
	}
	if cfg.JSONL != nil {
		a.jsonl = exporter.NewJSONL(cfg.JSONL)
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
			return nil, fmt.Errorf("agent: kafka: %w", err)
		}
		a.kafka = k
	}
	a.reg.MustRegister(exporter.NewCaptureCollector(a.captureStats))
	return a, nil
}

// Registry is the agent's metrics registry.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Processes is the process tracker, nil when tracking is off.
func (a *Agent) Processes() *proctrack.Tracker { return a.procs }

// buildRevision is the VCS revision the binary was built from, if known.
func buildRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

func parseReasons() []string {
	r := append([]string(nil), sniffer.ErrorReasons()...)
	return append(r, "quic_decrypt_failed", "quic_frame_error", "quic_unknown_version", "quic_malformed", "quic_crypto_overflow", "quic_evicted", "panic")
}

// handle runs on a capture worker for each record its sniffer finishes.
// With process tracking the record goes to the attribution goroutine (or,
// when its queue is full, on unattributed: the capture never waits).
//
// The attribution goroutine is not woken for each record: in a quiet
// period records wait for the next process scan anyway, and waking another
// goroutine (another thread) per record cost more than parsing it. It is
// nudged only for records that need a prompt exact lookup (swap windows),
// when the queue is half full, and when it sleeps with nothing pending.
func (a *Agent) handle(r *record.Handshake) {
	a.count(r)
	if a.attribQ == nil {
		a.process(r)
		return
	}
	it := attribItem{r, time.Now()}
	select {
	case a.attribQ <- it:
		if !a.mayBeQuiet(it) || len(a.attribQ) >= cap(a.attribQ)/2 || a.attribIdle.CompareAndSwap(true, false) {
			a.nudgeAttrib()
		}
	default:
		a.attribSkip.Add(1)
		a.procs.NoteSkipped()
		a.process(r)
	}
}

func (a *Agent) nudgeAttrib() {
	select {
	case a.attribNudge <- struct{}{}:
	default:
	}
}

// attribItem is a finished record waiting for attribution, and when it was
// finished: its connection had been accepted by then.
type attribItem struct {
	r    *record.Handshake
	done time.Time
}

// acceptMargin is how long before its SYN a connection may count as
// accepted in a quiet-period check: clock granularity and the capture's
// timestamps, not the network, so a small margin.
const acceptMargin = 50 * time.Millisecond

// maxAttribWait bounds how long a record waits for the process scan that
// confirms a quiet period; past it the record is looked up exactly.
const maxAttribWait = 3 * time.Second

// attributeLoop attributes queued records to server generations.
//
// Outside nginx swaps and reloads one generation serves each port, and a
// per-connection lookup (sock_diag and /proc/PID/fd, some 15 µs, often too
// late for a short connection) would only repeat what the process table
// already says. So a record waits for the next process scan (at most a
// ScanInterval): when no serving process started, exited or changed role
// between its SYN and that scan, and one generation alone holds the
// listener, that generation is the answer (tracker.AttributeQuiet).
// Otherwise — a swap in progress — the record's socket is looked up
// exactly (tracker.Attribute).
func (a *Agent) attributeLoop() {
	defer close(a.attribDone)
	var pending []attribItem // waiting for a scan, oldest first
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	in := a.attribQ
	for {
		// Take what is queued.
	drain:
		for in != nil {
			select {
			case it, ok := <-in:
				if !ok {
					in = nil
					break drain
				}
				if a.mayBeQuiet(it) && len(pending) < cap(a.attribQ) {
					pending = append(pending, it)
				} else {
					a.attribute(it, false)
				}
			default:
				break drain
			}
		}
		scanAt, scanDone := a.procs.LastScan()
		for len(pending) > 0 {
			it := pending[0]
			scanned := scanAt.After(it.done)
			if in != nil && !scanned && time.Since(it.done) < maxAttribWait {
				break // wait for the scan that follows it
			}
			a.attribute(it, scanned)
			pending[0] = attribItem{}
			pending = pending[1:]
		}
		if in == nil {
			return // closed and drained: everything was attributed
		}
		// Wait for the next scan only when a record waits for it. With
		// nothing pending, sleep until the next record nudges (attribIdle);
		// a record queued just before the flag was raised is seen here.
		var timeout <-chan time.Time
		var scanned <-chan struct{}
		if len(pending) > 0 {
			timer.Reset(maxAttribWait - time.Since(pending[0].done))
			timeout, scanned = timer.C, scanDone
		} else {
			a.attribIdle.Store(true)
			if len(in) > 0 {
				a.attribIdle.Store(false)
				continue
			}
		}
		select {
		case <-a.attribNudge:
		case <-scanned:
		case <-timeout:
		}
		a.attribIdle.Store(false)
		timer.Stop()
	}
}

// mayBeQuiet says whether waiting for the next process scan can let the
// record be attributed without a lookup: a TCP connection whose SYN was
// seen after the current quiet period began, while no nginx swap is in
// progress. Otherwise the record is looked up at once, while its socket
// may still exist.
func (a *Agent) mayBeQuiet(it attribItem) bool {
	r := it.r
	if r.FlowStart.IsZero() {
		return false
	}
	since, swapping := a.procs.QuietSince()
	return !swapping && r.FlowStart.Add(-acceptMargin).After(since)
}

// attribute finds the generation of one record's server process; scanned
// says a process scan has completed since the record was finished.
func (a *Agent) attribute(it attribItem, scanned bool) {
	r := it.r
	server, client := addrPort(r.Server), addrPort(r.Client)
	g, ok := (*record.Generation)(nil), false
	switch r.Transport {
	case record.TransportTCP:
		if scanned && !r.FlowStart.IsZero() {
			g, ok = a.procs.AttributeQuiet(server, r.FlowStart.Add(-acceptMargin), it.done)
		}
		if !ok {
			g, ok = a.procs.Attribute(client, server)
		}
	case record.TransportQUIC:
		// Quiet periods only: there is no per-connection lookup for QUIC.
		if !r.FlowStart.IsZero() {
			g, ok = a.procs.AttributeQuietQUIC(server, r.FlowStart.Add(-acceptMargin), it.done)
		}
	}
	if ok {
		gc := *g
		r.Generation = &gc
		a.procs.ObserveHandshake(g, r.Group)
	}
	a.process(r)
}

// count puts a record in the metrics, on the capture worker that finished
// it, while it is still in that CPU's cache: none of these metrics depends on
// the generation, which attribution adds later.
func (a *Agent) count(r *record.Handshake) {
	_ = a.metrics.Write(r)
	a.metrics.ObserveForecast(forecast.Predict(a.policy, r).Kind.String())
}

// process sends a counted (and, with process tracking, attributed) record
// on: it may wait for its access-log line before it goes to the record
// sinks.
func (a *Agent) process(r *record.Handshake) {
	if a.joiner != nil {
		a.joiner.AddHandshake(r, time.Now())
		return
	}
	a.deliver(r)
}

// mirrorJoinCounters turns the growth of counters kept elsewhere into
// metrics: handshakes the joiner found ambiguous, and lines the tailers
// skipped as over-long. Called from one goroutine (the ticker).
func (a *Agent) mirrorJoinCounters() {
	st := a.joiner.Stats()
	a.metrics.AddLogJoins(exporter.JoinAmbiguous, st.AmbiguousHandshakes-a.lastAmbiguous)
	a.lastAmbiguous = st.AmbiguousHandshakes
	tl := a.lines.TooLong.Load()
	a.metrics.AddLogLines("other", exporter.LogLineSkipped, tl-a.lastTooLong)
	a.lastTooLong = tl
}

// JoinStats reports the access-log join (zero when no logs are tailed).
func (a *Agent) JoinStats() join.Stats {
	if a.joiner == nil {
		return join.Stats{}
	}
	return a.joiner.Stats()
}

// deliver hands a finished record to the record sinks.
func (a *Agent) deliver(r *record.Handshake) {
	a.recordsOut.Add(1)
	if g, l := r.Generation, r.Log; g != nil && g.WorkerPID == 0 && l != nil && l.Source == "nginx" && l.PID > 0 {
		// nginx's $pid is the worker that handled the connection, and
		// a connection never leaves the worker that accepted it.
		g.WorkerPID = l.PID
	}
	if a.joiner != nil && r.Outcome == record.OutcomeOK {
		if r.Log != nil {
			a.metrics.LogJoin(exporter.JoinJoined)
			// The instrument checks itself: nginx's own $ssl_curve
			// against the group seen on the wire.
			if r.Log.SSLCurve != "" && r.Group != "" && join.IANAGroupName(r.Log.SSLCurve) != r.Group {
				a.metrics.LogJoin(exporter.JoinMismatch)
				a.log.Warn("nginx $ssl_curve disagrees with the wire", "client", r.Client, "ssl_curve", r.Log.SSLCurve, "wire", r.Group)
			}
		} else {
			a.metrics.LogJoin(exporter.JoinUnmatched)
		}
	}
	if a.jsonl != nil {
		if err := a.jsonl.Write(r); err != nil && a.jsonlFailed.CompareAndSwap(false, true) {
			// The writer keeps its first error: no record is written
			// after it. Say so once (it was counted as a "panic" parse
			// error per record before, which it is not).
			a.log.Error("JSONL output failed: no more records are written to it", "err", err)
		}
	}
	if a.kafka != nil {
		_ = a.kafka.Write(r) // failures are counted by the sink
	}
	if a.cfg.OnRecord != nil {
		a.cfg.OnRecord(r)
	}
}

// Run captures until ctx ends, then drains. It returns the capture's error,
// if any, after the drain.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	srv, err := a.startHTTP()
	if err != nil {
		return err
	}
	if a.procs != nil {
		go a.attributeLoop()
	}
	tailCtx, stopTails := context.WithCancel(context.Background())
	var tails sync.WaitGroup
	a.startTails(tailCtx, &tails)

	// Housekeeping, once a second on one timer: the process probe or scan,
	// then flow expiry (flows idle in quiet periods still time out) and
	// counters. One wakeup for all: on a small VM waking an idle process
	// costs more CPU than the work itself.
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case now := <-t.C:
				scan(false)
				for _, w := range a.workers {
					w.mu.Lock()
					w.sn.Expire(now)
					a.countErrors(w, w.sn.Stats())
					w.mu.Unlock()
				}
				a.mirrorPanics()
				if a.joiner != nil {
					a.joiner.Tick(now)
					a.mirrorJoinCounters()
				}
			}
		}
	}()

	a.log.Info("capture starting", "interfaces", a.cfg.Ifaces, "workers", len(a.workers))
	capErr := a.capt.Run(ctx, a.packet)

	// Drain: capture has stopped; flush flows, then logs, then sinks.
	stopTails()
	tails.Wait()
	for _, w := range a.workers {
		w.mu.Lock()
		w.sn.Flush()
		a.countErrors(w, w.sn.Stats())
		w.mu.Unlock()
	}
	if a.attribQ != nil {
		close(a.attribQ)
		a.nudgeAttrib()
		<-a.attribDone
	}
	if a.joiner != nil {
		a.joiner.Flush()
	}
	if a.jsonl != nil {
		if err := a.jsonl.Flush(); err != nil {
			a.log.Error("jsonl flush", "err", err)
		}
	}
	if a.kafka != nil {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.kafka.Close(kctx); err != nil {
			a.log.Error("kafka close", "err", err)
		}
		cancel()
	}
	stopBG()
	wg.Wait()
	a.mirrorPanics() // the ticker has stopped
	if a.procs != nil {
		a.procs.Close()
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if capErr != nil && !errors.Is(capErr, context.Canceled) {
		return fmt.Errorf("agent: capture: %w", capErr)
	}
	return nil
}

// packet is the capture callback, on worker i's goroutine. A panic is
// recovered (and logged) by the capture worker, which drops the packet and
// keeps capturing; mirrorPanics counts it in the metrics. The deferred
// unlock keeps the worker's sniffer usable after one.
func (a *Agent) packet(i int, ts time.Time, link int, data []byte) {
	w := a.workers[i]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sn.Packet(ts, link, data)
}

// mirrorPanics counts the packet-path panics the capture recovered as
// parse_errors{reason="panic"}. Called from one goroutine (the ticker).
func (a *Agent) mirrorPanics() {
	n := a.capt.Panics()
	a.metrics.AddParseErrors("panic", n-a.lastPanics)
	a.lastPanics = n
}

// countErrors turns the growth of a worker's error counters into metrics.
// The caller holds w.mu.
func (a *Agent) countErrors(w *worker, st sniffer.Stats) {
	for reason, n := range st.Errors {
		if d := n - w.last.Errors[reason]; d > 0 {
			a.metrics.AddParseErrors(reason, d)
		}
	}
	for reason, n := range st.QUIC {
		switch reason {
		case "decrypt_failed", "frame_error", "unknown_version", "malformed", "crypto_overflow", "evicted":
			if d := n - w.last.QUIC[reason]; d > 0 {
				a.metrics.AddParseErrors("quic_"+reason, d)
			}
		}
	}
	w.last = st
}

func (a *Agent) captureStats() exporter.CaptureStats {
	cs := a.capt.Stats()
	out := exporter.CaptureStats{Packets: cs.Packets, Drops: cs.Drops, Interfaces: map[string]exporter.IfaceStats{}}
	for name, s := range cs.Interfaces {
		out.Interfaces[name] = exporter.IfaceStats{Packets: s.Packets, Drops: s.Drops}
	}
	for _, w := range a.workers {
		w.mu.Lock()
		st := w.sn.Stats()
		w.mu.Unlock()
		out.FlowsEvicted += st.FlowsEvicted // the cap at work; idle expiry is normal
		out.FlowsActive += st.FlowsActive
		out.QUICConnsActive += int(st.QUIC["conns"])
	}
	return out
}

func (a *Agent) startHTTP() (*http.Server, error) {
	ln := a.cfg.Listener
	if ln == nil {
		if a.cfg.MetricsAddr == "" {
			return nil, nil
		}
		var err error
		if ln, err = net.Listen("tcp", a.cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("agent: metrics listener: %w", err)
		}
	}
	var h http.Handler = exporter.Handler(a.reg)
	if a.cfg.Pprof {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/", h)
		h = mux
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", "err", err)
		}
	}()
	a.log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}
