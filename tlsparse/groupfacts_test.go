package tlsparse

import (
	"crypto/tls"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// TestGroupFacts: the registry's share sizes against the published values
// (FIPS 203 for ML-KEM, draft-ietf-tls-ecdhe-mlkem for the hybrids, RFC
// 8446 for ECDH), every common group has them, and OpenSSL's spelling of
// each common group parses back to it.
func TestGroupFacts(t *testing.T) {
	for _, tc := range []struct {
		g              Group
		client, server int
	}{
		{GroupX25519MLKEM768, 1216, 1120},
		{GroupSecP256r1MLKEM768, 1249, 1153},
		{GroupSecP384r1MLKEM1024, 1665, 1665},
		{GroupMLKEM768, 1184, 1088},
		{GroupX25519, 32, 32},
		{GroupSecp256r1, 65, 65},
		{GroupFFDHE2048, 256, 256},
		{GroupFFDHE8192, 1024, 1024},
		{GroupMLKEM512, 800, 768},
		{GroupMLKEM1024, 1568, 1568},
		{GroupCurveSM2MLKEM768, 1249, 1153},
		{GroupX25519Kyber768Draft00, 1216, 1120},
		{GroupSecP256r1Kyber768Draft00, 1249, 1153},
		{GroupX448, 56, 56},
		{GroupSecp384r1, 97, 97},
		{GroupSecp521r1, 133, 133},
		{GroupBrainpoolP512r1TLS13, 129, 129},
		{GroupCurveSM2, 0, 0}, // no TLS 1.3 share size registered
		{0x2a2a, 0, 0},        // GREASE
	} {
		if c, s := tc.g.ClientShareSize(), tc.g.ServerShareSize(); c != tc.client || s != tc.server {
			t.Errorf("%v: client %d server %d, want %d %d", tc.g, c, s, tc.client, tc.server)
		}
	}
	for g, want := range map[Group]string{
		GroupX25519: "X25519", GroupX448: "X448", GroupSecp256r1: "P-256", GroupSecp384r1: "P-384", GroupSecp521r1: "P-521",
		GroupX25519MLKEM768: "X25519MLKEM768", GroupFFDHE2048: "ffdhe2048", 0x1234: "0x1234",
	} {
		if got := g.OpenSSLName(); got != want {
			t.Errorf("%v: OpenSSL name %q, want %q", g, got, want)
		}
	}
	for _, g := range CommonGroups {
		if g.ClientShareSize() == 0 || g.ServerShareSize() == 0 {
			t.Errorf("%v: no share size", g)
		}
		if back, ok := ParseGroup(g.OpenSSLName()); !ok || back != g {
			t.Errorf("%v: OpenSSL name %q parses to %v %v", g, g.OpenSSLName(), back, ok)
		}
	}
}

// TestGoGroups: GoGroups is what crypto/tls offers when asked for every
// group it implements, in any order: its own fixed preference.
func TestGoGroups(t *testing.T) {
	curves := make([]tls.CurveID, len(GoGroups))
	for i, g := range GoGroups {
		curves[len(curves)-1-i] = tls.CurveID(g) // reversed: Go's order wins
	}
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		cl := tls.Client(c, &tls.Config{ServerName: "pqwatch.test", CurvePreferences: curves, MinVersion: tls.VersionTLS13})
		_ = cl.SetDeadline(time.Now().Add(5 * time.Second))
		_ = cl.Handshake()
		c.Close()
	}()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, msg); err != nil {
		t.Fatal(err)
	}
	var ch ClientHello
	if err := ch.Parse(msg); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.SupportedGroups, GoGroups) {
		t.Errorf("crypto/tls offers %v for every group it implements, GoGroups is %v", ch.SupportedGroups, GoGroups)
	}
}
