package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// Counting by class (AddClass) makes the plan Add makes record by record,
// to the last bit: 30,000 records of the golden lines over 40 nodes and
// 15,000 JA4s (past MaxJA4, so the JA4 tables fold rows into
// "other"; and past MaxPlanClasses, so records of new classes go one by
// one), with duplicates, costs and lines AddClass cannot take (a string
// with an escape) among them.
func TestPlanAddClassEqualsAdd(t *testing.T) {
	var golden []record.Handshake
	for _, l := range planGoldenLines(t) {
		var h record.Handshake
		if err := json.Unmarshal(l, &h); err != nil {
			t.Fatal(err)
		}
		golden = append(golden, h)
	}
	var lines [][]byte
	var recs []record.Handshake // each line's record, as encoding/json reads it
	base := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	for i := range 30_000 {
		h := golden[i%len(golden)]
		h.TS = base.Add(time.Duration(i) * time.Millisecond)
		h.Node = fmt.Sprintf("node-%02d", i%40)
		h.JA4 = fmt.Sprintf("t13d%06d", i*7919%15_000)
		h.ID, h.IDPrefix, h.IDSeq = "", fmt.Sprintf("n%02d-", i%40), uint64(i/40+1)
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if i%997 == 0 {
			b = bytes.Replace(b, []byte(`"server":"`), []byte(`"server":"\u0031`), 1) // an escape: the decoder declines
			h.Server = "1" + h.Server
		}
		h.ID, h.IDPrefix, h.IDSeq = h.RecordID(), "", 0
		h.FillIDs()
		lines, recs = append(lines, b), append(recs, h)
		if i%101 == 0 {
			j := len(lines) - 1 - i%7 // a second delivery
			lines, recs = append(lines, lines[j]), append(recs, recs[j])
		}
	}
	costs := []PlanCosts{{Table: costTable(t)}}
	var out [2][]byte
	for pass := range 2 {
		pl := NewPlan(planPolicy(t), costs)
		d := NewPlanDecoder()
		classes, declined := 0, 0
		for i, l := range lines {
			var r record.Handshake
			if pass == 0 || !d.Decode(l, &r) {
				if pass == 1 {
					declined++
				}
				r = recs[i]
				pl.Add(&r)
				continue
			}
			k, ok := d.Class()
			if !ok {
				t.Fatal("no class")
			}
			classes++
			pl.AddClass(&r, k)
		}
		pl.Finish()
		if pass == 1 && (declined == 0 || len(pl.classes.slots) < MaxPlanClasses || pl.Forecast.TailEvicted == 0 || pl.Duplicates == 0) {
			t.Fatalf("declined %d, %d classes, %d JA4s evicted, %d families folded, %d duplicates: not the cases meant", declined, len(pl.classes.slots), pl.Forecast.TailEvicted, pl.FamiliesOverflow, pl.Duplicates)
		}
		var err error
		if out[pass], err = json.Marshal(pl); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0], out[1]) {
		i := 0
		for i < len(out[0]) && i < len(out[1]) && out[0][i] == out[1][i] {
			i++
		}
		t.Fatalf("plans differ at byte %d:\nAdd      %s\nAddClass %s", i, out[0][max(0, i-200):min(len(out[0]), i+200)], out[1][max(0, i-200):min(len(out[1]), i+200)])
	}
}
