package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

func planPolicy(t *testing.T) forecast.Policy {
	t.Helper()
	p, err := forecast.ParsePolicy("X25519MLKEM768,x25519")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func costTable(t *testing.T) *CostTable {
	t.Helper()
	ct, err := NewCostTable("test", map[string]GroupCost{
		"x25519":         {Mean: 100, Min: 90, Max: 110, Trials: 3},
		"X25519MLKEM768": {Mean: 150, Min: 140, Max: 170, Trials: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// done completes r today with group g.
func done(r *record.Handshake, g string) *record.Handshake {
	r.Group, r.PQ, r.Version = g, g == "X25519MLKEM768", "TLS1.3"
	r.FillIDs()
	return r
}

func TestPlanRecordCost(t *testing.T) {
	p, ct := planPolicy(t), costTable(t)
	reset := hello("13", []uint16{x25519}, []uint16{x25519})
	reset.Outcome = record.OutcomeReset
	for _, tc := range []struct {
		name  string
		table *CostTable
		r     *record.Handshake
		want  recordCost
	}{
		{"x25519 to hybrid", ct, done(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "x25519"), recordCost{today: 100, extra: 50, low: 140 - 110, high: 170 - 90}},
		{"stays x25519", ct, done(hello("13", []uint16{x25519}, []uint16{x25519}), "x25519"), recordCost{today: 100}},
		{"stays hybrid", ct, done(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem}), "X25519MLKEM768"), recordCost{today: 150}},
		{"not completed", ct, reset, recordCost{why: UncostedNotComplete}},
		{"no table", nil, done(hello("13", []uint16{x25519}, []uint16{x25519}), "x25519"), recordCost{why: UncostedNoTable}},
		{"group not measured", ct, done(hello("13", []uint16{p256, x25519}, []uint16{p256}), "secp256r1"), recordCost{why: "no cost for secp256r1"}},
		{"resumed, no group", ct, done(hello("13", []uint16{x25519}, []uint16{x25519}), ""), recordCost{why: UncostedNoGroup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planRecordCost(tc.table, tc.r, forecast.Predict(p, tc.r)); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Two nodes over 10 s: dedup by id, the (no node) row, the window, per
// node sums, and the cost figures by hand.
func TestPlanAdd(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rec := func(node, id string, sec int, r *record.Handshake) *record.Handshake {
		r.Node, r.ID, r.TS, r.Server = node, id, t0.Add(time.Duration(sec)*time.Second), "10.0.0.1:443"
		return r
	}
	hy := func() *record.Handshake { return hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}) }
	cl := func() *record.Handshake { return hello("13", []uint16{x25519}, []uint16{x25519}) }
	pl := NewPlan(planPolicy(t), []PlanCosts{{Table: costTable(t)}})
	for _, r := range []*record.Handshake{
		rec("a", "1", 0, done(hy(), "x25519")), // +50 (30..80)
		rec("a", "1", 3, done(hy(), "x25519")), // duplicate
		rec("b", "2", 5, done(cl(), "x25519")),
		rec("", "3", 10, done(hy(), "X25519MLKEM768")),
		rec("b", "", 7, done(cl(), "x25519")), // no id: never a duplicate
		rec("b", "", 7, done(cl(), "x25519")),
	} {
		pl.Add(r)
	}
	pl.Finish()
	if pl.Read != 6 || pl.Duplicates != 1 || pl.Handshakes != 5 || pl.NoNode != 1 || pl.WindowSeconds != 10 {
		t.Errorf("read %d dup %d handshakes %d no node %d window %v", pl.Read, pl.Duplicates, pl.Handshakes, pl.NoNode, pl.WindowSeconds)
	}
	if names := sortedNames(pl.Nodes); !slices.Equal(names, []string{PlanNoNode, "a", "b"}) {
		t.Errorf("nodes %v", names)
	}
	sum := 0
	var rate float64
	for _, f := range pl.Nodes {
		sum += f.Handshakes
		rate += f.HandshakesPerSecond
	}
	if sum != pl.Handshakes || rate != pl.HandshakesPerSecond || pl.HandshakesPerSecond != 0.5 {
		t.Errorf("nodes sum %d (%v/s), fleet %d (%v/s)", sum, rate, pl.Handshakes, pl.HandshakesPerSecond)
	}
	c := pl.Cost
	// today 100+100+150+100+100 = 550 us; extra 50 (30..80) over 10 s.
	want := PlanCost{Costed: 5, Uncosted: map[string]int{}, TodayCPUSeconds: 550e-6,
		ExtraCPUSeconds: 50e-6, ExtraCPUSecondsLow: 30e-6, ExtraCPUSecondsHigh: 80e-6,
		ExtraCores: 5e-6, ExtraCoresLow: 3e-6, ExtraCoresHigh: 8e-6,
		ExtraCoreSecondsPerDay: 5e-6 * 86400, ExtraCoreSecondsPerDayLow: 3e-6 * 86400, ExtraCoreSecondsPerDayHigh: 8e-6 * 86400,
		Percent: 100 * 50.0 / 550, PercentLow: 100 * 30.0 / 550, PercentHigh: 100 * 80.0 / 550}
	near := func(name string, got, want float64) {
		if d := got - want; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("today", c.TodayCPUSeconds, want.TodayCPUSeconds)
	near("extra", c.ExtraCPUSeconds, want.ExtraCPUSeconds)
	near("low", c.ExtraCPUSecondsLow, want.ExtraCPUSecondsLow)
	near("high", c.ExtraCPUSecondsHigh, want.ExtraCPUSecondsHigh)
	near("cores", c.ExtraCores, want.ExtraCores)
	near("cores low", c.ExtraCoresLow, want.ExtraCoresLow)
	near("cores high", c.ExtraCoresHigh, want.ExtraCoresHigh)
	near("per day", c.ExtraCoreSecondsPerDay, want.ExtraCoreSecondsPerDay)
	near("percent", c.Percent, want.Percent)
	near("percent low", c.PercentLow, want.PercentLow)
	near("percent high", c.PercentHigh, want.PercentHigh)
	if c.Costed != 5 {
		t.Errorf("costed %d", c.Costed)
	}
	if len(pl.ClassicalFamilies) != 1 || pl.ClassicalFamilies[0].Count != 3 || !strings.HasSuffix(pl.ClassicalFamilies[0].Family, "[x25519]") || pl.ClassicalFamilies[0].Share != 0.6 {
		t.Errorf("families %+v", pl.ClassicalFamilies)
	}
	var b strings.Builder
	if err := pl.WriteText(&b); err != nil || !strings.Contains(b.String(), "1 duplicates dropped") {
		t.Errorf("text: %v\n%s", err, b.String())
	}
	if rows := pl.CSVRows(); len(rows) != 1+3+1 || len(rows[0]) != len(PlanCSVHeader) {
		t.Errorf("csv rows %d, columns %d of %d", len(rows), len(rows[0]), len(PlanCSVHeader))
	}
}

// A user-agent family when a log line was joined, else JA4 and offered
// groups.
func TestFamily(t *testing.T) {
	r := hello("13", []uint16{x25519, p256}, []uint16{x25519})
	if got, want := Family(r), "ja4 "+r.JA4+" [x25519,secp256r1]"; got != want {
		t.Errorf("Family = %q, want %q", got, want)
	}
	r.Log = &record.Log{UserAgent: "curl/8.5.0"}
	if got := Family(r); got != "ua curl" {
		t.Errorf("Family = %q, want ua curl", got)
	}
}

// Past MaxPlanRows names, a new server is counted under "other".
func TestPlanRowsBounded(t *testing.T) {
	pl := NewPlan(planPolicy(t), nil)
	m := map[string]*PlanFigures{}
	for i := range MaxPlanRows + 5 {
		pl.row(m, strings.Repeat("x", 1)+string(rune('a'+i%26))+time.Duration(i).String())
	}
	if len(m) != MaxPlanRows+1 || pl.RowsOverflow != 5 || m[PlanOther] == nil {
		t.Errorf("rows %d, overflow %d", len(m), pl.RowsOverflow)
	}
}

func BenchmarkPlanAdd(b *testing.B) {
	p, _ := forecast.ParsePolicy("X25519MLKEM768,x25519")
	ct, _ := NewCostTable("bench", map[string]GroupCost{"x25519": {Mean: 100, Min: 90, Max: 110}, "X25519MLKEM768": {Mean: 150, Min: 140, Max: 170}})
	pl := NewPlan(p, []PlanCosts{{Table: ct}})
	r := done(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "x25519")
	r.Node, r.Server, r.SNI, r.TS = "node-a", "10.0.0.1:443", "a.test", time.Now()
	b.ReportAllocs()
	for b.Loop() {
		pl.Add(r)
	}
}
