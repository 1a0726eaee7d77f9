package tlsparse

import (
	"errors"
	"slices"
	"testing"
)

var shCases = []struct {
	name        string
	msg         func(t testing.TB) []byte
	length      int
	version     uint16
	cipher      uint16
	hrr         bool
	group       Group
	keyShareLen int
	exts        []uint16
	alpn        string
}{
	{"go_X25519MLKEM768", golden("go_mlkem_sh"), 1210, VersionTLS13, 0x1301, false, GroupX25519MLKEM768, 1120, []uint16{ExtSupportedVersions, ExtKeyShare}, ""},
	{"go_HRR_secp256r1", golden("go_hrr_hrr"), 88, VersionTLS13, 0x1301, true, GroupSecp256r1, 0, []uint16{ExtSupportedVersions, ExtKeyShare}, ""},
	{"go_after_HRR", golden("go_hrr_sh"), 155, VersionTLS13, 0x1301, false, GroupSecp256r1, 65, []uint16{ExtSupportedVersions, ExtKeyShare}, ""},
	{"go_TLS12", golden("go_tls12_sh"), 59, VersionTLS12, 0xc02b, false, 0, 0, []uint16{ExtRenegotiationInfo, ExtExtendedMasterSecret, ExtECPointFormats}, ""},
	{"synthetic_x25519", fixed(tls13ServerHello(GroupX25519, 32)), 0, VersionTLS13, 0x1301, false, GroupX25519, 32, []uint16{ExtSupportedVersions, ExtKeyShare}, ""},
	{"synthetic_TLS12_ALPN", fixed(buildServerHello(shSpec{version: VersionTLS12, cipher: 0xc02f, exts: []ext{{ExtALPN, []byte{0, 3, 2, 'h', '2'}}}})), 0, VersionTLS12, 0xc02f, false, 0, 0, []uint16{ExtALPN}, "h2"},
	{"synthetic_TLS12_no_extensions", fixed(buildServerHello(shSpec{version: VersionTLS12, cipher: 0x009c})), 0, VersionTLS12, 0x009c, false, 0, 0, nil, ""},
}

func TestServerHelloParse(t *testing.T) {
	var sh ServerHello
	for _, tc := range shCases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.msg(t)
			if err := sh.Parse(msg); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if sh.Length != len(msg) || (tc.length != 0 && sh.Length != tc.length) {
				t.Errorf("Length = %d, want %d (message %d)", sh.Length, tc.length, len(msg))
			}
			if sh.Version != tc.version || sh.CipherSuite != tc.cipher || sh.HRR != tc.hrr ||
				sh.Group != tc.group || sh.KeyShareLen != tc.keyShareLen || string(sh.ALPN) != tc.alpn {
				t.Errorf("got version %x cipher %x hrr %v group %v kslen %d alpn %q", sh.Version, sh.CipherSuite, sh.HRR, sh.Group, sh.KeyShareLen, sh.ALPN)
			}
			if !slices.Equal(sh.Extensions, tc.exts) {
				t.Errorf("Extensions = %x, want %x", sh.Extensions, tc.exts)
			}
		})
	}
}

func TestServerHelloErrors(t *testing.T) {
	good := tls13ServerHello(GroupX25519, 32)
	hrrBadShare := buildServerHello(shSpec{version: VersionTLS12, random: helloRetryRequestRandom, cipher: 0x1301,
		exts: []ext{{ExtKeyShare, []byte{0, 0x17, 0, 1, 0}}}})
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short", good[:len(good)-2], ErrTruncated},
		{"client_hello", chromeLikeClientHello(), ErrNotServerHello},
		{"no_cipher", handshakeMsg(TypeServerHello, make([]byte, 2+32+1)), ErrMalformed},
		{"versions_long", buildServerHello(shSpec{version: VersionTLS12, exts: []ext{{ExtSupportedVersions, []byte{3, 4, 0}}}}), ErrMalformed},
		{"key_share_short", buildServerHello(shSpec{version: VersionTLS12, exts: []ext{{ExtKeyShare, []byte{0, 0x1d, 0, 32}}}}), ErrMalformed},
		{"hrr_key_share_with_data", hrrBadShare, ErrMalformed},
		{"alpn_two_protocols", buildServerHello(shSpec{version: VersionTLS12, exts: []ext{{ExtALPN, []byte{0, 4, 1, 'a', 1, 'b'}}}}), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sh ServerHello
			if err := sh.Parse(tc.msg); !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestServerHelloZeroAllocs(t *testing.T) {
	msgs := [][]byte{loadGolden(t, "go_mlkem_sh"), loadGolden(t, "go_hrr_hrr"), loadGolden(t, "go_tls12_sh")}
	var sh ServerHello
	for _, m := range msgs {
		if err := sh.Parse(m); err != nil {
			t.Fatal(err)
		}
	}
	ske := loadGolden(t, "go_tls12_ske")
	allocs := testing.AllocsPerRun(100, func() {
		for _, m := range msgs {
			if err := sh.Parse(m); err != nil {
				t.Fatal(err)
			}
			if sh.Group != 0 { // 0 means absent; unregistered values may allocate
				_ = sh.Group.String()
			}
			_ = CipherSuiteName(sh.CipherSuite)
			_ = VersionName(sh.Version)
		}
		if _, _, err := ParseServerKeyExchangeGroup(ske); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ServerHello.Parse + names + ParseServerKeyExchangeGroup: %v allocs/run, want 0", allocs)
	}
}

func TestParseServerKeyExchangeGroup(t *testing.T) {
	explicit := handshakeMsg(TypeServerKeyExchange, []byte{1, 0, 0})
	for _, tc := range []struct {
		name    string
		msg     func(testing.TB) []byte
		group   Group
		ok      bool
		wantErr error
	}{
		{"go_ECDHE_P256", golden("go_tls12_ske"), GroupSecp256r1, true, nil},
		{"ECDHE_x25519", fixed(ecdheSKE(GroupX25519, 32)), GroupX25519, true, nil},
		{"ECDHE_secp384r1", fixed(ecdheSKE(GroupSecp384r1, 97)), GroupSecp384r1, true, nil},
		{"DHE_2048", fixed(dheSKE(256)), 0, false, nil},
		// A 6144-bit DHE prime has length 0x0300: its first byte is 3 like
		// named_curve, and only the layout check tells them apart.
		{"DHE_6144_looks_like_named_curve", fixed(dheSKE(768)), 0, false, nil},
		{"explicit_prime_curve", fixed(explicit), 0, false, nil},
		{"garbage", fixed(handshakeMsg(TypeServerKeyExchange, []byte{3, 0})), 0, false, ErrMalformed},
		{"empty_body", fixed(handshakeMsg(TypeServerKeyExchange, nil)), 0, false, ErrMalformed},
		{"truncated", fixed(ecdheSKE(GroupX25519, 32)[:20]), 0, false, ErrTruncated},
		{"wrong_type", fixed(tls13ServerHello(GroupX25519, 32)), 0, false, ErrNotServerKeyExchange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, ok, err := ParseServerKeyExchangeGroup(tc.msg(t))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if g != tc.group || ok != tc.ok {
				t.Errorf("got %v %v, want %v %v", g, ok, tc.group, tc.ok)
			}
		})
	}
}

func TestIsECDHECipherSuite(t *testing.T) {
	for id, want := range map[uint16]bool{
		0xc02b: true, 0xc02f: true, 0xcca8: true, 0xc018: true, // ECDH_anon
		0x1301: false, 0x009e: false, 0x002f: false, 0xc004: false, // ECDH (static)
		0x0a0a: false,
	} {
		if got := IsECDHECipherSuite(id); got != want {
			t.Errorf("IsECDHECipherSuite(%#04x) = %v, want %v", id, got, want)
		}
	}
}

// TestServerHelloResumption checks what tells a resumed session: the
// legacy_session_id (TLS 1.2 echoes the client's on resumption) and the
// pre_shared_key extension (TLS 1.3), with or without a key_share.
func TestServerHelloResumption(t *testing.T) {
	ks := keyShareExt(KeyShare{GroupX25519, 32}).data[2:] // one ServerHello KeyShareEntry
	sid := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name      string
		msg       []byte
		sessionID []byte
		psk       bool
		group     Group
	}{
		{"TLS12_echoed_session_id", buildServerHello(shSpec{version: VersionTLS12, sessionID: sid, cipher: 0xc02f, exts: []ext{}}), sid, false, 0},
		{"TLS12_empty_session_id", buildServerHello(shSpec{version: VersionTLS12, sessionID: []byte{}, cipher: 0xc02f}), nil, false, 0},
		{"TLS13_psk_dhe_ke", buildServerHello(shSpec{version: VersionTLS12, cipher: 0x1301, exts: []ext{
			{ExtSupportedVersions, []byte{3, 4}}, {ExtKeyShare, ks}, {ExtPreSharedKey, []byte{0, 0}}}}), make([]byte, 32), true, GroupX25519},
		{"TLS13_psk_ke", buildServerHello(shSpec{version: VersionTLS12, cipher: 0x1301, exts: []ext{
			{ExtSupportedVersions, []byte{3, 4}}, {ExtPreSharedKey, []byte{0, 1}}}}), make([]byte, 32), true, 0},
		{"TLS13_full", tls13ServerHello(GroupX25519, 32), make([]byte, 32), false, GroupX25519},
		{"go_TLS12_full", loadGolden(t, "go_tls12_sh"), nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sh ServerHello
			if err := sh.Parse(tc.msg); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tc.name == "go_TLS12_full" {
				tc.sessionID = sh.SessionID // Go picks a random one; only its length is fixed
				if len(sh.SessionID) != 32 && len(sh.SessionID) != 0 {
					t.Errorf("len(SessionID) = %d", len(sh.SessionID))
				}
			}
			if string(sh.SessionID) != string(tc.sessionID) || sh.PSK != tc.psk || sh.Group != tc.group {
				t.Errorf("SessionID %x PSK %v Group %v; want %x %v %v", sh.SessionID, sh.PSK, sh.Group, tc.sessionID, tc.psk, tc.group)
			}
		})
	}
}

func TestIsDHECipherSuite(t *testing.T) {
	for id, want := range map[uint16]bool{
		0x009e: true, 0x0033: true, 0x0018: true, 0xccaa: true, // DHE_RSA, DH_anon, DHE_RSA_CHACHA20
		0xc02f: false, 0x002f: false, 0x1301: false, 0x000d: false, // ECDHE, RSA, TLS 1.3, static DH
		0x0a0a: false,
	} {
		if got := IsDHECipherSuite(id); got != want {
			t.Errorf("IsDHECipherSuite(%#04x) = %v, want %v", id, got, want)
		}
	}
	if !KnownCipherSuite(0x002f) || KnownCipherSuite(0x0a0a) {
		t.Error("KnownCipherSuite: 0x002f must be known, GREASE 0x0a0a not")
	}
}
