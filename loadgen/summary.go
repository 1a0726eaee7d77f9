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

// ArmSummary aggregates the trials of one arm at one rate.
type ArmSummary struct {
	Arm          string  `json:"arm"`
	Rate         float64 `json:"rate"`
	Trials       int     `json:"trials"`
	RateAchieved Spread  `json:"rate_achieved"`
	// ServerCPUUsPerHandshake is present when server processes are named.
	ServerCPUUsPerHandshake *Spread `json:"server_cpu_us_per_handshake,omitempty"`
	ClientCPUUsPerHandshake Spread  `json:"client_cpu_us_per_handshake"`
	// CeilingPerSecond is Cores*1e6 / mean server CPU per handshake: the
	// handshake rate at which the server would saturate every core.
	CeilingPerSecond float64 `json:"ceiling_per_s,omitempty"`
	// CostRatio is this arm's mean server CPU per handshake over the
	// baseline arm's at the same rate (client CPU when no server is named).
	CostRatio float64        `json:"cost_ratio,omitempty"`
	P50MS     float64        `json:"p50_ms"` // mean over trials
	P99MS     float64        `json:"p99_ms"` // worst trial
	Requests  int            `json:"requests"`
	Errors    int            `json:"errors"`
	HRR       int            `json:"hrr"`
	Groups    map[string]int `json:"groups"`
}

func summarize(res *Results, c *Config) []ArmSummary {
	var out []ArmSummary
	base := map[float64]float64{}
	for _, rate := range c.Rates {
		for _, a := range c.Arms {
			s := ArmSummary{Arm: a.Name, Rate: rate, Groups: map[string]int{}}
			var srv, cli, ach, p50 []float64
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
				if t.ServerCPUUsPerHandshake != nil {
					srv = append(srv, *t.ServerCPUUsPerHandshake)
				}
				cli = append(cli, t.ClientCPUUsPerHandshake)
				ach = append(ach, t.RateAchieved)
				p50 = append(p50, t.LatencyMS.P50)
				s.P99MS = max(s.P99MS, t.LatencyMS.P99)
			}
			if s.Trials == 0 {
				continue
			}
			s.RateAchieved = spreadOf(ach)
			s.ClientCPUUsPerHandshake = spreadOf(cli)
			s.P50MS = spreadOf(p50).Mean
			cost := s.ClientCPUUsPerHandshake.Mean
			if len(srv) > 0 {
				sp := spreadOf(srv)
				s.ServerCPUUsPerHandshake = &sp
				cost = sp.Mean
				if sp.Mean > 0 {
					s.CeilingPerSecond = float64(res.Cores) * 1e6 / sp.Mean
				}
			}
			if a.Name == c.Baseline {
				base[rate] = cost
			}
			out = append(out, s)
		}
	}
	for i := range out {
		s := &out[i]
		cost := s.ClientCPUUsPerHandshake.Mean
		if s.ServerCPUUsPerHandshake != nil {
			cost = s.ServerCPUUsPerHandshake.Mean
		}
		if b := base[s.Rate]; b > 0 {
			s.CostRatio = cost / b
		}
	}
	return out
}
