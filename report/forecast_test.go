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

const (
	x25519  = 0x001d
	p256    = 0x0017
	p384    = 0x0018
	p521    = 0x0019
	x448    = 0x001e
	mlkem   = 0x11ec // X25519MLKEM768
	p256mk  = 0x11eb
	p384mk  = 0x11ed
	kyber   = 0x6399
	ffdhe8k = 0x0104
)

// hello builds a record from what a ClientHello carried; ver is "13", "12"
// or "" (no JA4).
func hello(ver string, offered, shares []uint16) *record.Handshake {
	r := &record.Handshake{Outcome: record.OutcomeOK, ClientHelloBytes: 300, OfferedIDs: offered, KeyShareIDs: shares}
	if ver != "" {
		r.JA4 = "t" + ver + "d1516h2_8daaf6152771_e5627efa2ab1"
	}
	for _, g := range offered {
		r.OfferedGroups = append(r.OfferedGroups, tlsparse.Group(g).String())
		r.PQOffered = r.PQOffered || tlsparse.Group(g).IsPQ()
	}
	for _, g := range shares {
		r.KeyShares = append(r.KeyShares, record.KeyShare{Group: tlsparse.Group(g).String(), Bytes: tlsparse.Group(g).ClientShareSize()})
	}
	return r
}

// seen adds what a server negotiated.
func seen(r *record.Handshake, version string, g uint16, hrr bool, shBytes int) *record.Handshake {
	r.Version, r.HRR, r.ServerHelloBytes = version, hrr, shBytes
	r.SetGroup(tlsparse.Group(g))
	return r
}

var (
	goDefault = []uint16{mlkem, p256mk, p384mk, x25519, p256, p384, p521}
	openssl30 = forecast.Policy{Groups: []uint16{x25519, p256}, Mode: forecast.ModeClientShare}
)

func TestReport(t *testing.T) {
	rep := NewForecast(forecast.GoPolicy)
	chrome := seen(hello("13", []uint16{mlkem, x25519, p256}, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 122)
	chrome.Log = &record.Log{Source: "nginx", UserAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"}
	curl := seen(hello("13", []uint16{x25519, p256}, []uint16{x25519}), "TLS1.3", x25519, false, 122)
	curl.JA4 = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6"
	curl.Log = &record.Log{Source: "nginx", UserAgent: "curl/7.88.1"}
	old := seen(hello("12", []uint16{x25519}, nil), "TLS1.2", x25519, false, 80)
	for range 3 {
		rep.Add(chrome)
	}
	rep.Add(curl)
	rep.Add(curl)
	rep.Add(old)
	rep.Add(seen(hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), "TLS1.3", x25519, false, 122))
	rep.Add(&record.Handshake{Outcome: record.OutcomeReset})
	rep.Finish()
	if rep.Handshakes != 8 || rep.Predicted != 7 || rep.PQ != 3 || rep.HRR != 1 || rep.HRRPQ != 1 || rep.Classical != 3 || rep.Unknown != 1 {
		t.Fatalf("counts: %+v", rep)
	}
	if rep.PQShare != 4.0/7 || rep.HRRShare != 1.0/7 || rep.ClassicalShare != 3.0/7 {
		t.Errorf("shares: pq %v hrr %v classical %v", rep.PQShare, rep.HRRShare, rep.ClassicalShare)
	}
	if rep.ClassicalReasons[forecast.ReasonNoPQOffered] != 2 || rep.ClassicalReasons[forecast.ReasonTLS12] != 1 {
		t.Errorf("reasons: %v", rep.ClassicalReasons)
	}
	// 4 handshakes grow by 1088, 3 by 0.
	if rep.Modeled != 7 || rep.AddedServerHelloBytes != 4*1088.0/7 || rep.AddedServerHelloBytesPQ != 1088 {
		t.Errorf("bytes: modeled %d mean %v pq %v", rep.Modeled, rep.AddedServerHelloBytes, rep.AddedServerHelloBytesPQ)
	}
	if rep.NewHRR != 1 || rep.HRRBytesPerNewHRR != 88+300-36+1220 {
		t.Errorf("hrr bytes: %d %v", rep.NewHRR, rep.HRRBytesPerNewHRR)
	}
	if len(rep.ClassicalByJA4) != 2 || rep.ClassicalByJA4[0].Key != curl.JA4 || rep.ClassicalByJA4[0].Count != 2 {
		t.Errorf("by ja4: %+v", rep.ClassicalByJA4)
	}
	if len(rep.ClassicalByUA) != 1 || rep.ClassicalByUA[0] != (TailRow{Key: "curl", Count: 2, Reason: forecast.ReasonNoPQOffered}) {
		t.Errorf("by ua: %+v", rep.ClassicalByUA)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"pq_share":`, `"hrr_share":`, `"classical_share":`, `"classical_reasons":`, `"added_server_hello_bytes_per_handshake":`, `"classical_by_ja4":`, `"classical_by_ua_family":`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("json lacks %s: %s", k, b)
		}
	}
	txt := rep.Text()
	for _, k := range []string{"would be PQ", "57.1%", "would need an HRR", "TLS 1.2 only", "curl", "+621.7 bytes per handshake"} {
		if !strings.Contains(txt, k) {
			t.Errorf("text lacks %q:\n%s", k, txt)
		}
	}
	t.Logf("\n%s", txt)
}

func TestReportHRRToClassical(t *testing.T) {
	rep := NewForecast(forecast.GoPolicy)
	r := seen(hello("13", []uint16{x448, p256}, []uint16{x448}), "TLS1.3", p256, true, 155)
	if o := rep.Add(r); o.Kind != forecast.HRR || o.Reason != forecast.ReasonNoShare {
		t.Fatalf("outcome %+v", o)
	}
	rep.Finish()
	if rep.HRR != 1 || rep.HRRPQ != 0 || rep.ClassicalShare != 1 || rep.HRRShare != 1 || rep.PQShare != 0 {
		t.Errorf("counts %+v", rep)
	}
	if rep.ClassicalReasons[forecast.ReasonNoPQOffered] != 1 || len(rep.ClassicalByJA4) != 1 || rep.ClassicalByJA4[0].Reason != forecast.ReasonNoPQOffered {
		t.Errorf("reasons %v tail %+v", rep.ClassicalReasons, rep.ClassicalByJA4)
	}
}

// TestReportLosesPQ: handshakes that negotiate a PQ group today and a
// classical one under the policy are their own outcome, listed with the
// group lost, never under "would stay classical".
func TestReportLosesPQ(t *testing.T) {
	// Chrome 124-130: X25519Kyber768Draft00 is its only PQ group.
	kyberOnly := func() *record.Handshake {
		return seen(hello("13", []uint16{kyber, x25519, p256, p384}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210)
	}
	// The same, with a share for the draft only: an HRR to x25519.
	kyberShareOnly := seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber}), "TLS1.3", kyber, false, 1210)
	kyberShareOnly.JA4 = "t13d1516h2_8daaf6152771_000000000000"
	stayPQ := seen(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210)
	classical := seen(hello("13", []uint16{x25519}, []uint16{x25519}), "TLS1.3", x25519, false, 122)
	cases := []struct {
		name                                string
		policy                              forecast.Policy
		recs                                []*record.Handshake
		pq, classical, loses, losesHRR, hrr int
		lostGroups                          map[string]int
		text                                []string
		rows                                []LostPQRow
	}{
		{
			name: "kyber-only client, policy without kyber", policy: forecast.DefaultPolicy,
			recs: []*record.Handshake{kyberOnly(), kyberOnly(), stayPQ, classical},
			pq:   1, classical: 1, loses: 2,
			lostGroups: map[string]int{"X25519Kyber768Draft00": 2},
			text: []string{
				"would stay classical    25.0%  1\n",
				"would lose PQ           50.0%  2 (PQ today, classical under this policy; lost X25519Kyber768Draft00 2; ServerHello -1088.0 bytes each, smaller)\n",
				"    client's PQ groups are not in the policy           2\n",
				"ServerHello shrink     -544.0 bytes per handshake, smaller than today (0.0 per PQ handshake; 4 modelled)\n",
				"losing PQ by JA4\n",
				"t13d1516h2_8daaf6152771_e5627efa2ab1   offered+share      X25519Kyber768Draft00 -> x25519            client's PQ groups are not in the policy\n",
			},
			rows: []LostPQRow{{JA4Row: JA4Row{TailRow: TailRow{Key: "t13d1516h2_8daaf6152771_e5627efa2ab1", Count: 2, Reason: forecast.ReasonNoMutualPQ}, PQOffered: true, PQKeyShare: true},
				Lost: "X25519Kyber768Draft00", Group: "x25519"}},
		},
		{
			name: "kyber share only loses PQ through an HRR", policy: forecast.GoPolicy,
			recs:  []*record.Handshake{kyberShareOnly},
			loses: 1, losesHRR: 1, hrr: 1,
			lostGroups: map[string]int{"X25519Kyber768Draft00": 1},
			text:       []string{"would need an HRR      100.0%  1", "lost X25519Kyber768Draft00 1; 1 after an HRR; ServerHello -1088.0 bytes each, smaller)\n", "would stay classical     0.0%  0\n"},
			rows: []LostPQRow{{JA4Row: JA4Row{TailRow: TailRow{Key: kyberShareOnly.JA4, Count: 1, Reason: forecast.ReasonNoMutualPQ}, PQOffered: true, PQKeyShare: true},
				Lost: "X25519Kyber768Draft00", Group: "x25519"}},
		},
		{
			name: "pq client stays pq", policy: forecast.GoPolicy,
			recs: []*record.Handshake{stayPQ, kyberOnly()}, // Go has no Kyber draft: that one loses PQ
			pq:   1, loses: 1,
			lostGroups: map[string]int{"X25519Kyber768Draft00": 1},
			text:       []string{"would be PQ             50.0%  1 (0 of them after an HRR); today 2\n", "ServerHello shrink     -544.0 bytes per handshake, smaller than today (0.0 per PQ handshake; 2 modelled)\n"},
			rows: []LostPQRow{{JA4Row: JA4Row{TailRow: TailRow{Key: "t13d1516h2_8daaf6152771_e5627efa2ab1", Count: 1, Reason: forecast.ReasonNoMutualPQ}, PQOffered: true, PQKeyShare: true},
				Lost: "X25519Kyber768Draft00", Group: "x25519"}},
		},
		{
			name: "nothing lost", policy: forecast.GoPolicy,
			recs: []*record.Handshake{stayPQ, classical},
			pq:   1, classical: 1,
			lostGroups: map[string]int{},
			text:       []string{"would lose PQ            0.0%  0 (PQ today, classical under this policy)\n", "ServerHello growth     0.0 bytes per handshake, unchanged (0.0 per PQ handshake; 2 modelled)\n"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := NewForecast(c.policy)
			for _, r := range c.recs {
				rep.Add(r)
			}
			rep.Finish()
			if rep.PQ+rep.HRRPQ != c.pq || rep.stayClassical() != c.classical || rep.LosesPQ != c.loses || rep.LosesPQHRR != c.losesHRR || rep.HRR != c.hrr {
				t.Errorf("pq %d classical %d loses %d (hrr %d) hrr %d, want %d %d %d (%d) %d",
					rep.PQ+rep.HRRPQ, rep.stayClassical(), rep.LosesPQ, rep.LosesPQHRR, rep.HRR, c.pq, c.classical, c.loses, c.losesHRR, c.hrr)
			}
			if sum := rep.PQShare + rep.ClassicalShare + rep.LosesPQShare + rep.FailShare; sum < 0.9999 || sum > 1.0001 {
				t.Errorf("shares add up to %v", sum)
			}
			if n := float64(len(c.recs)); rep.LosesPQShare != float64(c.loses)/n || rep.ClassicalShare != float64(c.classical)/n {
				t.Errorf("shares: loses %v classical %v", rep.LosesPQShare, rep.ClassicalShare)
			}
			if !reflect.DeepEqual(rep.LosesPQGroups, c.lostGroups) {
				t.Errorf("lost groups %v, want %v", rep.LosesPQGroups, c.lostGroups)
			}
			if !reflect.DeepEqual(rep.LosesPQByJA4, c.rows) && (len(rep.LosesPQByJA4) > 0 || len(c.rows) > 0) {
				t.Errorf("loses_pq_by_ja4 %+v, want %+v", rep.LosesPQByJA4, c.rows)
			}
			for _, row := range rep.ClassicalByJA4 {
				for _, lost := range c.rows {
					if row.Key == lost.Key && row.PQKeyShare == lost.PQKeyShare {
						t.Errorf("a client losing PQ is listed as staying classical: %+v", row)
					}
				}
			}
			if rep.ClassicalReasons[forecast.ReasonNoMutualPQ] != 0 {
				t.Errorf("classical reasons count a loss: %v", rep.ClassicalReasons)
			}
			txt := rep.Text()
			for _, want := range c.text {
				if !strings.Contains(txt, want) {
					t.Errorf("text lacks %q:\n%s", want, txt)
				}
			}
			b, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{`"loses_pq":`, `"loses_pq_hrr":`, `"loses_pq_share":`, `"loses_pq_groups":`, `"loses_pq_reasons":`, `"added_server_hello_bytes_per_loses_pq_handshake":`} {
				if !strings.Contains(string(b), k) {
					t.Errorf("json lacks %s: %s", k, b)
				}
			}
			if c.loses > 0 && !strings.Contains(string(b), `"loses_pq_by_ja4":[{"key":"t13d1516h2_8daaf6152771_`) || c.loses > 0 && !strings.Contains(string(b), `"lost_group":"X25519Kyber768Draft00","group":"x25519"`) {
				t.Errorf("json loses_pq_by_ja4: %s", b)
			}
		})
	}
}

// TestJA4RowsSplitByPQ: JA4 leaves supported_groups out, so one JA4 is
// several clients: with a PQ key share, with a PQ group listed but no
// share, without PQ. Both JA4 tables key and show them apart.
func TestJA4RowsSplitByPQ(t *testing.T) {
	withShare := seen(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 122)
	noShare := seen(hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), "TLS1.3", x25519, false, 122)
	noPQ := seen(hello("13", []uint16{x25519}, []uint16{x25519}), "TLS1.3", x25519, false, 122)
	for _, r := range []*record.Handshake{withShare, noShare, noPQ} {
		r.Server = "10.0.0.1:443"
		r.SNI = "a.test"
	}
	ja4 := withShare.JA4
	if noShare.JA4 != ja4 || noPQ.JA4 != ja4 {
		t.Fatal("the three clients must share a JA4")
	}
	// An OpenSSL 3.0 nginx: every client stays classical.
	s := New(openssl30)
	for r, n := range map[*record.Handshake]int{withShare: 3, noShare: 2, noPQ: 20} {
		for range n {
			s.Write(r)
		}
	}
	s.Finish()

	row := func(n int, offered, share bool, reason string) JA4Row {
		return JA4Row{TailRow: TailRow{Key: ja4, Count: n, Reason: reason}, PQOffered: offered, PQKeyShare: share}
	}
	wantTail := []JA4Row{row(20, false, false, forecast.ReasonNoPQOffered), row(3, true, true, forecast.ReasonNoMutualPQ), row(2, true, false, forecast.ReasonNoMutualPQ)}
	if !reflect.DeepEqual(s.Forecast.ClassicalByJA4, wantTail) {
		t.Errorf("classical_by_ja4\n got %+v\nwant %+v", s.Forecast.ClassicalByJA4, wantTail)
	}
	wantClients := []ClassicalDespitePQ{
		{JA4: ja4, PQOffered: true, PQKeyShare: true, SNI: "a.test", Server: "10.0.0.1:443", Group: "x25519", Count: 3},
		{JA4: ja4, PQOffered: true, PQKeyShare: false, SNI: "a.test", Server: "10.0.0.1:443", Group: "x25519", Count: 2},
	}
	if !reflect.DeepEqual(s.ClassicalClients, wantClients) {
		t.Errorf("pq_offered_negotiated_classical_clients\n got %+v\nwant %+v", s.ClassicalClients, wantClients)
	}

	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  count  ja4                                    pq                 server                   group                  sni\n",
		"  3      " + ja4 + "   offered+share      10.0.0.1:443             x25519                 a.test\n",
		"  2      " + ja4 + "   offered, no share  10.0.0.1:443             x25519                 a.test\n",
		"    count  ja4                                    pq                 reason\n",
		"    20     " + ja4 + "   not offered        client offers no PQ group\n",
		"    3      " + ja4 + "   offered+share      client's PQ groups are not in the policy\n",
		"    2      " + ja4 + "   offered, no share  client's PQ groups are not in the policy\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"ja4":"` + ja4 + `","pq_offered":true,"pq_key_share":true,"sni":"a.test"`,
		`{"ja4":"` + ja4 + `","pq_offered":true,"pq_key_share":false,"sni":"a.test"`,
		`{"key":"` + ja4 + `","count":20,"reason":"client offers no PQ group","pq_offered":false,"pq_key_share":false}`,
		`{"key":"` + ja4 + `","count":3,"reason":"client's PQ groups are not in the policy","pq_offered":true,"pq_key_share":true}`,
	} {
		if !strings.Contains(string(js), want) {
			t.Errorf("json lacks %s", want)
		}
	}
}

// TestPQKeyShare reads the key shares from their codepoints, which a record
// decoded from JSON has from its names (FillIDs).
func TestPQKeyShare(t *testing.T) {
	cases := []struct {
		name string
		r    *record.Handshake
		want bool
	}{
		{"mlkem share", hello("13", goDefault, []uint16{mlkem, x25519}), true},
		{"kyber share", hello("13", []uint16{kyber, x25519}, []uint16{kyber}), true},
		{"classical share", hello("13", goDefault, []uint16{x25519}), false},
		{"no share", hello("12", []uint16{x25519}, nil), false},
		{"from JSON", &record.Handshake{KeyShares: []record.KeyShare{{Group: "x25519", Bytes: 32}, {Group: "X25519MLKEM768", Bytes: 1216}}}, true},
		{"from JSON, classical", &record.Handshake{KeyShares: []record.KeyShare{{Group: "x25519", Bytes: 32}}}, false},
	}
	for _, c := range cases {
		c.r.FillIDs()
		if got := PQKeyShare(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestGrowthSign: every growth figure shows its sign, and a shrink says so.
func TestGrowthSign(t *testing.T) {
	cases := []struct {
		v            float64
		label, value string
	}{
		{544, "ServerHello growth", "+544.0 bytes per handshake"},
		{0.04, "ServerHello growth", "0.0 bytes per handshake, unchanged"},
		{0, "ServerHello growth", "0.0 bytes per handshake, unchanged"},
		{-0.04, "ServerHello growth", "0.0 bytes per handshake, unchanged"},
		{-8, "ServerHello shrink", "-8.0 bytes per handshake, smaller than today"},
		{-1088, "ServerHello shrink", "-1088.0 bytes per handshake, smaller than today"},
	}
	for _, c := range cases {
		if label, value := growthLine(c.v); label != c.label || value != c.value {
			t.Errorf("%v: %q %q, want %q %q", c.v, label, value, c.label, c.value)
		}
	}
	// In the report: a growth and a shrink.
	grow := NewForecast(forecast.GoPolicy)
	grow.Add(seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 122))
	grow.Add(seen(hello("13", []uint16{x25519}, []uint16{x25519}), "TLS1.3", x25519, false, 122))
	grow.Finish()
	if txt := grow.Text(); !strings.Contains(txt, "ServerHello growth     +544.0 bytes per handshake (+1088.0 per PQ handshake; 2 modelled)\n") {
		t.Errorf("growth:\n%s", txt)
	}
	shrink := NewForecast(forecast.Policy{Groups: []uint16{x25519}})
	shrink.Add(seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210))
	shrink.Finish()
	if txt := shrink.Text(); !strings.Contains(txt, "ServerHello shrink     -1088.0 bytes per handshake, smaller than today") ||
		!strings.Contains(txt, "ServerHello -1088.0 bytes each, smaller)") {
		t.Errorf("shrink:\n%s", txt)
	}
}
