package proctrack

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/record"
)

// LogPID is the pipeline stage after the access-log join: nginx's $pid in
// the joined line is the worker that served the connection (a connection
// never leaves the worker that accepted it), nginx's own word. A TCP
// record joined to a line whose $pid is a tracked process takes that
// worker, its master and its generation, whatever the attribution found
// before (without accept events a listener's or a quiet period's answer
// names no worker, and can be late for a process started since the last
// scan); a record the attribution left without a generation gets one.
//
// A $pid the scans have not seen yet (a worker of a swap's new generation,
// started since the last scan) holds its record for the next scan, at most
// maxAttribWait, when its process still exists; the scan is asked for at
// once. Records not held go straight on.
type LogPID struct {
	t    *Tracker
	next func(*record.Handshake)

	emitMu sync.Mutex // serialises next: Process and the holder both hand on

	mu      sync.Mutex
	held    []heldRecord // oldest first
	running bool         // the holder goroutine runs
	done    chan struct{}

	// pending are the records whose count waits for their $pid: the
	// attribution named no worker. Counted here when the record comes, or
	// with the attribution's answer after logCountWait.
	pendMu   sync.Mutex
	pending  map[*record.Handshake]pendingCount
	sweeping bool

	ns nsPIDs // $pid read in the generation's PID namespace (nspid.go)

	found     atomic.Uint64 // records without a generation that $pid attributed
	corrected atomic.Uint64 // records whose generation $pid replaced
	unknown   atomic.Uint64 // $pid of no tracked process
	overflow  atomic.Uint64 // not held for a scan: maxHeldLog were waiting
	desc      *prometheus.Desc
}

// pendingCount is a record's deferred count: the attribution's answer
// (nil: none) and when it was given.
type pendingCount struct {
	gen   *record.Generation
	group string
	at    time.Time
}

// logCountWait bounds how long a record's count waits for its log line's
// $pid: pqwatch_generation_handshakes_total lags the wire by at most this
// (and the sweep's period). A line usually follows its handshake within
// the request; a connection without a request has none.
const logCountWait = 500 * time.Millisecond

// maxPendingCounts bounds the deferred counts; past it a record is
// counted at once with the attribution's answer.
const maxPendingCounts = 65536

// deferCount leaves r's count to Process, or to the sweep after
// logCountWait.
func (s *LogPID) deferCount(r *record.Handshake, g *record.Generation) {
	s.pendMu.Lock()
	if len(s.pending) >= maxPendingCounts {
		s.pendMu.Unlock()
		s.count(g, record.GroupLabel(r))
		return
	}
	if s.pending == nil {
		s.pending = map[*record.Handshake]pendingCount{}
	}
	s.pending[r] = pendingCount{g, record.GroupLabel(r), time.Now()}
	if !s.sweeping {
		s.sweeping = true
		go s.sweep()
	}
	s.pendMu.Unlock()
}

// claim takes r's deferred count: true when it was pending (the caller
// counts it), false when it was counted already.
func (s *LogPID) claim(r *record.Handshake) bool {
	s.pendMu.Lock()
	_, ok := s.pending[r]
	if ok {
		delete(s.pending, r)
	}
	s.pendMu.Unlock()
	return ok
}

// sweep counts the deferred records whose line did not come within
// logCountWait with the attribution's answer; it returns when none is
// left.
func (s *LogPID) sweep() {
	const every = 100 * time.Millisecond
	for {
		time.Sleep(every)
		now := time.Now()
		var due []pendingCount
		left := 0
		s.pendMu.Lock()
		for r, p := range s.pending {
			switch {
			case p.gen == nil:
				// Nothing to count yet: the record waits in the map for
				// its line, whose $pid may name its generation (counted
				// then); one that never gets a line leaves the map when
				// it passes this stage unjoined.
			case now.Sub(p.at) >= logCountWait:
				due = append(due, p)
				delete(s.pending, r)
			default:
				left++
			}
		}
		if left == 0 {
			s.sweeping = false
		}
		s.pendMu.Unlock()
		for _, p := range due {
			s.count(p.gen, p.group)
		}
		if left == 0 {
			return
		}
	}
}

// count adds one handshake of group to g's count (none for nil: records
// of no generation are not counted by generation).
func (s *LogPID) count(g *record.Generation, group string) {
	if g != nil {
		s.t.ObserveHandshake(g, group)
	}
}

type heldRecord struct {
	r       *record.Handshake
	pid     int
	at      time.Time
	counted bool // the attribution counted it
}

// maxHeldLog bounds the records held for a scan; past it they go on as
// they are (counted held_overflow).
const maxHeldLog = 8192

// NewLogPID returns the stage for tracker t; Then says where it hands
// records. Its counters exist (at zero) from the start, with or without a log.
func NewLogPID(t *Tracker) *LogPID {
	return &LogPID{t: t, desc: prometheus.NewDesc("pqwatch_attributions_from_log_total",
		"TCP handshakes whose joined nginx access-log line's $pid named their server process: result found (the attribution had left them without a generation), corrected (it had named another generation, or another worker), unknown_pid ($pid names no tracked process, even after a scan), or held_overflow (not held for a scan: 8192 records were waiting).",
		[]string{"result"}, nil)}
}

// Then sets the step after this one and returns the stage. From then on
// the attribution leaves to it the count of each record whose generation
// the log's $pid decides (deferCount).
func (s *LogPID) Then(next func(*record.Handshake)) *LogPID {
	s.next = next
	s.t.logPID.Store(s)
	return s
}

// Flush waits until every held record was handed on (at most
// maxAttribWait).
func (s *LogPID) Flush() {
	s.mu.Lock()
	done, running := s.done, s.running
	s.mu.Unlock()
	if running {
		<-done
	}
}

// Process fills the record's generation from its log line's $pid.
func (s *LogPID) Process(r *record.Handshake) {
	counted := !s.claim(r)
	l := r.Log
	if l == nil || l.Source != "nginx" || l.PID <= 0 || r.Transport != record.TransportTCP {
		s.hand(r, counted)
		return
	}
	pid, ok := s.hostPID(r, l.PID)
	if !ok {
		s.unknown.Add(1)
		s.hand(r, counted)
		return
	}
	if s.resolve(r, pid) {
		s.hand(r, counted)
		return
	}
	if g := r.Generation; g != nil && g.WorkerPID == pid {
		s.hand(r, counted) // the accept event named this worker already
		return
	}
	// An nginx process that exists and no scan has seen: the next one
	// will. Anything else is not worth a wait: no process, or one that is
	// no nginx (an nginx in a container logs its own PID namespace's
	// numbers, which on the host are other processes).
	if !isNginx(s.t.cfg.ProcRoot, s.t.cfg.NginxComms, pid) {
		s.unknown.Add(1)
		s.hand(r, counted)
		return
	}
	s.t.ix.req.rescanSoon()
	s.mu.Lock()
	if len(s.held) >= maxHeldLog {
		s.mu.Unlock()
		s.overflow.Add(1)
		s.hand(r, counted)
		return
	}
	s.held = append(s.held, heldRecord{r, pid, time.Now(), counted})
	if !s.running {
		s.running, s.done = true, make(chan struct{})
		go s.hold()
	}
	s.mu.Unlock()
}

// isNginx reports whether /proc/PID/comm names an nginx process (starts
// with one of comms, Config.NginxComms).
func isNginx(procRoot string, comms []string, pid int) bool {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return false
	}
	for _, c := range comms {
		if strings.HasPrefix(string(b), c) {
			return true
		}
	}
	return false
}

// hold hands on the held records as scans learn their $pid, or when they
// waited maxAttribWait; it returns when none is left.
func (s *LogPID) hold() {
	timer := time.NewTimer(maxAttribWait)
	defer timer.Stop()
	for {
		_, scanned := s.t.ix.lastScan()
		s.mu.Lock()
		held := s.held
		s.held = nil
		s.mu.Unlock()
		var keep []heldRecord
		for _, h := range held {
			switch {
			case s.resolve(h.r, h.pid):
				s.hand(h.r, h.counted)
			case time.Since(h.at) >= maxAttribWait:
				s.unknown.Add(1)
				s.hand(h.r, h.counted)
			default:
				keep = append(keep, h)
			}
		}
		s.mu.Lock()
		s.held = append(keep, s.held...)
		if len(s.held) == 0 {
			s.running = false
			close(s.done)
			s.mu.Unlock()
			return
		}
		wait := maxAttribWait - time.Since(s.held[0].at)
		s.mu.Unlock()
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-scanned:
		case <-timer.C:
		}
	}
}

// resolve gives r the generation and worker of pid when a scan knows pid
// (now, or in the last minute for a worker that exited since).
func (s *LogPID) resolve(r *record.Handshake, pid int) bool {
	found, ok := s.t.ix.generationOfPID(pid)
	if !ok {
		return false
	}
	switch g := r.Generation; {
	case g == nil:
		s.found.Add(1)
	case g.ID == found.ID && g.MasterPID == found.MasterPID:
		if g.WorkerPID == pid {
			return true
		}
		if g.WorkerPID != 0 {
			s.corrected.Add(1)
		}
		// The attribution shares the tracker's generation between
		// records: a correction is the record's own copy.
		gc := *g
		gc.WorkerPID = pid
		r.Generation = &gc
		return true
	default:
		s.corrected.Add(1)
	}
	gc := *found
	gc.WorkerPID = pid
	r.Generation = &gc
	return true
}

// hand passes r on, counting it in its generation's
// pqwatch_generation_handshakes_total unless the attribution did (counted):
// a record is counted once, and a counter never goes down (a correction
// counted as -1 there and +1 here would read as a counter reset to
// Prometheus). A record the attribution counted and $pid corrected stays
// in the attribution's count: pqwatch_attributions_from_log_total
// {result="corrected"} says how many.
func (s *LogPID) hand(r *record.Handshake, counted bool) {
	if !counted {
		s.count(r.Generation, record.GroupLabel(r))
	}
	s.emitMu.Lock()
	s.next(r)
	s.emitMu.Unlock()
}

// Describe implements prometheus.Collector.
func (s *LogPID) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *LogPID) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.found.Load()), "found")
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.corrected.Load()), "corrected")
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.overflow.Load()), "held_overflow")
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.unknown.Load()), "unknown_pid")
}
