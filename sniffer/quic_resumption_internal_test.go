package sniffer

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer/quic"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// quicHello is a handshake message of type typ: legacy version, a zero
// random, an empty session_id, then body and the extensions.
func quicHello(typ uint8, body func(b *cryptobyte.Builder), exts map[uint16][]byte, order ...uint16) []byte {
	var b cryptobyte.Builder
	b.AddUint8(typ)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32))
		b.AddUint8(0)
		body(b)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, t := range order {
				b.AddUint16(t)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(exts[t]) })
			}
		})
	})
	return b.BytesOrPanic()
}

// TestQUICResumption: a QUIC record says resumed when the ServerHello
// accepted a pre-shared key, and why it has no group when it has none.
func TestQUICResumption(t *testing.T) {
	ch := quicHello(tlsparse.TypeClientHello, func(b *cryptobyte.Builder) {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
	}, map[uint16][]byte{tlsparse.ExtSupportedVersions: {2, 3, 4}, tlsparse.ExtSupportedGroups: {0, 2, 0, 0x1d}}, tlsparse.ExtSupportedVersions, tlsparse.ExtSupportedGroups)
	sh := func(exts ...uint16) []byte {
		return quicHello(tlsparse.TypeServerHello, func(b *cryptobyte.Builder) {
			b.AddUint16(0x1301)
			b.AddUint8(0)
		}, map[uint16][]byte{
			tlsparse.ExtSupportedVersions: {3, 4},
			tlsparse.ExtKeyShare:          append([]byte{0, 0x1d, 0, 32}, make([]byte, 32)...),
			tlsparse.ExtPreSharedKey:      {0, 0},
		}, exts...)
	}
	for _, tc := range []struct {
		name    string
		sh      []byte
		group   string
		missing string
		resumed bool
	}{
		{"full handshake", sh(tlsparse.ExtSupportedVersions, tlsparse.ExtKeyShare), "x25519", "", false},
		{"psk_dhe_ke", sh(tlsparse.ExtSupportedVersions, tlsparse.ExtKeyShare, tlsparse.ExtPreSharedKey), "x25519", "", true},
		{"psk_ke", sh(tlsparse.ExtSupportedVersions, tlsparse.ExtPreSharedKey), "", record.GroupMissingNoKeyExchange, true},
		{"no key_share, no PSK", sh(tlsparse.ExtSupportedVersions), "", record.GroupMissingUnknown, false},
		{"malformed ServerHello", []byte{tlsparse.TypeServerHello, 0, 0, 3, 3, 3, 0}, "", record.GroupMissingUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *record.Handshake
			s := New(Config{OnRecord: func(r *record.Handshake) { got = r }})
			s.quicConn(&quic.Conn{Client: netip.MustParseAddrPort("10.0.0.2:50000"), Server: netip.MustParseAddrPort("10.0.0.1:443"),
				FirstTS: time.Unix(1, 0), ClientHello: ch, ServerHello: tc.sh, ClientHelloStarted: true})
			if got == nil {
				t.Fatal("no record")
			}
			if got.Outcome != record.OutcomeOK || got.Group != tc.group || got.GroupMissing != tc.missing || got.Resumed != tc.resumed {
				t.Errorf("outcome %s group %q group_missing %q resumed %v; want ok %q %q %v", got.Outcome, got.Group, got.GroupMissing, got.Resumed, tc.group, tc.missing, tc.resumed)
			}
		})
	}
}
