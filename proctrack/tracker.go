// Package proctrack tracks TLS server processes through /proc: nginx masters
// and workers grouped into generations (one master and its workers, one
// binary), the binary's path, SHA-256 and OpenSSL version, and any other
// process that owns a listening socket on a configured port (Caddy, a Go
// server...).
//
// Three parts, each in its own file. Reading /proc into a snapshot value
// (snapshot.go); the swap state machine, a function from the previous
// state, a snapshot, the [emerg] lines read from error logs and the time
// to the next state and the swap events (swap.go); and the attribution
// index, which answers which process accepted a connection, in parts each
// with one job: the kernel's accept events and the quiet set's epochs
// (accept*.go), socket lookups (index.go), listeners and the ports' quiet
// periods (listener.go), over one immutable view per scan (view.go), with
// the Attribution stage's policy over them (attribution.go). The Tracker
// drives them: Tick (or Scan) reads a snapshot without holding the
// tracker's lock, steps the state machine, searches for servers by their
// listeners (search.go), publishes the scan's view to the index and
// chooses the kernel's quiet set from it (quietchoice.go). One goroutine
// calls Tick: the agent's housekeeping timer, or Run.
//
// The state machine observes: USR2 (a
// second master appears as a child of the first), WINCH (the old master's
// workers leave), QUIT (the old master exits), HUP reloads (new workers, same
// master), the fast rollback (the new generation exits while the old one
// still runs) and the failed swap (a ".oldbin" pid file or an [emerg] log
// line without a second master running shortly after).
//
// The Tracker is safe for concurrent use. Tick, Scan and Run are driven by
// one goroutine; Attribute, NoteEmerg, ObserveHandshake and the Prometheus
// collector may be called from any goroutine.
package proctrack

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
	"github.com/pqwatch/pqwatch/record"
)

// Config configures a Tracker. The zero value is usable: every field has a
// default.
type Config struct {
	// ProcRoot is the proc filesystem to read, "/proc" by default
	// ("/host/proc" for a Kubernetes DaemonSet with hostPID and a host mount).
	ProcRoot string
	// ScanInterval is the period of Run's scans, 1 s by default: swap
	// events are seen within it, and records wait up to it for the scan
	// that confirms a quiet period. A scan reads /proc's directory and the
	// files of the server processes (every process's stat in one scan of
	// thirty); on a small VM one costs about a millisecond of CPU, most of
	// it system calls and the Go runtime's wakeups around them.
	ScanInterval time.Duration
	// FailedSwapTimeout is how long after a ".oldbin" pid file or an [emerg]
	// a second master must run before the swap is declared failed, 3 s by
	// default. A failure is reported earlier when the process that logged the
	// [emerg] is already gone and no second master exists.
	FailedSwapTimeout time.Duration
	// MaxGenerations bounds the generations kept; the oldest exited ones are
	// evicted first. 32 by default.
	MaxGenerations int
	// MaxEvents bounds the event history returned by Events. 256 by default.
	MaxEvents int
	// NginxComms are process names (/proc/PID/comm prefixes) whose titles are
	// read to find nginx masters and workers. {"nginx"} by default.
	NginxComms []string
	// ServerPorts are TCP ports whose listening sockets' owners are tracked
	// as TLS servers even when they are not nginx (Caddy, Go servers...).
	// Attribute also adds the server port of a connection it could not
	// attribute.
	ServerPorts []uint16
	// ListenerRescan is the period of the searches for the owners of
	// unknown listening sockets (15 s by default, as /proc's directory);
	// an attribution miss, an accept by an unknown process or a server's
	// exit asks for one at the next scan.
	ListenerRescan time.Duration
	// IndexRefreshMin is the minimum period between rebuilds of the socket
	// inode index on an Attribute miss. 10 ms by default.
	IndexRefreshMin time.Duration
	// NoAcceptEvents switches off attribution from the kernel's accept
	// events (eBPF), leaving process scans and socket lookups.
	NoAcceptEvents bool
	// AllAcceptEvents has the kernel report every accept. By default,
	// outside swaps, the serving processes of the generation that serves
	// the most handshakes are the kernel's quiet set: their accepts are
	// only counted, and a connection answered by a server with no event
	// is theirs (see chooseQuiet). That saves some 1.4 µs of
	// kernel time per accept, and leaves worker_pid unset when that
	// generation has several workers (the access log's $pid can give it).
	AllAcceptEvents bool
	// MaxAccepts bounds the index of accept events, DefaultMaxAccepts by
	// default.
	MaxAccepts int
	// NginxConf, NginxPrefix and NginxPidFile are the compiled-in defaults
	// used when a master's command line has no -c / -p and its configuration
	// has no pid directive; NginxErrorLog the error log when it has no -e
	// (where a new binary started by USR2 logs its configuration errors).
	// Debian's by default.
	NginxConf, NginxPrefix, NginxPidFile, NginxErrorLog string
	// PodLogs is kubelet's pod log directory (/var/log/pods), "" for
	// none: a server in a pod is named from its cgroup path (the pod's UID
	// and container ID) and from this directory (its namespace and name,
	// the container's name); see package kubepod.
	PodLogs string
	// ClockTicks is USER_HZ (CLK_TCK), 100 by default.
	ClockTicks int64
	// PageSize is the page size for /proc/PID/statm, os.Getpagesize() by default.
	PageSize int64
	// Logger receives swap events and generation changes. slog.Default() by default.
	Logger *slog.Logger
	// Now is the clock, time.Now by default.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.ScanInterval <= 0 {
		c.ScanInterval = time.Second
	}
	if c.FailedSwapTimeout <= 0 {
		c.FailedSwapTimeout = 3 * time.Second
	}
	if c.MaxGenerations <= 0 {
		c.MaxGenerations = 32
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = 256
	}
	if len(c.NginxComms) == 0 {
		c.NginxComms = []string{"nginx"}
	}
	if c.ListenerRescan <= 0 {
		c.ListenerRescan = 15 * time.Second
	}
	if c.IndexRefreshMin <= 0 {
		c.IndexRefreshMin = 10 * time.Millisecond
	}
	if c.NginxConf == "" {
		c.NginxConf = "/etc/nginx/nginx.conf"
	}
	if c.NginxPrefix == "" {
		c.NginxPrefix = "/usr/share/nginx"
	}
	if c.NginxPidFile == "" {
		c.NginxPidFile = "/run/nginx.pid"
	}
	if c.NginxErrorLog == "" {
		c.NginxErrorLog = "/var/log/nginx/error.log"
	}
	if c.ClockTicks <= 0 {
		c.ClockTicks = 100
	}
	if c.PageSize <= 0 {
		c.PageSize = int64(os.Getpagesize())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// GenerationInfo is a snapshot of one generation.
type GenerationInfo struct {
	record.Generation
	Kind        string    // "nginx" or the process name of another server
	Start       time.Time // master start time
	Exited      time.Time // zero while alive
	Alive       bool
	ExeDeleted  bool   // the binary was replaced or removed on disk
	ExeInode    uint64 // inode of the running binary
	Config      string // nginx -c path
	PidFile     string
	Parent      string // the generation that started this one by USR2
	Workers     []int  // live worker PIDs (not shutting down)
	Draining    []int  // workers shutting down
	CPUSeconds  float64
	RSSBytes    uint64
	Handshakes  map[string]uint64 // by group
	Connections uint64            // handshakes observed
}

// Tracker tracks server processes and their generations. Create it with New.
type Tracker struct {
	cfg  Config
	log  *slog.Logger
	diag sockDiag
	ix   *attribIndex // the attribution index, fed by the scans
	// logPID: a LogPID stage follows the attribution; a record whose
	// generation the log's $pid decides has its count deferred to it.
	logPID atomic.Pointer[LogPID]

	// The scanner (Tick, Probe, Scan; NoteEmergIn and Close too): scanMu
	// serialises it, and guards what only it uses, the /proc reader, the
	// server search, the namespaces' reader and the quiet choice. It
	// reads /proc holding scanMu alone; it alone writes st, under mu, and
	// may read st without mu. Lock order: scanMu, then mu.
	scanMu sync.Mutex
	rd     *procReader // reads /proc into snapshots
	search *serverSearch
	nets   nsReader
	quiet  quietChoice

	mu         sync.RWMutex
	st         *swapState  // the swap state machine's state
	emergs     []emergNote // [emerg] lines noted since the last scan
	emergDrops uint64      // [emerg] lines dropped: maxEmergs were waiting
	events     []Event
	counts     map[string]uint64
	failed     uint64
	scans      uint64
	scanErrors uint64    // scans that failed, and files the reader could not parse
	lastScan   time.Time // last Scan (not Probe)

	unknownHS atomic.Uint64
}

// maxEmergs bounds the [emerg] lines waiting for the next scan; each opens
// (or joins) a pending failed swap, so more add nothing but memory.
const maxEmergs = 64

// New returns a Tracker. It reads the boot time from ProcRoot/stat.
func New(cfg Config) (*Tracker, error) {
	cfg.setDefaults()
	btime, err := procfs.ReadBtime(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("proctrack: %w", err)
	}
	t := &Tracker{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "proctrack"),
		st:     newSwapState(swapConfig{failedSwapTimeout: cfg.FailedSwapTimeout, maxGenerations: cfg.MaxGenerations}),
		counts: make(map[string]uint64, len(Kinds)),
	}
	t.rd = newProcReader(cfg, btime, t.log)
	t.ix = newAttribIndex(cfg, &t.diag)
	t.search = newServerSearch(cfg, &t.diag, t.log)
	t.nets = nsReader{root: cfg.ProcRoot, self: selfNetns(cfg.ProcRoot), log: t.log}
	for _, k := range Kinds {
		t.counts[k] = 0
	}
	// Open the sock_diag socket now: it queries the network namespace of
	// the thread that creates it, which is the caller's (the agent may be
	// built inside a namespace, as its tests do).
	if _, err := t.diag.handle(); err != nil {
		t.log.Warn("sock_diag unavailable: handshakes will not be attributed to processes", "err", err)
	}
	t.log.Info("socket lookups: sock_diag in the agent's network namespace; servers in other network namespaces (pods) through /proc/PID/net/tcp{,6} read at each scan and /proc/PID/fd",
		"agent_netns", t.nets.self)
	return t, nil
}

// Close releases the accept events, the netlink socket and the kept-open
// /proc files.
func (t *Tracker) Close() error {
	t.ix.acc.close()
	t.diag.close()
	t.scanMu.Lock()
	t.rd.close()
	t.scanMu.Unlock()
	return nil
}

// Run scans every ScanInterval until ctx is done. Scan errors are logged and
// counted, never fatal. (The agent calls Tick from its own timer instead.)
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.ScanInterval)
	defer tick.Stop()
	if err := t.Scan(); err != nil {
		t.log.Warn("scan failed", "err", err)
	}
	for {
		if err := t.Tick(); err != nil {
			t.log.Warn("scan failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// scanEvery: between probes, a scan (stat, cmdline and statm of every
// server process: CPU, memory, roles) runs at least once in this many
// ScanIntervals.
const scanEvery = 5

// Tick is one ScanInterval's work: a Probe, and a Scan when the probe saw a
// change or the last scan is scanEvery intervals old. Run calls it; so does
// the agent, from the timer it already has.
func (t *Tracker) Tick() error {
	t.ix.syncAccepts() // the accept ring, read on this timer rather than a timer of its own
	if !t.ScanDue() && t.Probe() {
		return nil
	}
	return t.Scan()
}

// ScanDue says whether the next Tick reads /proc in full rather than
// probing: the scan interval is up, a swap is in flux (two generations
// alive, a failure pending, an [emerg] noted), or the attribution asked
// for a search (the owner of a port it missed, a process that accepted
// and is not known yet). A Tick whose probe finds a change scans too.
func (t *Tracker) ScanDue() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.lastScan.IsZero() || t.cfg.Now().Sub(t.lastScan) >= scanEvery*t.cfg.ScanInterval-t.cfg.ScanInterval/2 ||
		len(t.st.pendings) > 0 || len(t.emergs) > 0 || t.ix.swapping() || t.search.due.Load() ||
		t.ix.req.requested()
}

// Probe checks, cheaply, that the serving processes are those of the last
// scan (procReader.probe). It returns true when nothing changed, and then
// counts as a scan for quiet periods (LastScan, AttributeQuiet).
func (t *Tracker) Probe() bool {
	t.scanMu.Lock()
	defer t.scanMu.Unlock()
	now := t.cfg.Now()
	if !t.rd.probe(t.st) {
		return false
	}
	t.ix.probed(now)
	return true
}

// Scan reads /proc once, steps the swap state machine, records its events
// and publishes the serving processes to the attribution index. /proc is
// read (the processes, the listeners' owners, the namespaces, the quiet
// set's ports) without the tracker's lock, which only the step and the
// publication's copy of the state take.
func (t *Tracker) Scan() error {
	t.scanMu.Lock()
	defer t.scanMu.Unlock()
	now := t.cfg.Now()
	if ports, rescan := t.ix.req.take(); rescan {
		t.search.want(ports)
		t.rd.rescan()
	}
	// The pids whose existence the state machine asks about. Only the
	// scanner changes st and emergs (NoteEmergIn holds scanMu too).
	alive := t.st.pendingPIDs(nil)
	for _, e := range t.emergs {
		if e.pid > 0 {
			alive = append(alive, e.pid)
		}
	}
	t.mu.Lock()
	t.scans++
	first := t.scans == 1
	t.mu.Unlock()
	if first {
		// The first scan searches for listeners' owners before reading
		// /proc, so a server found by its listener alone (Caddy, in a pod
		// or not) has its generation from the first scan rather than
		// the next.
		t.search.search(now, t.st.procs, t.rd, t.nets.self)
	}
	snap, err := t.rd.read(now, t.search.serverPIDs, alive)
	if err != nil {
		t.mu.Lock()
		t.scanErrors++
		t.mu.Unlock()
		return err
	}

	t.mu.Lock()
	prev := t.st.procs
	var out stepOut
	t.st, out = step(t.st, snap, t.emergs, now)
	clear(t.emergs)
	t.emergs = t.emergs[:0]
	for _, l := range out.logs {
		t.log.Log(context.Background(), l.level, l.msg, l.args...)
	}
	for _, e := range out.events {
		t.record(e)
	}
	t.lastScan = now
	v := newScanView(t.st, now)
	t.mu.Unlock()

	// A server that exited is searched for again by its listener, now (a
	// restart's new process holds it soon).
	t.search.exited(prev, t.st.procs)
	if t.search.search(now, t.st.procs, t.rd, t.nets.self) {
		t.mu.Lock()
		t.lastScan = time.Time{} // the next Tick scans: the new server's generation
		t.mu.Unlock()
	}
	v.nets = t.nets.read(v.serving, now) // the serving processes' other network namespaces (pods)
	if t.ix.publish(v) {
		t.ix.listeners.refreshOwners(v)
	}
	t.applyQuiet(v)
	return nil
}

// NoteEmerg reports an [emerg] line from an nginx error log: ts is the line's
// time, pid the process that logged it. An [emerg] from a worker is ignored;
// any other opens a pending failed swap that a new master running within
// FailedSwapTimeout settles. NoteEmergIn says which log it came from.
func (t *Tracker) NoteEmerg(ts time.Time, pid int, msg string) { t.NoteEmergIn("", ts, pid, msg) }

// NoteEmergIn is NoteEmerg for a line read from the error log at path (as
// this process sees it): the masters that write that file are the only
// ones the failure may be about, and the one master that does is named by
// it when nothing else (the process that logged, its parent) names one.
func (t *Tracker) NoteEmergIn(path string, ts time.Time, pid int, msg string) {
	t.scanMu.Lock() // the reader
	defer t.scanMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.st.procs[pid]; p != nil && (p.role == roleWorker || p.role == roleDrain || p.role == roleHelper) {
		t.log.Debug("emerg from a worker ignored", "pid", pid, "msg", msg)
		return
	}
	n := emergNote{at: t.cfg.Now(), ts: ts, pid: pid, msg: msg, log: path}
	if pid > 0 && t.st.procs[pid] == nil {
		n.ppid = t.rd.parentOf(pid) // it may be gone by the next scan
	}
	if len(t.emergs) < maxEmergs {
		n.masters = t.rd.logMasters(path, t.st.procs)
	}
	t.log.Warn("nginx emerg", "pid", pid, "msg", msg, "ts", ts, "log", path, "log_masters", len(n.masters))
	if len(t.emergs) >= maxEmergs {
		t.emergDrops++
		return
	}
	t.emergs = append(t.emergs, n)
}

func (t *Tracker) record(e Event) {
	t.counts[e.Kind]++
	if e.Kind == KindFailed {
		t.failed++
	}
	if len(t.events) >= t.cfg.MaxEvents {
		copy(t.events, t.events[1:])
		t.events = t.events[:len(t.events)-1]
	}
	t.events = append(t.events, e)
	lvl := slog.LevelInfo
	if e.Kind == KindFailed || e.Kind == KindRollback {
		lvl = slog.LevelWarn
	}
	t.log.Log(context.Background(), lvl, "swap event", "kind", e.Kind, "generation", e.Generation, "other", e.Other, "msg", e.Message, "ts", e.Time)
}

// Attribute returns the generation whose process owns the server side of the
// TCP connection client -> server, with WorkerPID set. The returned value is
// shared and must not be modified. It needs the socket to exist (call it
// while the connection is open or shortly after the capture saw it) and
// CAP_NET_ADMIN-free sock_diag access plus read access to /proc/PID/fd.
// When the socket is gone it answers by the listening socket's owner, when
// one generation alone holds it (WorkerPID unset then).
func (t *Tracker) Attribute(client, server netip.AddrPort) (*record.Generation, bool) {
	return t.ix.attribute(client, server, time.Time{})
}

// AttributeQuiet attributes a connection without looking it up, when the
// answer cannot be wrong: the serving processes did not change from before
// from until after to (a scan that started after to saw the same set as
// every scan since before from), and one generation alone holds every
// listening socket of server. WorkerPID is set when that generation has
// a single serving process (one nginx worker, a Caddy or Go server), and
// left unset otherwise. Outside quiet periods (a swap, a reload, a worker
// respawned) it answers false and Attribute must look the socket up.
//
// from is when the connection may first have been accepted (its first
// packet, with a margin) and to when it surely was (the handshake record
// was finished). A process that started and exited between two scans is
// never seen; what it accepted in that window is attributed to the
// generation that was serving.
func (t *Tracker) AttributeQuiet(server netip.AddrPort, from, to time.Time) (*record.Generation, bool) {
	return t.ix.attributeQuiet(server, false, from, to)
}

// AttributeQuietQUIC is AttributeQuiet for a QUIC connection: the server's
// unconnected UDP sockets on the address play the listener's part. There is
// no exact lookup for QUIC (a server receives every connection on shared
// UDP sockets), so outside quiet periods QUIC stays unattributed; a miss is
// counted and the port's owner is searched for, as for TCP.
func (t *Tracker) AttributeQuietQUIC(server netip.AddrPort, from, to time.Time) (*record.Generation, bool) {
	g, ok := t.ix.attributeQuiet(server, true, from, to)
	if !ok {
		t.ix.n.unattributed.Add(1)
		t.ix.req.wantPort(server.Port())
	}
	return g, ok
}

// QuietSince is when the current quiet period began: the last time a scan
// found the serving processes changed (zero before the first scan); and
// whether an nginx swap is in progress (two generations of one lineage
// alive), when no period is quiet. Lock-free: it is asked per handshake.
func (t *Tracker) QuietSince() (since time.Time, swapping bool) { return t.ix.quietSince() }

// LastScan is when the last completed scan (or probe) started (zero before
// the first), and a channel closed when the next one completes.
func (t *Tracker) LastScan() (time.Time, <-chan struct{}) { return t.ix.lastScan() }

// NoteSkipped counts a handshake its caller had no time to attribute
// (pqwatch_attributions_total{method="skipped"}).
func (t *Tracker) NoteSkipped() { t.ix.n.skipped.Add(1) }

// AttributionSource says whether attribution uses the kernel's accept
// events (SourceEBPF) or not (SourceFallback, with the reason); "" before
// an Attribution stage started them.
func (t *Tracker) AttributionSource() (source, reason string) { return t.ix.source() }

// AcceptStats returns the accept events' counters (zero without them).
func (t *Tracker) AcceptStats() AcceptStats { return t.ix.acceptStats() }

// ObserveHandshake counts a handshake served by gen with the negotiated group
// (pqwatch_generation_handshakes_total). Handshakes of unknown or evicted
// generations are counted apart.
func (t *Tracker) ObserveHandshake(gen *record.Generation, group string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observe(gen, group, 1)
}

// observeAttributed counts r in generation g as the attribution found it
// (pqwatch_generation_handshakes_total counts a handshake when it is seen,
// not when its log line comes). Only an answer that the access log's $pid
// may change, while a LogPID stage follows, is left to that stage, for at
// most logCountWait: none, or one that names no worker and is not a quiet
// period's (where the port's one generation served it: $pid can name its
// worker, not another generation). With wait false it does not wait for a
// scan that holds the tracker, and says false when it did not count.
func (t *Tracker) observeAttributed(g *record.Generation, r *record.Handshake, wait, quiet bool) bool {
	if lp := t.logPID.Load(); lp != nil && (g == nil || g.WorkerPID == 0 && !quiet) && r.Transport == record.TransportTCP {
		lp.deferCount(r, g)
		return true
	}
	if g == nil {
		return true
	}
	if wait {
		t.mu.Lock()
	} else if !t.mu.TryLock() {
		return false
	}
	defer t.mu.Unlock()
	t.observe(g, record.GroupLabel(r), 1)
	return true
}

// observe adds delta (1, or -1 to take one back) to gen's count of group.
// The caller holds t.mu.
func (t *Tracker) observe(gen *record.Generation, group string, delta int) {
	if gen == nil {
		t.countUnknown(delta)
		return
	}
	switch {
	case group == "":
		group = "none" // as pqwatch_handshakes_total: no group negotiated
	case strings.HasPrefix(group, "0x"):
		group = "other" // unregistered codepoints: keep label values bounded
	}
	var g *generation
	if p := t.st.procs[gen.MasterPID]; p != nil && p.gen != nil && p.gen.id == gen.ID {
		g = p.gen
	} else {
		for _, o := range t.st.order {
			if o.id == gen.ID {
				g = o
				break
			}
		}
	}
	if g == nil {
		t.countUnknown(delta)
		return
	}
	if _, ok := g.handshakes[group]; !ok && len(g.handshakes) >= maxGroupsPerGeneration {
		group = "other"
	}
	if delta < 0 && g.handshakes[group] == 0 {
		return
	}
	g.handshakes[group] += uint64(delta)
}

func (t *Tracker) countUnknown(delta int) {
	if delta > 0 {
		t.unknownHS.Add(1)
	} else if t.unknownHS.Load() > 0 {
		t.unknownHS.Add(^uint64(0))
	}
}

// Events returns the most recent swap events, oldest first.
func (t *Tracker) Events() []Event {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.events)
}

// EventCounts returns the number of events by kind.
func (t *Tracker) EventCounts() map[string]uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.counts)
}

// FailedSwaps returns the number of failed swaps seen.
func (t *Tracker) FailedSwaps() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.failed
}

// Generations returns a snapshot of the kept generations, oldest first.
func (t *Tracker) Generations() []GenerationInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]GenerationInfo, 0, len(t.st.order))
	for _, g := range t.st.order {
		out = append(out, t.info(g))
	}
	return out
}

// Generation returns the snapshot of one generation by id.
func (t *Tracker) Generation(id string) (GenerationInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, g := range t.st.order {
		if g.id == id {
			return t.info(g), true
		}
	}
	return GenerationInfo{}, false
}

// GenerationOf returns the generation a process belongs to, as of the last scan.
func (t *Tracker) GenerationOf(pid int) (*record.Generation, bool) {
	return t.ix.generationOf(pid)
}

func (t *Tracker) info(g *generation) GenerationInfo {
	gi := GenerationInfo{
		Generation: g.rec,
		Kind:       g.kind,
		Start:      g.start,
		Exited:     g.exited,
		Alive:      g.alive,
		ExeDeleted: g.ident.deleted,
		ExeInode:   g.ident.fkey.Ino,
		Config:     g.ident.conf,
		PidFile:    g.ident.pidFile,
		CPUSeconds: float64(g.exitedTicks+g.liveTicks) / float64(t.cfg.ClockTicks),
		Handshakes: maps.Clone(g.handshakes),
	}
	if g.alive {
		gi.Workers = slices.Clone(g.live)
		gi.Draining = slices.Clone(g.draining)
		gi.RSSBytes = g.rssBytes
	}
	if g.parent != nil {
		gi.Parent = g.parent.id
	}
	for _, n := range g.handshakes {
		gi.Connections += n
	}
	return gi
}

// Stats are the tracker's own counters.
type Stats struct {
	Scans, ScanErrors        uint64
	Attributed, Unattributed uint64
	// Of Attributed: in a quiet period without a lookup, and by the
	// listening socket's owner when the connection was gone; the rest by
	// the connection's own socket.
	Quiet, ByListener  uint64
	ByAccept           uint64 // the kernel's accept event named the process
	ByAcceptQuiet      uint64 // no accept event, the quiet generation's processes alone unreported (chooseQuiet)
	Skipped            uint64 // NoteSkipped
	UnknownHandshakes  uint64
	EvictedGenerations uint64
	EmergDropped       uint64 // [emerg] lines dropped: maxEmergs waited for a scan
}

// Stats returns the tracker's own counters.
func (t *Tracker) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := &t.ix.n
	return Stats{
		Scans: t.scans, ScanErrors: t.scanErrors + t.rd.errors.Load(),
		Attributed: n.attributed.Load(), Unattributed: n.unattributed.Load(),
		Quiet: n.quiet.Load(), ByListener: n.byListener.Load(), ByAccept: n.byAccept.Load(), ByAcceptQuiet: n.byQuiet.Load(), Skipped: n.skipped.Load(),
		UnknownHandshakes: t.unknownHS.Load(), EvictedGenerations: t.st.evicted, EmergDropped: t.emergDrops,
	}
}
