package tlsparse

import (
	"errors"
	"testing"
)

func TestGroupString(t *testing.T) {
	for g, want := range map[Group]string{
		0x0017: "secp256r1", 0x0018: "secp384r1", 0x0019: "secp521r1", 0x001d: "x25519", 0x001e: "x448",
		0x0100: "ffdhe2048", 0x0104: "ffdhe8192", 0x001a: "brainpoolP256r1", 0x0021: "brainpoolP512r1tls13",
		0x0001: "sect163k1", 0x0022: "GC256A", 0x0028: "GC512C", 0x0029: "curveSM2",
		0x11ec: "X25519MLKEM768", 0x11eb: "SecP256r1MLKEM768", 0x11ed: "SecP384r1MLKEM1024", 0x11ee: "curveSM2MLKEM768",
		0x0200: "MLKEM512", 0x0201: "MLKEM768", 0x0202: "MLKEM1024",
		0x6399: "X25519Kyber768Draft00", 0x639a: "SecP256r1Kyber768Draft00",
		0xff01: "arbitrary_explicit_prime_curves", 0xff02: "arbitrary_explicit_char2_curves",
		0x0000: "0x0000", 0x023d: "0x023d", 0x2a2a: "0x2a2a", 0xfafa: "0xfafa", 0xABCD: "0xabcd",
	} {
		if got := g.String(); got != want {
			t.Errorf("Group(%#04x).String() = %q, want %q", uint16(g), got, want)
		}
	}
}

func TestGroupIsPQ(t *testing.T) {
	pq := map[Group]bool{0x11eb: true, 0x11ec: true, 0x11ed: true, 0x11ee: true, 0x0200: true, 0x0201: true, 0x0202: true, 0x6399: true, 0x639a: true}
	for g := range 0x10000 {
		if got := Group(g).IsPQ(); got != pq[Group(g)] {
			t.Errorf("Group(%#04x).IsPQ() = %v", g, got)
		}
	}
}

func TestIsGREASE(t *testing.T) {
	n := 0
	for v := range 0x10000 {
		if IsGREASE(uint16(v)) {
			n++
			if v&0x0f0f != 0x0a0a || v>>8 != v&0xff {
				t.Errorf("IsGREASE(%#04x) = true", v)
			}
		}
	}
	if n != 16 {
		t.Errorf("%d GREASE values, want 16", n)
	}
}

func TestNamesDoNotAllocate(t *testing.T) {
	n := testing.AllocsPerRun(100, func() {
		_ = GroupX25519MLKEM768.String()
		_ = Group(0x3a3a).String()
		_ = CipherSuiteName(0x1301)
		_ = VersionName(VersionTLS13)
		_ = AlertName(40)
	})
	if n != 0 {
		t.Errorf("%v allocs, want 0", n)
	}
}

func TestCipherSuiteName(t *testing.T) {
	for id, want := range map[uint16]string{
		0x1301: "TLS_AES_128_GCM_SHA256", 0x1302: "TLS_AES_256_GCM_SHA384", 0x1303: "TLS_CHACHA20_POLY1305_SHA256",
		0x1304: "TLS_AES_128_CCM_SHA256", 0x1305: "TLS_AES_128_CCM_8_SHA256", 0x1306: "TLS_AEGIS_256_SHA384",
		0xc02f: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xc02b: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		0xcca8: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0x009c: "TLS_RSA_WITH_AES_128_GCM_SHA256",
		0x002f: "TLS_RSA_WITH_AES_128_CBC_SHA", 0x000a: "TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x0000: "TLS_NULL_WITH_NULL_NULL",
		0x00ff: "TLS_EMPTY_RENEGOTIATION_INFO_SCSV", 0x5600: "TLS_FALLBACK_SCSV", 0xc0aa: "TLS_PSK_DHE_WITH_AES_128_CCM_8",
		0xc106: "TLS_GOSTR341112_256_WITH_MAGMA_MGM_S", 0xd005: "TLS_ECDHE_PSK_WITH_AES_128_CCM_SHA256",
		0x00c6: "TLS_SM4_GCM_SM3",
		0x0a0a: "0x0a0a", 0xd004: "0xd004", 0xcc13: "0xcc13", 0xffff: "0xffff", 0x001c: "0x001c",
	} {
		if got := CipherSuiteName(id); got != want {
			t.Errorf("CipherSuiteName(%#04x) = %q, want %q", id, got, want)
		}
	}
}

func TestVersionAndAlertNames(t *testing.T) {
	for v, want := range map[uint16]string{0x0304: "TLS1.3", 0x0303: "TLS1.2", 0x0302: "TLS1.1", 0x0301: "TLS1.0", 0x0300: "SSL3.0", 0x7f17: "0x7f17", 0xfefd: "0xfefd"} {
		if got := VersionName(v); got != want {
			t.Errorf("VersionName(%#04x) = %q, want %q", v, got, want)
		}
	}
	for d, want := range map[uint8]string{0: "close_notify", 40: "handshake_failure", 47: "illegal_parameter", 70: "protocol_version",
		80: "internal_error", 112: "unrecognized_name", 120: "no_application_protocol", 121: "ech_required", 2: "0x02", 255: "0xff"} {
		if got := AlertName(d); got != want {
			t.Errorf("AlertName(%d) = %q, want %q", d, got, want)
		}
	}
}

func TestRecordHeader(t *testing.T) {
	ch := chromeLikeClientHello()
	rec := append([]byte{ContentHandshake, 3, 1, byte(len(ch) >> 8), byte(len(ch))}, ch...)
	for _, tc := range []struct {
		name  string
		b     []byte
		want  RecordHeader
		err   error
		looks bool
	}{
		{"client_hello", rec, RecordHeader{ContentHandshake, VersionTLS10, len(ch)}, nil, true},
		{"header_only", rec[:5], RecordHeader{ContentHandshake, VersionTLS10, len(ch)}, nil, true},
		{"server_hello", []byte{22, 3, 3, 0, 90, 2}, RecordHeader{22, VersionTLS12, 90}, nil, true},
		{"certificate_record", []byte{22, 3, 3, 0, 90, 11}, RecordHeader{22, VersionTLS12, 90}, nil, false},
		{"alert", []byte{21, 3, 3, 0, 2, 2, 40}, RecordHeader{21, VersionTLS12, 2}, nil, false},
		{"short", rec[:4], RecordHeader{}, ErrTruncated, false},
		{"http", []byte("GET / HTTP/1.1\r\n"), RecordHeader{'G', 0x4554, 0x202f}, ErrMalformed, false},
		{"bad_major", []byte{22, 2, 0, 0, 10, 1}, RecordHeader{22, 0x0200, 10}, ErrMalformed, false},
		{"too_long", []byte{22, 3, 3, 0x48, 0x01, 1}, RecordHeader{22, VersionTLS12, 0x4801}, ErrMalformed, false},
		{"zero_length", []byte{22, 3, 3, 0, 0}, RecordHeader{22, VersionTLS12, 0}, nil, false},
		{"tls13_record_version_0305", []byte{22, 3, 5, 0, 10, 1}, RecordHeader{22, 0x0305, 10}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseRecordHeader(tc.b)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if h != tc.want {
				t.Errorf("header = %+v, want %+v", h, tc.want)
			}
			if got := LooksLikeTLS(tc.b); got != tc.looks {
				t.Errorf("LooksLikeTLS = %v, want %v", got, tc.looks)
			}
		})
	}
}

func TestParseHandshakeHeader(t *testing.T) {
	typ, n, err := ParseHandshakeHeader([]byte{1, 0, 2, 0})
	if typ != 1 || n != 4+512 || err != nil {
		t.Errorf("got %d %d %v", typ, n, err)
	}
	if _, _, err := ParseHandshakeHeader([]byte{1, 0}); !errors.Is(err, ErrTruncated) {
		t.Errorf("short header: %v", err)
	}
}

func TestRegistrySorted(t *testing.T) {
	for i := 1; i < len(registry); i++ {
		if registry[i-1].g >= registry[i].g {
			t.Fatalf("registry out of order at %#04x", registry[i].g)
		}
	}
}

func TestParseGroup(t *testing.T) {
	for in, want := range map[string]Group{
		"x25519": GroupX25519, "X25519": GroupX25519, " X25519 ": GroupX25519,
		"prime256v1": GroupSecp256r1, "P-256": GroupSecp256r1, "CurveP256": GroupSecp256r1, "secp256r1": GroupSecp256r1,
		"P-384": GroupSecp384r1, "p521": GroupSecp521r1,
		"X25519MLKEM768": GroupX25519MLKEM768, "x25519mlkem768": GroupX25519MLKEM768,
		"SecP256r1MLKEM768": GroupSecP256r1MLKEM768, "MLKEM1024": GroupMLKEM1024,
		"X25519Kyber768Draft00": GroupX25519Kyber768Draft00, "x25519kyber768": GroupX25519Kyber768Draft00,
		"0x11ec": GroupX25519MLKEM768, "0X11EC": GroupX25519MLKEM768, "0x1234": 0x1234,
		"brainpoolP256r1": 0x001a, "ffdhe3072": 0x0101,
	} {
		if got, ok := ParseGroup(in); !ok || got != want {
			t.Errorf("ParseGroup(%q) = %#04x, %v; want %#04x", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "nope", "0x", "0x12345", "0xzz", "X25519MLKEM"} {
		if g, ok := ParseGroup(in); ok {
			t.Errorf("ParseGroup(%q) = %#04x, want not ok", in, g)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ParseGroup("X25519MLKEM768"); ParseGroup("x25519") }); n != 0 {
		t.Errorf("ParseGroup allocates %v times", n)
	}
}
