package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
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
	ErrorReasons  map[string]int `json:"error_reasons,omitempty"`
	// ErrorSamples is the error text of the first failure of each reason.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Groups       map[string]int    `json:"groups"`
	HRR          int               `json:"hrr"`
	LatencyMS    Latency           `json:"latency_ms"` // from the intended send time
	ServiceMS    Latency           `json:"service_ms"` // from the actual send time (coordinated omission NOT corrected; for comparison)
	// SendLagMS is how late the generator sent (actual minus intended);
	// a large lag means the client machine could not keep up.
	SendLagMS Latency `json:"send_lag_ms"`
	// ServerCPUUsPerHandshake is set when server processes are named.
	ServerCPUUsPerHandshake *float64   `json:"server_cpu_us_per_handshake,omitempty"`
	ServerCPUUs             *int64     `json:"server_cpu_us,omitempty"`
	ServerRSSMaxBytes       int64      `json:"server_rss_max_bytes,omitempty"`
	ClientCPUUsPerHandshake float64    `json:"client_cpu_us_per_handshake"`
	ServerPIDs              []int      `json:"server_pids,omitempty"` // distinct X-Pid values seen
	Completed               int        `json:"completed"`             // OK responses that ended inside the window
	Start                   time.Time  `json:"start"`                 // trial start (warm-up begins)
	WindowStart             time.Time  `json:"window_start"`
	WindowEnd               time.Time  `json:"window_end"`
	Timeline                []Bin      `json:"timeline"`
	RSS                     []RSSPoint `json:"rss,omitempty"`

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
	// Failures lists why measured requests failed, per arm and reason.
	Failures  []Failure        `json:"failures,omitempty"`
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
}

type job struct {
	arm   Arm
	rate  float64
	trial int
}

// Run executes every trial and returns the results. If a scenario step
// fails, Run still returns the Results, with an error wrapping
// ErrScenarioFailed. With Config.OutDir set, the output files are written
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
		res.Arms = append(res.Arms, ArmInfo{Name: a.Name, Groups: a.GroupNames()})
	}
	var serverCPU *ServerCPU
	if len(c.ServerPIDs) > 0 || len(c.ServerNames) > 0 {
		serverCPU = NewServerCPU(c.ProcRoot, c.ServerPIDs, c.ServerNames)
		if _, err := serverCPU.Sample(); err != nil {
			return nil, err
		}
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
		tr, reqs, evs, scr := c.runTrial(ctx, i, j, res.Started, serverCPU, sc, master)
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
	res.Finished = time.Now()
	res.Summary = summarize(res, c)
	res.Failures = failures(res)
	if runErr == nil {
		runErr = allFailed(res)
	}
	if res.ScenarioStatus == "FAILED" && runErr == nil {
		for _, s := range res.Scenarios {
			if s.Status == "FAILED" {
				runErr = fmt.Errorf("%w: trial %d %s: %s", ErrScenarioFailed, s.TrialID, s.Kind, s.Detail)
				break
			}
		}
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

// binWidth is the timeline resolution.
const binWidth = 100 * time.Millisecond

// runTrial runs one arm at one rate for Warmup+Duration.
func (c *Config) runTrial(ctx context.Context, id int, j job, runStart time.Time, serverCPU *ServerCPU,
	sc *scenarioRunner, master int) (*TrialResult, []Request, []Event, *ScenarioResult) {
	q := newRequester(c, j.arm)
	span := c.Warmup + c.Duration
	sched, err := NewSchedule(c.Arrival, j.rate, span, c.Seed+uint64(id)*7919)
	if err != nil { // validated already
		panic(err)
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
		server      int64
		serverValid bool
		client      time.Duration
	}
	var atStart, atEnd mark
	samplerDone := make(chan struct{})
	sctx, stopSampler := context.WithCancel(ctx)
	go func() {
		defer close(samplerDone)
		take := func() mark {
			m := mark{client: selfCPU()}
			if serverCPU != nil {
				if s, err := serverCPU.Sample(); err == nil {
					m.server, m.serverValid = s.CPUMicros(), true
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
		r := Request{Arm: j.arm.Name, Rate: j.rate, Trial: j.trial, Seq: seq, Intended: intended,
			Warmup: intended.Before(ws)}
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
			us := atEnd.server - atStart.server
			per := float64(us) / float64(tr.Completed)
			tr.ServerCPUUs, tr.ServerCPUUsPerHandshake = &us, &per
		}
	}
	evMu.Lock()
	defer evMu.Unlock()
	return tr, collected, events, scRes
}
