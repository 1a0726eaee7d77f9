package e2e

import (
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestQUICFirstInitialNotCaptured covers a capture that missed the first of
// the two Initial packets of a hybrid ClientHello (tcpdump drops, a capture
// started mid-handshake, asymmetric routing). A QUIC record needs CRYPTO data
// from offset 0 that starts a ClientHello: the second half alone is exactly
// what anyone can forge (Initial keys derive from the public DCID), so it is
// no record, and it is counted as quic_no_client_hello.
//
// No root or network needed: the packets are built here and fed to the
// sniffer as Ethernet frames.
func TestQUICFirstInitialNotCaptured(t *testing.T) {
	ch := goClientHello(t)
	dcid := []byte{0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08}
	ck, _ := initialKeys(t, 1, dcid)
	half := len(ch) / 2
	second := ck.seal(1, dcid, []byte{1, 2, 3, 4}, 1, appendCrypto(nil, uint64(half), ch[half:]), 1200)

	client := netip.MustParseAddrPort("192.0.2.10:50000")
	server := netip.MustParseAddrPort("192.0.2.1:443")
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{OnRecord: func(h *record.Handshake) { recs = append(recs, h) }})
	s.Packet(ts, sniffer.LinkEthernet, udpFrame(client, server, second))
	s.Flush()

	st := s.Stats()
	if len(recs) != 0 {
		js, _ := json.Marshal(recs[0])
		t.Fatalf("%d records, want none; first: %s", len(recs), js)
	}
	if st.QUIC["initial_packets"] != 1 || st.Errors["quic_no_client_hello"] != 1 {
		t.Errorf("quic stats %v errors %v: want the Initial decrypted and counted quic_no_client_hello", nonZero(st.QUIC), st.Errors)
	}
}

// udpFrame wraps payload in Ethernet, IPv4 and UDP headers.
func udpFrame(src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 14, 14+20+8+len(payload))
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[8] = 64
	ip[9] = 17
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	b = append(b, ip...)
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	b = append(b, udp...)
	return append(b, payload...)
}
