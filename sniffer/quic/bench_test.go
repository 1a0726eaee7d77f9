package quic

import (
	"net/netip"
	"testing"
)

// BenchmarkDecryptInitial measures header protection removal and AES-GCM
// decryption of the RFC 9001 1200-byte client Initial with cached keys.
func BenchmarkDecryptInitial(b *testing.B) {
	ck, _, err := DeriveInitialKeys(Version1, unhex(b, rfcDCID))
	if err != nil {
		b.Fatal(err)
	}
	pkt := unhex(b, rfcClientV1)
	buf := make([]byte, 0, 1500)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		h, err := ParseLongHeader(pkt)
		if err != nil {
			b.Fatal(err)
		}
		if _, buf, _, err = ck.Open(buf, pkt, &h, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDatagramInitial measures a client Initial of a tracked connection
// through the whole ConnTable path: lookup, decryption, frames, reassembly.
func BenchmarkDatagramInitial(b *testing.B) {
	tr := NewConnTable(Config{})
	tc := newTestConn(b, Version1, "bench-cid")
	tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
	pkt := tc.client(nil, []byte{FrameACK, 0, 0, 0, 0}, cryptoFrame(0, handshakeMsg(1, 100)[:50]))
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		tr.Datagram(t0, cliAddr, srvAddr, pkt)
	}
}

// BenchmarkDatagramNotQUIC measures the rejection of non-QUIC UDP.
func BenchmarkDatagramNotQUIC(b *testing.B) {
	tr := NewConnTable(Config{})
	dns := unhex(b, "abcd01000001000000000000076578616d706c6503636f6d0000010001")
	dst := netip.MustParseAddrPort("192.0.2.53:53")
	b.SetBytes(int64(len(dns)))
	b.ReportAllocs()
	for b.Loop() {
		tr.Datagram(t0, cliAddr, dst, dns)
	}
}

// BenchmarkDeriveInitialKeys measures the per-new-connection key derivation.
func BenchmarkDeriveInitialKeys(b *testing.B) {
	dcid := unhex(b, rfcDCID)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DeriveInitialKeys(Version1, dcid); err != nil {
			b.Fatal(err)
		}
	}
}
