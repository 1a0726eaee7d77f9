package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

func TestParseExpectation(t *testing.T) {
	cases := []struct{ in, server, policy string }{
		{"127.0.0.1:8443=go", "127.0.0.1:8443", forecast.GoPolicy.String()},
		{"[::1]:443=caddy", "[::1]:443", forecast.CaddyPolicy.String()},
		{"[::ffff:10.0.0.1]:443=caddy", "10.0.0.1:443", forecast.CaddyPolicy.String()},
		{":443=openssl35", ":443", forecast.DefaultPolicy.String()},
		{"*:443=go=x25519,X25519MLKEM768", ":443", "go=X25519MLKEM768,x25519"},
		{"go", "", forecast.GoPolicy.String()},
		{"X25519:P-256", "", "go=x25519,secp256r1"},                         // a group list, not ADDR:PORT
		{"openssl3.0=X25519:prime256v1", "", "openssl3.0=x25519,secp256r1"}, // a mode prefix
		{"10.0.0.1:443=openssl3.5=X25519MLKEM768/x25519:P-256", "10.0.0.1:443", "openssl3.5=X25519MLKEM768 / x25519,secp256r1"},
	}
	for _, c := range cases {
		e, err := ParseExpectation(c.in)
		if err != nil || e.Server != c.server || e.Policy.String() != c.policy {
			t.Errorf("%q: got %q %q %v, want %q %q", c.in, e.Server, e.Policy.String(), err, c.server, c.policy)
			continue
		}
		if back, err := ParseExpectation(e.String()); err != nil || back.String() != e.String() {
			t.Errorf("%q: %q does not round-trip: %v", c.in, e.String(), err)
		}
	}
	for _, bad := range []string{"", "bogus", "10.0.0.1:443=bogus", "host.example:443=go", "10.0.0.1:443="} {
		if _, err := ParseExpectation(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestExpectationsFor(t *testing.T) {
	var es Expectations
	for _, s := range []string{"openssl35", ":8443=caddy", "127.0.0.1:8443=go"} {
		e, err := ParseExpectation(s)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	for server, want := range map[string]string{
		"127.0.0.1:8443": forecast.GoPolicy.String(),
		"127.0.0.2:8443": forecast.CaddyPolicy.String(),
		"127.0.0.1:443":  forecast.DefaultPolicy.String(),
		"[::1]:8443":     forecast.CaddyPolicy.String(),
	} {
		if p, ok := es.For(server); !ok || p.String() != want {
			t.Errorf("%s: %v %q, want %q", server, ok, p.String(), want)
		}
	}
	if _, ok := es[1:2].For("127.0.0.1:443"); ok {
		t.Error(":8443 alone covers port 443")
	}
	if got := es.Ports(); len(got) != 1 || got[0] != 8443 {
		t.Errorf("Ports %v", got)
	}
}

// served is hello's record with the server's answer; hrrOnly: the server
// sent an HRR for g and no ServerHello followed.
func served(r *record.Handshake, version string, g uint16, hrr bool) *record.Handshake {
	r = seen(r, version, g, hrr, 122)
	r.Server, r.Client = "127.0.0.1:8443", "127.0.0.1:50000"
	if hrr {
		r.SetHRRGroup(tlsparse.Group(g))
	}
	return r
}

// TestCheckPolicy: the selection rules of a correct server are never
// flagged, each kind of deviation is, with its reason.
func TestCheckPolicy(t *testing.T) {
	browser := func() *record.Handshake { return hello("13", []uint16{mlkem, x25519, p256}, []uint16{mlkem, x25519}) }
	listsPQ := func() *record.Handshake { return hello("13", []uint16{x25519, mlkem, p256}, []uint16{x25519}) } // no PQ share
	p256only := func() *record.Handshake { return hello("13", []uint16{mlkem, p256}, []uint16{p256}) }          // hybrid listed, P-256 share
	classical := func() *record.Handshake { return hello("13", []uint16{x25519, p256}, []uint16{x25519}) }
	sharesP256 := func() *record.Handshake { return hello("13", []uint16{x25519, p256}, []uint16{p256}) }
	tls12 := func() *record.Handshake { return hello("12", []uint16{p256, x25519}, nil) }
	x448only := func() *record.Handshake { return hello("13", []uint16{x448}, []uint16{x448}) }
	tuplesX448 := func() *record.Handshake { return hello("13", []uint16{x448, x25519}, []uint16{x448}) }

	hrrOnly := served(p256only(), "", mlkem, true)
	hrrOnly.Group, hrrOnly.GroupID, hrrOnly.Version = "", 0, ""
	hrrOnly.Outcome = record.OutcomeReset
	failed := x448only()
	failed.Server, failed.Outcome, failed.Alert = "127.0.0.1:8443", record.OutcomeAlert, "handshake_failure"
	noSH := browser()
	noSH.Server, noSH.Outcome = "127.0.0.1:8443", record.OutcomeTimeout

	cases := []struct {
		name, policy string
		r            *record.Handshake
		kind, reason string
	}{
		// Correct servers.
		{"go pq share", "go", served(browser(), "TLS1.3", mlkem, false), "", ""},
		{"go classical share", "go", served(classical(), "TLS1.3", x25519, false), "", ""},
		{"go hrr to pq", "go", served(listsPQ(), "TLS1.3", mlkem, true), "", ""},
		{"go p256 share, hybrid listed: hrr", "caddy", served(p256only(), "TLS1.3", mlkem, true), "", ""},
		{"go hrr seen, no serverhello", "go", hrrOnly, "", ""},
		{"go takes the p256 share", "go", served(sharesP256(), "TLS1.3", p256, false), "", ""},
		{"go tls12 client order", "go", served(tls12(), "TLS1.2", p256, false), "", ""},
		{"no mutual group, failed", "go", failed, "", ""},
		{"openssl35 tuple share", "openssl35", served(sharesP256(), "TLS1.3", p256, false), "", ""},
		{"openssl35 earlier tuple via hrr", "openssl35", served(tuplesX448(), "TLS1.3", x25519, true), "", ""},
		{"openssl30 client share", "openssl30", served(listsPQ(), "TLS1.3", x25519, false), "", ""},
		// Deviations.
		{"CVE class: x25519 despite a PQ share", "go", served(browser(), "TLS1.3", x25519, false), ViolationClassical,
			"policy predicts X25519MLKEM768 (client sent its share), server chose x25519 without HRR"},
		{"x25519 instead of an HRR to PQ", "caddy", served(listsPQ(), "TLS1.3", x25519, false), ViolationClassical,
			"policy predicts an HRR for X25519MLKEM768 (client sent no share for it), server chose x25519 without HRR"},
		{"p256 instead of an HRR to PQ", "go", served(p256only(), "TLS1.3", p256, false), ViolationClassical,
			"policy predicts an HRR for X25519MLKEM768 (client sent no share for it), server chose secp256r1 without HRR"},
		{"pq where the policy has none", "go=x25519,secp256r1", served(browser(), "TLS1.3", mlkem, false), ViolationPQ,
			"policy predicts x25519 (client sent its share), server chose X25519MLKEM768 without HRR"},
		{"needless hrr", "go", served(sharesP256(), "TLS1.3", x25519, true), ViolationGroup,
			"policy predicts secp256r1 (client sent its share), server chose x25519 after an HRR"},
		{"hrr for a shared group", "go", served(classical(), "TLS1.3", x25519, true), ViolationHRR,
			"policy predicts x25519 (client sent its share), server chose x25519 after an HRR"},
		{"no hrr where one is needed", "go", served(listsPQ(), "TLS1.3", mlkem, false), ViolationNoHRR,
			"policy predicts an HRR for X25519MLKEM768 (client sent no share for it), server chose X25519MLKEM768 without HRR"},
		{"outside policy", "caddy", served(x448only(), "TLS1.3", x448, false), ViolationOutside,
			"policy predicts no mutual group (the handshake fails), server chose x448 without HRR"},
		{"tls12 to a tls13 client", "go", served(browser(), "TLS1.2", x25519, false), ViolationVersion,
			"policy predicts X25519MLKEM768 (client sent its share), server negotiated TLS 1.2 with x25519"},
		{"openssl35 share of a later tuple taken", "openssl35", served(tuplesX448(), "TLS1.3", x448, false), ViolationGroup,
			"policy predicts an HRR for x25519 (client sent no share for it), server chose x448 without HRR"},
		{"tls12 server order", "go", served(tls12(), "TLS1.2", x25519, false), ViolationGroup,
			"policy predicts TLS 1.2 with secp256r1 (the client's first group the policy lists), server negotiated TLS 1.2 with x25519"},
	}
	for _, c := range cases {
		e, err := ParseExpectation("127.0.0.1:8443=" + c.policy)
		if err != nil {
			t.Fatal(err)
		}
		res := CheckPolicy(Expectations{e}, c.r)
		if !res.Covered || !res.Checked || res.Kind != c.kind || res.Reason != c.reason {
			t.Errorf("%s: got covered=%v checked=%v (%s) %q %q, want %q %q", c.name, res.Covered, res.Checked, res.Unchecked, res.Kind, res.Reason, c.kind, c.reason)
		}
	}
	e, _ := ParseExpectation("127.0.0.1:8443=go")
	if res := CheckPolicy(Expectations{e}, noSH); !res.Covered || res.Checked || res.Unchecked != UncheckedNoChoice+" (timeout)" {
		t.Errorf("timeout before a ServerHello: %+v", res)
	}
	// TLS 1.2 with a finite-field DHE suite (group ffdhe2048 or dhe2048)
	// is no ECDHE choice: as predicted for a client offering no group,
	// not checkable for one offering x25519, never a violation.
	noGroups := hello("12", nil, nil)
	for _, g := range []string{"ffdhe2048", "dhe2048", "dhe1024"} {
		r := served(noGroups, "TLS1.2", 0, false)
		r.Group, r.GroupID = g, record.GroupCode(g)
		if res := CheckPolicy(Expectations{e}, r); !res.Checked || res.Kind != "" {
			t.Errorf("TLS 1.2 %s, client without groups: %+v", g, res)
		}
		r = served(tls12(), "TLS1.2", 0, false)
		r.Group, r.GroupID = g, record.GroupCode(g)
		if res := CheckPolicy(Expectations{e}, r); res.Checked || res.Kind != "" || res.Unchecked != UncheckedDHE {
			t.Errorf("TLS 1.2 %s, client offering ECDHE groups: %+v", g, res)
		}
	}
	other := served(browser(), "TLS1.3", x25519, false)
	other.Server = "127.0.0.1:9443"
	if res := CheckPolicy(Expectations{e}, other); res.Covered {
		t.Errorf("a server without a declared policy is covered: %+v", res)
	}
}

func TestPolicyCheckSection(t *testing.T) {
	e, _ := ParseExpectation("127.0.0.1:8443=go")
	s := New(forecast.DefaultPolicy)
	s.Policy = NewPolicyCheck(Expectations{e})
	good := served(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false)
	bad := served(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", x25519, false)
	bad.SNI = "legacy.test"
	other := served(hello("13", []uint16{x25519}, []uint16{x25519}), "TLS1.3", x25519, false)
	other.Server = "127.0.0.1:9443"
	timeout := hello("13", []uint16{x25519}, []uint16{x25519})
	timeout.Server, timeout.Outcome = "127.0.0.1:8443", record.OutcomeTimeout
	for _, r := range []*record.Handshake{good, bad, bad, other, timeout} {
		s.Write(r)
	}
	s.Finish()
	pc := s.Policy
	if pc.Handshakes != 5 || pc.Covered != 4 || pc.Checked != 3 || pc.Matched != 1 || pc.Violations != 2 ||
		pc.ByKind[ViolationClassical] != 2 || pc.Unchecked[UncheckedNoChoice+" (timeout)"] != 1 || len(pc.First) != 2 {
		t.Fatalf("%+v", pc)
	}
	row := pc.ByServer["127.0.0.1:8443"]
	if row == nil || row.Checked != 3 || row.Violations != 2 || row.Reasons["policy predicts X25519MLKEM768 (client sent its share), server chose x25519 without HRR"] != 2 {
		t.Fatalf("row %+v", row)
	}
	v := pc.First[0]
	if v.SNI != "legacy.test" || v.Expected != "X25519MLKEM768" || v.Group != "x25519" || v.Kind != ViolationClassical ||
		strings.Join(v.OfferedGroups, ",") != "X25519MLKEM768,x25519" || strings.Join(v.KeyShares, ",") != "X25519MLKEM768,x25519" {
		t.Errorf("listed %+v", v)
	}
	var b strings.Builder
	if err := s.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(b.String()), &out); err != nil {
		t.Fatal(err)
	}
	if p, ok := out["policy"].(map[string]any); !ok || p["violations"] != 2.0 || p["checked"] != 3.0 {
		t.Errorf("json policy section: %v", out["policy"])
	}
	b.Reset()
	s.WriteText(&b)
	for _, want := range []string{"policy check\n  declared     127.0.0.1:8443=go=X25519MLKEM768,", "violations   2 (classical_instead_of_pq 2)", "checked      3 (1 not checkable: no ServerHello or HRR with a group (timeout) 1)",
		`sni "legacy.test"`, "offered [X25519MLKEM768,x25519] shares [X25519MLKEM768,x25519]: policy predicts X25519MLKEM768"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPolicyCheckFromRollups: the plan's policy check from rollup rows (the
// records of TestPlanFromRollupsExact rolled up a minute at a time, read
// back as JSON) equals the check of the records in every count, by kind,
// by server and by reason, for policies under which those records match
// and break it; only the listed violations differ (a class is listed once,
// with its count and without client details).
func TestPolicyCheckFromRollups(t *testing.T) {
	recs := variedRecords(5000, 11)
	for _, decl := range [][]string{
		{"10.0.0.1:443=go", "10.0.0.2:443=openssl35"},
		{"caddy"},
		{":443=openssl30=x25519,secp256r1"},
		{"10.0.0.1:443=go=x25519,secp256r1,secp384r1"},
	} {
		var es Expectations
		for _, d := range decl {
			e, err := ParseExpectation(d)
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, e)
		}
		byRec, byRoll := NewPlan(forecast.DefaultPolicy, nil), NewPlan(forecast.DefaultPolicy, nil)
		byRec.PolicyCheck, byRoll.PolicyCheck = NewPolicyCheck(es), NewPolicyCheck(es)
		planBoth(t, recs, byRec, byRoll)
		a, b := *byRec.PolicyCheck, *byRoll.PolicyCheck
		listed := func(pc PolicyCheck) (n int) {
			for _, v := range pc.First {
				n += v.Count
			}
			return n
		}
		if a.Violations < PolicyListed && listed(a) != a.Violations || b.Violations > 0 && listed(b) == 0 {
			t.Errorf("%v: listed %d of %d (records), %d of %d (rollups)", decl, listed(a), a.Violations, listed(b), b.Violations)
		}
		a.First, b.First = nil, nil
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%v: records %+v\nrollups %+v", decl, a, b)
		}
		if a.Matched == 0 || a.Violations == 0 {
			t.Errorf("%v: %d matched, %d violations: the mix must have both", decl, a.Matched, a.Violations)
		}
		t.Logf("%v: %d handshakes, %d covered, %d checked, %d matched, %d violations %v, unchecked %v", decl, a.Handshakes, a.Covered, a.Checked, a.Matched, a.Violations, a.ByKind, a.Unchecked)
	}
}

// TestCheckPolicyAllocs: run checks every record on the packet path; a
// record that matches costs no allocation.
func TestCheckPolicyAllocs(t *testing.T) {
	e, _ := ParseExpectation("127.0.0.1:8443=go")
	es := Expectations{e}
	r := served(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false)
	if n := testing.AllocsPerRun(100, func() { CheckPolicy(es, r) }); n != 0 {
		t.Errorf("%v allocs per matched record", n)
	}
}

func BenchmarkCheckPolicy(b *testing.B) {
	var es Expectations
	for _, s := range []string{"openssl35", ":443=caddy", "127.0.0.1:8443=go"} {
		e, _ := ParseExpectation(s)
		es = append(es, e)
	}
	r := served(hello("13", []uint16{mlkem, x25519, p256}, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false)
	b.ReportAllocs()
	for b.Loop() {
		CheckPolicy(es, r)
	}
}

func FuzzParseExpectation(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8443=go", "[::1]:443=caddy", ":443=openssl35", "*:443=go=x25519", "go", "X25519:P-256", "10.0.0.1:443=openssl3.5=X25519MLKEM768/x25519", "=", ":=", "1:2:3=go"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseExpectation(s)
		if err != nil {
			return
		}
		back, err := ParseExpectation(e.String())
		if err != nil || back.String() != e.String() || back.Server != e.Server {
			t.Fatalf("%q -> %q does not round-trip: %q %v", s, e.String(), back.String(), err)
		}
		r := served(hello("13", []uint16{mlkem, x25519}, []uint16{x25519}), "TLS1.3", x25519, false)
		r.Server = e.Server
		if e.Server == "" || e.Server[0] == ':' {
			r.Server = "127.0.0.1" + e.Server
			if e.Server == "" {
				r.Server = "127.0.0.1:443"
			}
		}
		if res := CheckPolicy(Expectations{e}, r); !res.Covered {
			t.Fatalf("%q does not cover %s", s, r.Server)
		}
	})
}

// TestPlanCSVPolicy: the plan's CSV carries the policy check's counts, the
// fleet's totals and each declared server's row, counted here by hand: at
// 8443 (declared go) one match and two violations, at 7443 (declared) only
// a timeout, not checkable (0 checked), at 9443 nothing declared (empty).
func TestPlanCSVPolicy(t *testing.T) {
	var es Expectations
	for _, d := range []string{"127.0.0.1:8443=go", "127.0.0.1:7443=go"} {
		e, err := ParseExpectation(d)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	goPolicy, _ := es.For("127.0.0.1:8443")
	good := served(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false)
	bad := served(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", x25519, false)
	other := served(hello("13", []uint16{x25519}, []uint16{x25519}), "TLS1.3", x25519, false)
	other.Server = "127.0.0.1:9443"
	timeout := hello("13", []uint16{x25519}, []uint16{x25519})
	timeout.Server, timeout.Outcome = "127.0.0.1:7443", record.OutcomeTimeout
	recs := []*record.Handshake{good, bad, bad, other, timeout}
	for i, r := range recs {
		r.Node = []string{"a", "b"}[i%2]
	}

	col := map[string]int{}
	for i, h := range PlanCSVHeader {
		col[h] = i
	}
	policyCols := func(row []string) string {
		return strings.Join([]string{row[col["policy"]], row[col["policy_checked"]], row[col["policy_matched"]], row[col["policy_violations"]]}, "|")
	}
	for _, check := range []bool{false, true} {
		pl := NewPlan(forecast.DefaultPolicy, nil)
		if check {
			pl.PolicyCheck = NewPolicyCheck(es)
		}
		for _, r := range recs {
			pl.Add(r)
		}
		pl.Finish()
		want := map[string]string{"fleet": "|||", "node a": "|||", "node b": "|||",
			"server 127.0.0.1:7443": "|||", "server 127.0.0.1:8443": "|||", "server 127.0.0.1:9443": "|||"}
		if check {
			want["fleet"] = "|3|1|2"
			want["server 127.0.0.1:7443"] = goPolicy.String() + "|0|0|0"
			want["server 127.0.0.1:8443"] = goPolicy.String() + "|3|1|2"
		}
		rows := pl.CSVRows()
		if len(rows) != len(want) {
			t.Fatalf("policy check %v: %d rows, want %d", check, len(rows), len(want))
		}
		for _, row := range rows {
			if len(row) != len(PlanCSVHeader) {
				t.Fatalf("row %v: %d columns of %d", row[:2], len(row), len(PlanCSVHeader))
			}
			key := strings.TrimSpace(row[0] + " " + row[1])
			if got := policyCols(row); got != want[key] {
				t.Errorf("policy check %v: %s policy columns %q, want %q", check, key, got, want[key])
			}
		}
		if check {
			// Had the check folded servers past MaxPolicyServers, 7443's
			// (no row of its own) could be among them: counts unknown.
			pl.PolicyCheck.ServersOverflow = 1
			for _, row := range pl.CSVRows() {
				if row[1] == "127.0.0.1:7443" && policyCols(row) != goPolicy.String()+"|||" {
					t.Errorf("folded server's policy columns %q", policyCols(row))
				}
			}
			if s := pl.PolicyCheck.ByServer["127.0.0.1:8443"]; s == nil || s.Checked != 3 || s.Matched != 1 || s.Violations != 2 || s.Policy != goPolicy.String() {
				t.Errorf("policy check's own row %+v", s)
			}
		}
	}
}
