package tlsparse

import "testing"

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
	} {
		if c, s := tc.g.ClientShareSize(), tc.g.ServerShareSize(); c != tc.client || s != tc.server {
			t.Errorf("%v: client %d server %d, want %d %d", tc.g, c, s, tc.client, tc.server)
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
