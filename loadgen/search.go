package loadgen

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// Search configures the search for the highest rate an arm sustains.
type Search struct {
	// Start is the first rate tried (default: the ladder's highest rate,
	// or 100/s). The rate doubles while trials pass, then the last pass
	// and the first failure are bisected Steps times (default 4).
	Start float64
	Steps int
	// MaxP99 is the p99 latency a passing trial stays under (default
	// 100 ms); it must be valid too (on schedule, completed, no errors).
	MaxP99 time.Duration
	// Max caps the rate (default 100,000/s); MaxTrials caps the trials of
	// one arm's search (default 16).
	Max       float64
	MaxTrials int
}

func (s *Search) defaults(c *Config) {
	if s.Start <= 0 {
		s.Start = 100
		for _, r := range c.Rates {
			s.Start = max(s.Start, r)
		}
	}
	if s.Steps <= 0 {
		s.Steps = 4
	}
	if s.MaxP99 <= 0 {
		s.MaxP99 = 100 * time.Millisecond
	}
	if s.Max <= 0 {
		s.Max = 1e5
	}
	if s.MaxTrials <= 0 {
		s.MaxTrials = 16
	}
}

// SearchStep is one trial of a max-rate search.
type SearchStep struct {
	Rate                    float64  `json:"rate"`
	Pass                    bool     `json:"pass"`
	Why                     []string `json:"why,omitempty"` // why it did not pass
	RateCompleted           float64  `json:"rate_completed"`
	P99MS                   float64  `json:"p99_ms"`
	SendLagP99MS            float64  `json:"send_lag_p99_ms"`
	Errors                  int      `json:"errors"`
	ServerCPUUsPerHandshake *float64 `json:"server_cpu_us_per_handshake,omitempty"`
	ClientCPUUsPerHandshake float64  `json:"client_cpu_us_per_handshake"`
	ClientRunqueueWaitMS    float64  `json:"client_runqueue_wait_ms"`
}

// MaxRate is the result of one arm's search: the highest rate at which a
// trial passed, the steps that found it, and how it compares with the
// ceilings the ladder's CPU per handshake implies.
type MaxRate struct {
	Arm   string       `json:"arm"`
	Rate  float64      `json:"max_rate"` // 0: not even Start passed
	Steps []SearchStep `json:"steps"`
	// LimitedBy is the reasons of the lowest failing step.
	LimitedBy []string `json:"limited_by,omitempty"`
	// ServerCeiling is cores×1e6 / the ladder's server CPU per handshake;
	// SharedCeiling the same with the client's CPU added (loadgen runs on
	// the server's cores).
	ServerCeiling float64 `json:"ladder_server_ceiling_per_s,omitempty"`
	SharedCeiling float64 `json:"ladder_shared_ceiling_per_s,omitempty"`
	// Agrees says whether the search's rate is within 25% of the ceiling
	// that applies; Note says why not, or what was compared.
	Agrees bool   `json:"agrees"`
	Note   string `json:"note"`
}

// searchMaxRate runs the search for arm a; trial runs one trial at a rate.
func (c *Config) searchMaxRate(ctx context.Context, a Arm, trial func(rate float64) *TrialResult) MaxRate {
	s := c.Search
	m := MaxRate{Arm: a.Name}
	step := func(rate float64) bool {
		tr := trial(rate)
		st := SearchStep{Rate: rate, RateCompleted: tr.RateCompleted, P99MS: tr.LatencyMS.P99, SendLagP99MS: tr.SendLagMS.P99,
			Errors: tr.Errors, ServerCPUUsPerHandshake: tr.ServerCPUUsPerHandshake, ClientCPUUsPerHandshake: tr.ClientCPUUsPerHandshake,
			ClientRunqueueWaitMS: tr.ClientRunqueueWaitMS, Why: tr.InvalidReasons}
		if lim := float64(s.MaxP99) / 1e6; tr.LatencyMS.P99 > lim {
			st.Why = append(st.Why, fmt.Sprintf("p99: p99 latency %.1f ms over %g ms", tr.LatencyMS.P99, lim))
		}
		st.Pass = len(st.Why) == 0
		m.Steps = append(m.Steps, st)
		if st.Pass {
			m.Rate = max(m.Rate, rate)
		} else if m.LimitedBy == nil || rate < failRate(m) {
			m.LimitedBy = st.Why
		}
		return st.Pass
	}
	lo, hi := 0.0, 0.0
	for r := s.Start; ctx.Err() == nil && len(m.Steps) < s.MaxTrials; r *= 2 {
		r = math.Min(r, s.Max)
		if !step(r) {
			hi = r
			break
		}
		lo = r
		if r >= s.Max {
			break
		}
	}
	if lo == 0 && hi > 0 { // the start failed: halve down to a pass
		for r := hi / 2; ctx.Err() == nil && len(m.Steps) < s.MaxTrials && r >= 1; r /= 2 {
			if step(r) {
				lo = r
				break
			}
			hi = r
		}
	}
	for i := 0; i < s.Steps && lo > 0 && hi > lo && (hi-lo)/lo > 0.05 && ctx.Err() == nil && len(m.Steps) < s.MaxTrials; i++ {
		mid := math.Round((lo + hi) / 2)
		if step(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return m
}

// failRate is the lowest rate among m's failing steps.
func failRate(m MaxRate) float64 {
	r := math.Inf(1)
	for _, s := range m.Steps {
		if !s.Pass {
			r = math.Min(r, s.Rate)
		}
	}
	return r
}

// compareCeiling sets m's ceilings from the ladder's valid trials of the
// arm, and says whether the search agrees with the one that applies: the
// ceiling with loadgen's own CPU added, since loadgen measures the server's
// CPU only from the same machine, and so shares its cores.
func compareCeiling(m *MaxRate, res *Results) {
	var srv, cli, rates []float64
	for _, t := range res.Trials {
		if t.Arm == m.Arm && t.Valid && t.ServerCPUUsPerHandshake != nil {
			srv = append(srv, *t.ServerCPUUsPerHandshake)
			cli = append(cli, t.ClientCPUUsPerHandshake)
			rates = append(rates, t.Rate)
		}
	}
	if len(srv) == 0 {
		m.Note = "no valid ladder trial with a server CPU figure to compare with"
		return
	}
	s, cl := spreadOf(srv).Mean, spreadOf(cli).Mean
	cores := float64(res.Cores)
	m.ServerCeiling = cores * 1e6 / s
	m.SharedCeiling = cores * 1e6 / (s + cl)
	dev := m.Rate/m.SharedCeiling - 1
	m.Agrees = m.Rate > 0 && math.Abs(dev) <= 0.25
	rs := spreadOf(rates)
	ladder := fmt.Sprintf("%.0f-%.0f/s", rs.Min, rs.Max)
	if rs.Min == rs.Max {
		ladder = fmt.Sprintf("%.0f/s", rs.Min)
	}
	m.Note = fmt.Sprintf("max rate %.0f/s vs %.0f/s, the ceiling the ladder (%s) implies with loadgen's own CPU added (loadgen shares the cores): %+.0f%%; the server-only ceiling (a client elsewhere) is %.0f/s",
		m.Rate, m.SharedCeiling, ladder, 100*dev, m.ServerCeiling)
	if m.Agrees {
		m.Note += "; they agree within 25%"
		return
	}
	var best *SearchStep
	for i := range m.Steps {
		if st := &m.Steps[i]; st.Pass && st.Rate == m.Rate {
			best = st
		}
	}
	switch {
	case m.Rate == 0:
		m.Note += "; they disagree: no step passed, the lowest failing on: " + firstOr(m.LimitedBy, "?")
	case dev > 0 && best != nil && best.ServerCPUUsPerHandshake != nil:
		own := cores * 1e6 / (*best.ServerCPUUsPerHandshake + best.ClientCPUUsPerHandshake)
		m.Note += fmt.Sprintf("; they disagree: at %.0f/s the server spent %.1f µs and loadgen %.1f µs per handshake, against %.1f and %.1f µs on the ladder: "+
			"the cost per handshake is not flat (fixed costs, such as waking up, are shared by more handshakes at a higher rate), so a ceiling drawn from lower rates underestimates. "+
			"At the max rate's own cost the ceiling is %.0f/s (%+.0f%%)",
			m.Rate, *best.ServerCPUUsPerHandshake, best.ClientCPUUsPerHandshake, s, cl, own, 100*(m.Rate/own-1))
		if math.Abs(m.Rate/own-1) > 0.25 {
			m.Note += "; even at that cost they disagree: the search stopped before the cores were saturated (" + firstOr(m.LimitedBy, "?") + ")"
			if len(m.LimitedBy) > 0 && strings.HasPrefix(m.LimitedBy[0], InvalidSendLag) {
				m.Note += "; loadgen lagged first, so this is its limit on this machine, not the server's"
			}
		}
	default:
		m.Note += "; they disagree: trials failed before the cores were saturated (" + firstOr(m.LimitedBy, "?") +
			"): queueing and scheduling delay grow before every core is busy, and other processes take their share"
		if len(m.LimitedBy) > 0 && strings.HasPrefix(m.LimitedBy[0], InvalidSendLag) {
			m.Note += "; loadgen lagged first, so this is its limit on this machine, not the server's"
		}
	}
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}
