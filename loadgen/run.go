package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Latency summarises a latency distribution in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func latencyOf(h *Histogram) Latency {
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	return Latency{
		P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)), P95: ms(h.Quantile(0.95)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6,
	}
}

// Bin is one slice of a trial's timeline, by intended send time.
type Bin struct {
	Offset    float64 `json:"offset_s"` // bin start, seconds since the run started
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	MaxMS     float64 `json:"max_ms"`
	MeanMS    float64 `json:"mean_ms"`
	Warmup    bool    `json:"warmup,omitempty"`
	sumMS     float64
	completed int
}

// RSSPoint is the server's resident memory at one moment.
type RSSPoint struct {
	Offset float64 `json:"offset_s"` // seconds since the run started
	Bytes  int64   `json:"bytes"`
}

// TrialResult is one trial: one arm at one rate for Duration.
type TrialResult struct {
	ID         int     `json:"id"` // position in the (shuffled) execution order
	Arm        string  `json:"arm"`
	Rate       float64 `json:"rate"`
	Trial      int     `json:"trial"`
	RateTarget float64 `json:"rate_target"`
	// RateAchieved is successful requests whose actual send fell inside
	// the window, per second. It drops below target when requests fail or
	// the sender falls behind (see SendLagMS); server slowness shows in
	// latency instead (the load is open).
	RateAchieved float64 `json:"rate_achieved"`
	// RateCompleted is successful requests that completed in the window,
	// per second: the server's handshake throughput.
	RateCompleted float64        `json:"rate_completed"`
	Requests      int            `json:"requests"` // intended in the measured window
	OK            int            `json:"ok"`
	Errors        int            `json:"errors"`
	Timeouts      int            `json:"timeouts"` // errors whose reason is a timeout
	ErrorReasons  map[string]int `json:"error_reasons,omitempty"`
	// ErrorSamples is the error text of the first failure of each reason.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Groups       map[string]int    `json:"groups"`
	HRR          int               `json:"hrr"`
	// Resumed is how many successful measured requests resumed a session
	// (the client's ConnectionState.DidResume); ResumeAttempts how many
	// offered a ticket (an arm with a resume share).
	Resumed        int     `json:"resumed"`
	ResumeAttempts int     `json:"resume_attempts,omitempty"`
	LatencyMS      Latency `json:"latency_ms"` // from the intended send time
	ServiceMS      Latency `json:"service_ms"` // from the actual send time (coordinated omission NOT corrected; for comparison)
	// SendLagMS is how late the generator sent (actual minus intended);
	// a large lag means the client machine could not keep up.
	SendLagMS Latency `json:"send_lag_ms"`
	// Valid is false when the trial broke one of the validity limits
	// (InvalidReasons says which); an invalid trial is reported but left
	// out of every summary, ratio and ceiling.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	// GroupMismatch is set when successful requests negotiated another
	// group than the one the arm measures.
	GroupMismatch string `json:"group_mismatch,omitempty"`
	// Idle sessions (Config.IdleSessions): asked for, opened before the
	// trial, still open at the window end; the server's resident memory
	// before the run's first idle session and with this trial's open, and
	// the growth per session.
	IdleSessionsWanted           int       `json:"idle_sessions_wanted,omitempty"`
	IdleSessionsOpened           int       `json:"idle_sessions_opened,omitempty"`
	IdleSessions                 int       `json:"idle_sessions,omitempty"`
	IdleErrors                   int       `json:"idle_errors,omitempty"`
	IdleFirstError               string    `json:"idle_first_error,omitempty"`
	IdleOpenStart                time.Time `json:"idle_open_start,omitzero"`
	IdleOpenEnd                  time.Time `json:"idle_open_end,omitzero"`
	ServerRSSBaselineBytes       int64     `json:"server_rss_baseline_bytes,omitempty"`
	ServerRSSWithIdleBytes       int64     `json:"server_rss_with_idle_bytes,omitempty"`
	ServerRSSPerIdleSessionBytes *float64  `json:"server_rss_per_idle_session_bytes,omitempty"`
	// ServerCPUUsPerHandshake is the server's run time in the window
	// (schedstat, every thread of ServerCPUPIDs) over Completed; set when a
	// server process was measured.
	ServerCPUUsPerHandshake *float64 `json:"server_cpu_us_per_handshake,omitempty"`
	ServerCPUUs             *int64   `json:"server_cpu_us,omitempty"`
	ServerCPUPIDs           []int    `json:"server_cpu_pids,omitempty"` // the processes measured in the window
	ServerRSSMaxBytes       int64    `json:"server_rss_max_bytes,omitempty"`
	ClientCPUUsPerHandshake float64  `json:"client_cpu_us_per_handshake"`
	// ClientRunqueueWaitMS is how long loadgen's threads, together, were
	// ready to run but waited for a CPU in the window (schedstat): much of
	// it means other processes held the machine's cores.
	ClientRunqueueWaitMS float64 `json:"client_runqueue_wait_ms"`
	// CPUSampledFrom and CPUSampledTo are when the CPU readings at the
	// window's edges were actually taken: late when the machine starved
	// loadgen's sampler, and then the CPU figures cover that span, not the
	// window (the trial is invalid: sample_late).
	CPUSampledFrom time.Time  `json:"cpu_sampled_from,omitzero"`
	CPUSampledTo   time.Time  `json:"cpu_sampled_to,omitzero"`
	ServerPIDs     []int      `json:"server_pids,omitempty"` // distinct X-Pid values seen
	Completed      int        `json:"completed"`             // OK responses that ended inside the window
	Start          time.Time  `json:"start"`                 // trial start (warm-up begins)
	WindowStart    time.Time  `json:"window_start"`
	WindowEnd      time.Time  `json:"window_end"`
	Timeline       []Bin      `json:"timeline"`
	RSS            []RSSPoint `json:"rss,omitempty"`

	hist, service, lag Histogram
}

// Results is everything a Run measured.
type Results struct {
	Started   time.Time      `json:"started"`
	Finished  time.Time      `json:"finished"`
	Target    string         `json:"target"`
	SNI       string         `json:"sni,omitempty"`
	Cores     int            `json:"cores"`
	GoVersion string         `json:"go_version"`
	Arrival   string         `json:"arrival"`
	Duration  float64        `json:"duration_s"`
	Warmup    float64        `json:"warmup_s"`
	Baseline  string         `json:"baseline"`
	Arms      []ArmInfo      `json:"arms"`
	Trials    []*TrialResult `json:"trials"`
	Summary   []ArmSummary   `json:"summary"`
	// Study is the arms in the form of the nginx live-swap study\'s table.
	Study []StudyRow `json:"study"`
	// Failures lists why measured requests failed, per arm and reason.
	Failures []Failure `json:"failures,omitempty"`
	// Warnings are what a reader of the results must know: arms that did
	// not measure their group, arms without a valid trial, server
	// processes that could not be found.
	Warnings []string `json:"warnings,omitempty"`
	// MaxRates are the max-rate searches (Config.MaxRateSearch), per arm.
	MaxRates []MaxRate `json:"max_rates,omitempty"`
	// Server says which processes were measured as the server, and how.
	Server    *ServerInfo      `json:"server,omitempty"`
	Events    []Event          `json:"events,omitempty"`
	Scenarios []ScenarioResult `json:"scenarios,omitempty"`
	// ScenarioStatus is "ok", "FAILED" or empty when no scenario ran.
	ScenarioStatus string    `json:"scenario_status,omitempty"`
	Requests       []Request `json:"-"` // when Config.KeepRequests
	// H2Load is set when an h2load comparison ran (Main's -h2load).
	H2Load *H2LoadComparison `json:"h2load,omitempty"`
}

// ArmInfo describes an arm in the results.
type ArmInfo struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups"`
	// Measures is the group the arm is meant to measure (Arm.Measures).
	Measures string `json:"measures"`
	// Resume is the share of requests that offer a session ticket.
	Resume float64 `json:"resume,omitempty"`
}

type job struct {
	arm   Arm
	rate  float64
	trial int
}

// Run executes every trial and returns the results. If a scenario step
// fails, no measured request succeeded, or an arm has no valid trial, Run
// still returns the Results, with an error wrapping ErrScenarioFailed,
// ErrFailed or ErrNoValidTrial (joined when several apply). With Config.OutDir set, the output files are written
// even after a failure.
func (c *Config) Run(ctx context.Context) (*Results, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	var jobs []job
	for _, rate := range c.Rates {
		var step []job
		for tr := range c.Trials {
			for _, a := range c.Arms {
				step = append(step, job{arm: a, rate: rate, trial: tr + 1})
			}
		}
		rng.Shuffle(len(step), func(i, j int) { step[i], step[j] = step[j], step[i] })
		jobs = append(jobs, step...)
	}
	res := &Results{
		Started: time.Now(), Target: c.Target, SNI: c.SNI, Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), Arrival: string(c.Arrival), Duration: c.Duration.Seconds(),
		Warmup: c.Warmup.Seconds(), Baseline: c.Baseline,
	}
	for _, a := range c.Arms {
		res.Arms = append(res.Arms, ArmInfo{Name: a.Name, Groups: a.GroupNames(), Measures: GroupName(a.Measures()), Resume: a.Resume})
	}
	server := NewServerCPU(c.ProcRoot, ServerSelection{Target: c.Target, NoSocket: c.NoServerSocket,
		PIDs: c.ServerPIDs, Names: c.ServerNames})
	// refresh selects the server's processes before a trial (nil: none).
	refresh := func() (*ServerCPU, error) {
		if !server.Refresh() {
			return nil, nil
		}
		if _, err := server.Sample(); err != nil {
			return nil, err
		}
		return server, nil
	}
	if _, err := refresh(); err != nil {
		return nil, err
	}
	var out *outputs
	if c.OutDir != "" {
		var err error
		if out, err = openOutputs(c.OutDir); err != nil {
			return nil, err
		}
		defer out.close()
	}
	master := c.Scenario.MasterPID
	var runErr error
	var idleBaseline int64 // the server's RSS before the first idle session
	for i, j := range jobs {
		if ctx.Err() != nil {
			runErr = ctx.Err()
			break
		}
		if i > 0 && c.Cooldown > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(c.Cooldown):
			}
		}
		var sc *scenarioRunner
		if c.Scenario.Kind != ScenarioNone && res.ScenarioStatus != "FAILED" {
			if master == 0 {
				m, err := findMaster(c.ProcRoot, c.ServerPIDs)
				if err != nil {
					res.ScenarioStatus = "FAILED"
					res.Scenarios = append(res.Scenarios, ScenarioResult{TrialID: i, Kind: string(c.Scenario.Kind), Status: "FAILED", Detail: err.Error()})
				}
				master = m
			}
			if master != 0 {
				sc = &scenarioRunner{sc: c.Scenario, root: c.ProcRoot, trialID: i, runStart: res.Started}
			}
		}
		serverCPU, err := refresh()
		if err != nil {
			runErr = err
			break
		}
		tr, reqs, evs, scr := c.runTrial(ctx, i, j, res.Started, serverCPU, sc, master, &idleBaseline)
		res.Trials = append(res.Trials, tr)
		res.Events = append(res.Events, evs...)
		if scr != nil {
			res.Scenarios = append(res.Scenarios, *scr)
			if scr.Status == "ok" {
				master = scr.NewMaster
				if res.ScenarioStatus == "" {
					res.ScenarioStatus = "ok"
				}
			} else {
				res.ScenarioStatus = "FAILED"
			}
		}
		c.Logger.Info("trial done", "id", i, "arm", tr.Arm, "rate", tr.Rate, "trial", tr.Trial,
			"achieved", tr.RateAchieved, "errors", tr.Errors, "p99_ms", tr.LatencyMS.P99)
		if out != nil {
			if err := out.writeRequests(reqs, res.Started); err != nil && runErr == nil {
				runErr = err
			}
		}
		if c.KeepRequests {
			res.Requests = append(res.Requests, reqs...)
		}
	}
	if c.MaxRateSearch && runErr == nil {
		id := len(res.Trials)
		for _, a := range c.Arms {
			m := c.searchMaxRate(ctx, a, func(rate float64) *TrialResult {
				serverCPU, _ := refresh()
				tr, _, _, _ := c.runTrial(ctx, id, job{arm: a, rate: rate, trial: 1}, res.Started, serverCPU, nil, 0, &idleBaseline)
				id++
				c.Logger.Info("search trial", "arm", a.Name, "rate", rate, "valid", tr.Valid, "p99_ms", tr.LatencyMS.P99)
				if !tr.Valid { // let an overloaded server drain
					time.Sleep(time.Second)
				}
				return tr
			})
			compareCeiling(&m, res)
			res.MaxRates = append(res.MaxRates, m)
		}
	}
	res.Finished = time.Now()
	res.Server = server.Info()
	res.Summary = summarize(res, c)
	res.Study = study(res, c)
	res.Failures = failures(res)
	res.Warnings = warnings(res)
	if res.ScenarioStatus == "FAILED" && runErr == nil {
		for _, s := range res.Scenarios {
			if s.Status == "FAILED" {
				runErr = fmt.Errorf("%w: trial %d %s: %s", ErrScenarioFailed, s.TrialID, s.Kind, s.Detail)
				break
			}
		}
	}
	if err := allFailed(res); err != nil {
		runErr = errors.Join(runErr, err)
	} else if err := noValidTrial(res); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if out != nil {
		if err := out.writeAll(res); err != nil {
			runErr = errors.Join(runErr, err)
		}
	}
	return res, runErr
}

// allFailed returns an error wrapping ErrFailed when no measured request of
// any arm succeeded, naming the most frequent reason and its fix.
func allFailed(res *Results) error {
	requests := 0
	for _, t := range res.Trials {
		if t.OK > 0 {
			return nil
		}
		requests += t.Requests
	}
	if requests == 0 {
		return nil
	}
	var top Failure
	for _, f := range res.Failures {
		if f.Count > top.Count {
			top = f
		}
	}
	fix := ""
	if top.Fix != "" {
		fix = " (fix: " + top.Fix + ")"
	}
	return fmt.Errorf("%w: all %d measured requests of every arm failed, most with %s: %s%s",
		ErrFailed, requests, top.Reason, top.FirstError, fix)
}

// noValidTrial returns an error wrapping ErrNoValidTrial naming every arm
// without a valid trial and the first reason of its first trial.
func noValidTrial(res *Results) error {
	var bad []string
	for _, a := range res.Arms {
		var first *TrialResult
		valid := false
		for _, t := range res.Trials {
			if t.Arm == a.Name {
				valid = valid || t.Valid
				if first == nil {
					first = t
				}
			}
		}
		if !valid && first != nil {
			why := "no trial"
			if len(first.InvalidReasons) > 0 {
				why = first.InvalidReasons[0]
			}
			bad = append(bad, fmt.Sprintf("arm %s (trial %d: %s)", a.Name, first.ID, why))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNoValidTrial, strings.Join(bad, "; "))
}

// warnings collects what a reader of the results must not miss.
func warnings(res *Results) []string {
	var w []string
	if res.Server != nil && res.Server.Note != "" {
		w = append(w, "server CPU: "+res.Server.Note)
	}
	if res.Server == nil || len(res.Server.PIDs) == 0 {
		w = append(w, "no server process was measured: CPU figures and cost ratios are the client's (pass -server-pid or -server-name)")
	}
	for _, s := range res.Summary {
		if s.ResumeAttempts > 0 && float64(s.Resumed) < 0.9*float64(s.ResumeAttempts) {
			w = append(w, fmt.Sprintf("arm %s at %g/s: %d of %d resumption attempts resumed: the server did not accept its session tickets (nginx: ssl_session_tickets on)",
				s.Arm, s.Rate, s.Resumed, s.ResumeAttempts))
		}
		if s.GroupMismatch != "" {
			w = append(w, fmt.Sprintf("arm %s at %g/s %s: no cost ratio drawn", s.Arm, s.Rate, s.GroupMismatch))
		}
		if s.ValidTrials == 0 {
			w = append(w, fmt.Sprintf("arm %s at %g/s: no valid trial of %d: no CPU figure, ceiling or ratio", s.Arm, s.Rate, s.Trials))
		}
		if sp := s.ServerRSSPerIdleSessionBytes; sp != nil && sp.Min <= 0 {
			w = append(w, fmt.Sprintf("arm %s at %g/s: the server's resident memory did not grow with its idle sessions (%.0f bytes per session at least): it reused memory it held before the run; restart the server before measuring memory per session",
				s.Arm, s.Rate, sp.Min))
		}
	}
	for _, t := range res.Trials {
		for _, r := range t.InvalidReasons {
			w = append(w, fmt.Sprintf("trial %d (arm %s at %g/s, trial %d) invalid: %s", t.ID, t.Arm, t.Rate, t.Trial, r))
		}
	}
	return w
}

// binWidth is the timeline resolution.
const binWidth = 100 * time.Millisecond

// runTrial runs one arm at one rate for Warmup+Duration.
func (c *Config) runTrial(ctx context.Context, id int, j job, runStart time.Time, serverCPU *ServerCPU,
	sc *scenarioRunner, master int, idleBaseline *int64) (*TrialResult, []Request, []Event, *ScenarioResult) {
	q := newRequester(c, j.arm)
	span := c.Warmup + c.Duration
	sched, err := NewSchedule(c.Arrival, j.rate, span, c.Seed+uint64(id)*7919)
	if err != nil { // validated already
		panic(err)
	}
	var idle *idleSessions
	if c.IdleSessions > 0 {
		idle = openIdle(ctx, q, c.IdleSessions, serverCPU, idleBaseline)
		defer idle.close()
	}
	t0 := time.Now().Add(20 * time.Millisecond)
	ws, we := t0.Add(c.Warmup), t0.Add(span)
	tr := &TrialResult{
		ID: id, Arm: j.arm.Name, Rate: j.rate, Trial: j.trial, RateTarget: j.rate,
		Groups: map[string]int{}, Start: t0, WindowStart: ws, WindowEnd: we,
	}

	// Sampler: server CPU and RSS, client CPU, exactly at the window edges
	// and every SampleInterval in between.
	type mark struct {
		at          time.Time // when the reading began
		server      int64     // ns
		serverValid bool
		client      time.Duration
		clientWait  time.Duration
	}
	serverPIDs := map[int]bool{}
	var atStart, atEnd mark
	samplerDone := make(chan struct{})
	sctx, stopSampler := context.WithCancel(ctx)
	go func() {
		defer close(samplerDone)
		take := func() mark {
			m := mark{at: time.Now(), client: selfCPU(), clientWait: selfRunqueueWait()}
			if serverCPU != nil {
				if s, err := serverCPU.Sample(); err == nil {
					m.server, m.serverValid = s.CPUNs, true
					if !s.At.Before(ws) && !s.At.After(we.Add(c.SampleInterval)) {
						for _, p := range s.PIDs {
							serverPIDs[p] = true
						}
					}
					tr.RSS = append(tr.RSS, RSSPoint{Offset: s.At.Sub(runStart).Seconds(), Bytes: s.RSSBytes})
					tr.ServerRSSMaxBytes = max(tr.ServerRSSMaxBytes, s.RSSBytes)
				}
			}
			return m
		}
		var times []time.Time
		for t := t0; t.Before(we); t = t.Add(c.SampleInterval) {
			times = append(times, t)
		}
		times = append(times, ws, we)
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		for _, t := range times {
			select {
			case <-sctx.Done():
				return
			case <-time.After(time.Until(t)):
			}
			m := take()
			if t.Equal(ws) {
				atStart = m
			}
			if t.Equal(we) {
				atEnd = m
			}
		}
	}()

	var (
		evMu   sync.Mutex
		events []Event
		scRes  *ScenarioResult
		scDone = make(chan struct{})
	)
	if sc != nil {
		sc.emit = func(e Event) {
			evMu.Lock()
			events = append(events, e)
			evMu.Unlock()
		}
		go func() {
			defer close(scDone)
			r := sc.run(ctx, t0, master)
			scRes = &r
		}()
	} else {
		close(scDone)
	}

	// Open-loop sender.
	results := make(chan Request, 1024)
	var collected []Request
	collectDone := make(chan struct{})
	go func() {
		defer close(collectDone)
		for r := range results {
			collected = append(collected, r)
		}
	}()
	sem := make(chan struct{}, c.MaxInFlight)
	var wg sync.WaitGroup
	seq := 0
	for {
		off, ok := sched.Next()
		if !ok {
			break
		}
		intended := t0.Add(off)
		if d := time.Until(intended); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case sem <- struct{}{}: // when full, this send is late; latency still counts from intended
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		r := Request{Arm: j.arm.Name, Rate: j.rate, Trial: j.trial, TrialID: id, Seq: seq, Intended: intended,
			ResumeAttempt: resumeAttempt(seq, j.arm.Resume),
			Warmup:        intended.Before(ws)}
		seq++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			q.do(ctx, &r)
			results <- r
		}()
	}
	wg.Wait()
	close(results)
	<-collectDone
	// The sampler never waits past we; on cancellation it stops at once.
	<-samplerDone
	stopSampler()
	<-scDone
	if idle != nil {
		idle.fill(tr, c.IdleSessions)
	}

	// Statistics over the measured window.
	slices.SortFunc(collected, func(a, b Request) int { return a.Intended.Compare(b.Intended) })
	nbins := int(span/binWidth) + 1
	bins := make([]Bin, nbins)
	for i := range bins {
		bins[i].Offset = t0.Add(time.Duration(i) * binWidth).Sub(runStart).Seconds()
		bins[i].Warmup = t0.Add(time.Duration(i+1) * binWidth).Before(ws.Add(1))
	}
	pids := map[int]bool{}
	sentOK := 0
	for i := range collected {
		r := &collected[i]
		if b := int(r.Intended.Sub(t0) / binWidth); b >= 0 && b < nbins {
			bin := &bins[b]
			bin.Requests++
			if r.OK() {
				ms := float64(r.Latency) / 1e6
				bin.MaxMS = max(bin.MaxMS, ms)
				bin.sumMS += ms
				bin.completed++
			} else {
				bin.Errors++
			}
		}
		if r.OK() && !r.End().Before(ws) && r.End().Before(we) {
			tr.Completed++
		}
		if r.OK() && !r.Start.Before(ws) && r.Start.Before(we) {
			sentOK++
		}
		if r.Warmup {
			continue
		}
		tr.Requests++
		tr.lag.Record(int64(r.Start.Sub(r.Intended)))
		if !r.OK() {
			tr.Errors++
			if strings.HasSuffix(r.Err, "_timeout") {
				tr.Timeouts++
			}
			if tr.ErrorReasons == nil {
				tr.ErrorReasons, tr.ErrorSamples = map[string]int{}, map[string]string{}
			}
			if tr.ErrorReasons[r.Err] == 0 {
				tr.ErrorSamples[r.Err] = r.ErrText
			}
			tr.ErrorReasons[r.Err]++
			continue
		}
		tr.OK++
		tr.Groups[r.Group]++
		if r.ResumeAttempt {
			tr.ResumeAttempts++
		}
		if r.Resumed {
			tr.Resumed++
		}
		if r.HRR {
			tr.HRR++
		}
		if r.PID != 0 && !pids[r.PID] {
			pids[r.PID] = true
			tr.ServerPIDs = append(tr.ServerPIDs, r.PID)
		}
		tr.hist.Record(int64(r.Latency))
		tr.service.Record(int64(r.Service))
	}
	for i := range bins {
		if bins[i].completed > 0 {
			bins[i].MeanMS = bins[i].sumMS / float64(bins[i].completed)
		}
	}
	tr.Timeline = bins
	tr.LatencyMS = latencyOf(&tr.hist)
	tr.ServiceMS = latencyOf(&tr.service)
	tr.SendLagMS = latencyOf(&tr.lag)
	tr.RateAchieved = float64(sentOK) / c.Duration.Seconds()
	tr.RateCompleted = float64(tr.Completed) / c.Duration.Seconds()
	if tr.Completed > 0 {
		if atEnd.client > 0 && atStart.client > 0 {
			tr.ClientCPUUsPerHandshake = float64((atEnd.client - atStart.client).Microseconds()) / float64(tr.Completed)
		}
		if serverCPU != nil && atStart.serverValid && atEnd.serverValid {
			ns := atEnd.server - atStart.server
			us := ns / 1000
			per := float64(ns) / 1000 / float64(tr.Completed)
			tr.ServerCPUUs, tr.ServerCPUUsPerHandshake = &us, &per
		}
	}
	if atEnd.clientWait > 0 && atStart.clientWait > 0 {
		tr.ClientRunqueueWaitMS = float64(atEnd.clientWait-atStart.clientWait) / 1e6
	}
	tr.ServerCPUPIDs = sortedKeys(serverPIDs)
	tr.CPUSampledFrom, tr.CPUSampledTo = atStart.at, atEnd.at
	tr.InvalidReasons = judge(tr, c)
	tr.Valid = len(tr.InvalidReasons) == 0
	tr.GroupMismatch = groupMismatch(tr, GroupName(j.arm.Measures()))
	evMu.Lock()
	defer evMu.Unlock()
	return tr, collected, events, scRes
}
