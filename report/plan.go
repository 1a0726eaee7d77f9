package report

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// Plan bounds and names.
const (
	// PlanNoNode is the node name of records that carry no node.
	PlanNoNode = "(no node)"
	// PlanNoSNI is the SNI row of records that sent no server_name.
	PlanNoSNI = "(no sni)"
	// PlanOther collects the rows past a table's cap.
	PlanOther = "other"
	// MaxPlanIDs bounds the ids kept by hash to drop duplicates (ids not
	// of the agent's form, prefixes past MaxPlanIDWindows, rollup rows'
	// keys): a 64-bit hash of each, some 40 bytes with the map's
	// overhead, about 400 MB at the cap; past it, records are not checked
	// (counted in IDsUnchecked). The agent's ids go to windows (planids.go).
	MaxPlanIDs = 10_000_000
	// MaxPlanRows bounds each of the node, server and SNI tables: past it
	// a new name is counted under PlanOther (and in RowsOverflow).
	MaxPlanRows = 10_000
	// PlanTopSNIs is how many SNIs the report lists.
	PlanTopSNIs = 10
	// planMaxCached bounds the plan's caches of strings it builds.
	planMaxCached = 4096
	// secondsPerDay turns per-second figures into per-day ones.
	secondsPerDay = 86400
)

// GroupCost is the server CPU a full handshake negotiating one group costs,
// in microseconds, as loadgen measured it: the mean and the smallest and
// largest trial (its spread).
type GroupCost struct {
	Mean   float64 `json:"mean_us"`
	Min    float64 `json:"min_us"`
	Max    float64 `json:"max_us"`
	Trials int     `json:"trials"`
}

// CostTable is one loadgen run's cost per negotiated group.
type CostTable struct {
	Source string               `json:"source"`
	Groups map[string]GroupCost `json:"groups"` // registry names
	ids    map[uint16]GroupCost
}

// PlanCosts applies a CostTable to the records of Servers (address:port),
// or to every server when Servers is empty.
type PlanCosts struct {
	Servers []string   `json:"servers,omitempty"`
	Table   *CostTable `json:"table"`
}

// PlanCost is the cost half of a plan's figures. CPU figures are server
// CPU: seconds over the window, cores (CPU seconds per second of the
// window) and core-seconds per day at that rate; Low and High carry the
// measured trials' spread (see planRecordCost).
type PlanCost struct {
	Costed   int            `json:"handshakes_costed"`
	Uncosted map[string]int `json:"handshakes_uncosted"` // by reason

	TodayCPUSeconds float64 `json:"server_cpu_seconds_today"`

	ExtraCPUSeconds     float64 `json:"extra_server_cpu_seconds"`
	ExtraCPUSecondsLow  float64 `json:"extra_server_cpu_seconds_low"`
	ExtraCPUSecondsHigh float64 `json:"extra_server_cpu_seconds_high"`

	ExtraCores     float64 `json:"extra_server_cpu_cores"`
	ExtraCoresLow  float64 `json:"extra_server_cpu_cores_low"`
	ExtraCoresHigh float64 `json:"extra_server_cpu_cores_high"`

	ExtraCoreSecondsPerDay     float64 `json:"extra_server_cpu_core_seconds_per_day"`
	ExtraCoreSecondsPerDayLow  float64 `json:"extra_server_cpu_core_seconds_per_day_low"`
	ExtraCoreSecondsPerDayHigh float64 `json:"extra_server_cpu_core_seconds_per_day_high"`

	// Percent is ExtraCPUSeconds over TodayCPUSeconds, in percent; Low and
	// High divide the range's ends by the same TodayCPUSeconds.
	Percent     float64 `json:"extra_percent_of_handshake_cpu"`
	PercentLow  float64 `json:"extra_percent_of_handshake_cpu_low"`
	PercentHigh float64 `json:"extra_percent_of_handshake_cpu_high"`
}

// PlanFigures is one scope of a plan (the fleet, a node, a server, an SNI):
// today, under the policy, and with costs.
type PlanFigures struct {
	Handshakes          int            `json:"handshakes"`
	HandshakesPerSecond float64        `json:"handshakes_per_second"`
	Completed           int            `json:"completed"`
	PQ                  int            `json:"pq"`
	PQShare             float64        `json:"pq_share"` // pq / completed
	HRR                 int            `json:"hrr"`
	HRRShare            float64        `json:"hrr_share"` // hrr / handshakes
	Failed              int            `json:"failed"`
	Failures            map[string]int `json:"failures"`

	Forecast *Forecast `json:"forecast"`

	// ExtraBytes is the forecast's ServerHello growth plus its HRR
	// estimates over the modelled handshakes of the window (the forecast's
	// total_server_hello_growth_bytes + new_hrr x hrr_added_bytes_per_new_hrr).
	ExtraBytes          int64   `json:"extra_handshake_bytes"`
	ExtraBytesPerSecond float64 `json:"extra_handshake_bytes_per_second"`
	ExtraBytesPerDay    float64 `json:"extra_handshake_bytes_per_day"`

	// The ClientHello is the client's: no server policy changes it. Of
	// the records with client_hello_wire_segments, MultiSegment need more
	// than one segment at their MSS; MultiSegmentPQ of the WireKnownPQ
	// that would end in a PQ group.
	WireKnown         int     `json:"client_hello_wire_segments_known"`
	MultiSegment      int     `json:"client_hello_multi_segment"`
	MultiSegmentShare float64 `json:"client_hello_multi_segment_share"`
	WireKnownPQ       int     `json:"client_hello_wire_segments_known_pq"`
	MultiSegmentPQ    int     `json:"client_hello_multi_segment_pq"`
	MultiSegmentPQShr float64 `json:"client_hello_multi_segment_pq_share"`

	Cost *PlanCost `json:"cost,omitempty"`

	todayUs, extraUs, lowUs, highUs float64
}

// FamilyRow is a client family that would stay classical: its share is of
// the fleet's predicted handshakes.
type FamilyRow struct {
	Family string  `json:"family"`
	Count  int     `json:"count"`
	Share  float64 `json:"share"`
	Reason string  `json:"reason"`
}

// PlanSNI is one row of the top SNIs.
type PlanSNI struct {
	SNI string `json:"sni"`
	*PlanFigures
}

// Plan is the fleet capacity plan: records from many nodes under one server
// policy, optionally with loadgen costs.
type Plan struct {
	Policy string `json:"policy"`
	// Read counts every record given to Add; Duplicates of them had an id
	// already seen and were dropped; Handshakes are the rest.
	Read         int `json:"records_read"`
	Duplicates   int `json:"duplicates_dropped"`
	IDsUnchecked int `json:"ids_unchecked,omitempty"`
	// IDsOutsideWindow counts records whose id's sequence number was
	// PlanIDWindow or more below the highest of its prefix (and stream),
	// or below numbers the window forgot: kept, not checked.
	IDsOutsideWindow int `json:"ids_outside_window,omitempty"`
	// Stream is the stream the next records come from (the caller's: a
	// Kafka partition + 1; 0 for files): each has its own id windows.
	Stream       int `json:"-"`
	NoNode       int `json:"records_without_node"`
	RowsOverflow int `json:"rows_overflow,omitempty"`
	// Malformed counts input lines that were not a record (the caller's).
	Malformed int `json:"malformed_lines"`
	// Rollups is set when the plan read rollup rows (AddRollup).
	Rollups *RollupStats `json:"rollups,omitempty"`

	WindowStart   time.Time `json:"window_start"`
	WindowEnd     time.Time `json:"window_end"`
	WindowSeconds float64   `json:"window_seconds"`

	Costs []PlanCosts `json:"costs,omitempty"`

	*PlanFigures
	Nodes   map[string]*PlanFigures `json:"nodes"`
	Servers map[string]*PlanFigures `json:"servers"`
	TopSNIs []PlanSNI               `json:"top_snis"`

	ClassicalFamilies []FamilyRow `json:"classical_client_families"`
	FamiliesOverflow  int         `json:"classical_client_families_overflow,omitempty"`

	// PolicyCheck checks the records kept against declared policies (set
	// by the caller: NewPolicyCheck).
	PolicyCheck *PolicyCheck `json:"policy_check,omitempty"`

	policy   forecast.Policy
	ids      map[uint64]struct{} // maphash of each id seen
	windows  map[idStream]*seqWindow
	lastKey  idStream
	lastWin  *seqWindow
	seed     maphash.Seed
	snis     map[string]*PlanFigures
	families map[tailKey]*tailAcc

	failures    map[[2]string]string
	uaFamilies  map[string]string
	familyCache map[familyKey]string

	classes planClassTable // AddClass's (planclass.go)
	pending []int32        // its slots with records not yet in the figures
}

// NewPlan returns an empty plan for policy p and costs (nil: no cost half).
func NewPlan(p forecast.Policy, costs []PlanCosts) *Plan {
	pl := &Plan{
		Policy: p.String(), policy: p, Costs: costs,
		Nodes: map[string]*PlanFigures{}, Servers: map[string]*PlanFigures{},
		ids: map[uint64]struct{}{}, windows: map[idStream]*seqWindow{}, seed: maphash.MakeSeed(), snis: map[string]*PlanFigures{}, families: map[tailKey]*tailAcc{},
		failures: map[[2]string]string{}, uaFamilies: map[string]string{}, familyCache: map[familyKey]string{},
	}
	pl.PlanFigures = pl.newFigures()
	return pl
}

func (pl *Plan) newFigures() *PlanFigures {
	f := &PlanFigures{Failures: map[string]int{}, Forecast: NewForecast(pl.policy)}
	if len(pl.Costs) > 0 {
		f.Cost = &PlanCost{Uncosted: map[string]int{}}
	}
	return f
}

// row returns m[name], made on first use; past MaxPlanRows names a new one
// is counted under PlanOther.
func (pl *Plan) row(m map[string]*PlanFigures, name string) *PlanFigures {
	f := m[name]
	if f == nil {
		if len(m) >= MaxPlanRows {
			pl.RowsOverflow++
			name = PlanOther
			f = m[name]
		}
		if f == nil {
			f = pl.newFigures()
			m[name] = f
		}
	}
	return f
}

// NewCostTable builds a cost table from costs by group name; a name the
// registry does not know is an error.
func NewCostTable(source string, groups map[string]GroupCost) (*CostTable, error) {
	t := &CostTable{Source: source, Groups: map[string]GroupCost{}, ids: map[uint16]GroupCost{}}
	for name, c := range groups {
		g, ok := tlsparse.ParseGroup(name)
		if !ok {
			return nil, fmt.Errorf("report: cost for unknown group %q", name)
		}
		t.Groups[g.String()] = c
		t.ids[uint16(g)] = c
	}
	return t, nil
}

// table is the cost table for server, nil when none applies: the first
// PlanCosts naming server, else the first that names none.
func (pl *Plan) table(server string) *CostTable {
	var all *CostTable
	for _, c := range pl.Costs {
		if len(c.Servers) == 0 {
			if all == nil {
				all = c.Table
			}
			continue
		}
		if slices.Contains(c.Servers, server) {
			return c.Table
		}
	}
	return all
}

// Add counts one record (its codepoints filled: record.Handshake.FillIDs):
// dropped when its id was seen before, else counted fleet-wide and in its
// node, server and SNI rows.
func (pl *Plan) Add(r *record.Handshake) {
	if len(pl.pending) > 0 {
		pl.flush()
	}
	pl.Read++
	if r.HasID() && pl.seenID(r) {
		pl.Duplicates++
		return
	}
	pl.window(r)
	node := r.Node
	if node == "" {
		node = PlanNoNode
		pl.NoNode++
	}
	sni := r.SNI
	if sni == "" {
		sni = PlanNoSNI
	}
	scopes := [...]*PlanFigures{pl.PlanFigures, pl.row(pl.Nodes, node), pl.row(pl.Servers, r.Server), pl.row(pl.snis, sni)}
	if pl.PolicyCheck != nil {
		pl.PolicyCheck.Add(r)
	}
	o := forecast.Predict(pl.policy, r)
	var cost recordCost
	if len(pl.Costs) > 0 {
		cost = planRecordCost(pl.table(r.Server), r, o)
	}
	w := recordWeight(r, o)
	fail := pl.failure(r)
	for _, f := range scopes {
		f.add(r, o, cost, w, fail)
	}
	if stayClassical(o) {
		count(pl.families, tailKey{key: pl.family(r)}, classicalReason(&pl.policy, r, o), 1, &pl.FamiliesOverflow)
	}
}

// window widens the plan's window to r's ts.
func (pl *Plan) window(r *record.Handshake) {
	if !r.TS.IsZero() {
		if pl.WindowStart.IsZero() || r.TS.Before(pl.WindowStart) {
			pl.WindowStart = r.TS
		}
		if r.TS.After(pl.WindowEnd) {
			pl.WindowEnd = r.TS
		}
	}
}

// failure is the failures key of r (failed: its outcome, or "alert:" and
// the description), from a small cache.
func (pl *Plan) failure(r *record.Handshake) string {
	if r.Outcome == record.OutcomeOK {
		return ""
	}
	if r.Alert == "" {
		return r.Outcome
	}
	k := [2]string{r.Outcome, r.Alert}
	if s, ok := pl.failures[k]; ok {
		return s
	}
	s := r.Outcome + ":" + r.Alert
	if len(pl.failures) < planMaxCached {
		pl.failures[k] = s
	}
	return s
}

// familyKey is what Family reads of a record whose family is by JA4: its
// JA4 and its offered_groups array (shared by the records a PlanDecoder
// read from the same text).
type familyKey struct {
	ja4    string
	groups *string
	n      int
}

// family is Family(r), from a small cache.
func (pl *Plan) family(r *record.Handshake) string {
	if r.Log != nil && r.Log.UserAgent != "" {
		f := UAFamily(r.Log.UserAgent)
		s, ok := pl.uaFamilies[f]
		if !ok {
			s = "ua " + f
			pl.uaFamilies[f] = s // UAFamilies: a handful
		}
		return s
	}
	if len(r.OfferedGroups) == 0 {
		return Family(r)
	}
	k := familyKey{r.JA4, &r.OfferedGroups[0], len(r.OfferedGroups)}
	if s, ok := pl.familyCache[k]; ok {
		return s
	}
	s := Family(r)
	if len(pl.familyCache) < planMaxCached {
		pl.familyCache[k] = s
	}
	return s
}

// stayClassical reports whether o ends in a classical group for a record
// that is classical today (LosesPQ is counted apart).
func stayClassical(o forecast.Outcome) bool {
	return o.Kind == forecast.Classical || o.Kind == forecast.HRR && !tlsparse.Group(o.Group).IsPQ()
}

func classicalReason(p *forecast.Policy, r *record.Handshake, o forecast.Outcome) string {
	if o.Kind == forecast.HRR {
		return forecast.ClassicalReason(p, r)
	}
	return o.Reason
}

// Family is r's client family in the long tail: its user-agent family when
// a log line with a User-Agent was joined, else "ja4 JA4 [offered groups]".
func Family(r *record.Handshake) string {
	if r.Log != nil && r.Log.UserAgent != "" {
		return "ua " + UAFamily(r.Log.UserAgent)
	}
	ja4 := r.JA4
	if ja4 == "" {
		ja4 = "none"
	}
	return "ja4 " + ja4 + " [" + strings.Join(r.OfferedGroups, ",") + "]"
}

// recordCost is one record's server CPU today and the change under the
// policy, in microseconds; why is set when it could not be costed.
type recordCost struct {
	why                     string
	today, extra, low, high float64
}

// Reasons a record is not costed.
const (
	UncostedNoTable      = "no cost table for the server"
	UncostedNotComplete  = "did not complete today"
	UncostedNoGroup      = "no group today"
	UncostedNoPrediction = "no predicted group"
)

// planRecordCost is what r costs the server today and would cost more under
// the prediction o, from t: today is the mean cost of the group r
// negotiated; extra is mean(predicted) - mean(today), 0 when the group does
// not change. The range takes the trials' spread at its widest: low is
// min(predicted) - max(today), high max(predicted) - min(today) (both 0
// when the group does not change). An HRR's own CPU is not in loadgen's
// per-group figures and is not added.
func planRecordCost(t *CostTable, r *record.Handshake, o forecast.Outcome) recordCost {
	switch {
	case t == nil:
		return recordCost{why: UncostedNoTable}
	case r.Outcome != record.OutcomeOK:
		return recordCost{why: UncostedNotComplete}
	}
	today := tlsparse.Group(r.GroupID)
	if today == 0 {
		return recordCost{why: UncostedNoGroup}
	}
	if o.Group == 0 {
		return recordCost{why: UncostedNoPrediction}
	}
	ct, ok := t.ids[uint16(today)]
	if !ok {
		return recordCost{why: "no cost for " + today.String()}
	}
	cp, ok := t.ids[o.Group]
	if !ok {
		return recordCost{why: "no cost for " + tlsparse.Group(o.Group).String()}
	}
	c := recordCost{today: ct.Mean}
	if uint16(today) != o.Group {
		c.extra, c.low, c.high = cp.Mean-ct.Mean, cp.Min-ct.Max, cp.Max-ct.Min
	}
	return c
}

// add counts w.N handshakes like r, each predicted as o and costing c;
// fail is its failures key (Plan.failure).
func (f *PlanFigures) add(r *record.Handshake, o forecast.Outcome, c recordCost, w weight, fail string) {
	f.addCounts(r, o, w, fail)
	if f.Cost != nil {
		if c.why != "" {
			f.Cost.Uncosted[c.why] += w.N
		} else {
			f.Cost.Costed += w.N
			f.addCostUs(c, w.N)
		}
	}
}

// addCostUs adds n handshakes costing c to f's CPU sums.
func (f *PlanFigures) addCostUs(c recordCost, n int) {
	nf := float64(n)
	f.todayUs += nf * c.today
	f.extraUs += nf * c.extra
	f.lowUs += nf * c.low
	f.highUs += nf * c.high
}

// addCounts is add but for the cost.
func (f *PlanFigures) addCounts(r *record.Handshake, o forecast.Outcome, w weight, fail string) {
	n := w.N
	f.Handshakes += n
	if r.HRR {
		f.HRR += n
	}
	if r.Outcome == record.OutcomeOK {
		f.Completed += n
		if r.PQ {
			f.PQ += n
		}
	} else {
		f.Failed += n
		f.Failures[fail] += n
	}
	f.Forecast.add(r, o, w)
	pq := tlsparse.Group(o.Group).IsPQ() && (o.Kind == forecast.PQ || o.Kind == forecast.HRR)
	f.WireKnown += w.WireKnown
	f.MultiSegment += w.MultiSegment
	if pq {
		f.WireKnownPQ += w.WireKnown
		f.MultiSegmentPQ += w.MultiSegment
	}
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// finish computes f's shares and rates over a window of secs seconds (0:
// rates left 0).
func (f *PlanFigures) finish(secs float64) {
	f.Forecast.Finish()
	f.PQShare = share(f.PQ, f.Completed)
	f.HRRShare = share(f.HRR, f.Handshakes)
	f.MultiSegmentShare = share(f.MultiSegment, f.WireKnown)
	f.MultiSegmentPQShr = share(f.MultiSegmentPQ, f.WireKnownPQ)
	f.ExtraBytes = f.Forecast.TotalServerHelloGrowth + f.Forecast.hrrBytes
	perSec := func(v float64) float64 {
		if secs <= 0 {
			return 0
		}
		return v / secs
	}
	f.HandshakesPerSecond = perSec(float64(f.Handshakes))
	f.ExtraBytesPerSecond = perSec(float64(f.ExtraBytes))
	f.ExtraBytesPerDay = f.ExtraBytesPerSecond * secondsPerDay
	if c := f.Cost; c != nil {
		c.TodayCPUSeconds = f.todayUs / 1e6
		c.ExtraCPUSeconds, c.ExtraCPUSecondsLow, c.ExtraCPUSecondsHigh = f.extraUs/1e6, f.lowUs/1e6, f.highUs/1e6
		c.ExtraCores, c.ExtraCoresLow, c.ExtraCoresHigh = perSec(c.ExtraCPUSeconds), perSec(c.ExtraCPUSecondsLow), perSec(c.ExtraCPUSecondsHigh)
		c.ExtraCoreSecondsPerDay = c.ExtraCores * secondsPerDay
		c.ExtraCoreSecondsPerDayLow = c.ExtraCoresLow * secondsPerDay
		c.ExtraCoreSecondsPerDayHigh = c.ExtraCoresHigh * secondsPerDay
		if f.todayUs > 0 {
			c.Percent = 100 * f.extraUs / f.todayUs
			c.PercentLow = 100 * f.lowUs / f.todayUs
			c.PercentHigh = 100 * f.highUs / f.todayUs
		}
	}
}

// Finish computes every scope's shares and rates over the plan's window
// (first to last ts of the records kept; every scope's rates use it, so
// the nodes' rates sum to the fleet's), the top SNIs and the tail.
func (pl *Plan) Finish() {
	pl.flush()
	if pl.WindowEnd.After(pl.WindowStart) {
		pl.WindowSeconds = pl.WindowEnd.Sub(pl.WindowStart).Seconds()
	}
	pl.PlanFigures.finish(pl.WindowSeconds)
	for _, m := range []map[string]*PlanFigures{pl.Nodes, pl.Servers, pl.snis} {
		for _, f := range m {
			f.finish(pl.WindowSeconds)
		}
	}
	pl.TopSNIs = pl.TopSNIs[:0]
	for name, f := range pl.snis {
		pl.TopSNIs = append(pl.TopSNIs, PlanSNI{SNI: name, PlanFigures: f})
	}
	slices.SortFunc(pl.TopSNIs, func(a, b PlanSNI) int {
		return cmp.Or(cmp.Compare(b.Handshakes, a.Handshakes), cmp.Compare(a.SNI, b.SNI))
	})
	if len(pl.TopSNIs) > PlanTopSNIs {
		pl.TopSNIs = pl.TopSNIs[:PlanTopSNIs]
	}
	pl.ClassicalFamilies = pl.ClassicalFamilies[:0]
	for _, t := range tailRows(pl.families) {
		pl.ClassicalFamilies = append(pl.ClassicalFamilies, FamilyRow{Family: t.Key, Count: t.Count, Share: share(t.Count, pl.Forecast.Predicted), Reason: t.Reason})
	}
}

// sortedNames returns m's keys in order.
func sortedNames(m map[string]*PlanFigures) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// PlanCSVHeader is the header row of WriteCSV.
var PlanCSVHeader = []string{
	"scope", "name", "handshakes", "handshakes_per_second", "completed", "pq", "pq_share", "hrr", "hrr_share", "failed",
	"forecast_predicted", "forecast_pq", "forecast_hrr", "forecast_hrr_pq", "forecast_classical", "forecast_loses_pq", "forecast_fail", "forecast_unknown",
	"extra_handshake_bytes", "extra_handshake_bytes_per_second", "extra_handshake_bytes_per_day",
	"client_hello_wire_segments_known", "client_hello_multi_segment", "client_hello_multi_segment_share",
	"handshakes_costed", "server_cpu_seconds_today", "extra_server_cpu_seconds", "extra_server_cpu_seconds_low", "extra_server_cpu_seconds_high",
	"extra_server_cpu_cores", "extra_server_cpu_cores_low", "extra_server_cpu_cores_high", "extra_percent_of_handshake_cpu",
	"extra_percent_of_handshake_cpu_low", "extra_percent_of_handshake_cpu_high",
	"policy", "policy_checked", "policy_matched", "policy_violations",
}

// planCSVPolicyColumns are the last columns of PlanCSVHeader: the policy
// check's.
const planCSVPolicyColumns = 4

// CSVRows returns the rows of the CSV form: the fleet, then one per node
// and one per server, in name order, with PlanCSVHeader's columns (cost
// columns empty without costs; policy columns as policyCSV).
func (pl *Plan) CSVRows() [][]string {
	rows := [][]string{append(pl.PlanFigures.csv("fleet", ""), pl.policyCSV("fleet", "")...)}
	for _, n := range sortedNames(pl.Nodes) {
		rows = append(rows, append(pl.Nodes[n].csv("node", n), pl.policyCSV("node", n)...))
	}
	for _, n := range sortedNames(pl.Servers) {
		rows = append(rows, append(pl.Servers[n].csv("server", n), pl.policyCSV("server", n)...))
	}
	return rows
}

// policyCSV returns the policy columns of a row: empty without a policy
// check and on node rows; the check's totals (no policy) on the fleet row;
// on a server row with a declared policy that policy and its counts (0
// when none of its records was checkable), empty for a server without
// one, for the plan's "other" row, and the counts empty for a server the
// check folded into its own "(other)" (past MaxPolicyServers).
func (pl *Plan) policyCSV(scope, name string) []string {
	row := make([]string, planCSVPolicyColumns)
	pc := pl.PolicyCheck
	if pc == nil || scope == "node" || scope == "server" && name == PlanOther {
		return row
	}
	counts := func(checked, matched, violations int) {
		row[1], row[2], row[3] = fmt.Sprint(checked), fmt.Sprint(matched), fmt.Sprint(violations)
	}
	if scope == "fleet" {
		counts(pc.Checked, pc.Matched, pc.Violations)
		return row
	}
	p, ok := pc.exp.For(name)
	if !ok {
		return row
	}
	row[0] = p.String()
	if s := pc.ByServer[name]; s != nil {
		counts(s.Checked, s.Matched, s.Violations)
	} else if pc.ServersOverflow == 0 {
		counts(0, 0, 0)
	}
	return row
}

func (f *PlanFigures) csv(scope, name string) []string {
	d := func(n int) string { return fmt.Sprint(n) }
	g := func(v float64) string { return fmt.Sprint(v) }
	fc := f.Forecast
	row := []string{scope, name, d(f.Handshakes), g(f.HandshakesPerSecond), d(f.Completed), d(f.PQ), g(f.PQShare), d(f.HRR), g(f.HRRShare), d(f.Failed),
		d(fc.Predicted), d(fc.PQ), d(fc.HRR), d(fc.HRRPQ), d(fc.Classical), d(fc.LosesPQ), d(fc.Fail), d(fc.Unknown),
		fmt.Sprint(f.ExtraBytes), g(f.ExtraBytesPerSecond), g(f.ExtraBytesPerDay),
		d(f.WireKnown), d(f.MultiSegment), g(f.MultiSegmentShare)}
	if c := f.Cost; c != nil {
		row = append(row, d(c.Costed), g(c.TodayCPUSeconds), g(c.ExtraCPUSeconds), g(c.ExtraCPUSecondsLow), g(c.ExtraCPUSecondsHigh),
			g(c.ExtraCores), g(c.ExtraCoresLow), g(c.ExtraCoresHigh), g(c.Percent), g(c.PercentLow), g(c.PercentHigh))
	} else {
		row = append(row, make([]string, len(PlanCSVHeader)-planCSVPolicyColumns-len(row))...)
	}
	return row
}

// WriteText writes the plan as the text a planner pastes into a review.
func (pl *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "capacity plan (policy %s)\n", pl.Policy)
	if pl.Read > 0 || pl.Rollups == nil {
		fmt.Fprintf(&b, "records %d read, %d duplicates dropped (by id), %d without a node (as %q)\n", pl.Read, pl.Duplicates, pl.NoNode, PlanNoNode)
	}
	if pl.Malformed > 0 {
		fmt.Fprintf(&b, "  %d input lines were not a record (skipped)\n", pl.Malformed)
	}
	if pl.IDsUnchecked > 0 {
		fmt.Fprintf(&b, "  %d records past the id cap were not checked for duplicates\n", pl.IDsUnchecked)
	}
	if pl.IDsOutsideWindow > 0 {
		fmt.Fprintf(&b, "  %d records were not checked for duplicates: their id's sequence number was more than %d behind its agent's latest (or below what its window forgot)\n", pl.IDsOutsideWindow, PlanIDWindow)
	}
	if st := pl.Rollups; st != nil {
		fmt.Fprintf(&b, "rollup rows %d read, %d duplicates dropped (by node, server and window), %d handshakes without a node (as %q); %d handshakes with a folded offer (forecast unknown)", st.Rows, st.Duplicates, pl.NoNode, PlanNoNode, st.OtherOffer)
		if st.Unplanned > 0 {
			fmt.Fprintf(&b, "; %d handshakes not planned (%d rows without offer classes)", st.Unplanned, st.WithoutClasses)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "window %s to %s (%.3f s)\n", pl.WindowStart.UTC().Format(time.RFC3339Nano), pl.WindowEnd.UTC().Format(time.RFC3339Nano), pl.WindowSeconds)
	for _, c := range pl.Costs {
		who := "every server"
		if len(c.Servers) > 0 {
			who = strings.Join(c.Servers, ", ")
		}
		fmt.Fprintf(&b, "costs for %s from %s:", who, c.Table.Source)
		names := make([]string, 0, len(c.Table.Groups))
		for n := range c.Table.Groups {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			gc := c.Table.Groups[n]
			fmt.Fprintf(&b, " %s %.1f us (%.1f-%.1f, %d trials);", n, gc.Mean, gc.Min, gc.Max, gc.Trials)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nfleet\n")
	pl.PlanFigures.text(&b, "  ")
	for _, n := range sortedNames(pl.Nodes) {
		fmt.Fprintf(&b, "\nnode %s\n", n)
		pl.Nodes[n].text(&b, "  ")
	}
	for _, n := range sortedNames(pl.Servers) {
		fmt.Fprintf(&b, "\nserver %s\n", n)
		pl.Servers[n].text(&b, "  ")
	}
	if len(pl.TopSNIs) > 0 {
		b.WriteString("\ntop SNIs\n")
		fmt.Fprintf(&b, "  %-8s %-10s %-8s %-8s %-10s %-8s %s\n", "count", "per s", "pq now", "pq then", "classical", "loses pq", "sni")
		for _, s := range pl.TopSNIs {
			fc := s.Forecast
			fmt.Fprintf(&b, "  %-8d %-10.3f %-8s %-8s %-10s %-8s %s\n", s.Handshakes, s.HandshakesPerSecond, pctString(s.PQShare), pctString(fc.PQShare), pctString(fc.ClassicalShare), pctString(fc.LosesPQShare), s.SNI)
		}
	}
	if len(pl.ClassicalFamilies) > 0 {
		b.WriteString("\nstaying classical by client family (share of the fleet's predicted handshakes)\n")
		for _, r := range pl.ClassicalFamilies {
			fmt.Fprintf(&b, "  %6s %-6d %-60s %s\n", pctString(r.Share), r.Count, r.Family, r.Reason)
		}
		if pl.FamiliesOverflow > 0 {
			fmt.Fprintf(&b, "  (%d handshakes past %d families counted as %q)\n", pl.FamiliesOverflow, MaxJA4, PlanOther)
		}
	}
	if pl.PolicyCheck != nil {
		b.WriteString("\n" + pl.PolicyCheck.Text())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pctString(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func (f *PlanFigures) text(b *strings.Builder, in string) {
	fc := f.Forecast
	fmt.Fprintf(b, "%stoday         %d handshakes, %.3f/s; PQ %s of %d completed; HRR %s; %d failed", in, f.Handshakes, f.HandshakesPerSecond, pctString(f.PQShare), f.Completed, pctString(f.HRRShare), f.Failed)
	if len(f.Failures) > 0 {
		fmt.Fprintf(b, " (%s)", kv(f.Failures))
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "%sunder policy  of %d predicted: PQ %d (%s; %d after an HRR), HRR %d (%s), stays classical %d (%s), loses PQ %d (%s), fail %d; %d without a ClientHello\n",
		in, fc.Predicted, fc.PQ+fc.HRRPQ, pctString(fc.PQShare), fc.HRRPQ, fc.HRR, pctString(fc.HRRShare), fc.stayClassical(), pctString(fc.ClassicalShare), fc.LosesPQ, pctString(fc.LosesPQShare), fc.Fail, fc.Unknown)
	fmt.Fprintf(b, "%sextra bytes   %d over %d modelled handshakes: %.1f/s, %.0f/day\n", in, f.ExtraBytes, fc.Modeled, f.ExtraBytesPerSecond, f.ExtraBytesPerDay)
	fmt.Fprintf(b, "%smulti-segment ClientHellos %d of %d with an MSS (%s); of those ending in PQ %d of %d (%s)\n", in, f.MultiSegment, f.WireKnown, pctString(f.MultiSegmentShare), f.MultiSegmentPQ, f.WireKnownPQ, pctString(f.MultiSegmentPQShr))
	if c := f.Cost; c != nil {
		fmt.Fprintf(b, "%sextra CPU     %s cores (%s to %s), %s core-s/day; %s of today's handshake CPU (%s to %s); %d costed",
			in, num(c.ExtraCores), num(c.ExtraCoresLow), num(c.ExtraCoresHigh), num(c.ExtraCoreSecondsPerDay), signedPct(c.Percent), signedPct(c.PercentLow), signedPct(c.PercentHigh), c.Costed)
		if len(c.Uncosted) > 0 {
			fmt.Fprintf(b, ", not costed: %s", kv(c.Uncosted))
		}
		b.WriteString("\n")
	}
}

func num(v float64) string {
	if v == 0 || math.Abs(v) >= 0.01 {
		return fmt.Sprintf("%.4f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func signedPct(v float64) string { return fmt.Sprintf("%+.1f%%", v) }
