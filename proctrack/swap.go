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
	// kids remembers the master-titled children of masters (a USR2's new
	// master, forked or exec'd) seen by a scan, by pid, for a while after
	// they exit: the [emerg] of a new binary that fails its configuration
	// is read from the log after it has gone.
	kids map[int]kidNote
	// reported are the failures reported within failedSwapTimeout: a late
	// [emerg] of one (the log read after nginx's own verdict, within a
	// third of it) joins it.
	reported []reportedFail
	serving  []*proc // workers and servers, for the socket index
	scans    uint64  // steps taken
	evicted  uint64  // generations evicted
}

func newSwapState(cfg swapConfig) *swapState {
	return &swapState{cfg: cfg, procs: map[int]*proc{}, gens: map[procKey]*generation{}}
}

// reportedFail is a failed swap reported.
type reportedFail struct {
	gen *generation // nil: no fact named its master
	at  time.Time
}

// kidNote is a master-titled child of a master, as a scan saw it.
type kidNote struct {
	key    procKey // the child
	parent procKey // its master
	seen   time.Time
}

// maxKids bounds swapState.kids; kidsKeep is how long a child that exited
// is remembered.
const (
	maxKids  = 64
	kidsKeep = 30 * time.Second
)

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

// pending is a suspected failed swap. gen is the master that tried it,
// from a fact of its own: its pid file's .oldbin, or the [emerg]'s process
// (itself, its parent, or the child of it a scan saw); nil when none says.
// cands are then the masters the [emerg]'s error log leaves possible (nil:
// any), and the failure is reported without naming one unless a later
// fact does.
type pending struct {
	gen      *generation
	cands    []*generation
	by       string // which fact named gen
	since    time.Time
	ts       time.Time
	emergPID int
	reason   string
	oldbin   bool // opened by the pid file's .oldbin (a USR2 attempt of its own)
	back     bool // the pid file was renamed to .oldbin and back: nginx saw its new binary exit
	scans    int
}

// emergNote is an [emerg] line of an nginx error log, as NoteEmerg read it.
type emergNote struct {
	at   time.Time // when it was noted: a pending failure's start
	ts   time.Time // the line's own time
	pid  int       // the process that logged it
	ppid int       // its parent when noted (0: gone by then)
	msg  string
	// log is the error log the line was read from ("" unknown), masters
	// the nginx masters that write that file (their -e startup log, where
	// a new binary's configuration errors go, or an error log they hold
	// open), as the Tracker found them when the line was noted.
	log     string
	masters []procKey
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
		s.noteEmerg(e, now, &out)
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
	s.rememberKids(seen, now)
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
	g.rec = record.Generation{MasterPID: pid, Exe: p.ident.exe, ExeSHA256: p.ident.sha256, OpenSSL: p.ident.openssl, Pod: p.ident.pod}
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
// settles. The master it is about is named by facts of its own only: the
// process that logged (a master), its parent (read when the line was
// noted, or remembered from a scan that saw it), or the one master whose
// error log the line came from; never by being the only or the first
// master on the host.
func (s *swapState) noteEmerg(e emergNote, now time.Time, out *stepOut) {
	pid := e.pid
	var g *generation
	by := ""
	if p := s.procs[pid]; p != nil {
		switch p.role {
		case roleWorker, roleDrain, roleHelper:
			out.log(slog.LevelDebug, "emerg from a worker ignored", "pid", pid, "msg", e.msg)
			return
		case roleMaster:
			if p.gen != nil && p.gen.key == p.key {
				g, by = p.gen, "the master that logged the [emerg]"
			} else if m := s.procs[p.ppid]; m != nil && m.gen != nil && m.gen.key == m.key {
				g, by = m.gen, "the parent of the process that logged the [emerg]"
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
			g, by = m.gen, "the parent of the process that logged the [emerg]"
		}
	}
	if g == nil && pid > 0 {
		// A scan saw it as a master's child before it exited.
		if k, ok := s.kids[pid]; ok && now.Sub(k.seen) <= kidsKeep {
			if m := s.gens[k.parent]; m != nil && m.alive {
				g, by = m, "the parent a scan saw of the process that logged the [emerg]"
			}
		}
	}
	var cands []*generation
	if g == nil && len(e.masters) > 0 {
		for _, k := range e.masters {
			if m := s.gens[k]; m != nil && m.alive && !slices.Contains(cands, m) {
				cands = append(cands, m)
			}
		}
		if len(cands) == 1 {
			g, by, cands = cands[0], "the master whose error log holds the [emerg]", nil
		} else if len(cands) == 0 {
			cands = nil
		}
	}
	reason := "[emerg] " + e.msg
	s.addPending(&pending{gen: g, cands: cands, by: by, since: e.at, ts: e.ts, emergPID: pid, reason: reason}, out)
}

// rememberKids notes the master-titled children of masters in seen, and
// forgets those gone for kidsKeep (or the oldest, beyond maxKids).
func (s *swapState) rememberKids(seen map[int]*proc, now time.Time) {
	for _, p := range seen {
		if p.role != roleMaster {
			continue
		}
		if m := seen[p.ppid]; m != nil && m.role == roleMaster {
			if s.kids == nil {
				s.kids = map[int]kidNote{}
			}
			s.kids[p.key.pid] = kidNote{key: p.key, parent: m.key, seen: now}
		}
	}
	for pid, k := range s.kids {
		if now.Sub(k.seen) > kidsKeep {
			delete(s.kids, pid)
		}
	}
	for len(s.kids) > maxKids {
		oldest := -1
		for pid, k := range s.kids {
			if o, ok := s.kids[oldest]; !ok || k.seen.Before(o.seen) || (k.seen.Equal(o.seen) && pid < oldest) {
				oldest = pid
			}
		}
		delete(s.kids, oldest)
	}
}

// checkOldbin opens a pending failure when a master's pid file was renamed
// to .oldbin (the scan found the file, or the pid-file watch saw the
// rename since the last scan) and it has no running successor. A rename
// already undone (the watch saw it, the file is gone) is nginx's own
// verdict: its new binary exited.
func (s *swapState) checkOldbin(seen map[int]*proc, now time.Time, out *stepOut) {
	for _, g := range s.order {
		if !g.alive || g.kind != record.GenerationNginx || g.ident.pidFile == "" {
			continue
		}
		if g.parent != nil && g.parent.alive {
			continue // the new master of an ongoing swap shares the pid path
		}
		exists, renamed := false, false
		if m := seen[g.key.pid]; m != nil && m.key == g.key {
			exists, renamed = m.oldbin, m.oldbinRenamed
		}
		noSucc := g.successor == nil || !g.successor.alive
		if (exists && !g.oldbinSeen || renamed) && noSucc {
			back := renamed && !exists
			out.log(slog.LevelInfo, "pid file renamed to .oldbin", "generation", g.id, "pid_file", g.ident.pidFile, "renamed_back", back)
			reason := g.ident.pidFile + ".oldbin appeared"
			if back {
				reason = g.ident.pidFile + " renamed to .oldbin and back"
			}
			s.addPending(&pending{gen: g, by: "its pid file's .oldbin", since: now, ts: now, reason: reason, oldbin: true, back: back}, out)
		}
		g.oldbinSeen = exists
	}
}

// addPending adds p, or joins it to the pending failure it is part of: one
// about the same master, or one whose master no fact named yet and whose
// candidates allow p's. A pending of unknown master joins the one pending
// its candidates allow, when there is exactly one.
func (s *swapState) addPending(p *pending, out *stepOut) {
	var into *pending
	if p.gen != nil {
		for _, q := range s.pendings {
			if q.gen == p.gen {
				into = q
				break
			}
		}
		if into == nil {
			for _, q := range s.pendings {
				if q.gen == nil && q.allows(p.gen) {
					into = q
					break
				}
			}
		}
	} else {
		var known []*pending
		for _, q := range s.pendings {
			if q.gen != nil && p.allows(q.gen) {
				known = append(known, q)
			}
		}
		if len(known) == 1 {
			into = known[0]
		} else {
			for _, q := range s.pendings {
				if q.gen == nil {
					into = q
					break
				}
			}
		}
	}
	if into == nil && !p.oldbin {
		// A line of a failure already reported (nginx's verdict came
		// first): it joins it rather than report it again. A .oldbin is
		// a new attempt.
		for _, r := range slices.Backward(s.reported) {
			if p.since.Sub(r.at) <= s.cfg.failedSwapTimeout/3 && (r.gen != nil && p.allows(r.gen) || r.gen == nil && p.gen == nil) {
				id := ""
				if r.gen != nil {
					id = r.gen.id
				}
				out.log(slog.LevelInfo, "emerg of a failed swap already reported", "generation", id, "reason", p.reason)
				return
			}
		}
	}
	if into == nil {
		s.pendings = append(s.pendings, p)
		if p.gen != nil {
			out.log(slog.LevelInfo, "failed swap suspected", "generation", p.gen.id, "by", p.by)
		}
		return
	}
	q := into
	switch {
	case q.gen == nil && p.gen != nil:
		q.gen, q.by, q.cands = p.gen, p.by, nil
		out.log(slog.LevelInfo, "failed swap suspected", "generation", q.gen.id, "by", q.by)
	case q.gen == nil:
		// Two lines of unknown master: the candidates either allows.
		if q.cands == nil || p.cands == nil {
			q.cands = nil
		} else {
			for _, c := range p.cands {
				if !slices.Contains(q.cands, c) {
					q.cands = append(q.cands, c)
				}
			}
		}
	}
	if q.emergPID == 0 {
		q.emergPID = p.emergPID
	}
	q.back = q.back || p.back
	if p.reason != "" && !strings.Contains(q.reason, p.reason) {
		q.reason += "; " + p.reason
	}
}

// allows says whether g may be the master of p: p names it, or names none
// and has no candidates or g among them.
func (p *pending) allows(g *generation) bool {
	if p.gen != nil {
		return p.gen == g
	}
	return p.cands == nil || slices.Contains(p.cands, g)
}

// resolvePendings drops the pending failures that a new master of g settles.
func (s *swapState) resolvePendings(g *generation) {
	s.pendings = slices.DeleteFunc(s.pendings, func(p *pending) bool {
		return p.allows(g)
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
				if m := seen[q.ppid]; m != nil && m.role == roleMaster && m.gen != nil && p.allows(m.gen) {
					candidate = true
				}
			}
		}
		_, emergAlive := seen[p.emergPID]
		if p.emergPID > 0 && !emergAlive {
			emergAlive = snap.alive[p.emergPID]
		}
		// Early: the process that logged is gone, or nginx renamed its pid
		// file back (its new binary exited), and no child may yet become
		// the new master.
		// The pid file renamed back waits a little for the [emerg] that
		// says why (the log is read apart from the scans).
		back := p.back && now.Sub(p.since) >= s.cfg.failedSwapTimeout/6
		fast := (p.emergPID > 0 && !emergAlive || back) && !candidate && p.scans >= 1
		if !fast && now.Sub(p.since) < s.cfg.failedSwapTimeout {
			keep = append(keep, p)
			continue
		}
		s.failed(p, now, out)
	}
	clear(s.pendings[len(keep):])
	s.pendings = keep
}

// failed emits the failed swap p: about the master a fact named, which
// alone still serves; or, when none did, about no generation, with the
// masters the facts left possible (those whose error log held the line).
// Another master on the host is never named: it had no swap.
func (s *swapState) failed(p *pending, now time.Time, out *stepOut) {
	g := p.gen
	s.reported = slices.DeleteFunc(s.reported, func(r reportedFail) bool { return now.Sub(r.at) > s.cfg.failedSwapTimeout })
	if len(s.reported) >= 8 {
		s.reported = slices.Delete(s.reported, 0, 1)
	}
	s.reported = append(s.reported, reportedFail{gen: g, at: now})
	switch {
	case g != nil && g.alive:
		msg := fmt.Sprintf("swap failed (%s): no new master runs; %s still serves", p.reason, g.id)
		if len(g.live) == 0 {
			msg = fmt.Sprintf("swap failed (%s): no new master runs; %s runs but has no workers", p.reason, g.id)
		}
		out.emit(now, KindFailed, g.id, g.id, msg)
	case g != nil:
		out.emit(now, KindFailed, g.id, "", fmt.Sprintf("swap failed (%s): no new master runs and %s has exited", p.reason, g.id))
	default:
		var ids []string
		for _, c := range p.cands {
			if c.alive {
				ids = append(ids, c.id)
			}
		}
		msg := fmt.Sprintf("swap failed (%s): no new master runs; no fact names the master that tried it", p.reason)
		if len(ids) > 0 {
			msg += fmt.Sprintf(" (its error log is that of %s)", strings.Join(ids, ", "))
		}
		out.emit(now, KindFailed, "", "", msg)
	}
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
