package report

import (
	"encoding/json"
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
		r.KeyShares = append(r.KeyShares, record.KeyShare{Group: tlsparse.Group(g).String(), Bytes: forecast.ClientShareSize(g)})
	}
	return r
}

// seen adds what a server negotiated.
func seen(r *record.Handshake, version string, g uint16, hrr bool, shBytes int) *record.Handshake {
	r.Version, r.Group, r.HRR, r.ServerHelloBytes = version, tlsparse.Group(g).String(), hrr, shBytes
	r.PQ = tlsparse.Group(g).IsPQ()
	return r
}

var (
	goDefault = []uint16{mlkem, p256mk, p384mk, x25519, p256, p384, p521}
	openssl30 = forecast.Policy{Groups: []uint16{x25519, p256}, Mode: forecast.ModeClientShare}
	openssl35 = forecast.DefaultPolicy
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
