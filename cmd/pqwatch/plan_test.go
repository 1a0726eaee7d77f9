package main

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// captureJSONL is `analyze -format jsonl` of testdata/handshakes.pcap, one
// record a line.
func captureJSONL(t *testing.T) []string {
	t.Helper()
	code, out, stderr := run(t, "analyze", "-format", "jsonl", filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if code != exitOK {
		t.Fatalf("analyze exits %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 10 {
		t.Fatalf("only %d records", len(lines))
	}
	return lines
}

// withFields puts extra fields (`"node":"a",`) at the start of a record line.
func withFields(line, fields string) string {
	return "{" + fields + line[1:]
}

// twoNodeFiles splits lines between node-a (even lines) and node-b (odd),
// writes them to fa and fb (gzip when the name ends in .gz), and returns
// the two node's lines.
func twoNodeFiles(t *testing.T, lines []string, fa, fb string) (a, b []string) {
	t.Helper()
	for i, l := range lines {
		if i%2 == 0 {
			a = append(a, withFields(l, `"node":"node-a",`))
		} else {
			b = append(b, withFields(l, `"node":"node-b",`))
		}
	}
	writeFile(t, fa, a, strings.HasSuffix(fa, ".gz"))
	writeFile(t, fb, b, strings.HasSuffix(fb, ".gz"))
	return a, b
}

func writeFile(t *testing.T, path string, lines []string, gz bool) {
	t.Helper()
	var b bytes.Buffer
	data := []byte(strings.Join(lines, "\n") + "\n")
	if gz {
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		data = b.Bytes()
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func planJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, stderr := run(t, append([]string{"plan", "-format", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("plan %v exits %d: %s", args, code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("plan -format json: %v\n%s", err, out)
	}
	return m
}

func num(t *testing.T, m map[string]any, path ...string) float64 {
	t.Helper()
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: not an object at %q", path, p)
		}
		v = mm[p]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%v = %v, not a number", path, v)
	}
	return f
}

// The plan of one capture's records split into two node files (one of them
// gzip) equals analyze of the capture in every key both report, the
// forecast's included, and the nodes sum to the fleet.
func TestPlanTwoNodesEqualsAnalyze(t *testing.T) {
	lines := captureJSONL(t)
	dir := t.TempDir()
	fa, fb := filepath.Join(dir, "node-a.jsonl"), filepath.Join(dir, "node-b.jsonl.gz")
	a, b := twoNodeFiles(t, lines, fa, fb)

	code, out, stderr := run(t, "analyze", "-format", "json", filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if code != exitOK {
		t.Fatalf("analyze exits %d: %s", code, stderr)
	}
	var an map[string]any
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	pl := planJSON(t, fa, fb)

	compared := 0
	for k, av := range an {
		pv, ok := pl[k]
		if !ok || k == "forecast" {
			continue
		}
		compared++
		if !reflect.DeepEqual(av, pv) {
			t.Errorf("%s: analyze %v, plan %v", k, av, pv)
		}
	}
	af, pf := an["forecast"].(map[string]any), pl["forecast"].(map[string]any)
	for k, av := range af {
		pv, ok := pf[k]
		if !ok {
			t.Errorf("forecast.%s: in analyze, not in plan", k)
			continue
		}
		compared++
		if !reflect.DeepEqual(av, pv) {
			t.Errorf("forecast.%s: analyze %v, plan %v", k, av, pv)
		}
	}
	if compared < 30 {
		t.Errorf("only %d keys compared", compared)
	}
	if n := num(t, pl, "handshakes"); n != float64(len(lines)) {
		t.Errorf("handshakes %v, want %d", n, len(lines))
	}
	if d, nn := num(t, pl, "duplicates_dropped"), num(t, pl, "records_without_node"); d != 0 || nn != 0 {
		t.Errorf("duplicates %v, without node %v; want 0, 0", d, nn)
	}

	nodes := pl["nodes"].(map[string]any)
	if len(nodes) != 2 {
		t.Fatalf("nodes %v", nodes)
	}
	if n := num(t, nodes["node-a"].(map[string]any), "handshakes"); n != float64(len(a)) {
		t.Errorf("node-a handshakes %v, want %d", n, len(a))
	}
	for _, path := range [][]string{
		{"handshakes"}, {"handshakes_per_second"}, {"completed"}, {"pq"}, {"hrr"}, {"failed"},
		{"extra_handshake_bytes"}, {"extra_handshake_bytes_per_second"}, {"client_hello_wire_segments_known"}, {"client_hello_multi_segment"},
		{"forecast", "predicted"}, {"forecast", "pq"}, {"forecast", "hrr"}, {"forecast", "hrr_pq"}, {"forecast", "classical"},
		{"forecast", "loses_pq"}, {"forecast", "fail"}, {"forecast", "unknown"}, {"forecast", "bytes_modeled"},
		{"forecast", "total_server_hello_growth_bytes"}, {"forecast", "new_hrr"},
	} {
		var sum float64
		for _, n := range nodes {
			sum += num(t, n.(map[string]any), path...)
		}
		if fleet := num(t, pl, path...); math.Abs(sum-fleet) > 1e-9*math.Max(1, math.Abs(fleet)) {
			t.Errorf("%v: nodes sum to %v, fleet %v", path, sum, fleet)
		}
	}
	for _, k := range []string{"failures"} {
		sum := map[string]float64{}
		for _, n := range nodes {
			for r, c := range n.(map[string]any)[k].(map[string]any) {
				sum[r] += c.(float64)
			}
		}
		fleet := map[string]float64{}
		for r, c := range pl[k].(map[string]any) {
			fleet[r] = c.(float64)
		}
		if !reflect.DeepEqual(sum, fleet) {
			t.Errorf("%s: nodes %v, fleet %v", k, sum, fleet)
		}
	}
	t.Logf("%d records (%d + %d), %d keys equal to analyze's; fleet pq %v, forecast pq %v hrr %v classical %v loses_pq %v",
		len(lines), len(a), len(b), compared, pl["pq"], pf["pq"], pf["hrr"], pf["classical"], pf["loses_pq"])

	// stdin and CSV: the fleet, a row per node, a row per server.
	code, csvOut, stderr := run(t, "plan", "-format", "csv", fa, fb)
	if code != exitOK {
		t.Fatalf("plan -format csv exits %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	servers := pl["servers"].(map[string]any)
	if len(rows) != 1+1+2+len(servers) || rows[1][0] != "fleet" || rows[2][1] != "node-a" {
		t.Errorf("csv rows:\n%s", csvOut)
	}
	if rows[1][2] != fmt.Sprint(len(lines)) {
		t.Errorf("csv fleet handshakes %q, want %d", rows[1][2], len(lines))
	}
	code, text, stderr := run(t, "plan", fa, fb)
	if code != exitOK || !strings.Contains(text, "node node-b") || !strings.Contains(text, "staying classical by client family") {
		t.Errorf("plan text exits %d: %s\n%s", code, stderr, text)
	}
}

// Records whose id was already seen are dropped and counted; records
// without a node are planned under one name and counted.
func TestPlanDuplicatesAndNoNode(t *testing.T) {
	lines := captureJSONL(t)
	var a, again []string
	noNode := 0
	for i, l := range lines {
		fields := fmt.Sprintf(`"node":"node-a","id":"00000000000000aa-%016x",`, i)
		if i%5 == 0 {
			fields = fmt.Sprintf(`"id":"00000000000000aa-%016x",`, i)
			noNode++
		}
		a = append(a, withFields(l, fields))
		if i < 3 {
			again = append(again, a[i]) // delivered twice
		}
	}
	dir := t.TempDir()
	fa, fr := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "redelivered.jsonl")
	writeFile(t, fa, a, false)
	writeFile(t, fr, append(again, "not a record"), false)
	pl := planJSON(t, fa, fr)
	for k, want := range map[string]float64{
		"records_read": float64(len(lines) + 3), "duplicates_dropped": 3, "handshakes": float64(len(lines)),
		"records_without_node": float64(noNode), "malformed_lines": 1,
	} {
		if got := num(t, pl, k); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	nodes := pl["nodes"].(map[string]any)
	if got := num(t, nodes["(no node)"].(map[string]any), "handshakes"); got != float64(noNode) {
		t.Errorf("(no node) handshakes %v, want %d", got, noNode)
	}
}

// The cost half by hand, from testdata/plan/results.json and records.jsonl,
// policy X25519MLKEM768,x25519, costs for 10.0.0.1:443 only.
//
// Costs (server CPU per handshake, microseconds): x25519 is measured at two
// rates, 3 trials mean 100 (90..110) and 2 trials mean 110 (105..115),
// pooled to mean (3*100+2*110)/5 = 104, range 90..115; X25519MLKEM768 3
// trials mean 150 (140..170). The secp256r1 arm has no server CPU: skipped.
//
// Records of 10.0.0.1:443 (window: 12:00:00 to 12:00:10 over all records,
// 10 s):
//
//	1 x25519 today, offers and shares X25519MLKEM768 -> PQ: +150-104 = +46 (low 140-115 = 25, high 170-90 = 80)
//	2 x25519 only -> x25519: 0; today 104
//	3 X25519MLKEM768 today -> X25519MLKEM768: 0; today 150
//	4 reset: not costed ("did not complete today")
//
// 10.0.0.2:443 (node n2): no cost table, not costed.
//
// Today 104+104+150 = 358 us; extra 46 us = 46e-6 s (25e-6..80e-6);
// cores 46e-6/10 = 4.6e-6 (2.5e-6..8e-6); per day 4.6e-6*86400 = 0.39744
// core-seconds (0.216..0.6912); 46/358 = 12.849% (6.983%..22.346%).
func TestPlanCostArithmetic(t *testing.T) {
	dir := filepath.Join("testdata", "plan")
	pl := planJSON(t, "-forecast-groups", "X25519MLKEM768,x25519", "-costs", "10.0.0.1:443="+filepath.Join(dir, "results.json"), filepath.Join(dir, "records.jsonl"))
	near := func(path []string, want float64) {
		t.Helper()
		if got := num(t, pl, path...); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%v = %v, want %v", path, got, want)
		}
	}
	near([]string{"window_seconds"}, 10)
	near([]string{"handshakes"}, 5)
	near([]string{"forecast", "pq"}, 2)
	near([]string{"cost", "handshakes_costed"}, 3)
	near([]string{"cost", "server_cpu_seconds_today"}, 358e-6)
	near([]string{"cost", "extra_server_cpu_seconds"}, 46e-6)
	near([]string{"cost", "extra_server_cpu_seconds_low"}, 25e-6)
	near([]string{"cost", "extra_server_cpu_seconds_high"}, 80e-6)
	near([]string{"cost", "extra_server_cpu_cores"}, 4.6e-6)
	near([]string{"cost", "extra_server_cpu_cores_low"}, 2.5e-6)
	near([]string{"cost", "extra_server_cpu_cores_high"}, 8e-6)
	near([]string{"cost", "extra_server_cpu_core_seconds_per_day"}, 0.39744)
	near([]string{"cost", "extra_server_cpu_core_seconds_per_day_low"}, 0.216)
	near([]string{"cost", "extra_server_cpu_core_seconds_per_day_high"}, 0.6912)
	near([]string{"cost", "extra_percent_of_handshake_cpu"}, 100*46.0/358)
	near([]string{"cost", "extra_percent_of_handshake_cpu_low"}, 100*25.0/358)
	near([]string{"cost", "extra_percent_of_handshake_cpu_high"}, 100*80.0/358)
	near([]string{"cost", "handshakes_uncosted", "did not complete today"}, 1)
	near([]string{"cost", "handshakes_uncosted", "no cost table for the server"}, 1)
	near([]string{"nodes", "n2", "cost", "handshakes_costed"}, 0)
	near([]string{"servers", "10.0.0.1:443", "cost", "extra_server_cpu_seconds"}, 46e-6)
}

// Every flag docs/plan.md names (in bold, in spans and on `pqwatch plan`
// lines) is a flag of `pqwatch plan`, and its flag table lists every flag:
// docs_test.go does not know the command yet.
func TestPlanDocFlags(t *testing.T) {
	_, stdout, stderr := run(t, "plan", "-h")
	flags := map[string]bool{"h": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(stdout+stderr, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 4 {
		t.Fatalf("plan -h lists no flags:\n%s", stderr)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "plan.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var missing []string
	for _, m := range regexp.MustCompile("`[^`]*`|(?m)^pqwatch plan .*$").FindAllString(doc, -1) {
		if cmdLineRe.MatchString(strings.Trim(m, "`")) {
			continue // another command's line, which docs_test.go checks
		}
		if w := strings.Fields(strings.Trim(m, "`")); len(w) > 0 && foreignTools[w[0]] {
			continue // openssl's flags, tshark's...
		}
		for _, f := range flagsIn(m) {
			if !flags[f] && !slices.Contains(missing, f) {
				missing = append(missing, f)
			}
		}
	}
	listed := map[string]bool{"h": true}
	for _, m := range regexp.MustCompile(`\*\*-([a-z][a-z0-9-]*)\*\*`).FindAllStringSubmatch(doc, -1) {
		listed[m[1]] = true
		if !flags[m[1]] && !slices.Contains(missing, m[1]) {
			missing = append(missing, m[1])
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/plan.md names flags `pqwatch plan` does not have: %v", missing)
	}
	for f := range flags {
		if !listed[f] {
			t.Errorf("docs/plan.md's flag table does not list -%s", f)
		}
	}
}

// `-` reads records from stdin, gzip too.
func TestPlanStdin(t *testing.T) {
	lines := captureJSONL(t)
	path := filepath.Join(t.TempDir(), "all.jsonl.gz")
	writeFile(t, path, lines, true)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	pl := planJSON(t, "-")
	if got := num(t, pl, "handshakes"); got != float64(len(lines)) {
		t.Errorf("handshakes %v, want %d", got, len(lines))
	}
	if got := num(t, pl, "records_without_node"); got != float64(len(lines)) {
		t.Errorf("records_without_node %v, want %d", got, len(lines))
	}
}

// Under other policies too (hybrid first, classical only, OpenSSL 3.0's
// rule), plan's forecast of the two node files is analyze's.
func TestPlanForecastPolicies(t *testing.T) {
	lines := captureJSONL(t)
	dir := t.TempDir()
	fa, fb := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	twoNodeFiles(t, lines, fa, fb)
	for _, policy := range []string{"X25519MLKEM768,x25519,secp256r1", "x25519,secp256r1", "openssl3.0=x25519,X25519MLKEM768,secp384r1", "secp384r1,X25519MLKEM768"} {
		code, out, stderr := run(t, "analyze", "-format", "json", "-forecast-groups", policy, filepath.Join("..", "..", "testdata", "handshakes.pcap"))
		if code != exitOK {
			t.Fatalf("analyze exits %d: %s", code, stderr)
		}
		var an map[string]any
		if err := json.Unmarshal([]byte(out), &an); err != nil {
			t.Fatal(err)
		}
		af, pf := an["forecast"].(map[string]any), planJSON(t, "-forecast-groups", policy, fa, fb)["forecast"].(map[string]any)
		for k, av := range af {
			if !reflect.DeepEqual(av, pf[k]) {
				t.Errorf("%s: forecast.%s: analyze %v, plan %v", policy, k, av, pf[k])
			}
		}
		t.Logf("%s: pq %v hrr %v classical %v loses_pq %v fail %v, growth %v bytes", policy, pf["pq"], pf["hrr"], pf["classical"], pf["loses_pq"], pf["fail"], pf["total_server_hello_growth_bytes"])
	}
}

// rollupLines are the rollup rows report.Rollup (the agent's writer) makes
// of the record lines, one node each as the lines say, a window every
// perWindow records.
func rollupLines(t *testing.T, lines []string, perWindow int) []string {
	t.Helper()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := report.NewRollup(start, 1024)
	var out []string
	flush := func(end time.Time) {
		for _, row := range r.Flush(end) {
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
	}
	for i, l := range lines {
		var h record.Handshake
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatal(err)
		}
		r.Write(&h)
		if (i+1)%perWindow == 0 {
			flush(start.Add(time.Duration(i+1) * time.Minute))
		}
	}
	flush(start.Add(time.Duration(len(lines)+1) * time.Minute))
	return out
}

// planRateKey reports whether a plan JSON key depends on the window's
// length (records: first to last ts; rollups: first start to last end) or
// on what rollups do not carry (SNIs, JA4s, user agents), or counts input.
func planRateKey(k string) bool {
	switch k {
	case "records_read", "window_start", "window_end", "window_seconds", "top_snis", "classical_client_families",
		"classical_client_families_overflow", "classical_by_ja4", "loses_pq_by_ja4", "classical_by_ua_family",
		"classical_ja4_overflow", "loses_pq_ja4_overflow", "rollups", "malformed_lines", "records_without_node", "duplicates_dropped":
		return true
	}
	return strings.Contains(k, "per_second") || strings.Contains(k, "per_day") || strings.Contains(k, "cores")
}

// comparePlans compares every leaf of two plan JSONs but planRateKey's;
// numbers within 1e-9 (relative: costs are sums of floats in another
// order). It returns how many leaves it compared.
func comparePlans(t *testing.T, label string, want, got any, path string) int {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %s: records %v, rollups %v", label, path, want, got)
			return 0
		}
		n := 0
		for k, wv := range w {
			if planRateKey(k) {
				continue
			}
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s: %s.%s: records %v, missing from the rollups' plan", label, path, k, wv)
				continue
			}
			n += comparePlans(t, label, wv, gv, path+"."+k)
		}
		for k := range g {
			if _, ok := w[k]; !ok && !planRateKey(k) {
				t.Errorf("%s: %s.%s: in the rollups' plan only: %v", label, path, k, g[k])
			}
		}
		return n
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(w-g) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: %s: records %v, rollups %v", label, path, want, got)
		}
		return 1
	default:
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: %s: records %v, rollups %v", label, path, want, got)
		}
		return 1
	}
}

// The plan from the rollups of two nodes' records (report.Rollup, the
// agent's writer, in 4-record windows, one row delivered twice) equals the
// plan from the records in every figure but those that need records or
// the window's length: today's counts, failures, the whole forecast
// (every kind, reason, group and byte total), multi-segment counts and the
// costs, fleet-wide, per node and per server, under five policies.
func TestPlanRollupsEqualRecords(t *testing.T) {
	lines := captureJSONL(t)
	dir := t.TempDir()
	fa, fb := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	a, b := twoNodeFiles(t, lines, fa, fb)
	ra, rb := rollupLines(t, a, 4), rollupLines(t, b, 4)
	rb = append(rb, rb[0]) // at-least-once: a row twice
	fra, frb := filepath.Join(dir, "a.rollup.jsonl"), filepath.Join(dir, "b.rollup.jsonl.gz")
	writeFile(t, fra, ra, false)
	writeFile(t, frb, rb, true)
	costs := "-costs=" + filepath.Join("testdata", "plan", "results.json")
	for _, policy := range []string{"", "X25519MLKEM768,x25519,secp256r1", "x25519,secp256r1", "openssl3.0=x25519,X25519MLKEM768,secp384r1", "secp384r1,X25519MLKEM768"} {
		args := []string{costs}
		if policy != "" {
			args = append(args, "-forecast-groups", policy)
		}
		rec := planJSON(t, append(args, fa, fb)...)
		roll := planJSON(t, append(args, fra, frb)...)
		n := comparePlans(t, policy, rec, roll, "")
		if n < 200 {
			t.Errorf("%s: only %d figures compared", policy, n)
		}
		st := roll["rollups"].(map[string]any)
		if st["rows_duplicate_dropped"] != 1.0 || st["handshakes_offer_other"] != 0.0 || st["handshakes_unplanned"] != 0.0 {
			t.Errorf("%s: rollup stats %v", policy, st)
		}
		f := roll["forecast"].(map[string]any)
		t.Logf("policy %q: %d figures equal over %d records in %d+%d rollup rows; forecast pq %v hrr %v classical %v loses_pq %v, ServerHello growth %v bytes, extra bytes %v",
			policy, n, len(lines), len(ra), len(rb)-1, f["pq"], f["hrr"], f["classical"], f["loses_pq"], f["total_server_hello_growth_bytes"], roll["extra_handshake_bytes"])
	}
	// Records and rollups in one plan would count the same handshakes twice.
	if code, _, stderr := run(t, "plan", fa, fra); code != exitFailure || !strings.Contains(stderr, "both handshake records") {
		t.Errorf("plan over records and rollups: exit %d, %s", code, stderr)
	}
}

// docs/plan.md's worked example: the records of TestPlanRecapture's nginx
// capture (7 Go client configs x 3) split into two nodes, a real loadgen
// run against Caddy 2.11.9 (caddy-results.json) and Caddy's policy. The
// text report is the golden file docs/plan.md quotes (its fleet and node
// sections verbatim), and the cost figures are the arithmetic the doc
// shows, done here from the loadgen file's own means, mins and maxes.
func TestPlanWorkedExample(t *testing.T) {
	dir := filepath.Join("testdata", "plan", "recapture")
	args := []string{"plan", "-forecast-groups", "go=X25519MLKEM768,x25519,secp256r1", "-costs", filepath.Join(dir, "caddy-results.json"),
		filepath.Join(dir, "node-a.jsonl"), filepath.Join(dir, "node-b.jsonl")}
	code, text, stderr := run(t, args...)
	if code != exitOK {
		t.Fatalf("plan exits %d: %s", code, stderr)
	}
	golden := filepath.Join(dir, "plan.golden")
	if *update {
		os.WriteFile(golden, []byte(text), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Errorf("plan text differs from %s (go test -run TestPlanWorkedExample -update):\n%s", golden, text)
	}
	doc, _ := os.ReadFile(filepath.Join("..", "..", "docs", "plan.md"))
	fleet := text[strings.Index(text, "\nfleet\n")+1 : strings.Index(text, "\nserver ")+1]
	if !strings.Contains(string(doc), fleet) {
		t.Errorf("docs/plan.md does not quote the worked example's fleet and node sections:\n%s", fleet)
	}

	// The arithmetic, from the loadgen file.
	var res loadgenResults
	b, _ := os.ReadFile(filepath.Join(dir, "caddy-results.json"))
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	type cost struct{ mean, min, max float64 }
	c := map[string]cost{}
	for _, s := range res.Summary {
		if s.ServerCPUUsPerHandshake != nil && s.ValidTrials > 0 {
			c[s.Measures] = cost{s.ServerCPUUsPerHandshake.Mean, s.ServerCPUUsPerHandshake.Min, s.ServerCPUUsPerHandshake.Max}
		}
	}
	x, h, p := c["x25519"], c["X25519MLKEM768"], c["secp256r1"]
	// Today 15 x25519, 6 secp256r1 and 3 secp384r1 (Caddy has no
	// secp384r1, loadgen no cost for it: not costed); under the policy 6
	// of the x25519 and 3 of the secp256r1 turn X25519MLKEM768.
	today := 15*x.mean + 6*p.mean
	extra := 6*(h.mean-x.mean) + 3*(h.mean-p.mean)
	low := 6*(h.min-x.max) + 3*(h.min-p.max)
	high := 6*(h.max-x.min) + 3*(h.max-p.min)
	pl := planJSON(t, args[1:]...)
	secs := num(t, pl, "window_seconds")
	for _, tc := range []struct {
		path []string
		want float64
	}{
		{[]string{"forecast", "pq"}, 9}, {[]string{"hrr"}, 6}, {[]string{"forecast", "hrr"}, 6}, {[]string{"forecast", "new_hrr"}, 3},
		// ServerHellos: 6 x25519 and 3 secp256r1 turn X25519MLKEM768, 3
		// secp384r1 turn x25519; 3 new HRRs of 88 + 218 bytes (tshark).
		{[]string{"extra_handshake_bytes"}, 6*(1120-32) + 3*(1120-65) + 3*(32-97) + 3*(88+218)},
		{[]string{"cost", "handshakes_costed"}, 21},
		{[]string{"cost", "handshakes_uncosted", "no cost for secp384r1"}, 3},
		{[]string{"cost", "server_cpu_seconds_today"}, today / 1e6},
		{[]string{"cost", "extra_server_cpu_seconds"}, extra / 1e6},
		{[]string{"cost", "extra_server_cpu_seconds_low"}, low / 1e6},
		{[]string{"cost", "extra_server_cpu_seconds_high"}, high / 1e6},
		{[]string{"cost", "extra_server_cpu_cores"}, extra / 1e6 / secs},
		{[]string{"cost", "extra_server_cpu_core_seconds_per_day"}, extra / 1e6 / secs * 86400},
		{[]string{"cost", "extra_percent_of_handshake_cpu"}, 100 * extra / today},
		{[]string{"cost", "extra_percent_of_handshake_cpu_low"}, 100 * low / today},
		{[]string{"cost", "extra_percent_of_handshake_cpu_high"}, 100 * high / today},
	} {
		if got := num(t, pl, tc.path...); math.Abs(got-tc.want) > 1e-9*math.Max(1, math.Abs(tc.want)) {
			t.Errorf("%v = %v, want %v", tc.path, got, tc.want)
		}
	}
	t.Logf("x25519 %.2f us, X25519MLKEM768 %.2f, secp256r1 %.2f; today %.1f us, extra %.1f us (%.1f..%.1f) = %+.2f%% over %.3f s",
		x.mean, h.mean, p.mean, today, extra, low, high, 100*extra/today, secs)
}
