package report

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

// variedRecords are n records of a dozen client kinds with sizes that vary
// per record (ClientHello, key shares, ServerHello, segments), as a fleet's
// do: hybrid clients, hybrid listed without a share (an HRR under a hybrid
// policy), TLS 1.2 clients, HRRs today, failures, no ServerHello, no
// ClientHello, a group the registry does not know.
func variedRecords(n int, seed uint64) []*record.Handshake {
	rng := rand.New(rand.NewPCG(seed, 1))
	type kind struct {
		ja4, version, group string
		offered             []string
		shares              []record.KeyShare
		pq, hrr             bool
		outcome, alert      string
		noSH, noCH          bool
	}
	kinds := []kind{
		{ja4: "t13d1516h2_x", version: "TLS1.3", group: "X25519MLKEM768", offered: []string{"X25519MLKEM768", "x25519", "secp256r1"}, shares: []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}}, pq: true, outcome: "ok"},
		{ja4: "t13d1516h2_x", version: "TLS1.3", group: "x25519", offered: []string{"X25519MLKEM768", "x25519", "secp256r1"}, shares: []record.KeyShare{{Group: "x25519", Bytes: 32}}, outcome: "ok"},
		{ja4: "t13d1516h2_y", version: "TLS1.3", group: "secp256r1", offered: []string{"secp256r1", "X25519MLKEM768", "x25519"}, shares: []record.KeyShare{{Group: "secp256r1", Bytes: 65}}, outcome: "ok"},
		{ja4: "t13d1516h2_z", version: "TLS1.3", group: "x25519", offered: []string{"x25519", "secp256r1", "secp384r1"}, shares: []record.KeyShare{{Group: "x25519", Bytes: 32}}, outcome: "ok"},
		{ja4: "t13d1516h2_w", version: "TLS1.3", group: "secp384r1", hrr: true, offered: []string{"secp256r1", "secp384r1"}, shares: []record.KeyShare{{Group: "secp256r1", Bytes: 65}}, outcome: "ok"},
		{ja4: "t12d1516h2_v", version: "TLS1.2", group: "x25519", offered: []string{"x25519", "secp256r1"}, outcome: "ok"},
		{ja4: "t12d1516h2_u", version: "TLS1.2", offered: nil, outcome: "ok"},
		{ja4: "t13d1516h2_x", offered: []string{"X25519MLKEM768", "x25519"}, shares: []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}}, outcome: "alert", alert: "handshake_failure", noSH: true},
		{ja4: "t13d1516h2_x", offered: []string{"x25519"}, shares: []record.KeyShare{{Group: "x25519", Bytes: 32}}, outcome: "reset", noSH: true},
		{outcome: "incomplete", noSH: true, noCH: true},
		{ja4: "t13d1516h2_q", version: "TLS1.3", group: "0x1234", offered: []string{"0x1234", "x25519"}, shares: []record.KeyShare{{Group: "0x1234", Bytes: 500}}, outcome: "ok"},
		{ja4: "t13d1516h2_x", version: "TLS1.3", group: "X25519Kyber768Draft00", pq: true, offered: []string{"X25519Kyber768Draft00", "x25519"}, shares: []record.KeyShare{{Group: "X25519Kyber768Draft00", Bytes: 1216}, {Group: "x25519", Bytes: 32}}, outcome: "ok"},
	}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	out := make([]*record.Handshake, 0, n)
	for i := range n {
		k := kinds[rng.IntN(len(kinds))]
		h := &record.Handshake{
			TS: start.Add(time.Duration(i) * time.Second), Transport: "tcp", Client: "192.0.2.1:1000",
			Server: []string{"10.0.0.1:443", "10.0.0.2:443"}[rng.IntN(2)], Node: []string{"n1", "n2", ""}[rng.IntN(3)],
			JA4: k.ja4, Version: k.version, Group: k.group, PQ: k.pq, HRR: k.hrr, Outcome: k.outcome, Alert: k.alert,
			OfferedGroups: k.offered,
		}
		for _, s := range k.shares {
			h.KeyShares = append(h.KeyShares, record.KeyShare{Group: s.Group, Bytes: s.Bytes + rng.IntN(3)})
		}
		for _, g := range k.offered {
			if strings.Contains(g, "MLKEM") || strings.Contains(g, "Kyber") {
				h.PQOffered = true
			}
		}
		if !k.noCH {
			h.ClientHelloBytes = 200 + rng.IntN(1500)
			for _, s := range h.KeyShares {
				h.ClientHelloBytes += 4 + s.Bytes
			}
			h.ClientHelloWireSegments = 1 + rng.IntN(2)*rng.IntN(3)
			if rng.IntN(4) == 0 {
				h.ClientHelloWireSegments = 0
			}
		}
		if !k.noSH {
			h.ServerHelloBytes = 80 + rng.IntN(1300)
		}
		h.FillIDs()
		out = append(out, h)
	}
	return out
}

// skipRollupKey: what a plan from rollups cannot equal (see planRateKey in
// cmd/pqwatch's tests).
func skipRollupKey(k string) bool {
	switch k {
	case "records_read", "window_start", "window_end", "window_seconds", "top_snis", "classical_client_families",
		"classical_client_families_overflow", "classical_by_ja4", "loses_pq_by_ja4", "classical_by_ua_family",
		"classical_ja4_overflow", "loses_pq_ja4_overflow", "rollups", "duplicates_dropped":
		return true
	}
	return strings.Contains(k, "per_second") || strings.Contains(k, "per_day") || strings.Contains(k, "cores")
}

func diffJSON(t *testing.T, label string, want, got any, path string) int {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		n := 0
		for k, wv := range w {
			if !skipRollupKey(k) {
				n += diffJSON(t, label, wv, g[k], path+"."+k)
			}
		}
		for k, gv := range g {
			if _, ok := w[k]; !ok && !skipRollupKey(k) {
				t.Errorf("%s: %s.%s only from rollups: %v", label, path, k, gv)
			}
		}
		return n
	case float64:
		if g, ok := got.(float64); !ok || math.Abs(w-g) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: %s: records %v, rollups %v", label, path, want, got)
		}
		return 1
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s: %s: records %v, rollups %v", label, path, want, got)
	}
	return 1
}

func planMap(t *testing.T, pl *Plan) map[string]any {
	t.Helper()
	pl.Finish()
	b, err := json.Marshal(pl)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// planBoth adds recs (in time order) to byRec, and their rollup rows, a
// minute at a time and read back as JSON, to byRoll; it returns how many
// rows.
func planBoth(t *testing.T, recs []*record.Handshake, byRec, byRoll *Plan) (rows int) {
	t.Helper()
	ru := NewRollup(recs[0].TS.Truncate(time.Minute), 1024)
	flush := func(end time.Time) {
		for _, row := range ru.Flush(end) {
			b, _ := json.Marshal(row)
			var back RollupRow
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			byRoll.AddRollup(&back)
			rows++
		}
	}
	next := recs[0].TS.Truncate(time.Minute).Add(time.Minute)
	for _, r := range recs {
		if !r.TS.Before(next) {
			flush(next)
			next = next.Add(time.Minute)
		}
		byRec.Add(r)
		ru.Write(r)
	}
	flush(next)
	return rows
}

// TestPlanFromRollupsExact: 5,000 records of varied sizes, rolled up in
// one-minute windows and read back as JSON, give the plan of the records
// in every count and byte total (ServerHello growth, new HRR bytes: the
// byte model's sums from the classes' sums), under policies that make new
// HRRs, lose PQ, fail and keep TLS 1.2, with costs.
func TestPlanFromRollupsExact(t *testing.T) {
	recs := variedRecords(5000, 7)
	costs, err := NewCostTable("test", map[string]GroupCost{
		"x25519": {Mean: 100, Min: 90, Max: 120, Trials: 3}, "X25519MLKEM768": {Mean: 140, Min: 125, Max: 160, Trials: 3},
		"secp256r1": {Mean: 110, Min: 100, Max: 130, Trials: 3}, "secp384r1": {Mean: 300, Min: 280, Max: 330, Trials: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range []string{"X25519MLKEM768,x25519,secp256r1", "x25519,secp256r1", "openssl3.0=x25519,X25519MLKEM768,secp384r1",
		"secp384r1,X25519MLKEM768", "X25519MLKEM768 / x25519:secp256r1 / secp384r1", "secp521r1"} {
		p, err := forecast.ParsePolicy(ps)
		if err != nil {
			t.Fatal(err)
		}
		pc := []PlanCosts{{Table: costs}}
		byRec, byRoll := NewPlan(p, pc), NewPlan(p, pc)
		rows := planBoth(t, recs, byRec, byRoll)
		want, got := planMap(t, byRec), planMap(t, byRoll)
		n := diffJSON(t, ps, want, got, "")
		f := got["forecast"].(map[string]any)
		t.Logf("%s: %d figures equal over %d records, %d rollup rows; pq %v hrr %v (new %v, %v bytes) classical %v loses_pq %v fail %v; growth %v bytes",
			ps, n, len(recs), rows, f["pq"], f["hrr"], f["new_hrr"], f["hrr_added_bytes_per_new_hrr"], f["classical"], f["loses_pq"], f["fail"], f["total_server_hello_growth_bytes"])
		if n < 300 {
			t.Errorf("%s: only %d figures compared", ps, n)
		}
	}
}

// TestRollupOfferClassCap: past RollupMaxClasses distinct offers a row
// folds the rest into other classes that keep today's outcome; the plan
// counts them today and as unknown in the forecast.
func TestRollupOfferClassCap(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ru := NewRollup(start, 10)
	for i := range RollupMaxClasses + 10 {
		h := sampleRecord()
		h.ClientHelloBytes = 1000
		h.OfferedGroups = []string{"X25519MLKEM768", "x25519", fmt.Sprintf("0x%04x", 0x3000+i)}
		ru.Write(h)
	}
	rows := ru.Flush(start.Add(time.Minute))
	if len(rows) != 1 || len(rows[0].OfferClasses) != RollupMaxClasses+1 || rows[0].OfferClassesOther != 10 {
		t.Fatalf("rows %d, classes %d, other %d", len(rows), len(rows[0].OfferClasses), rows[0].OfferClassesOther)
	}
	pl := NewPlan(forecast.DefaultPolicy, nil)
	pl.AddRollup(&rows[0])
	pl.Finish()
	if pl.Handshakes != RollupMaxClasses+10 || pl.PQ != RollupMaxClasses+10 || pl.Forecast.Unknown != 10 || pl.Rollups.OtherOffer != 10 {
		t.Errorf("handshakes %d pq %d unknown %d other %d", pl.Handshakes, pl.PQ, pl.Forecast.Unknown, pl.Rollups.OtherOffer)
	}
}

// A record of a class already in the row costs the rollup no allocation
// (the agent's Kafka sink writes every record to it).
func TestRollupWriteAllocs(t *testing.T) {
	ru := NewRollup(time.Now(), 16)
	h := sampleRecord()
	h.KeyShares = []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}}
	h.JA4 = "t13d1516h2_8daaf6152771_02713d6af862"
	ru.Write(h)
	if n := testing.AllocsPerRun(1000, func() { ru.Write(h) }); n != 0 {
		t.Errorf("Rollup.Write allocates %v times per record", n)
	}
}

func BenchmarkRollupWrite(b *testing.B) {
	ru := NewRollup(time.Now(), 16)
	h := sampleRecord()
	h.KeyShares = []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}}
	h.JA4 = "t13d1516h2_8daaf6152771_02713d6af862"
	b.ReportAllocs()
	for b.Loop() {
		ru.Write(h)
	}
}
