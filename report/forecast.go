package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// Tail bounds: the JA4 table keeps at most MaxJA4 distinct fingerprints
// (later ones are counted under "other" and in TailEvicted), and the JSON
// and text lists show the TailRows largest rows.
const (
	MaxJA4   = 10000
	TailRows = 50
)

// TailRow is one group of clients that would stay classical.
type TailRow struct {
	Key    string `json:"key"`
	Count  int    `json:"count"`
	Reason string `json:"reason"` // the most frequent reason in the row
}

// Forecast aggregates the predictions of package forecast: the `forecast`
// object of the JSON summary and the forecast section of the text report.
type Forecast struct {
	Policy     string `json:"policy"`
	Handshakes int    `json:"handshakes"` // records seen
	Predicted  int    `json:"predicted"`  // records with a ClientHello to predict from

	PQ        int `json:"pq"`
	HRR       int `json:"hrr"` // of which HRRPQ end in a PQ group
	HRRPQ     int `json:"hrr_pq"`
	Classical int `json:"classical"`
	Fail      int `json:"fail"`
	Unknown   int `json:"unknown"`

	// Shares are of Predicted and overlap: PQShare and ClassicalShare
	// count every handshake that would end in a PQ (classical) group, with
	// or without an HRR; HRRShare counts the HRRs of both. PQShare +
	// ClassicalShare + FailShare = 1.
	PQShare        float64 `json:"pq_share"`
	HRRShare       float64 `json:"hrr_share"`
	ClassicalShare float64 `json:"classical_share"`
	FailShare      float64 `json:"fail_share"`

	// Today: what the same handshakes negotiated.
	ObservedPQ  int `json:"observed_pq"`
	ObservedHRR int `json:"observed_hrr"`

	// ClassicalReasons says why each handshake counted in ClassicalShare
	// stays classical (see the Reason constants).
	ClassicalReasons map[string]int `json:"classical_reasons"`
	Groups           map[string]int `json:"groups"` // predicted group -> count

	// ServerHello growth (predicted minus observed) over the Modeled
	// handshakes, and the estimated bytes added by predicted HRRs.
	Modeled                   int     `json:"bytes_modeled"`
	AddedServerHelloBytes     float64 `json:"added_server_hello_bytes_per_handshake"`
	AddedServerHelloBytesPQ   float64 `json:"added_server_hello_bytes_per_pq_handshake"`
	TotalServerHelloGrowth    int64   `json:"total_server_hello_growth_bytes"`
	NewHRR                    int     `json:"new_hrr"`
	HRRBytesPerNewHRR         float64 `json:"hrr_added_bytes_per_new_hrr"` // estimate: HRR message + second ClientHello
	AddedBytesPerHandshakeAll float64 `json:"added_bytes_per_handshake"`   // ServerHello growth plus HRR estimates, over Modeled

	ClassicalByJA4 []TailRow `json:"classical_by_ja4,omitempty"`
	ClassicalByUA  []TailRow `json:"classical_by_ua_family,omitempty"`
	TailEvicted    int       `json:"classical_ja4_overflow,omitempty"`

	policy   forecast.Policy
	pqGrowth int64
	nPQBytes int
	hrrBytes int64
	ja4      map[string]*tailAcc
	ua       map[string]*tailAcc
}

type tailAcc struct {
	n       int
	reasons map[string]int
}

func (t *tailAcc) add(reason string) {
	t.n++
	t.reasons[reason]++
}

// NewForecast returns an empty forecast for policy p.
func NewForecast(p forecast.Policy) *Forecast {
	return &Forecast{
		Policy:           p.String(),
		policy:           p,
		ClassicalReasons: map[string]int{},
		Groups:           map[string]int{},
		ja4:              map[string]*tailAcc{},
		ua:               map[string]*tailAcc{},
	}
}

// Add predicts and counts one record.
func (rep *Forecast) Add(r *record.Handshake) forecast.Outcome {
	o := forecast.Predict(rep.policy, r)
	rep.Handshakes++
	if r.Outcome == record.OutcomeOK {
		if r.PQ {
			rep.ObservedPQ++
		}
		if r.HRR {
			rep.ObservedHRR++
		}
	}
	if o.Kind == forecast.Unknown {
		rep.Unknown++
		return o
	}
	rep.Predicted++
	if o.Group != 0 {
		rep.Groups[tlsparse.Group(o.Group).String()]++
	} else if o.Kind == forecast.Classical {
		rep.Groups["none"]++
	}
	switch o.Kind {
	case forecast.PQ:
		rep.PQ++
	case forecast.HRR:
		rep.HRR++
		if tlsparse.Group(o.Group).IsPQ() {
			rep.HRRPQ++
		}
		if o.HRRBytes > 0 {
			rep.NewHRR++
			rep.hrrBytes += int64(o.HRRBytes)
		}
	case forecast.Classical:
		rep.Classical++
	case forecast.Fail:
		rep.Fail++
	}
	if o.Kind == forecast.Classical || o.Kind == forecast.HRR && !tlsparse.Group(o.Group).IsPQ() {
		// Why it stays classical; for an HRR to a classical group the
		// Outcome's reason says why the HRR, so ask again.
		reason := o.Reason
		if o.Kind == forecast.HRR {
			reason = forecast.ClassicalReason(&rep.policy, r)
		}
		rep.ClassicalReasons[reason]++
		key := r.JA4
		if key == "" {
			key = "none"
		}
		acc := rep.ja4[key]
		if acc == nil {
			if len(rep.ja4) >= MaxJA4 {
				rep.TailEvicted++
				key = "other"
				acc = rep.ja4[key]
			}
			if acc == nil {
				acc = &tailAcc{reasons: map[string]int{}}
				rep.ja4[key] = acc
			}
		}
		acc.add(reason)
		if r.Log != nil {
			fam := UAFamily(r.Log.UserAgent)
			acc := rep.ua[fam]
			if acc == nil {
				acc = &tailAcc{reasons: map[string]int{}}
				rep.ua[fam] = acc
			}
			acc.add(reason)
		}
	}
	if o.Modeled {
		rep.Modeled++
		rep.TotalServerHelloGrowth += int64(o.ServerHelloGrowth)
		if tlsparse.Group(o.Group).IsPQ() {
			rep.pqGrowth += int64(o.ServerHelloGrowth)
			rep.nPQBytes++
		}
	}
	return o
}

// Finish computes shares, means and the sorted tails.
func (rep *Forecast) Finish() {
	if n := float64(rep.Predicted); n > 0 {
		rep.PQShare = float64(rep.PQ+rep.HRRPQ) / n
		rep.HRRShare = float64(rep.HRR) / n
		rep.ClassicalShare = float64(rep.Classical+rep.HRR-rep.HRRPQ) / n
		rep.FailShare = float64(rep.Fail) / n
	}
	if rep.Modeled > 0 {
		rep.AddedServerHelloBytes = float64(rep.TotalServerHelloGrowth) / float64(rep.Modeled)
		rep.AddedBytesPerHandshakeAll = float64(rep.TotalServerHelloGrowth+rep.hrrBytes) / float64(rep.Modeled)
	}
	if rep.nPQBytes > 0 {
		rep.AddedServerHelloBytesPQ = float64(rep.pqGrowth) / float64(rep.nPQBytes)
	}
	if rep.NewHRR > 0 {
		rep.HRRBytesPerNewHRR = float64(rep.hrrBytes) / float64(rep.NewHRR)
	}
	rep.ClassicalByJA4 = tailRows(rep.ja4)
	rep.ClassicalByUA = tailRows(rep.ua)
}

func tailRows(m map[string]*tailAcc) []TailRow {
	rows := make([]TailRow, 0, len(m))
	for k, a := range m {
		reason, best := "", -1
		for r, n := range a.reasons {
			if n > best || n == best && r < reason {
				reason, best = r, n
			}
		}
		rows = append(rows, TailRow{Key: k, Count: a.n, Reason: reason})
	}
	slices.SortFunc(rows, func(a, b TailRow) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(rows) > TailRows {
		rows = rows[:TailRows]
	}
	return rows
}

// Text renders the forecast section of the text report.
func (rep *Forecast) Text() string {
	var b strings.Builder
	pct := func(n int) float64 {
		if rep.Predicted == 0 {
			return 0
		}
		return 100 * float64(n) / float64(rep.Predicted)
	}
	fmt.Fprintf(&b, "migration forecast (policy %s)\n", rep.Policy)
	fmt.Fprintf(&b, "  %-22s %d (%d with a ClientHello)\n", "handshakes", rep.Handshakes, rep.Predicted)
	fmt.Fprintf(&b, "  %-22s %5.1f%%  %d (%d of them after an HRR); today %d\n", "would be PQ", 100*rep.PQShare, rep.PQ+rep.HRRPQ, rep.HRRPQ, rep.ObservedPQ)
	fmt.Fprintf(&b, "  %-22s %5.1f%%  %d (one extra round trip); today %d\n", "would need an HRR", 100*rep.HRRShare, rep.HRR, rep.ObservedHRR)
	fmt.Fprintf(&b, "  %-22s %5.1f%%  %d\n", "would stay classical", 100*rep.ClassicalShare, rep.Classical+rep.HRR-rep.HRRPQ)
	if rep.Fail > 0 {
		fmt.Fprintf(&b, "  %-22s %5.1f%%  %d (no mutual group)\n", "would fail", pct(rep.Fail), rep.Fail)
	}
	for _, k := range sortedByCount(rep.ClassicalReasons) {
		fmt.Fprintf(&b, "    %-50s %d\n", k, rep.ClassicalReasons[k])
	}
	fmt.Fprintf(&b, "  %-22s %+.1f bytes per handshake (%+.1f per PQ handshake; %d modelled)\n", "ServerHello growth",
		rep.AddedServerHelloBytes, rep.AddedServerHelloBytesPQ, rep.Modeled)
	if rep.NewHRR > 0 {
		fmt.Fprintf(&b, "  %-22s %d, ~%.0f bytes each (HRR + second ClientHello, estimated)\n", "new HRRs", rep.NewHRR, rep.HRRBytesPerNewHRR)
	}
	if len(rep.ClassicalByJA4) > 0 {
		b.WriteString("  staying classical by JA4\n")
		for i, r := range rep.ClassicalByJA4 {
			if i == 20 {
				fmt.Fprintf(&b, "    ... %d more\n", len(rep.ClassicalByJA4)-i)
				break
			}
			fmt.Fprintf(&b, "    %-6d %-38s %s\n", r.Count, r.Key, r.Reason)
		}
	}
	if len(rep.ClassicalByUA) > 0 {
		b.WriteString("  staying classical by user-agent family\n")
		for _, r := range rep.ClassicalByUA {
			fmt.Fprintf(&b, "    %-6d %-38s %s\n", r.Count, r.Key, r.Reason)
		}
	}
	return b.String()
}

func sortedByCount(m map[string]int) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	slices.SortFunc(k, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return k
}
