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

// Tail bounds: each JA4 table keeps at most MaxJA4 distinct rows (later
// ones are counted under "other" and in TailEvicted or LosesPQEvicted), and
// the JSON and text lists show the TailRows largest rows.
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

// JA4Row is a TailRow keyed by JA4 and by what JA4 leaves out: whether the
// client listed a PQ group in supported_groups and whether it sent a key
// share for one. The same JA4 with PQ on and off is two rows.
type JA4Row struct {
	TailRow
	PQOffered  bool `json:"pq_offered"`
	PQKeyShare bool `json:"pq_key_share"`
}

// LostPQRow is a group of clients that would lose PQ: their JA4 row, the
// PQ group they negotiate today and the classical group they would get.
type LostPQRow struct {
	JA4Row
	Lost  string `json:"lost_group"`
	Group string `json:"group"` // "none": TLS 1.2 without ECDHE
}

// Forecast aggregates the predictions of package forecast: the `forecast`
// object of the JSON summary and the forecast section of the text report.
type Forecast struct {
	Policy     string `json:"policy"`
	Handshakes int    `json:"handshakes"` // records seen
	Predicted  int    `json:"predicted"`  // records with a ClientHello to predict from

	PQ  int `json:"pq"`
	HRR int `json:"hrr"` // every predicted HRR: HRRPQ of them end in a PQ group, LosesPQHRR lose PQ
	// HRRPQ of the HRRs end in a PQ group.
	HRRPQ     int `json:"hrr_pq"`
	Classical int `json:"classical"`
	// LosesPQ negotiated a PQ group today and would negotiate a classical
	// one (LosesPQHRR of them after an HRR); not counted in Classical.
	LosesPQ    int `json:"loses_pq"`
	LosesPQHRR int `json:"loses_pq_hrr"`
	Fail       int `json:"fail"`
	Unknown    int `json:"unknown"`

	// Shares are of Predicted and overlap: PQShare and ClassicalShare
	// count every handshake that would end in a PQ (classical) group, with
	// or without an HRR, LosesPQShare those that lose PQ; HRRShare counts
	// the HRRs of all three. PQShare + ClassicalShare + LosesPQShare +
	// FailShare = 1.
	PQShare        float64 `json:"pq_share"`
	HRRShare       float64 `json:"hrr_share"`
	ClassicalShare float64 `json:"classical_share"`
	LosesPQShare   float64 `json:"loses_pq_share"`
	FailShare      float64 `json:"fail_share"`

	// Today: what the same handshakes negotiated.
	ObservedPQ  int `json:"observed_pq"`
	ObservedHRR int `json:"observed_hrr"`

	// ClassicalReasons says why each handshake counted in ClassicalShare
	// stays classical, LosesPQReasons why each LosesPQ handshake would not
	// end in a PQ group (see the Reason constants).
	ClassicalReasons map[string]int `json:"classical_reasons"`
	LosesPQReasons   map[string]int `json:"loses_pq_reasons"`
	// LosesPQGroups counts the LosesPQ handshakes by the PQ group they
	// negotiate today.
	LosesPQGroups map[string]int `json:"loses_pq_groups"`
	Groups        map[string]int `json:"groups"` // predicted group -> count

	// ServerHello growth (predicted minus observed; negative: it shrinks)
	// over the Modeled handshakes, and the estimated bytes added by
	// predicted HRRs.
	Modeled                      int     `json:"bytes_modeled"`
	AddedServerHelloBytes        float64 `json:"added_server_hello_bytes_per_handshake"`
	AddedServerHelloBytesPQ      float64 `json:"added_server_hello_bytes_per_pq_handshake"`
	AddedServerHelloBytesLosesPQ float64 `json:"added_server_hello_bytes_per_loses_pq_handshake"` // negative: the PQ share lost
	TotalServerHelloGrowth       int64   `json:"total_server_hello_growth_bytes"`
	NewHRR                       int     `json:"new_hrr"`
	HRRBytesPerNewHRR            float64 `json:"hrr_added_bytes_per_new_hrr"` // estimate: HRR message + second ClientHello
	AddedBytesPerHandshakeAll    float64 `json:"added_bytes_per_handshake"`   // ServerHello growth plus HRR estimates, over Modeled

	ClassicalByJA4 []JA4Row    `json:"classical_by_ja4,omitempty"`
	ClassicalByUA  []TailRow   `json:"classical_by_ua_family,omitempty"`
	TailEvicted    int         `json:"classical_ja4_overflow,omitempty"`
	LosesPQByJA4   []LostPQRow `json:"loses_pq_by_ja4,omitempty"`
	LosesPQEvicted int         `json:"loses_pq_ja4_overflow,omitempty"`

	policy     forecast.Policy
	pqGrowth   int64
	nPQBytes   int
	lossGrowth int64
	nLossBytes int
	hrrBytes   int64
	ja4        map[tailKey]*tailAcc
	lost       map[tailKey]*tailAcc
	ua         map[tailKey]*tailAcc
	byGroup    tally[uint16] // predictions by group code, named into Groups at Finish
}

// tailKey is a row of a tail table: key is a JA4 or a UA family; the PQ
// flags are set in JA4 tables, lost and group in the LosesPQ table.
type tailKey struct {
	key                string
	pqOffered, pqShare bool
	lost, group        uint16
}

type tailAcc struct {
	n       int
	reasons []reasonCount // a handful: the Reason constants
}

type reasonCount struct {
	reason string
	n      int
}

func (t *tailAcc) add(reason string, n int) {
	t.n += n
	for i := range t.reasons {
		if t.reasons[i].reason == reason {
			t.reasons[i].n += n
			return
		}
	}
	t.reasons = append(t.reasons, reasonCount{reason, n})
}

// addGroup counts n predictions of group id under its name.
func (rep *Forecast) addGroup(id uint16, n int) { rep.Groups[tlsparse.Group(id).String()] += n }

// NewForecast returns an empty forecast for policy p.
func NewForecast(p forecast.Policy) *Forecast {
	return &Forecast{
		Policy:           p.String(),
		policy:           p,
		ClassicalReasons: map[string]int{},
		LosesPQReasons:   map[string]int{},
		LosesPQGroups:    map[string]int{},
		Groups:           map[string]int{},
		ja4:              map[tailKey]*tailAcc{},
		lost:             map[tailKey]*tailAcc{},
		ua:               map[tailKey]*tailAcc{},
	}
}

// PQKeyShare reports whether r's ClientHello carried a key share for a PQ
// or hybrid group (its KeyShareIDs: a record read from JSON has them from
// record.Handshake.FillIDs).
func PQKeyShare(r *record.Handshake) bool {
	for _, g := range r.KeyShareIDs {
		if tlsparse.Group(g).IsPQ() {
			return true
		}
	}
	return false
}

// count adds n records with reason to row k of m; past MaxJA4 rows a new
// key is counted under "other" (its flags kept) and in *evicted.
func count(m map[tailKey]*tailAcc, k tailKey, reason string, n int, evicted *int) {
	acc := m[k]
	if acc == nil {
		if len(m) >= MaxJA4 {
			*evicted += n
			k.key = "other"
			acc = m[k]
		}
		if acc == nil {
			acc = &tailAcc{}
			m[k] = acc
		}
	}
	acc.add(reason, n)
}

// Add predicts and counts one record.
func (rep *Forecast) Add(r *record.Handshake) forecast.Outcome {
	o := forecast.Predict(rep.policy, r)
	rep.add(r, o, recordWeight(r, o))
	return o
}

// weight is what one add counts: N handshakes that share r's fields and
// so its prediction, with the sums of their byte-model figures (Growth:
// ServerHelloGrowth, HRRBytes), their ClientHello segment counts and the
// key of their row in the JA4 tables.
type weight struct {
	N                       int
	Growth, HRRBytes        int64
	WireKnown, MultiSegment int
	TailKey                 string
}

// recordWeight is the weight of the single record r predicted as o.
func recordWeight(r *record.Handshake, o forecast.Outcome) weight {
	w := weight{N: 1, Growth: int64(o.ServerHelloGrowth), HRRBytes: int64(o.HRRBytes), TailKey: r.JA4}
	if r.ClientHelloWireSegments > 0 {
		w.WireKnown = 1
		if r.ClientHelloWireSegments > 1 {
			w.MultiSegment = 1
		}
	}
	if w.TailKey == "" {
		w.TailKey = "none"
	}
	return w
}

// add counts w.N handshakes like r, each predicted as o.
func (rep *Forecast) add(r *record.Handshake, o forecast.Outcome, w weight) {
	n := w.N
	rep.Handshakes += n
	if r.Outcome == record.OutcomeOK {
		if r.PQ {
			rep.ObservedPQ += n
		}
		if r.HRR {
			rep.ObservedHRR += n
		}
	}
	if o.Kind == forecast.Unknown {
		rep.Unknown += n
		return
	}
	rep.Predicted += n
	if o.Group != 0 {
		rep.byGroup.add(o.Group, n, rep.addGroup)
	} else if o.Kind == forecast.Classical || o.Kind == forecast.LosesPQ {
		rep.Groups["none"] += n
	}
	if o.HRR {
		rep.HRR += n
		if o.HRRBytes > 0 {
			rep.NewHRR += n
			rep.hrrBytes += w.HRRBytes
		}
	}
	tk := tailKey{key: w.TailKey, pqOffered: r.PQOffered, pqShare: PQKeyShare(r)}
	switch o.Kind {
	case forecast.PQ:
		rep.PQ += n
	case forecast.HRR:
		if tlsparse.Group(o.Group).IsPQ() {
			rep.HRRPQ += n
		}
	case forecast.Classical:
		rep.Classical += n
	case forecast.LosesPQ:
		rep.LosesPQ += n
		if o.HRR {
			rep.LosesPQHRR += n
		}
		lost := tlsparse.Group(o.Lost).String()
		if o.Lost == 0 {
			lost = r.Group
		}
		rep.LosesPQGroups[lost] += n
		rep.LosesPQReasons[o.Reason] += n
		k := tk
		k.lost, k.group = o.Lost, o.Group
		count(rep.lost, k, o.Reason, n, &rep.LosesPQEvicted)
	case forecast.Fail:
		rep.Fail += n
	}
	if o.Kind == forecast.Classical || o.Kind == forecast.HRR && !tlsparse.Group(o.Group).IsPQ() {
		// Why it stays classical; for an HRR to a classical group the
		// Outcome's reason says why the HRR, so ask again.
		reason := o.Reason
		if o.Kind == forecast.HRR {
			reason = forecast.ClassicalReason(&rep.policy, r)
		}
		rep.ClassicalReasons[reason] += n
		count(rep.ja4, tk, reason, n, &rep.TailEvicted)
		if r.Log != nil {
			var none int // at most a dozen families: never evicted
			count(rep.ua, tailKey{key: UAFamily(r.Log.UserAgent)}, reason, n, &none)
		}
	}
	if o.Modeled {
		rep.Modeled += n
		rep.TotalServerHelloGrowth += w.Growth
		switch {
		case tlsparse.Group(o.Group).IsPQ():
			rep.pqGrowth += w.Growth
			rep.nPQBytes += n
		case o.Kind == forecast.LosesPQ:
			rep.lossGrowth += w.Growth
			rep.nLossBytes += n
		}
	}
}

// Finish computes shares, means and the sorted tails.
func (rep *Forecast) Finish() {
	rep.byGroup.flush(rep.addGroup)
	if n := float64(rep.Predicted); n > 0 {
		rep.PQShare = float64(rep.PQ+rep.HRRPQ) / n
		rep.HRRShare = float64(rep.HRR) / n
		rep.ClassicalShare = float64(rep.stayClassical()) / n
		rep.LosesPQShare = float64(rep.LosesPQ) / n
		rep.FailShare = float64(rep.Fail) / n
	}
	if rep.Modeled > 0 {
		rep.AddedServerHelloBytes = float64(rep.TotalServerHelloGrowth) / float64(rep.Modeled)
		rep.AddedBytesPerHandshakeAll = float64(rep.TotalServerHelloGrowth+rep.hrrBytes) / float64(rep.Modeled)
	}
	if rep.nPQBytes > 0 {
		rep.AddedServerHelloBytesPQ = float64(rep.pqGrowth) / float64(rep.nPQBytes)
	}
	if rep.nLossBytes > 0 {
		rep.AddedServerHelloBytesLosesPQ = float64(rep.lossGrowth) / float64(rep.nLossBytes)
	}
	if rep.NewHRR > 0 {
		rep.HRRBytesPerNewHRR = float64(rep.hrrBytes) / float64(rep.NewHRR)
	}
	rep.ClassicalByJA4 = rep.ClassicalByJA4[:0]
	for _, t := range tailRows(rep.ja4) {
		rep.ClassicalByJA4 = append(rep.ClassicalByJA4, t.ja4Row())
	}
	rep.LosesPQByJA4 = rep.LosesPQByJA4[:0]
	for _, t := range tailRows(rep.lost) {
		group := "none"
		if t.k.group != 0 {
			group = tlsparse.Group(t.k.group).String()
		}
		rep.LosesPQByJA4 = append(rep.LosesPQByJA4, LostPQRow{JA4Row: t.ja4Row(), Lost: tlsparse.Group(t.k.lost).String(), Group: group})
	}
	rep.ClassicalByUA = rep.ClassicalByUA[:0]
	for _, t := range tailRows(rep.ua) {
		rep.ClassicalByUA = append(rep.ClassicalByUA, t.TailRow)
	}
}

// stayClassical counts the handshakes that would end in a classical group
// and are classical today: Classical and the HRRs to a classical group.
func (rep *Forecast) stayClassical() int {
	return rep.Classical + rep.HRR - rep.HRRPQ - rep.LosesPQHRR
}

type tailRow struct {
	TailRow
	k tailKey
}

func (t tailRow) ja4Row() JA4Row {
	return JA4Row{TailRow: t.TailRow, PQOffered: t.k.pqOffered, PQKeyShare: t.k.pqShare}
}

// tailRows returns the TailRows largest rows of m, largest first.
func tailRows(m map[tailKey]*tailAcc) []tailRow {
	rows := make([]tailRow, 0, len(m))
	for k, a := range m {
		reason, best := "", -1
		for _, rc := range a.reasons {
			r, n := rc.reason, rc.n
			if n > best || n == best && r < reason {
				reason, best = r, n
			}
		}
		rows = append(rows, tailRow{TailRow: TailRow{Key: k.key, Count: a.n, Reason: reason}, k: k})
	}
	slices.SortFunc(rows, func(a, b tailRow) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key),
			cmpBool(a.k.pqOffered, b.k.pqOffered), cmpBool(a.k.pqShare, b.k.pqShare),
			cmp.Compare(a.k.lost, b.k.lost), cmp.Compare(a.k.group, b.k.group))
	})
	if len(rows) > TailRows {
		rows = rows[:TailRows]
	}
	return rows
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// PQColumn renders a JA4 row's PQ flags, what JA4 leaves out, for the text
// tables.
func PQColumn(offered, share bool) string {
	switch {
	case offered && share:
		return "offered+share"
	case offered:
		return "offered, no share"
	case share:
		return "share, not offered"
	}
	return "not offered"
}

// signedBytes renders a byte change with its sign: "+544.0", "-1088.0",
// and "0.0" for no change.
func signedBytes(v float64) string {
	s := fmt.Sprintf("%+.1f", v)
	if s == "+0.0" || s == "-0.0" {
		return "0.0"
	}
	return s
}

// growthLine is a text line for a mean ServerHello change: "growth" when it
// grows (or stays), "shrink" when it gets smaller, the sign shown either way.
func growthLine(v float64) (label, value string) {
	value = signedBytes(v) + " bytes per handshake"
	switch {
	case value[0] == '-':
		return "ServerHello shrink", value + ", smaller than today"
	case value[0] == '0':
		return "ServerHello growth", value + ", unchanged"
	}
	return "ServerHello growth", value
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
	fmt.Fprintf(&b, "  %-22s %5.1f%%  %d\n", "would stay classical", 100*rep.ClassicalShare, rep.stayClassical())
	for _, k := range sortedByCount(rep.ClassicalReasons) {
		fmt.Fprintf(&b, "    %-50s %d\n", k, rep.ClassicalReasons[k])
	}
	fmt.Fprintf(&b, "  %-22s %5.1f%%  %d (PQ today, classical under this policy", "would lose PQ", 100*rep.LosesPQShare, rep.LosesPQ)
	if rep.LosesPQ > 0 {
		fmt.Fprintf(&b, "; lost %s", kv(rep.LosesPQGroups))
		if rep.LosesPQHRR > 0 {
			fmt.Fprintf(&b, "; %d after an HRR", rep.LosesPQHRR)
		}
		if rep.nLossBytes > 0 {
			fmt.Fprintf(&b, "; ServerHello %s bytes each", signedBytes(rep.AddedServerHelloBytesLosesPQ))
			if rep.AddedServerHelloBytesLosesPQ < 0 {
				b.WriteString(", smaller")
			}
		}
	}
	b.WriteString(")\n")
	for _, k := range sortedByCount(rep.LosesPQReasons) {
		fmt.Fprintf(&b, "    %-50s %d\n", k, rep.LosesPQReasons[k])
	}
	if rep.Fail > 0 {
		fmt.Fprintf(&b, "  %-22s %5.1f%%  %d (no mutual group)\n", "would fail", pct(rep.Fail), rep.Fail)
	}
	label, value := growthLine(rep.AddedServerHelloBytes)
	fmt.Fprintf(&b, "  %-22s %s (%s per PQ handshake; %d modelled)\n", label, value, signedBytes(rep.AddedServerHelloBytesPQ), rep.Modeled)
	if rep.NewHRR > 0 {
		fmt.Fprintf(&b, "  %-22s %d, +%.0f bytes each (HRR + second ClientHello, estimated)\n", "new HRRs", rep.NewHRR, rep.HRRBytesPerNewHRR)
	}
	if len(rep.LosesPQByJA4) > 0 {
		b.WriteString("  losing PQ by JA4\n")
		fmt.Fprintf(&b, "    %-6s %-38s %-18s %-42s %s\n", "count", "ja4", "pq", "group today -> under the policy", "reason")
		for i, r := range rep.LosesPQByJA4 {
			if i == 20 {
				fmt.Fprintf(&b, "    ... %d more\n", len(rep.LosesPQByJA4)-i)
				break
			}
			fmt.Fprintf(&b, "    %-6d %-38s %-18s %-42s %s\n", r.Count, r.Key, PQColumn(r.PQOffered, r.PQKeyShare), r.Lost+" -> "+r.Group, r.Reason)
		}
	}
	if len(rep.ClassicalByJA4) > 0 {
		b.WriteString("  staying classical by JA4\n")
		fmt.Fprintf(&b, "    %-6s %-38s %-18s %s\n", "count", "ja4", "pq", "reason")
		for i, r := range rep.ClassicalByJA4 {
			if i == 20 {
				fmt.Fprintf(&b, "    ... %d more\n", len(rep.ClassicalByJA4)-i)
				break
			}
			fmt.Fprintf(&b, "    %-6d %-38s %-18s %s\n", r.Count, r.Key, PQColumn(r.PQOffered, r.PQKeyShare), r.Reason)
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
