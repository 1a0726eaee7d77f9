package tlsparse

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"
)

type chCase struct {
	name string
	msg  func(t testing.TB) []byte

	length    int
	groups    []Group
	keyShares []KeyShare
	versions  []uint16
	sni       string
	alpn      []string
	nCiphers  int
	nExts     int
	ech       bool
	pqOffered bool
	ja4       string
}

func golden(name string) func(t testing.TB) []byte {
	return func(t testing.TB) []byte { return loadGolden(t, name) }
}

func fixed(b []byte) func(testing.TB) []byte { return func(testing.TB) []byte { return b } }

var chCases = []chCase{
	{
		name:      "go_X25519MLKEM768",
		msg:       golden("go_mlkem_ch"),
		length:    1508,
		groups:    []Group{GroupX25519MLKEM768, GroupX25519, GroupSecp256r1},
		keyShares: []KeyShare{{GroupX25519MLKEM768, 1216}, {GroupX25519, 32}},
		versions:  []uint16{VersionTLS13, VersionTLS12},
		sni:       "example.com",
		alpn:      []string{"h2", "http/1.1"},
		nCiphers:  13, nExts: 12,
		pqOffered: true,
		ja4:       "t13d1312h2_f57a46bbacb6_ab7e3b40a677",
	},
	{
		name:      "go_after_HRR_secp256r1",
		msg:       golden("go_hrr_ch2"),
		length:    321,
		groups:    []Group{GroupX25519MLKEM768, GroupX25519, GroupSecp256r1},
		keyShares: []KeyShare{{GroupSecp256r1, 65}},
		versions:  []uint16{VersionTLS13, VersionTLS12},
		sni:       "example.com",
		alpn:      []string{"h2", "http/1.1"},
		nCiphers:  13, nExts: 12,
		pqOffered: true,
		ja4:       "t13d1312h2_f57a46bbacb6_ab7e3b40a677",
	},
	{
		name:     "go_TLS12_no_SNI",
		msg:      golden("go_tls12_ch"),
		length:   198,
		groups:   []Group{GroupX25519, GroupSecp256r1},
		versions: []uint16{VersionTLS12},
		nCiphers: 10, nExts: 9,
		ja4: "t12i100900_a8cf61a50a39_a92c7c6a82fe",
	},
	{
		name:   "chrome_like_GREASE_ECH_MLKEM",
		msg:    fixed(chromeLikeClientHello()),
		groups: []Group{0x2a2a, GroupX25519MLKEM768, GroupX25519, GroupSecp256r1, GroupSecp384r1},
		keyShares: []KeyShare{
			{0x2a2a, 1}, {GroupX25519MLKEM768, 1216}, {GroupX25519, 32},
		},
		versions: []uint16{0x9a9a, VersionTLS13, VersionTLS12},
		sni:      "www.example.com",
		alpn:     []string{"h2", "http/1.1"},
		nCiphers: 16, nExts: 18,
		ech:       true,
		pqOffered: true,
		// Chrome 13x's published JA4 for the same suites and extensions.
		ja4: "t13d1516h2_8daaf6152771_d8a2da3f94cd",
	},
	{
		name: "TLS10_no_extensions",
		msg: fixed(buildClientHello(chSpec{
			legacyVersion: VersionTLS10, ciphers: []uint16{0x002f, 0x0035, 0x000a}, noExtensions: true,
		})),
		nCiphers: 3,
		ja4:      "t10i030000_" + "5704bdfc91c6" + "_000000000000",
	},
}

func TestClientHelloParse(t *testing.T) {
	var ch ClientHello // reused across cases on purpose: Parse must reset
	for _, tc := range chCases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.msg(t)
			if err := ch.Parse(msg); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tc.length != 0 && ch.Length != tc.length {
				t.Errorf("Length = %d, want %d", ch.Length, tc.length)
			}
			if ch.Length != len(msg) {
				t.Errorf("Length = %d, message is %d bytes", ch.Length, len(msg))
			}
			if !slices.Equal(ch.SupportedGroups, tc.groups) {
				t.Errorf("SupportedGroups = %v, want %v", ch.SupportedGroups, tc.groups)
			}
			if !slices.Equal(ch.KeyShares, tc.keyShares) {
				t.Errorf("KeyShares = %v, want %v", ch.KeyShares, tc.keyShares)
			}
			if !slices.Equal(ch.SupportedVersions, tc.versions) {
				t.Errorf("SupportedVersions = %x, want %x", ch.SupportedVersions, tc.versions)
			}
			if string(ch.ServerName) != tc.sni {
				t.Errorf("ServerName = %q, want %q", ch.ServerName, tc.sni)
			}
			var alpn []string
			for _, p := range ch.ALPN {
				alpn = append(alpn, string(p))
			}
			if !slices.Equal(alpn, tc.alpn) {
				t.Errorf("ALPN = %q, want %q", alpn, tc.alpn)
			}
			if len(ch.CipherSuites) != tc.nCiphers || len(ch.Extensions) != tc.nExts {
				t.Errorf("%d suites, %d extensions; want %d, %d", len(ch.CipherSuites), len(ch.Extensions), tc.nCiphers, tc.nExts)
			}
			if ch.ECH != tc.ech {
				t.Errorf("ECH = %v, want %v", ch.ECH, tc.ech)
			}
			if got := ch.PQOffered(); got != tc.pqOffered {
				t.Errorf("PQOffered = %v, want %v", got, tc.pqOffered)
			}
			if len(ch.Random) != 32 {
				t.Errorf("len(Random) = %d", len(ch.Random))
			}
			got := string(AppendJA4(nil, &ch, TransportTCP))
			want, _ := refJA4(&ch, TransportTCP)
			if got != want {
				t.Errorf("JA4 = %s, reference implementation says %s", got, want)
			}
			if tc.ja4 != "" && got != tc.ja4 {
				t.Errorf("JA4 = %s, want %s", got, tc.ja4)
			}
		})
	}
}

// TestClientHelloLive parses what today's crypto/tls sends, so a Go upgrade
// that changes the ClientHello cannot hide behind the golden files.
func TestClientHelloLive(t *testing.T) {
	cert := selfSignedCert(t)
	for _, tc := range []struct {
		name   string
		curves []tls.CurveID
		pq     bool
		shares []KeyShare
	}{
		{"X25519MLKEM768", []tls.CurveID{tls.X25519MLKEM768, tls.X25519}, true, []KeyShare{{GroupX25519MLKEM768, 1216}, {GroupX25519, 32}}},
		{"x25519", []tls.CurveID{tls.X25519, tls.CurveP256}, false, []KeyShare{{GroupX25519, 32}}},
		{"P256", []tls.CurveID{tls.CurveP256}, false, []KeyShare{{GroupSecp256r1, 65}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := captureHandshake(t, goClientConfig(tc.curves...), &tls.Config{Certificates: []tls.Certificate{cert}})
			var ch ClientHello
			if err := ch.Parse(findMsg(cli, TypeClientHello)); err != nil {
				t.Fatal(err)
			}
			if ch.PQOffered() != tc.pq || !slices.Equal(ch.KeyShares, tc.shares) {
				t.Errorf("PQOffered %v, KeyShares %v; want %v, %v", ch.PQOffered(), ch.KeyShares, tc.pq, tc.shares)
			}
			var sh ServerHello
			if err := sh.Parse(findMsg(srv, TypeServerHello)); err != nil {
				t.Fatal(err)
			}
			if sh.Version != VersionTLS13 || sh.Group != tc.shares[0].Group || sh.Group.IsPQ() != tc.pq {
				t.Errorf("ServerHello version %x group %v", sh.Version, sh.Group)
			}
		})
	}
}

func TestClientHelloErrors(t *testing.T) {
	good := chromeLikeClientHello()
	corrupt := func(off int, b byte) []byte {
		m := slices.Clone(good)
		m[off] = b
		return m
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"header_only_3", good[:3], ErrTruncated},
		{"body_short", good[:len(good)-1], ErrTruncated},
		{"server_hello", tls13ServerHello(GroupX25519, 32), ErrNotClientHello},
		{"cipher_suites_odd", buildClientHello(chSpec{legacyVersion: VersionTLS12, ciphers: []uint16{1}}) /* patched below */, nil},
		{"extensions_overrun", corrupt(4+2+32+1+32+2+32+2, 0xff), ErrMalformed},
		{"no_random", handshakeMsg(TypeClientHello, []byte{3, 3, 1, 2}), ErrMalformed},
		{"trailing_garbage_after_extensions", func() []byte {
			m := buildClientHello(chSpec{legacyVersion: VersionTLS12, ciphers: []uint16{0x1301}, exts: []ext{{0x1234, nil}}})
			m = append(m, 0)
			m[3]++ // announce the extra byte inside the body
			return m
		}(), ErrMalformed},
		{"bad_sni", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtServerName, []byte{0, 5, 0}}}}), ErrMalformed},
		{"bad_key_share", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtKeyShare, []byte{0, 4, 0, 0x1d, 0, 9}}}}), ErrMalformed},
		{"odd_groups", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtSupportedGroups, []byte{0, 1, 0}}}}), ErrMalformed},
		{"bad_versions", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtSupportedVersions, []byte{3, 3, 4}}}}), ErrMalformed},
		{"bad_alpn", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtALPN, []byte{0, 3, 5, 'h', '2'}}}}), ErrMalformed},
		{"bad_sigalgs", buildClientHello(chSpec{legacyVersion: VersionTLS12, exts: []ext{{ExtSignatureAlgorithms, []byte{0, 3, 4, 3, 8}}}}), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, want := tc.msg, tc.want
			if tc.name == "cipher_suites_odd" {
				// cipher_suites length 3: patch the length prefix and the body.
				msg = slices.Clone(msg)
				off := 4 + 2 + 32 + 1
				msg[off+1] = 3
				msg = slices.Insert(msg, off+4, 0)
				msg[3]++
				want = ErrMalformed
			}
			var ch ClientHello
			err := ch.Parse(msg)
			if !errors.Is(err, want) {
				t.Fatalf("Parse = %v, want %v", err, want)
			}
		})
	}
}

func TestClientHelloTrailingBytesIgnored(t *testing.T) {
	msg := append(chromeLikeClientHello(), 0x16, 0x03, 0x01) // next record's bytes
	var ch ClientHello
	if err := ch.Parse(msg); err != nil {
		t.Fatal(err)
	}
	if ch.Length != len(msg)-3 {
		t.Errorf("Length = %d, want %d", ch.Length, len(msg)-3)
	}
}

func TestClientHelloZeroAllocs(t *testing.T) {
	msgs := [][]byte{chromeLikeClientHello(), loadGolden(t, "go_mlkem_ch"), loadGolden(t, "go_tls12_ch")}
	var ch ClientHello
	for _, m := range msgs { // warm up the reusable slices
		if err := ch.Parse(m); err != nil {
			t.Fatal(err)
		}
	}
	dst := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		for _, m := range msgs {
			if err := ch.Parse(m); err != nil {
				t.Fatal(err)
			}
			dst = AppendJA4(dst[:0], &ch, TransportTCP)
			_ = ch.PQOffered()
			for _, g := range ch.SupportedGroups {
				_ = g.String()
			}
		}
	})
	if allocs != 0 {
		t.Errorf("ClientHello.Parse + AppendJA4 + Group.String: %v allocs/run, want 0", allocs)
	}
}

// TestClientHelloSessionTicket: a non-empty session_ticket offers a TLS 1.2
// session for resumption; an empty one only asks for a new ticket.
func TestClientHelloSessionTicket(t *testing.T) {
	ticket := []byte("opaque ticket bytes")
	for _, tc := range []struct {
		name      string
		exts      []ext
		sidLen    int
		wantTick  string
		wantSIDLn int
	}{
		{"ticket_offered", []ext{{ExtSessionTicket, ticket}}, 32, string(ticket), 32},
		{"empty_ticket_extension", []ext{{ExtSessionTicket, nil}}, 0, "", 0},
		{"no_ticket_extension", []ext{sniExt("a.test")}, 16, "", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ch ClientHello
			msg := buildClientHello(chSpec{legacyVersion: VersionTLS12, sessionIDLen: tc.sidLen, ciphers: []uint16{0xc02f}, exts: tc.exts})
			if err := ch.Parse(msg); err != nil {
				t.Fatal(err)
			}
			if string(ch.SessionTicket) != tc.wantTick || (tc.wantTick == "") != (ch.SessionTicket == nil) || len(ch.SessionID) != tc.wantSIDLn {
				t.Errorf("SessionTicket %q SessionID %d bytes; want %q, %d", ch.SessionTicket, len(ch.SessionID), tc.wantTick, tc.wantSIDLn)
			}
		})
	}
}
