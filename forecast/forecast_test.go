package forecast

import (
	"errors"
	"reflect"
	"testing"

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
	openssl30 = Policy{Groups: []uint16{x25519, p256}, Mode: ModeClientShare}
	openssl35 = DefaultPolicy
)

func TestPredict(t *testing.T) {
	withPQ := openssl30
	withPQ.Groups = []uint16{mlkem, x25519, p256}
	type want struct {
		kind   Kind
		group  uint16
		reason string
	}
	cases := []struct {
		name   string
		p      Policy
		r      *record.Handshake
		want   want
		nobyte bool
	}{
		{"go client, go server", GoPolicy, hello("13", goDefault, []uint16{mlkem, x25519}), want{PQ, mlkem, ReasonPQShare}, false},
		{"chrome-like, openssl3.5", openssl35, hello("13", []uint16{mlkem, x25519, p256, p384}, []uint16{mlkem, x25519}), want{PQ, mlkem, ReasonPQShare}, false},
		{"pq listed no share, go", GoPolicy, hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), want{HRR, mlkem, ReasonPQNoShare}, false},
		{"pq listed no share, openssl3.5", openssl35, hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), want{HRR, mlkem, ReasonPQNoShare}, false},
		{"pq listed no share, openssl3.0", withPQ, hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), want{Classical, x25519, ReasonClassicalShare}, false},
		{"x25519 only", GoPolicy, hello("13", []uint16{x25519}, []uint16{x25519}), want{Classical, x25519, ReasonNoPQOffered}, false},
		{"p256 share, go", GoPolicy, hello("13", []uint16{p256, x25519}, []uint16{p256}), want{Classical, p256, ReasonNoPQOffered}, false},
		{"p256 share, openssl3.5", openssl35, hello("13", []uint16{p256, x25519}, []uint16{p256}), want{Classical, p256, ReasonNoPQOffered}, false},
		{"p256 share, openssl3.0", openssl30, hello("13", []uint16{p256, x25519}, []uint16{p256}), want{Classical, p256, ReasonNoPQOffered}, false},
		{"x448 share, go", GoPolicy, hello("13", []uint16{x448, p256}, []uint16{x448}), want{HRR, p256, ReasonNoShare}, false},
		{"x448 share, openssl3.5", openssl35, hello("13", []uint16{x448, p256}, []uint16{x448}), want{HRR, p256, ReasonNoShare}, false},
		{"x448 share, openssl3.0", openssl30, hello("13", []uint16{x448, p256}, []uint16{x448}), want{HRR, p256, ReasonNoShare}, false},
		{"p384 share, go takes it", GoPolicy, hello("13", []uint16{p384, x25519}, []uint16{p384}), want{Classical, p384, ReasonNoPQOffered}, false},
		{"p384 share, openssl3.5 asks earlier tuple", openssl35, hello("13", []uint16{p384, x25519}, []uint16{p384}), want{HRR, x25519, ReasonNoShare}, false},
		{"openssl3.0 hrr in client order", openssl30, hello("13", []uint16{x448, p256, x25519}, []uint16{x448}), want{HRR, p256, ReasonNoShare}, false},
		{"strict server order", Policy{Groups: []uint16{p256, x25519}, Tuple: []uint8{0, 1}, Mode: ModeTuples}, hello("13", []uint16{x25519, p256}, []uint16{x25519}), want{HRR, p256, ReasonNoShare}, false},
		{"one tuple takes any share", Policy{Groups: []uint16{p256, x25519}, Mode: ModeTuples}, hello("13", []uint16{x25519, p256}, []uint16{x25519}), want{Classical, x25519, ReasonNoPQOffered}, false},
		{"tuple: client share order", Policy{Groups: []uint16{p256, x25519}, Mode: ModeTuples}, hello("13", []uint16{x25519, p256}, []uint16{x25519, p256}), want{Classical, x25519, ReasonNoPQOffered}, false},
		// OpenSSL 3.5 with and without server preference inside a tuple
		// (tls_parse_ctos_key_share's two check_overlap orders).
		{"tuple hrr: client's order", Policy{Groups: []uint16{x25519, p256}, Mode: ModeTuples}, hello("13", []uint16{p256, x25519}, nil), want{HRR, p256, ReasonNoShare}, false},
		{"tuple hrr: server's order", Policy{Groups: []uint16{x25519, p256}, Mode: ModeTuplesServer}, hello("13", []uint16{p256, x25519}, nil), want{HRR, x25519, ReasonNoShare}, false},
		{"tuple share: server's order", Policy{Groups: []uint16{p256, x25519}, Mode: ModeTuplesServer}, hello("13", []uint16{x25519, p256}, []uint16{x25519, p256}), want{Classical, p256, ReasonNoPQOffered}, false},
		{"tuples-server: strict between tuples", Policy{Groups: []uint16{mlkem, x25519, p256}, Tuple: []uint8{0, 1, 1}, Mode: ModeTuplesServer}, hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), want{HRR, mlkem, ReasonPQNoShare}, false},
		{"tls1.2 server order", Policy{Groups: []uint16{x25519, p256}, Mode: ModeTuplesServer}, hello("12", []uint16{p256, x25519}, nil), want{Classical, x25519, ReasonTLS12}, false},
		{"kyber draft only", GoPolicy, hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), want{Classical, x25519, ReasonNoMutualPQ}, false},
		{"policy prefers classical", Policy{Groups: []uint16{x25519, mlkem}, Tuple: []uint8{0, 1}, Mode: ModeTuples}, hello("13", []uint16{mlkem, x25519}, []uint16{mlkem, x25519}), want{Classical, x25519, ReasonPolicyClassic}, false},
		{"tls1.2 client", GoPolicy, hello("12", []uint16{x25519, p256}, nil), want{Classical, x25519, ReasonTLS12}, false},
		{"tls1.2 client order", GoPolicy, hello("12", []uint16{p384, x25519}, nil), want{Classical, p384, ReasonTLS12}, false},
		{"tls1.2 no groups", GoPolicy, hello("12", nil, nil), want{Classical, 0, ReasonTLS12}, false},
		{"tls1.2 skips pq", GoPolicy, hello("12", []uint16{mlkem, p256}, nil), want{Classical, p256, ReasonTLS12}, false},
		{"no ja4, shares mean tls1.3", GoPolicy, hello("", goDefault, []uint16{mlkem, x25519}), want{PQ, mlkem, ReasonPQShare}, false},
		{"no ja4, no shares mean tls1.2", GoPolicy, hello("", []uint16{x25519}, nil), want{Classical, x25519, ReasonTLS12}, false},
		{"empty key_share, tls1.3 by ja4", GoPolicy, hello("13", []uint16{x25519, mlkem}, nil), want{HRR, mlkem, ReasonPQNoShare}, false},
		{"no mutual group", GoPolicy, hello("13", []uint16{ffdhe8k}, []uint16{ffdhe8k}), want{Fail, 0, ReasonNoMutualGroup}, true},
		{"no clienthello", GoPolicy, &record.Handshake{Outcome: record.OutcomeTruncated}, want{Unknown, 0, ReasonNoClientHello}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Predict(c.p, c.r)
			if got := (want{o.Kind, o.Group, o.Reason}); got != c.want {
				t.Fatalf("got %v %s %q, want %v %s %q", got.kind, tlsparse.Group(got.group), got.reason, c.want.kind, tlsparse.Group(c.want.group), c.want.reason)
			}
			if c.nobyte && (o.ServerHelloBytes != 0 || o.Modeled) {
				t.Errorf("bytes modelled for %v: %+v", o.Kind, o)
			}
		})
	}
}

// TestPredictLosesPQ: a record that negotiated a PQ group today and would
// negotiate a classical one is LosesPQ, never Classical, with the group lost.
func TestPredictLosesPQ(t *testing.T) {
	kyberPolicy, err := ParsePolicy("X25519Kyber768Draft00,x25519")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		p      Policy
		r      *record.Handshake
		kind   Kind
		group  uint16
		lost   uint16
		hrr    bool
		reason string
		growth int
	}{
		{"kyber-only client, policy without kyber", GoPolicy, seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210),
			LosesPQ, x25519, kyber, false, ReasonNoMutualPQ, -1088},
		{"kyber-only client, openssl3.5 default", openssl35, seen(hello("13", []uint16{kyber, x25519, p256}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210),
			LosesPQ, x25519, kyber, false, ReasonNoMutualPQ, -1088},
		{"kyber share only, loses PQ through an HRR", GoPolicy, seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber}), "TLS1.3", kyber, false, 1210),
			LosesPQ, x25519, kyber, true, ReasonNoMutualPQ, -1088},
		{"policy prefers classical", Policy{Groups: []uint16{x25519, mlkem}, Tuple: []uint8{0, 1}, Mode: ModeTuples}, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210),
			LosesPQ, x25519, mlkem, false, ReasonPolicyClassic, -1088},
		{"classical-only openssl3.0", openssl30, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210),
			LosesPQ, x25519, mlkem, false, ReasonNoMutualPQ, -1088},
		{"mlkem -> p256", Policy{Groups: []uint16{p256}}, seen(hello("13", []uint16{mlkem, p256}, []uint16{mlkem, p256}), "TLS1.3", mlkem, false, 1210),
			LosesPQ, p256, mlkem, false, ReasonNoMutualPQ, -1055},
		{"pq client stays pq", GoPolicy, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210),
			PQ, mlkem, 0, false, ReasonPQShare, 0},
		{"kyber client, policy with kyber", kyberPolicy, seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210),
			PQ, kyber, 0, false, ReasonPQShare, 0},
		{"pq today, another pq group via hrr", Policy{Groups: []uint16{p256mk, p256}}, seen(hello("13", []uint16{mlkem, p256mk, p256}, []uint16{mlkem}), "TLS1.3", mlkem, false, 1210),
			HRR, p256mk, 0, true, ReasonPQNoShare, (65 + 1088) - (32 + 1088)},
		{"classical today stays classical", Policy{Groups: []uint16{x25519}}, seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), "TLS1.3", x25519, false, 122),
			Classical, x25519, 0, false, ReasonNoMutualPQ, 0},
		{"pq today, no mutual group fails", Policy{Groups: []uint16{p384}}, seen(hello("13", []uint16{mlkem, x25519}, []uint16{mlkem}), "TLS1.3", mlkem, false, 1210),
			Fail, 0, 0, false, ReasonNoMutualGroup, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Predict(c.p, c.r)
			if o.Kind != c.kind || o.Group != c.group || o.Lost != c.lost || o.HRR != c.hrr || o.Reason != c.reason || o.ServerHelloGrowth != c.growth {
				t.Errorf("got %v %s lost %s hrr %v %q growth %+d, want %v %s lost %s hrr %v %q growth %+d",
					o.Kind, tlsparse.Group(o.Group), tlsparse.Group(o.Lost), o.HRR, o.Reason, o.ServerHelloGrowth,
					c.kind, tlsparse.Group(c.group), tlsparse.Group(c.lost), c.hrr, c.reason, c.growth)
			}
			if o.Kind == LosesPQ && o.HRR && o.HRRBytes == 0 {
				t.Errorf("a loss through a new HRR adds no HRR bytes: %+v", o)
			}
		})
	}
}

func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		if s := k.String(); seen[s] || s == "" || s[0] == 'k' {
			t.Errorf("kind %d: name %q", k, s)
		}
		seen[k.String()] = true
	}
	if len(Kinds) != len(kindNames) {
		t.Errorf("Kinds lists %d of %d kinds", len(Kinds), len(kindNames))
	}
}

func TestBytes(t *testing.T) {
	// A TLS 1.3 ServerHello with a 32-byte session id and an x25519 share
	// is 122 bytes; X25519MLKEM768 makes it 1210.
	cases := []struct {
		name             string
		p                Policy
		r                *record.Handshake
		sh, growth, hrrB int
		modeled          bool
	}{
		{"x25519 -> mlkem", GoPolicy, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 122), 1210, 1088, 0, true},
		{"p256 stays", GoPolicy, seen(hello("13", []uint16{p256}, []uint16{p256}), "TLS1.3", p256, false, 155), 155, 0, 0, true},
		{"short session id kept", GoPolicy, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 90), 1178, 1088, 0, true},
		{"mlkem -> x25519", Policy{Groups: []uint16{x25519}}, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210), 122, -1088, 0, true},
		{"mlkem -> p256, short session id", Policy{Groups: []uint16{p256}}, seen(hello("13", []uint16{mlkem, p256}, []uint16{mlkem, p256}), "TLS1.3", mlkem, false, 1178), 123, -1055, 0, true},
		{"SecP256r1MLKEM768 observed", GoPolicy, seen(hello("13", []uint16{p256mk, p256}, []uint16{p256mk}), "TLS1.3", p256mk, false, 1211), 1211, 0, 0, true},
		{"observed tls1.2, built", GoPolicy, seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.2", x25519, false, 80), 1210, 1130, 0, true},
		{"tls1.2 client unchanged", GoPolicy, seen(hello("12", []uint16{x25519}, nil), "TLS1.2", x25519, false, 80), 80, 0, 0, true},
		// HRR: 88-byte HelloRetryRequest + a second ClientHello of
		// 300 - (4+32) + (4+1216).
		{"new hrr to mlkem", GoPolicy, seen(hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), "TLS1.3", x25519, false, 122), 1210, 1088, 88 + 300 - 36 + 1220, true},
		{"hrr already seen", GoPolicy, seen(hello("13", []uint16{x448, p256}, []uint16{x448}), "TLS1.3", p256, true, 155), 155, 0, 0, true},
		{"no serverhello", GoPolicy, hello("13", goDefault, []uint16{mlkem, x25519}), 1210, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Predict(c.p, c.r)
			if o.ServerHelloBytes != c.sh || o.ServerHelloGrowth != c.growth || o.HRRBytes != c.hrrB || o.Modeled != c.modeled {
				t.Errorf("got sh=%d growth=%d hrr=%d modeled=%v, want %d %d %d %v", o.ServerHelloBytes, o.ServerHelloGrowth, o.HRRBytes, o.Modeled, c.sh, c.growth, c.hrrB, c.modeled)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		in   string
		want Policy
		err  bool
	}{
		{in: "X25519MLKEM768,x25519,secp256r1", want: Policy{Groups: []uint16{mlkem, x25519, p256}}},
		// Mode go: Go's own order, whatever the list's.
		{in: "X25519:P-256:prime256v1:0x11EC", want: Policy{Groups: []uint16{mlkem, x25519, p256}}},
		{in: "caddy=secp256r1,x448,x25519 / X25519MLKEM768", want: Policy{Groups: []uint16{mlkem, x25519, p256, x448}}},
		{in: "go", want: GoPolicy},
		{in: " Caddy ", want: CaddyPolicy},
		{in: "openssl35", want: DefaultPolicy},
		{in: "OpenSSL3.5", want: DefaultPolicy},
		{in: "openssl30", want: OpenSSL30Policy},
		{in: "openssl3.5-server=X25519MLKEM768/x25519:P-256", want: Policy{Groups: []uint16{mlkem, x25519, p256}, Tuple: []uint8{0, 1, 1}, Mode: ModeTuplesServer}},
		{in: "openssl35=X25519MLKEM768/x25519", want: Policy{Groups: []uint16{mlkem, x25519}, Tuple: []uint8{0, 1}, Mode: ModeTuples}},
		{in: "?*X25519MLKEM768 / ?*X25519:?secp256r1 / ?X448:?secp384r1:?secp521r1 / ?ffdhe2048:?ffdhe3072", want: DefaultPolicy},
		{in: "openssl3.0=X25519:prime256v1", want: Policy{Groups: []uint16{x25519, p256}, Mode: ModeClientShare}},
		{in: "go=SecP256r1MLKEM768, P-384, p-521", want: Policy{Groups: []uint16{p256mk, p384, p521}}},
		{in: "0x6399", want: Policy{Groups: []uint16{kyber}}},
		{in: "openssl3.5=x25519:P-256", want: Policy{Groups: []uint16{x25519, p256}, Mode: ModeTuples}},
		{in: "/ x25519 // P-256 /", want: Policy{Groups: []uint16{x25519, p256}, Tuple: []uint8{0, 1}, Mode: ModeTuples}},
		{in: "go=/x25519", want: Policy{Groups: []uint16{x25519}}},
		{in: "bogus", err: true},
		{in: "", err: true},
		{in: "x25519,0x0a0a", err: true},
		{in: "nope=x25519", err: true},
		{in: "0x1ffff", err: true},
	}
	for _, c := range cases {
		p, err := ParsePolicy(c.in)
		if c.err {
			if !errors.Is(err, ErrPolicy) {
				t.Errorf("%q: err %v, want ErrPolicy", c.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(p, c.want) {
			t.Errorf("%q: got %+v %v, want %+v", c.in, p, err, c.want)
		}
		if back, err := ParsePolicy(p.String()); err != nil || !reflect.DeepEqual(back, p) {
			t.Errorf("%q: String %q does not round-trip: %+v %v", c.in, p.String(), back, err)
		}
	}
}

func TestPredictAllocs(t *testing.T) {
	recs := []*record.Handshake{
		seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", x25519, false, 122),
		seen(hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), "TLS1.3", x25519, false, 122),
		seen(hello("12", []uint16{x25519}, nil), "TLS1.2", x25519, false, 80),
		seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210), // loses PQ
		seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber}), "TLS1.3", kyber, false, 1210),         // loses PQ via an HRR
	}
	for _, p := range []Policy{GoPolicy, DefaultPolicy, openssl30} {
		for _, r := range recs {
			if n := testing.AllocsPerRun(100, func() { Predict(p, r) }); n != 0 {
				t.Errorf("%s: %v allocs", p.Mode, n)
			}
		}
	}
}

func BenchmarkPredict(b *testing.B) {
	r := seen(hello("13", []uint16{x25519, mlkem, p256, p384}, []uint16{x25519}), "TLS1.3", x25519, false, 122)
	b.ReportAllocs()
	for b.Loop() {
		Predict(DefaultPolicy, r)
	}
}

// BenchmarkPredictObserved: records of every observed kind (classical,
// TLS 1.2, PQ lost with and without an HRR) under the three rules: the
// paths that read the record's own group (the loss, the byte model).
func BenchmarkPredictObserved(b *testing.B) {
	recs := []*record.Handshake{
		seen(hello("13", goDefault, []uint16{mlkem, x25519}), "TLS1.3", mlkem, false, 1210),
		seen(hello("13", []uint16{x25519, mlkem}, []uint16{x25519}), "TLS1.3", x25519, false, 122),
		seen(hello("12", []uint16{x25519}, nil), "TLS1.2", x25519, false, 80),
		seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber, x25519}), "TLS1.3", kyber, false, 1210),
		seen(hello("13", []uint16{kyber, x25519}, []uint16{kyber}), "TLS1.3", kyber, false, 1210),
	}
	policies := []Policy{GoPolicy, DefaultPolicy, openssl30}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range policies {
			for _, r := range recs {
				Predict(p, r)
			}
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"X25519MLKEM768,x25519,secp256r1", "?*X25519MLKEM768 / ?*X25519:?secp256r1 / ?X448", "openssl3.0=X25519:prime256v1", "0x11ec", "", "=", "/", "go=/x25519"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		back, err := ParsePolicy(p.String())
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Fatalf("%q -> %q does not round-trip: %+v vs %+v (%v)", s, p.String(), back, p, err)
		}
		Predict(p, hello("13", goDefault, []uint16{mlkem, x25519}))
	})
}
