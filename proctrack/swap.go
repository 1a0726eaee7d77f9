package proctrack

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// The swap state machine: from the previous state, one snapshot of /proc
// (snapshot.go), the [emerg] lines read from nginx error logs since, and
// the time, to the next state and the swap events observed. step reads no
// file and no clock: the fixture tests (swap_test.go) drive it with
// snapshot values alone.

// Swap event kinds, the label values of pqwatch_swap_events_total.
const (
	KindUSR2     = "usr2"     // a new master started as a child of a running one
	KindWINCH    = "winch"    // a master with a live successor lost its workers
	KindQUIT     = "quit"     // a master exited while its successor runs: swap complete
	KindReload   = "reload"   // a master replaced all its workers (HUP)
	KindRollback = "rollback" // a new generation exited while the one it replaced still runs
	KindFailed   = "failed"   // .oldbin or [emerg] seen but no second master ran in time
)

// Kinds lists every swap event kind.
var Kinds = []string{KindUSR2, KindWINCH, KindQUIT, KindReload, KindRollback, KindFailed}

// Event is one observed swap event.
type Event struct {
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Generation string    `json:"generation"`      // the generation the event is about
	Other      string    `json:"other,omitempty"` // the other side of a swap, or the still serving generation(s)
	Message    string    `json:"message"`
}

// swapConfig is what the state machine needs of Config.
type swapConfig struct {
	failedSwapTimeout time.Duration
	maxGenerations    int
}

// swapState is the state machine's state: the server processes of the last
// snapshot, the generations they form, and the failed swaps pending.
type swapState struct {
	cfg      swapConfig
	procs    map[int]*proc // the last snapshot's processes
	gens     map[procKey]*generation
	order    []*generation // creation order, for eviction
	pendings []*pending
	serving  []*proc // workers and servers, for the socket index
	scans    uint64  // steps taken
	evicted  uint64  // generations evicted
}

func newSwapState(cfg swapConfig) *swapState {
	return &swapState{cfg: cfg, procs: map[int]*proc{}, gens: map[procKey]*generation{}}
}

type procKey struct {
	pid   int
	start uint64
}

// proc is a server process of the state: as last read, and its generation.
type proc struct {
	procSnap
	gen   *generation
	rec   *record.Generation // attribution answer for this process
	recID string
}

type generation struct {
	key       procKey
	kind      string // record.GenerationNginx or the process name of another server
	id        string
	rec       record.Generation
	start     time.Time
	exited    time.Time
	alive     bool
	ident     identity
	parent    *generation
	successor *generation

	live, draining []int
	baseline       map[int]bool
	hadWorkers     bool
	oldbinSeen     bool

	exitedTicks uint64
	liveTicks   uint64
	rssBytes    uint64
	handshakes  map[string]uint64
}

// maxGroupsPerGeneration bounds the group label values per generation;
// further groups are counted as "other".
const maxGroupsPerGeneration = 32

type pending struct {
	gen      *generation
	since    time.Time
	ts       time.Time
	emergPID int
	reason   string
	scans    int
}

// emergNote is an [emerg] line of an nginx error log, as NoteEmerg read it.
type emergNote struct {
	at   time.Time // when it was noted: a pending failure's start
	ts   time.Time // the line's own time
	pid  int       // the process that logged it
	ppid int       // its parent when noted (0: gone by then)
	msg  string
}

// logNote is a log line step asks its caller to write.
type logNote struct {
	level slog.Level
	msg   string
	args  []any
}

// stepOut is what one step observed.
type stepOut struct {
	events []Event
	logs   []logNote
}

func (o *stepOut) emit(now time.Time, kind, gen, other, msg string) {
	o.events = append(o.events, Event{Time: now, Kind: kind, Generation: gen, Other: other, Message: msg})
}

func (o *stepOut) log(level slog.Level, msg string, args ...any) {
	o.logs = append(o.logs, logNote{level, msg, args})
}

// step advances the state machine: s is the previous state, snap the
// processes read from /proc (nginx masters, workers and helpers, and the
// other servers: every other process is left out), emergs the [emerg]
// lines noted since the previous step, now the snapshot's time. It returns
// the next state and what it observed. step does no I/O and reads no
// clock: the same inputs give the same output. The next state reuses s's
// storage (generations are long-lived, and the attribution hands out
// their records): s must not be used again.
func step(s *swapState, snap *snapshot, emergs []emergNote, now time.Time) (*swapState, stepOut) {
	var out stepOut
	s.scans++
	for _, e := range emergs {
		s.noteEmerg(e, &out)
	}

	seen := make(map[int]*proc, len(snap.procs))
	for _, ps := range snap.procs {
		p := s.procs[ps.key.pid]
		if p == nil || p.key != ps.key {
			p = &proc{}
		}
		p.procSnap = ps
		seen[ps.key.pid] = p
	}

	// Masters: top-level ones are confirmed at once. A master-titled child of
	// a master is a new master (USR2) only once it has exec'd: a freshly
	// forked worker, and the USR2 child before its execve, carry their
	// parent's title but have PF_FORKNOEXEC set.
	for _, p := range sortedProcs(seen) {
		if p.role != roleMaster || (p.gen != nil && p.gen.key == p.key) {
			continue
		}
		parent := seen[p.ppid]
		isChild := parent != nil && parent.role == roleMaster
		if isChild && (p.forkNoExec || parent.gen == nil) {
			continue
		}
		g := s.gens[p.key]
		if g == nil {
			g = s.newGeneration(p, record.GenerationNginx)
			if isChild && parent.gen != nil {
				g.parent = parent.gen
				parent.gen.successor = g
			}
		}
		p.gen = g
		g.identify(p)
		if g.parent != nil {
			out.emit(now, KindUSR2, g.id, g.parent.id, fmt.Sprintf("new master %d (%s) started by %s", p.key.pid, g.id, g.parent.id))
			s.resolvePendings(g.parent)
		} else {
			out.log(slog.LevelInfo, "generation found", "generation", g.id, "master_pid", p.key.pid, "exe", g.rec.Exe, "openssl", g.rec.OpenSSL)
		}
	}
	// Workers and helpers belong to their parent master's generation.
	for _, p := range sortedProcs(seen) {
		switch p.role {
		case roleWorker, roleDrain, roleHelper:
			if m := seen[p.ppid]; m != nil && m.role == roleMaster && m.gen != nil && m.gen.key == m.key {
				p.gen = m.gen
			}
		case roleNone:
			if p.server && (p.gen == nil || p.gen.key != p.key) {
				g := s.gens[p.key]
				if g == nil {
					g = s.newGeneration(p, p.comm)
				}
				p.gen = g
				g.identify(p)
				out.log(slog.LevelInfo, "server found", "generation", g.id, "pid", p.key.pid, "exe", g.rec.Exe)
			}
		}
	}
	// Re-identify live masters whose binary changed (exec after USR2 fork).
	for _, p := range sortedProcs(seen) {
		if g := p.gen; g != nil && g.key == p.key {
			g.ident.deleted = p.ident.deleted
			if p.ident.fkey != g.ident.fkey {
				old := g.id
				g.identify(p)
				if old != g.id {
					out.log(slog.LevelInfo, "generation binary changed", "generation", g.id, "was", old)
				}
			}
		}
	}

	// Accounting: exited processes keep their last CPU in their generation.
	for pid, p := range s.procs {
		if q := seen[pid]; q == p {
			continue
		}
		if p.gen != nil {
			p.gen.exitedTicks += p.ticks
		}
	}
	for _, g := range s.gens {
		g.liveTicks, g.rssBytes = 0, 0
		g.live, g.draining = g.live[:0], g.draining[:0]
	}
	s.serving = s.serving[:0]
	for _, p := range sortedProcs(seen) {
		g := p.gen
		if g == nil {
			continue
		}
		g.liveTicks += p.ticks
		g.rssBytes += p.rssBytes
		switch {
		case p.role == roleWorker:
			g.live = append(g.live, p.key.pid)
			s.serving = append(s.serving, p)
		case p.role == roleDrain:
			g.draining = append(g.draining, p.key.pid)
			s.serving = append(s.serving, p)
		case p.server:
			s.serving = append(s.serving, p)
		}
		if p.rec == nil || p.recID != g.id || p.rec.MasterPID != g.rec.MasterPID || p.rec.ExeSHA256 != g.rec.ExeSHA256 {
			r := g.rec
			r.WorkerPID = p.key.pid
			p.rec, p.recID = &r, g.id
		}
	}

	// Generation transitions.
	for _, g := range s.order {
		if !g.alive {
			continue
		}
		m := seen[g.key.pid]
		if m == nil || m.key != g.key || m.gen != g {
			g.alive = false
			g.exited = now
			succ := g.successor
			switch {
			case succ != nil && succ.alive:
				out.emit(now, KindQUIT, g.id, succ.id, fmt.Sprintf("old master %d exited; %s serves", g.key.pid, succ.id))
			case g.parent != nil && g.parent.alive:
				msg := fmt.Sprintf("new generation %s exited; %s still serves", g.id, g.parent.id)
				if len(g.parent.live) == 0 {
					msg = fmt.Sprintf("new generation %s exited; %s runs but has no workers", g.id, g.parent.id)
				}
				out.emit(now, KindRollback, g.id, g.parent.id, msg)
			default:
				out.log(slog.LevelInfo, "generation exited", "generation", g.id)
			}
			continue
		}
		slices.Sort(g.live)
		slices.Sort(g.draining)
		succ := g.successor
		switch {
		case len(g.live) == 0 && g.hadWorkers && succ != nil && succ.alive:
			out.emit(now, KindWINCH, g.id, succ.id, fmt.Sprintf("old generation %s has no workers left; %s serves", g.id, succ.id))
			clear(g.baseline)
		case len(g.live) > 0 && len(g.baseline) == 0:
			if g.hadWorkers || (succ != nil && succ.alive && s.scans > 1 && g.start.Before(succ.start)) {
				out.log(slog.LevelInfo, "generation has workers again", "generation", g.id, "workers", slices.Clone(g.live))
			}
			for _, w := range g.live {
				g.baseline[w] = true
			}
		case len(g.live) > 0:
			liveSet := make(map[int]bool, len(g.live))
			for _, w := range g.live {
				liveSet[w] = true
			}
			before := len(g.baseline)
			for w := range g.baseline {
				if !liveSet[w] {
					delete(g.baseline, w)
				}
			}
			switch {
			case len(g.baseline) == 0:
				out.emit(now, KindReload, g.id, "", fmt.Sprintf("master %d replaced its workers: %v", g.key.pid, g.live))
				for _, w := range g.live {
					g.baseline[w] = true
				}
			case len(g.live) <= before:
				// A worker crashed and was respawned: not a reload.
				for _, w := range g.live {
					g.baseline[w] = true
				}
			}
		}
		g.hadWorkers = len(g.live) > 0
	}

	s.checkOldbin(seen, now, &out)
	s.checkPendings(seen, snap, now, &out)
	s.procs = seen
	s.evict()
	return s, out
}

// sortedProcs lists procs by pid: step's output (events, their order, the
// generations created) does not depend on map order.
func sortedProcs(m map[int]*proc) []*proc {
	ps := make([]*proc, 0, len(m))
	for _, p := range m {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *proc) int { return a.key.pid - b.key.pid })
	return ps
}

func (s *swapState) newGeneration(p *proc, kind string) *generation {
	g := &generation{key: p.key, kind: kind, alive: true, start: p.started, baseline: map[int]bool{}, handshakes: map[string]uint64{}}
	s.gens[p.key] = g
	s.order = append(s.order, g)
	return g
}

// identify takes the generation's binary identity from its main process.
func (g *generation) identify(p *proc) {
	g.ident = p.ident
	pid := p.key.pid
	g.rec = record.Generation{MasterPID: pid, Exe: p.ident.exe, ExeSHA256: p.ident.sha256, OpenSSL: p.ident.openssl}
	sha12 := p.ident.sha256
	if len(sha12) > 12 {
		sha12 = sha12[:12]
	}
	if sha12 == "" {
		sha12 = "unknown"
	}
	g.id = fmt.Sprintf("%s-%s-%d", labelSafe(g.kind), sha12, pid)
	g.rec.ID = g.id
}

// labelSafe keeps a process name usable inside a generation id.
func labelSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// noteEmerg opens a pending failed swap for an [emerg] line, as of the
// previous snapshot: an [emerg] from a worker is ignored; any other opens
// a pending failure that a new master running within FailedSwapTimeout
// settles.
func (s *swapState) noteEmerg(e emergNote, out *stepOut) {
	pid := e.pid
	var g *generation
	if p := s.procs[pid]; p != nil {
		switch p.role {
		case roleWorker, roleDrain, roleHelper:
			out.log(slog.LevelDebug, "emerg from a worker ignored", "pid", pid, "msg", e.msg)
			return
		case roleMaster:
			if p.gen != nil && p.gen.key == p.key {
				g = p.gen
			} else if m := s.procs[p.ppid]; m != nil && m.gen != nil {
				g = m.gen
			}
		}
	}
	if pid < 0 {
		pid = 0
	}
	if g == nil && pid > 0 && e.ppid > 0 {
		// A new binary that fails its configuration usually logs and exits
		// before a scan sees it; while it lives, its parent names the
		// generation that tried the swap.
		if m := s.procs[e.ppid]; m != nil && m.role == roleMaster && m.gen != nil && m.gen.key == m.key {
			g = m.gen
		}
	}
	s.addPending(&pending{gen: g, since: e.at, ts: e.ts, emergPID: pid, reason: "[emerg] " + e.msg})
}

// checkOldbin opens a pending failure when a master's pid file was renamed
// to .oldbin and it has no running successor.
func (s *swapState) checkOldbin(seen map[int]*proc, now time.Time, out *stepOut) {
	for _, g := range s.order {
		if !g.alive || g.kind != record.GenerationNginx || g.ident.pidFile == "" {
			continue
		}
		if g.parent != nil && g.parent.alive {
			continue // the new master of an ongoing swap shares the pid path
		}
		exists := false
		if m := seen[g.key.pid]; m != nil && m.key == g.key {
			exists = m.oldbin
		}
		if exists && !g.oldbinSeen && (g.successor == nil || !g.successor.alive) {
			out.log(slog.LevelInfo, "pid file renamed to .oldbin", "generation", g.id, "pid_file", g.ident.pidFile)
			s.addPending(&pending{gen: g, since: now, ts: now, reason: g.ident.pidFile + ".oldbin appeared"})
		}
		g.oldbinSeen = exists
	}
}

func (s *swapState) addPending(p *pending) {
	for _, q := range s.pendings {
		if q.gen == nil || p.gen == nil || q.gen == p.gen {
			if q.gen == nil {
				q.gen = p.gen
			}
			if q.emergPID == 0 {
				q.emergPID = p.emergPID
			}
			if p.reason != "" && !strings.Contains(q.reason, p.reason) {
				q.reason += "; " + p.reason
			}
			return
		}
	}
	s.pendings = append(s.pendings, p)
}

// resolvePendings drops the pending failures that a new master of g settles.
func (s *swapState) resolvePendings(g *generation) {
	s.pendings = slices.DeleteFunc(s.pendings, func(p *pending) bool {
		return p.gen == nil || p.gen == g
	})
}

// pendingPIDs are the processes whose liveness the next snapshot must say
// (snapshot.alive): those that logged a pending [emerg].
func (s *swapState) pendingPIDs(dst []int) []int {
	for _, p := range s.pendings {
		if p.emergPID > 0 {
			dst = append(dst, p.emergPID)
		}
	}
	return dst
}

func (s *swapState) checkPendings(seen map[int]*proc, snap *snapshot, now time.Time, out *stepOut) {
	keep := s.pendings[:0]
	for _, p := range s.pendings {
		p.scans++
		candidate := false // a master-titled child that may still become the new master
		for _, q := range seen {
			if q.role == roleMaster && q.gen == nil {
				if m := seen[q.ppid]; m != nil && m.role == roleMaster && (p.gen == nil || m.gen == p.gen) {
					candidate = true
				}
			}
		}
		_, emergAlive := seen[p.emergPID]
		if p.emergPID > 0 && !emergAlive {
			emergAlive = snap.alive[p.emergPID]
		}
		fast := p.emergPID > 0 && !emergAlive && !candidate && p.scans >= 1
		if !fast && now.Sub(p.since) < s.cfg.failedSwapTimeout {
			keep = append(keep, p)
			continue
		}
		var serving []string
		subject := ""
		if p.gen != nil && p.gen.alive {
			serving = append(serving, p.gen.id)
			subject = p.gen.id
		} else {
			for _, g := range s.order {
				if g.alive && g.kind == record.GenerationNginx && len(g.live) > 0 && (g.successor == nil || !g.successor.alive) {
					serving = append(serving, g.id)
				}
			}
			if len(serving) > 0 {
				subject = serving[0]
			}
		}
		msg := fmt.Sprintf("swap failed (%s): no new master runs; %s still serves", p.reason, strings.Join(serving, ", "))
		if len(serving) == 0 {
			msg = fmt.Sprintf("swap failed (%s): no new master runs and no generation serves", p.reason)
		}
		out.emit(now, KindFailed, subject, strings.Join(serving, ","), msg)
	}
	clear(s.pendings[len(keep):])
	s.pendings = keep
}

// evict drops the oldest exited generations beyond MaxGenerations.
func (s *swapState) evict() {
	for len(s.order) > s.cfg.maxGenerations {
		i := slices.IndexFunc(s.order, func(g *generation) bool { return !g.alive })
		if i < 0 {
			return
		}
		g := s.order[i]
		s.order = slices.Delete(s.order, i, i+1)
		delete(s.gens, g.key)
		for _, o := range s.order {
			if o.parent == g {
				o.parent = nil
			}
			if o.successor == g {
				o.successor = nil
			}
		}
		s.evicted++
	}
}

// swapping says whether an nginx swap is in progress.
func (s *swapState) swapping() bool { return len(s.swappingIDs()) > 0 }

// swappingIDs are the ids of the generations in an nginx swap in progress
// (alive, with their parent or successor alive: two generations of one
// lineage); nil when none is.
func (s *swapState) swappingIDs() map[string]bool {
	var ids map[string]bool
	for _, g := range s.order {
		if g.alive && ((g.parent != nil && g.parent.alive) || (g.successor != nil && g.successor.alive)) {
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[g.rec.ID] = true
		}
	}
	return ids
}
