package loadgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
)

// ScenarioKind names an nginx process-management scenario run under load.
type ScenarioKind string

// Scenario kinds.
const (
	ScenarioNone ScenarioKind = ""
	// ScenarioSwap is nginx's binary upgrade: USR2 to the old master (a new
	// master starts beside it), WINCH to the old master (its workers stop
	// gracefully), QUIT to the old master (it exits; the new one serves).
	ScenarioSwap ScenarioKind = "swap"
	// ScenarioReload is HUP to the master: new workers with the re-read
	// configuration replace the old ones.
	ScenarioReload ScenarioKind = "reload"
	// ScenarioRollback is nginx's fast rollback during a swap: USR2 and
	// WINCH to the old master, then HUP to the old master (its workers come
	// back) and QUIT to the new master.
	ScenarioRollback ScenarioKind = "rollback"
)

// ParseScenario checks a scenario name.
func ParseScenario(s string) (ScenarioKind, error) {
	switch k := ScenarioKind(s); k {
	case ScenarioNone, ScenarioSwap, ScenarioReload, ScenarioRollback:
		return k, nil
	}
	return "", fmt.Errorf("%w: scenario %q (want swap, reload or rollback)", ErrUsage, s)
}

// Scenario configures signals sent to nginx during every trial.
type Scenario struct {
	Kind ScenarioKind
	// At are the step times as offsets from the start of the trial (warm-up
	// included), one per step. Default: spread evenly over the measured
	// part of the trial.
	At []time.Duration
	// StepTimeout bounds how long a step waits for the process table to
	// confirm it. Default 5 s.
	StepTimeout time.Duration
	// MasterPID is the nginx master to start from. Default: the process
	// among Config.ServerPIDs whose command line says "master process".
	MasterPID int
}

type stepKind int

const (
	stepUSR2 stepKind = iota
	stepWINCH
	stepQUITOld
	stepHUP
	stepHUPOld
	stepQUITNew
)

func (k ScenarioKind) steps() []stepKind {
	switch k {
	case ScenarioSwap:
		return []stepKind{stepUSR2, stepWINCH, stepQUITOld}
	case ScenarioReload:
		return []stepKind{stepHUP}
	case ScenarioRollback:
		return []stepKind{stepUSR2, stepWINCH, stepHUPOld, stepQUITNew}
	}
	return nil
}

func (s *Scenario) validate(c *Config) error {
	if s.Kind == ScenarioNone {
		return nil
	}
	if _, err := ParseScenario(string(s.Kind)); err != nil {
		return err
	}
	if s.MasterPID == 0 && len(c.ServerPIDs) == 0 {
		return fmt.Errorf("%w: -scenario needs -server-pid (the nginx master)", ErrUsage)
	}
	n := len(s.Kind.steps())
	if len(s.At) == 0 {
		for i := range n {
			s.At = append(s.At, c.Warmup+c.Duration*time.Duration(i+1)/time.Duration(n+1))
		}
	}
	if len(s.At) != n {
		return fmt.Errorf("%w: scenario %s has %d steps, got %d times", ErrUsage, s.Kind, n, len(s.At))
	}
	if !slices.IsSorted(s.At) {
		return fmt.Errorf("%w: scenario times must be ascending", ErrUsage)
	}
	if s.StepTimeout <= 0 {
		s.StepTimeout = 5 * time.Second
	}
	return nil
}

// Event is one scenario step: a signal sent and what the process table
// showed afterwards.
type Event struct {
	Time    time.Time `json:"time"`
	Offset  float64   `json:"offset_s"` // seconds since the run started
	TrialID int       `json:"trial_id"`
	Step    string    `json:"step"` // e.g. "USR2 old master"
	PID     int       `json:"pid"`  // the process signalled
	OK      bool      `json:"ok"`
	Detail  string    `json:"detail"`
}

// ScenarioResult is the verdict of one scenario run (one per trial).
type ScenarioResult struct {
	TrialID   int    `json:"trial_id"`
	Kind      string `json:"kind"`
	Status    string `json:"status"` // "ok" or "FAILED"
	OldMaster int    `json:"old_master"`
	NewMaster int    `json:"new_master,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// procTable is a snapshot with nginx-aware queries.
type procTable struct {
	root string
	all  map[int]procfs.Stat
	cmd  map[int]string
}

func snapshot(root string) (*procTable, error) {
	all, err := scanProcs(root)
	if err != nil {
		return nil, err
	}
	return &procTable{root: root, all: all, cmd: map[int]string{}}, nil
}

func (t *procTable) cmdline(pid int) string {
	if c, ok := t.cmd[pid]; ok {
		return c
	}
	c := readCmdline(t.root, pid)
	t.cmd[pid] = c
	return c
}

func (t *procTable) alive(pid int) bool {
	p, ok := t.all[pid]
	return ok && p.State != 'Z' && p.State != 'X'
}

func (t *procTable) childrenWith(pid int, marker string) []int {
	var out []int
	for c, p := range t.all {
		if p.PPID == pid && t.alive(c) && strings.Contains(t.cmdline(c), marker) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func (t *procTable) workers(master int) []int { return t.childrenWith(master, "worker process") }

// newMaster is a master forked by USR2 that has really started: it runs
// the new binary's master loop and has workers. (Between fork and exec the
// child still looks like the old master, and a new binary that fails its
// configuration check exits before it starts any worker.)
func (t *procTable) newMaster(old int) int {
	for _, m := range t.childrenWith(old, "master process") {
		if len(t.workers(m)) > 0 {
			return m
		}
	}
	return 0
}

// findMaster picks the nginx master among pids.
func findMaster(root string, pids []int) (int, error) {
	t, err := snapshot(root)
	if err != nil {
		return 0, err
	}
	for _, p := range pids {
		if t.alive(p) && strings.Contains(t.cmdline(p), "master process") {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: none of %v is an nginx master process", ErrScenarioFailed, pids)
}

// scenarioRunner runs one scenario during a trial.
type scenarioRunner struct {
	sc       Scenario
	root     string
	trialID  int
	runStart time.Time
	emit     func(Event)
}

// run executes the steps at their times after trialStart, starting from
// master, and returns the verdict; res.NewMaster (or OldMaster on rollback)
// is the master serving afterwards.
func (r *scenarioRunner) run(ctx context.Context, trialStart time.Time, master int) ScenarioResult {
	res := ScenarioResult{TrialID: r.trialID, Kind: string(r.sc.Kind), Status: "ok", OldMaster: master}
	old, nw := master, 0
	fail := func(detail string) ScenarioResult {
		res.Status, res.Detail = "FAILED", detail
		return res
	}
	for i, step := range r.sc.Kind.steps() {
		select {
		case <-ctx.Done():
			return fail("canceled before step " + fmt.Sprint(i+1))
		case <-time.After(time.Until(trialStart.Add(r.sc.At[i]))):
		}
		var (
			name   string
			target int
			sig    syscall.Signal
			check  func(t *procTable) (bool, string)
		)
		switch step {
		case stepUSR2:
			name, target, sig = "USR2 old master", old, syscall.SIGUSR2
			check = func(t *procTable) (bool, string) {
				if m := t.newMaster(old); m != 0 && t.alive(old) {
					nw = m
					return true, fmt.Sprintf("two masters running: old %d (workers %v), new %d (workers %v)", old, t.workers(old), m, t.workers(m))
				}
				return false, fmt.Sprintf("no new master with workers beside %d (new binary or config failed? see the error log for [emerg])", old)
			}
		case stepWINCH:
			name, target, sig = "WINCH old master", old, syscall.SIGWINCH
			check = func(t *procTable) (bool, string) {
				ow, nwk := t.workers(old), t.workers(nw)
				if len(ow) == 0 && len(nwk) > 0 && t.alive(old) {
					return true, fmt.Sprintf("old master %d has no workers; new master %d serves with %v", old, nw, nwk)
				}
				return false, fmt.Sprintf("old workers %v, new workers %v", ow, nwk)
			}
		case stepQUITOld:
			name, target, sig = "QUIT old master", old, syscall.SIGQUIT
			check = func(t *procTable) (bool, string) {
				if !t.alive(old) && t.alive(nw) && len(t.workers(nw)) > 0 {
					return true, fmt.Sprintf("old master %d gone; master %d with workers %v", old, nw, t.workers(nw))
				}
				return false, fmt.Sprintf("old master alive=%v, new master %d alive=%v", t.alive(old), nw, t.alive(nw))
			}
		case stepHUP:
			name, target, sig = "HUP master", old, syscall.SIGHUP
			t0, err := snapshot(r.root)
			if err != nil {
				return fail(err.Error())
			}
			before := t0.workers(old)
			check = func(t *procTable) (bool, string) {
				if !t.alive(old) {
					return false, fmt.Sprintf("master %d died", old)
				}
				for _, w := range t.workers(old) {
					if !slices.Contains(before, w) {
						return true, fmt.Sprintf("master %d: new workers %v (before %v)", old, t.workers(old), before)
					}
				}
				return false, fmt.Sprintf("no new worker under master %d (before %v): configuration rejected? see the error log", old, before)
			}
		case stepHUPOld:
			name, target, sig = "HUP old master", old, syscall.SIGHUP
			check = func(t *procTable) (bool, string) {
				if w := t.workers(old); len(w) > 0 && t.alive(old) {
					return true, fmt.Sprintf("old master %d has workers again: %v", old, w)
				}
				return false, fmt.Sprintf("old master %d has no workers", old)
			}
		case stepQUITNew:
			name, target, sig = "QUIT new master", nw, syscall.SIGQUIT
			check = func(t *procTable) (bool, string) {
				if !t.alive(nw) && t.alive(old) && len(t.workers(old)) > 0 {
					return true, fmt.Sprintf("new master %d gone; old master %d serves with %v", nw, old, t.workers(old))
				}
				return false, fmt.Sprintf("new master %d alive=%v, old master alive=%v", nw, t.alive(nw), t.alive(old))
			}
		}
		ev := Event{Time: time.Now(), TrialID: r.trialID, Step: name, PID: target}
		ev.Offset = ev.Time.Sub(r.runStart).Seconds()
		if target <= 0 {
			ev.Detail = "no process to signal"
			r.emit(ev)
			return fail(name + ": " + ev.Detail)
		}
		if err := syscall.Kill(target, sig); err != nil {
			ev.Detail = fmt.Sprintf("kill(%d, %v): %v", target, sig, err)
			r.emit(ev)
			return fail(name + ": " + ev.Detail)
		}
		ok, detail := r.await(ctx, check)
		ev.OK, ev.Detail = ok, detail
		r.emit(ev)
		if !ok {
			return fail(name + ": " + detail)
		}
	}
	switch r.sc.Kind {
	case ScenarioSwap:
		res.NewMaster = nw
	case ScenarioRollback:
		res.NewMaster = old
	default:
		res.NewMaster = old
	}
	return res
}

// await polls the process table until check passes or the step times out.
func (r *scenarioRunner) await(ctx context.Context, check func(*procTable) (bool, string)) (bool, string) {
	deadline := time.Now().Add(r.sc.StepTimeout)
	detail := "not checked"
	for {
		t, err := snapshot(r.root)
		if err != nil {
			detail = err.Error()
		} else {
			var ok bool
			if ok, detail = check(t); ok {
				return true, detail
			}
		}
		if time.Now().After(deadline) {
			return false, "timeout after " + r.sc.StepTimeout.String() + ": " + detail
		}
		select {
		case <-ctx.Done():
			return false, "canceled: " + detail
		case <-time.After(20 * time.Millisecond):
		}
	}
}
