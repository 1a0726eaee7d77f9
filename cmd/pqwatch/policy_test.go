package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPolicyCheckTestdata: testdata/handshakes.pcap is real crypto/tls
// handshakes with a server whose CurvePreferences are X25519MLKEM768,
// X25519, P-384 (pcapgen.DemoServerCurves). Declared as what it is, every
// one of its 20 handshakes is checked and none flagged (the 4 P-256-only
// clients it refused are what the policy predicts: no mutual group).
// Declared as Go's default (P-256 too), the 4 handshakes where it asked
// for P-384 with an HRR although the client had sent a P-256 share are
// flagged, and the 4 refused ones are not checkable. plan -expect-policy
// over analyze's JSONL of the capture says the same; a declaration for
// another server checks nothing and says so on stderr; a bad one is a
// usage error.
func TestPolicyCheckTestdata(t *testing.T) {
	pcap := filepath.Join("..", "..", "testdata", "handshakes.pcap")
	jsonl := filepath.Join(t.TempDir(), "records.jsonl")
	if code, _, stderr := run(t, "analyze", "-format", "jsonl", "-o", jsonl, pcap); code != 0 {
		t.Fatalf("analyze jsonl: %d %s", code, stderr)
	}
	cases := []struct {
		expect                                  string
		checked, matched, violations, unchecked int
		reason                                  string
	}{
		{"10.0.0.1:443=go=X25519MLKEM768,x25519,secp384r1", 20, 20, 0, 0, ""},
		{"go", 16, 12, 4, 4, "policy predicts secp256r1 (client sent its share), server chose secp384r1 after an HRR"},
	}
	for _, c := range cases {
		code, out, stderr := run(t, "analyze", "-format", "json", "-expect-policy", c.expect, pcap)
		if code != 0 {
			t.Fatalf("%s: analyze exits %d: %s", c.expect, code, stderr)
		}
		var sum struct {
			Policy map[string]any `json:"policy"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Policy == nil {
			t.Fatalf("%s: %v", c.expect, err)
		}
		p := sum.Policy
		unchecked := 0.0
		for _, v := range p["unchecked"].(map[string]any) {
			unchecked += v.(float64)
		}
		if p["checked"] != float64(c.checked) || p["matched"] != float64(c.matched) || p["violations"] != float64(c.violations) || unchecked != float64(c.unchecked) {
			t.Errorf("%s: checked %v matched %v violations %v unchecked %v", c.expect, p["checked"], p["matched"], p["violations"], p["unchecked"])
		}
		row := p["by_server"].(map[string]any)["10.0.0.1:443"].(map[string]any)
		if c.reason != "" && row["reasons"].(map[string]any)[c.reason] != float64(c.violations) {
			t.Errorf("%s: reasons %v", c.expect, row["reasons"])
		}
		pl := planJSON(t, "-expect-policy", c.expect, jsonl)["policy_check"].(map[string]any)
		for _, k := range []string{"handshakes", "covered", "checked", "matched", "violations", "unchecked", "violations_by_kind", "by_server", "expect"} {
			if !reflect.DeepEqual(pl[k], p[k]) {
				t.Errorf("%s: plan's %s %v, analyze's %v", c.expect, k, pl[k], p[k])
			}
		}
		// The CSV's policy columns: the fleet's totals and the server's row.
		code, csvOut, stderr := run(t, "plan", "-format", "csv", "-expect-policy", c.expect, jsonl)
		rows, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
		if code != 0 || err != nil || len(rows) < 2 {
			t.Fatalf("%s: plan -format csv exits %d (%v): %s", c.expect, code, err, stderr)
		}
		col := map[string]int{}
		for i, h := range rows[0] {
			col[h] = i
		}
		counts := fmt.Sprintf("%d|%d|%d", c.checked, c.matched, c.violations)
		servers := 0
		for _, r := range rows[1:] {
			got := strings.Join([]string{r[col["policy_checked"]], r[col["policy_matched"]], r[col["policy_violations"]]}, "|")
			want, wantPolicy := "||", ""
			switch {
			case r[0] == "fleet":
				want = counts
			case r[0] == "server" && r[1] == "10.0.0.1:443":
				want, wantPolicy = counts, row["policy"].(string)
				servers++
			}
			if got != want || r[col["policy"]] != wantPolicy {
				t.Errorf("%s: csv %s %s policy %q counts %s, want %q %s", c.expect, r[0], r[1], r[col["policy"]], got, wantPolicy, want)
			}
		}
		if servers != 1 {
			t.Errorf("%s: %d csv rows of server 10.0.0.1:443:\n%s", c.expect, servers, csvOut)
		}
		_, text, _ := run(t, "analyze", "-expect-policy", c.expect, pcap)
		if !strings.Contains(text, "\npolicy check\n") {
			t.Errorf("%s: text report without the policy check:\n%s", c.expect, text)
		}
	}
	code, _, stderr := run(t, "analyze", "-format", "json", "-o", os.DevNull, "-expect-policy", "10.0.0.9:443=go", pcap)
	if code != 0 || !strings.Contains(stderr, "-expect-policy checked nothing: none of the 20 handshakes is of a declared server") {
		t.Errorf("undeclared server: %d %q", code, stderr)
	}
	for _, cmd := range []string{"analyze", "plan"} {
		if code, _, stderr := run(t, cmd, "-expect-policy", "10.0.0.1:443=nonsense", pcap); code != exitUsage || !strings.Contains(stderr, "-expect-policy") {
			t.Errorf("%s with a bad -expect-policy: %d %q", cmd, code, stderr)
		}
	}
}
