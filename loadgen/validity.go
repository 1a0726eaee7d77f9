package loadgen

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Measures returns the group the arm is meant to measure: the first of its
// groups in crypto/tls's own preference order (hybrids first), which is
// the group the client sends its first key share for and asks the server
// to pick.
func (a Arm) Measures() tls.CurveID {
	for _, g := range goGroups {
		if slices.Contains(a.Groups, g) {
			return g
		}
	}
	if len(a.Groups) > 0 {
		return a.Groups[0]
	}
	return 0
}

// Codes that open each of a trial's invalid reasons.
const (
	InvalidSendLag = "send_lag" // the generator fell behind its schedule
	InvalidShort   = "short"    // fewer requests completed than were scheduled
	InvalidErrors  = "errors"   // too many requests failed
	InvalidEmpty   = "empty"    // nothing was scheduled in the window
	InvalidIdle    = "idle"     // the idle sessions asked for were not all held
	// InvalidSampleLate: the CPU readings at the window's edges were late.
	InvalidSampleLate = "sample_late"
)

// sampleLateLimit is how late a CPU reading at a window's edge may be:
// 1% of the window, and at least 5 ms.
func sampleLateLimit(window time.Duration) time.Duration {
	return max(5*time.Millisecond, window/100)
}

// judge returns why a trial is invalid (each reason opens with one of the
// Invalid codes), or nil when it is valid.
func judge(tr *TrialResult, c *Config) []string {
	var why []string
	if tr.Requests == 0 {
		return []string{InvalidEmpty + ": no request was scheduled in the measured window"}
	}
	if lim := float64(c.MaxSendLag) / float64(time.Millisecond); c.MaxSendLag >= 0 && tr.SendLagMS.P99 > lim {
		r := fmt.Sprintf("%s: p99 send lag %.1f ms over %g ms (max %.1f ms): this machine could not keep the schedule, so the load was not what was asked",
			InvalidSendLag, tr.SendLagMS.P99, lim, tr.SendLagMS.Max)
		if w := tr.ClientRunqueueWaitMS; w > 0 {
			r += fmt.Sprintf("; loadgen's threads waited %.0f ms for a CPU in the %.4g s window", w, windowSeconds(tr))
		}
		why = append(why, r)
	}
	// Compared in requests (so that exactly 1% short is not invalid by
	// float rounding), and never less than one request: a window's edges
	// cut the requests in flight there, one more or less either way.
	n := float64(tr.Requests)
	if short := 1 - float64(tr.Completed)/n; c.MaxShortfall >= 0 && n-float64(tr.Completed) > max(c.MaxShortfall*n, 1)+1e-9 {
		why = append(why, fmt.Sprintf("%s: %d requests completed OK in the window of %d scheduled (%.1f/s of %.4g/s, %.1f%% short; limit %g%%)",
			InvalidShort, tr.Completed, tr.Requests, tr.RateCompleted, float64(tr.Requests)/windowSeconds(tr), short*100, c.MaxShortfall*100))
	}
	if rate := float64(tr.Errors) / n; c.MaxErrorRate >= 0 && float64(tr.Errors) > c.MaxErrorRate*n+1e-9 {
		var top []string
		for _, r := range sortedKeys(tr.ErrorReasons) {
			top = append(top, fmt.Sprintf("%s %d", r, tr.ErrorReasons[r]))
		}
		why = append(why, fmt.Sprintf("%s: %d of %d requests failed (%.2f%%, %d timeouts; limit %g%%): %s",
			InvalidErrors, tr.Errors, tr.Requests, rate*100, tr.Timeouts, c.MaxErrorRate*100, strings.Join(top, ", ")))
	}
	if r := idleInvalid(tr); r != "" {
		why = append(why, r)
	}
	if !tr.CPUSampledFrom.IsZero() && !tr.CPUSampledTo.IsZero() {
		late := max(tr.CPUSampledFrom.Sub(tr.WindowStart), tr.CPUSampledTo.Sub(tr.WindowEnd))
		if lim := sampleLateLimit(tr.WindowEnd.Sub(tr.WindowStart)); late > lim {
			why = append(why, fmt.Sprintf("%s: a CPU reading at the window's edge was taken %.1f ms late (limit %.4g ms): the CPU figures cover %.4g s from %.1f ms after the window's start, not the window",
				InvalidSampleLate, float64(late)/1e6, float64(lim)/1e6, tr.CPUSampledTo.Sub(tr.CPUSampledFrom).Seconds(),
				float64(tr.CPUSampledFrom.Sub(tr.WindowStart))/1e6))
		}
	}
	return why
}

func windowSeconds(tr *TrialResult) float64 {
	if d := tr.WindowEnd.Sub(tr.WindowStart).Seconds(); d > 0 {
		return d
	}
	return 1
}

// groupMismatch describes how a trial's negotiated groups differ from the
// one its arm measures, or "" when every successful request negotiated it.
func groupMismatch(tr *TrialResult, want string) string {
	if tr.OK == 0 || tr.Groups[want] == tr.OK {
		return ""
	}
	var got []string
	for _, g := range sortedKeys(tr.Groups) {
		if g != want {
			got = append(got, fmt.Sprintf("%s on %d", g, tr.Groups[g]))
		}
	}
	return fmt.Sprintf("negotiated %s of %d requests, not %s, the group the arm measures", strings.Join(got, ", "), tr.OK, want)
}
