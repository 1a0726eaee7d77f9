package tlsparse

import (
	"testing"
)

// foxioExample is the ClientHello of FoxIO's JA4.md worked example and of
// the reference Rust unit test (test_client_stats_into_out).
func foxioExample() *ClientHello {
	return &ClientHello{
		LegacyVersion:     VersionTLS12,
		SupportedVersions: []uint16{VersionTLS13, VersionTLS12},
		CipherSuites: []uint16{0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8,
			0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		Extensions: []uint16{0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005,
			0x0023, 0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015},
		ALPN:                [][]byte{[]byte("h2")},
		SignatureAlgorithms: chromeSigAlgs,
	}
}

func TestJA4FoxIOExample(t *testing.T) {
	ch := foxioExample()
	if got, want := string(AppendJA4(nil, ch, TransportTCP)), "t13d1516h2_8daaf6152771_e5627efa2ab1"; got != want {
		t.Errorf("JA4 = %s, want %s", got, want)
	}
	const wantR = "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601"
	if got := string(AppendJA4R(nil, ch, TransportTCP)); got != wantR {
		t.Errorf("JA4_r = %s, want %s", got, wantR)
	}
	// JA4.md: without signature algorithms the string has no '_' and hashes to 6d807ffa2a79.
	ch.SignatureAlgorithms = nil
	if got, want := string(AppendJA4(nil, ch, TransportQUIC)), "q13d1516h2_8daaf6152771_6d807ffa2a79"; got != want {
		t.Errorf("JA4 without sigalgs = %s, want %s", got, want)
	}
}

func TestJA4Fields(t *testing.T) {
	base := func(mod func(ch *ClientHello)) *ClientHello {
		ch := foxioExample()
		mod(ch)
		return ch
	}
	for _, tc := range []struct {
		name string
		ch   *ClientHello
		want string // JA4_a, the first 10 characters
	}{
		{"alpn_http11", base(func(ch *ClientHello) { ch.ALPN = [][]byte{[]byte("http/1.1"), []byte("h2")} }), "t13d1516h1"},
		{"alpn_single_char", base(func(ch *ClientHello) { ch.ALPN = [][]byte{[]byte("x")} }), "t13d1516xx"},
		{"alpn_empty_value", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{}} }), "t13d151600"},
		{"alpn_none", base(func(ch *ClientHello) { ch.ALPN = nil }), "t13d151600"},
		{"alpn_0xAB", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{0xab}} }), "t13d1516ab"},
		{"alpn_0xAB_0xCD", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{0xab, 0xcd}} }), "t13d1516ad"},
		{"alpn_0x30_0xAB", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{0x30, 0xab}} }), "t13d15163b"},
		{"alpn_0x30_0x31_0xAB_0xCD", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{0x30, 0x31, 0xab, 0xcd}} }), "t13d15163d"},
		{"alpn_0x30_0xAB_0xCD_0x31", base(func(ch *ClientHello) { ch.ALPN = [][]byte{{0x30, 0xab, 0xcd, 0x31}} }), "t13d151601"},
		{"no_sni", base(func(ch *ClientHello) { ch.Extensions = ch.Extensions[2:] }), "t13i1514h2"},
		{"grease_not_counted", base(func(ch *ClientHello) {
			ch.CipherSuites = append([]uint16{0x0a0a}, ch.CipherSuites...)
			ch.Extensions = append([]uint16{0xfafa}, ch.Extensions...)
			ch.SupportedVersions = []uint16{0x7a7a, VersionTLS13}
		}), "t13d1516h2"},
		{"legacy_version_only", base(func(ch *ClientHello) { ch.SupportedVersions = nil }), "t12d1516h2"},
		{"only_grease_versions", base(func(ch *ClientHello) { ch.SupportedVersions = []uint16{0x1a1a} }), "t12d1516h2"},
		{"ssl3", base(func(ch *ClientHello) { ch.SupportedVersions = nil; ch.LegacyVersion = VersionSSL30 }), "ts3d1516h2"},
		{"dtls12", base(func(ch *ClientHello) { ch.SupportedVersions = []uint16{0xfefd} }), "td2d1516h2"},
		{"unknown_version", base(func(ch *ClientHello) { ch.SupportedVersions = []uint16{0x7f1c} }), "t00d1516h2"},
		{"counts_capped_99", base(func(ch *ClientHello) {
			for i := range 120 {
				ch.CipherSuites = append(ch.CipherSuites, uint16(0xd100+i))
				ch.Extensions = append(ch.Extensions, uint16(0xe100+i))
			}
		}), "t13d9999h2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendJA4(nil, tc.ch, TransportTCP))
			if got[:10] != tc.want {
				t.Errorf("JA4_a = %s, want %s (JA4 %s)", got[:10], tc.want, got)
			}
			ref, _ := refJA4(tc.ch, TransportTCP)
			if got != ref {
				t.Errorf("JA4 = %s, reference %s", got, ref)
			}
		})
	}
}

func TestJA4Empty(t *testing.T) {
	ch := &ClientHello{LegacyVersion: VersionTLS12, Extensions: []uint16{ExtServerName, ExtALPN}, ALPN: [][]byte{[]byte("h2")}}
	if got, want := string(AppendJA4(nil, ch, TransportTCP)), "t12d0002h2_000000000000_000000000000"; got != want {
		t.Errorf("JA4 = %s, want %s", got, want)
	}
	if got, want := string(AppendJA4R(nil, ch, TransportTCP)), "t12d0002h2__"; got != want {
		t.Errorf("JA4_r = %s, want %s", got, want)
	}
}

func TestJA4SigAlgGREASEIgnored(t *testing.T) {
	a, b := foxioExample(), foxioExample()
	b.SignatureAlgorithms = append([]uint16{0x5a5a}, b.SignatureAlgorithms...)
	if x, y := string(AppendJA4(nil, a, 't')), string(AppendJA4(nil, b, 't')); x != y {
		t.Errorf("GREASE signature algorithm changed JA4: %s vs %s", x, y)
	}
}

func TestJA4AppendsAndZeroAllocs(t *testing.T) {
	ch := foxioExample()
	dst := append(make([]byte, 0, 64), "ja4="...)
	dst = AppendJA4(dst, ch, TransportTCP)
	if got := string(dst); got != "ja4=t13d1516h2_8daaf6152771_e5627efa2ab1" || len(dst)-4 != JA4Len {
		t.Fatalf("got %q", got)
	}
	buf := make([]byte, 0, JA4Len)
	if n := testing.AllocsPerRun(100, func() { buf = AppendJA4(buf[:0], ch, TransportTCP) }); n != 0 {
		t.Errorf("AppendJA4: %v allocs, want 0", n)
	}
	raw := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { raw = AppendJA4R(raw[:0], ch, TransportTCP) }); n != 0 {
		t.Errorf("AppendJA4R: %v allocs, want 0", n)
	}
}
