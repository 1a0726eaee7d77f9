package loadgen

import (
	"math"
	"slices"
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
	// Groups sums the negotiated groups of every trial.
	Groups map[string]int `json:"groups"`
	// Measures is the group the arm is meant to measure; GroupMismatch
	// says how the negotiated groups differ from it.
	Measures      string `json:"measures"`
	GroupMismatch string `json:"group_mismatch,omitempty"`
	// Note says why a figure is missing.
	Note string `json:"note,omitempty"`
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
			var srv, cli, ach, done, p50, p95 []float64
			for _, t := range res.Trials {
				if t.Arm != a.Name || t.Rate != rate {
					continue
				}
				s.Trials++
				s.Requests += t.Requests
				s.Errors += t.Errors
				s.HRR += t.HRR
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
