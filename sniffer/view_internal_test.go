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

// TestQUICView: a QUIC record's View is its ClientHello's random, the
// client's first DCID and the TTL of the datagram that carried byte 0.
func TestQUICView(t *testing.T) {
	ch := quicHello(tlsparse.TypeClientHello, func(b *cryptobyte.Builder) {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
	}, map[uint16][]byte{tlsparse.ExtSupportedVersions: {2, 3, 4}}, tlsparse.ExtSupportedVersions)
	for i := range 32 {
		ch[6+i] = byte(i + 1)
	}
	c := &quic.Conn{Client: netip.MustParseAddrPort("10.0.0.2:50000"), Server: netip.MustParseAddrPort("10.0.0.1:443"),
		FirstTS: time.Unix(1, 0), ClientHello: ch, ClientHelloStarted: true, DCIDLen: 8, TTL: 57}
	copy(c.DCID[:], "\x01\x02\x03\x04\x05\x06\x07\x08")
	for _, known := range []bool{true, false} {
		var got *record.Handshake
		s := New(Config{OnRecord: func(r *record.Handshake) { got = r }})
		if !known {
			c.ClientHello, c.ClientHelloTruncated = nil, true // never completed: no random
		}
		s.quicConn(c)
		if got == nil {
			t.Fatal("no record")
		}
		v := got.View
		if v.Known != known || v.TTL != 57 || v.DCID != c.DCID || v.DCIDLen != 8 || v.Seq != 0 {
			t.Errorf("known %v: view %+v", known, v)
		}
		if known && (v.Random[0] != 1 || v.Random[31] != 32) {
			t.Errorf("random %x", v.Random)
		}
	}
}
