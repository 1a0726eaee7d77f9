package loadgen

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Spread is a statistic's mean and spread over trials.
type Spread struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	StdDev float64 `json:"stddev"` // sample standard deviation (n-1)
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{N: len(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
	for _, x := range xs {
		s.Mean += x
	}
	s.Mean /= float64(len(xs))
	if len(xs) > 1 {
		var v float64
		for _, x := range xs {
			v += (x - s.Mean) * (x - s.Mean)
		}
		s.StdDev = math.Sqrt(v / float64(len(xs)-1))
	}
	return s
}

// ArmSummary aggregates the valid trials of one arm at one rate. Invalid
// trials count in Trials, Requests and Errors only.
type ArmSummary struct {
	Arm         string  `json:"arm"`
	Rate        float64 `json:"rate"`
	Trials      int     `json:"trials"`
	ValidTrials int     `json:"valid_trials"`
	// RateCompleted is successful requests that completed in the window,
	// per second; RateAchieved those whose send fell in it.
	RateCompleted Spread `json:"rate_completed"`
	RateAchieved  Spread `json:"rate_achieved"`
	// ServerCPUUsPerHandshake is present when a server process was measured.
	ServerCPUUsPerHandshake *Spread `json:"server_cpu_us_per_handshake,omitempty"`
	ClientCPUUsPerHandshake Spread  `json:"client_cpu_us_per_handshake"`
	// CeilingPerSecond is Cores*1e6 / mean server CPU per handshake: the
	// handshake rate at which the server would saturate every core.
	CeilingPerSecond float64 `json:"ceiling_per_s,omitempty"`
	// CostRatio is this arm's mean server CPU per handshake over the
	// baseline arm's at the same rate (client CPU when no server is
	// measured). It is not drawn when either arm has no valid trial or did
	// not negotiate the group it measures.
	CostRatio float64 `json:"cost_ratio,omitempty"`
	P50MS     float64 `json:"p50_ms"` // mean over valid trials
	P95MS     float64 `json:"p95_ms"` // mean over valid trials
	P99MS     float64 `json:"p99_ms"` // worst valid trial
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	HRR       int     `json:"hrr"`
	// Resumed and ResumeAttempts sum those of every trial.
	Resumed        int `json:"resumed"`
	ResumeAttempts int `json:"resume_attempts,omitempty"`
	// Groups sums the negotiated groups of every trial.
	Groups map[string]int `json:"groups"`
	// Measures is the group the arm is meant to measure; GroupMismatch
	// says how the negotiated groups differ from it.
	Measures      string `json:"measures"`
	GroupMismatch string `json:"group_mismatch,omitempty"`
	// Note says why a figure is missing.
	Note string `json:"note,omitempty"`
	// IdleSessions is the fewest idle sessions a valid trial held open;
	// ServerRSSWithIdleBytes the server's resident memory with them open
	// (before the trial's load), ServerRSSPerIdleSessionBytes its growth
	// per idle session, over the valid trials: the edge-gateway study's
	// "RSS with N idle sessions" and "memory per SSL context" rows.
	IdleSessions                 int     `json:"idle_sessions,omitempty"`
	ServerRSSWithIdleBytes       *Spread `json:"server_rss_with_idle_bytes,omitempty"`
	ServerRSSPerIdleSessionBytes *Spread `json:"server_rss_per_idle_session_bytes,omitempty"`
}

func summarize(res *Results, c *Config) []ArmSummary {
	var out []ArmSummary
	type key struct {
		rate float64
		arm  string
	}
	cost := map[key]float64{} // 0: no usable figure
	for _, rate := range c.Rates {
		for _, a := range c.Arms {
			s := ArmSummary{Arm: a.Name, Rate: rate, Groups: map[string]int{}, Measures: GroupName(a.Measures())}
			var srv, cli, ach, done, p50, p95, idle, idleRSS []float64
			for _, t := range res.Trials {
				if t.Arm != a.Name || t.Rate != rate {
					continue
				}
				s.Trials++
				s.Requests += t.Requests
				s.Errors += t.Errors
				s.HRR += t.HRR
				s.Resumed += t.Resumed
				s.ResumeAttempts += t.ResumeAttempts
				for g, n := range t.Groups {
					s.Groups[g] += n
				}
				if !t.Valid {
					continue
				}
				s.ValidTrials++
				if t.ServerCPUUsPerHandshake != nil {
					srv = append(srv, *t.ServerCPUUsPerHandshake)
				}
				cli = append(cli, t.ClientCPUUsPerHandshake)
				ach = append(ach, t.RateAchieved)
				done = append(done, t.RateCompleted)
				p50 = append(p50, t.LatencyMS.P50)
				p95 = append(p95, t.LatencyMS.P95)
				s.P99MS = max(s.P99MS, t.LatencyMS.P99)
				if t.IdleSessionsWanted > 0 {
					if s.IdleSessions == 0 || t.IdleSessions < s.IdleSessions {
						s.IdleSessions = t.IdleSessions
					}
					if t.ServerRSSPerIdleSessionBytes != nil {
						idle = append(idle, *t.ServerRSSPerIdleSessionBytes)
						idleRSS = append(idleRSS, float64(t.ServerRSSWithIdleBytes))
					}
				}
			}
			if s.Trials == 0 {
				continue
			}
			s.GroupMismatch = groupMismatch(&TrialResult{OK: sumValues(s.Groups), Groups: s.Groups}, s.Measures)
			if s.ValidTrials == 0 {
				s.Note = "no valid trial"
				out = append(out, s)
				continue
			}
			s.RateAchieved = spreadOf(ach)
			s.RateCompleted = spreadOf(done)
			s.ClientCPUUsPerHandshake = spreadOf(cli)
			s.P50MS = spreadOf(p50).Mean
			s.P95MS = spreadOf(p95).Mean
			if len(idle) > 0 {
				sp, with := spreadOf(idle), spreadOf(idleRSS)
				s.ServerRSSPerIdleSessionBytes, s.ServerRSSWithIdleBytes = &sp, &with
			}
			k := key{rate, a.Name}
			cost[k] = s.ClientCPUUsPerHandshake.Mean
			if len(srv) > 0 {
				sp := spreadOf(srv)
				s.ServerCPUUsPerHandshake = &sp
				cost[k] = sp.Mean
				if sp.Mean > 0 {
					s.CeilingPerSecond = float64(res.Cores) * 1e6 / sp.Mean
				}
			}
			if s.GroupMismatch != "" {
				cost[k] = 0
			}
			out = append(out, s)
		}
	}
	for i := range out {
		s := &out[i]
		b, own := cost[key{s.Rate, c.Baseline}], cost[key{s.Rate, s.Arm}]
		switch {
		case s.Note != "":
		case own == 0 && s.GroupMismatch != "":
			s.Note = "no cost ratio: the arm did not negotiate " + s.Measures
		case b == 0:
			s.Note = "no cost ratio: the baseline arm " + c.Baseline + " has no valid trial at this rate, or did not negotiate its group"
		default:
			s.CostRatio = own / b
		}
	}
	return out
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// StudyRow is one arm in the form of the nginx live-swap study's table:
// server CPU per full handshake over every valid trial at every rate, the
// ceiling it implies on the machine's cores, whether the cost per
// handshake is flat across rates, and the trial-to-trial spread.
type StudyRow struct {
	Arm      string `json:"arm"`
	Measures string `json:"measures"`
	// Negotiated is the groups the arm's successful requests negotiated.
	Negotiated  map[string]int `json:"negotiated"`
	ValidTrials int            `json:"valid_trials"`
	Trials      int            `json:"trials"`
	// ServerCPUUsPerHandshake is over every valid trial at every rate
	// (client CPU when no server was measured: see CPUSource).
	ServerCPUUsPerHandshake Spread  `json:"server_cpu_us_per_handshake"`
	CPUSource               string  `json:"cpu_source"` // "server" or "client"
	CeilingPerSecond        float64 `json:"ceiling_per_s,omitempty"`
	// VsBaseline is the mean over the baseline arm's mean, minus one (0.21
	// is 21% more CPU per handshake); absent when either has no valid
	// trial or did not negotiate its group.
	VsBaseline *float64 `json:"vs_baseline,omitempty"`
	// ByRate is the mean per rate; Flat says whether the cost is flat
	// across rates, and Flatness how that was judged.
	ByRate   []RateCost `json:"by_rate"`
	Flat     *bool      `json:"flat,omitempty"` // absent with fewer than two rates
	Flatness string     `json:"flatness"`
	// SpreadUs is the trial-to-trial standard deviation within a rate,
	// pooled over the rates; RangeUs the widest max-min within a rate.
	SpreadUs float64 `json:"spread_us"`
	RangeUs  float64 `json:"range_us"`
	// GroupMismatch says how the negotiated groups differ from Measures.
	GroupMismatch string `json:"group_mismatch,omitempty"`
	Note          string `json:"note,omitempty"`
}

// RateCost is an arm's mean CPU per handshake at one rate.
type RateCost struct {
	Rate   float64 `json:"rate"`
	Trials int     `json:"trials"` // valid ones
	Mean   float64 `json:"mean_us"`
	StdDev float64 `json:"stddev_us"`
}

// flatShare is the largest spread of per-rate means, as a share of the
// arm's mean, that counts as flat.
const flatShare = 0.05

func study(res *Results, c *Config) []StudyRow {
	var rows []StudyRow
	server := false
	for _, t := range res.Trials {
		server = server || t.ServerCPUUsPerHandshake != nil
	}
	cpuOf := func(t *TrialResult) (float64, bool) {
		if server {
			if t.ServerCPUUsPerHandshake == nil {
				return 0, false
			}
			return *t.ServerCPUUsPerHandshake, true
		}
		return t.ClientCPUUsPerHandshake, true
	}
	mean := map[string]float64{}
	for _, a := range c.Arms {
		r := StudyRow{Arm: a.Name, Measures: GroupName(a.Measures()), Negotiated: map[string]int{}, CPUSource: "client"}
		if server {
			r.CPUSource = "server"
		}
		var all []float64
		var pooledSS float64
		var pooledDF int
		for _, rate := range c.Rates {
			var xs []float64
			for _, t := range res.Trials {
				if t.Arm != a.Name || t.Rate != rate {
					continue
				}
				r.Trials++
				for g, n := range t.Groups {
					r.Negotiated[g] += n
				}
				if v, ok := cpuOf(t); ok && t.Valid {
					xs = append(xs, v)
				}
			}
			if len(xs) == 0 {
				continue
			}
			sp := spreadOf(xs)
			r.ByRate = append(r.ByRate, RateCost{Rate: rate, Trials: sp.N, Mean: sp.Mean, StdDev: sp.StdDev})
			all = append(all, xs...)
			pooledSS += sp.StdDev * sp.StdDev * float64(sp.N-1)
			pooledDF += sp.N - 1
			r.RangeUs = max(r.RangeUs, sp.Max-sp.Min)
		}
		r.ValidTrials = len(all)
		mismatch := groupMismatch(&TrialResult{OK: sumValues(r.Negotiated), Groups: r.Negotiated}, r.Measures)
		r.GroupMismatch = mismatch
		switch {
		case len(all) == 0:
			r.Note = "no valid trial"
			r.Flatness = "no valid trial"
			rows = append(rows, r)
			continue
		case mismatch != "":
			r.Note = mismatch
		}
		if a.Resume > 0 {
			note := fmt.Sprintf("%.0f%% of its requests offer a ticket: CPU per handshake, resumed and full together, not per full handshake", 100*a.Resume)
			r.Note = strings.TrimPrefix(r.Note+"; "+note, "; ")
		}
		r.ServerCPUUsPerHandshake = spreadOf(all)
		if m := r.ServerCPUUsPerHandshake.Mean; m > 0 && server {
			r.CeilingPerSecond = float64(res.Cores) * 1e6 / m
		}
		if pooledDF > 0 {
			r.SpreadUs = math.Sqrt(pooledSS / float64(pooledDF))
		}
		r.Flat, r.Flatness = flatness(r.ByRate, r.ServerCPUUsPerHandshake.Mean, r.SpreadUs)
		if mismatch == "" {
			mean[a.Name] = r.ServerCPUUsPerHandshake.Mean
		}
		rows = append(rows, r)
	}
	for i := range rows {
		b, own := mean[c.Baseline], mean[rows[i].Arm]
		if b > 0 && own > 0 {
			v := own/b - 1
			rows[i].VsBaseline = &v
		}
	}
	return rows
}

// flatness judges whether per-rate means are flat: their range is within
// flatShare of the mean, or within twice the trial-to-trial spread.
func flatness(by []RateCost, mean, spread float64) (*bool, string) {
	if len(by) < 2 {
		return nil, "one rate with valid trials: not tested"
	}
	lo, hi := by[0], by[0]
	for _, r := range by {
		if r.Mean < lo.Mean {
			lo = r
		}
		if r.Mean > hi.Mean {
			hi = r
		}
	}
	rng := hi.Mean - lo.Mean
	first, last := by[0], by[len(by)-1]
	span := fmt.Sprintf("%g-%g/s", first.Rate, last.Rate)
	flat := true
	var how string
	switch {
	case rng <= flatShare*mean:
		how = fmt.Sprintf("flat across %s: per-rate means within %.1f µs (%.1f%% of the mean; flat is within %g%%)", span, rng, 100*rng/mean, 100*flatShare)
	case rng <= 2*spread:
		how = fmt.Sprintf("flat across %s within the trial spread: per-rate means within %.1f µs (%.1f%%), under twice the trial-to-trial sd (%.1f µs)", span, rng, 100*rng/mean, spread)
	default:
		flat = false
		dir := "rises"
		if last.Mean < first.Mean {
			dir = "falls"
		}
		how = fmt.Sprintf("not flat: %s %.1f%% from %g/s (%.1f µs) to %g/s (%.1f µs); lowest %.1f µs at %g/s, highest %.1f µs at %g/s",
			dir, 100*math.Abs(last.Mean/first.Mean-1), first.Rate, first.Mean, last.Rate, last.Mean, lo.Mean, lo.Rate, hi.Mean, hi.Rate)
	}
	return &flat, how
}
