package e2e

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// TestGarbageUDP sends a bounded stream of hostile UDP datagrams over
// loopback while tcpdump captures them, then reads the capture with pqwatch:
// random bytes, QUIC-looking long headers of every version and type with
// random bodies, short headers, and Initial packets that really authenticate
// (sealed with the keys of their own DCID) but carry random frames, bogus
// CRYPTO offsets, or a real ClientHello answered by garbage "server"
// Initials. Everything must be counted by reason and nothing may panic.
func TestGarbageUDP(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "tcpdump")

	port := freePort(t)
	srv, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// Drain both sockets so nothing queues up; the contents do not matter.
	for _, c := range []net.PacketConn{srv, cli} {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, _, err := c.ReadFrom(buf); err != nil {
					return
				}
			}
		}()
	}

	capture := testenv.StartCapture(t, "", "lo", fmt.Sprintf("udp port %d", port))

	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("PQWATCH_E2E_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (PQWATCH_E2E_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	const rounds = 300 // bounded: about 1300 datagrams
	sent := 0
	send := func(from net.PacketConn, to net.Addr, b []byte) {
		if _, err := from.WriteTo(b, to); err != nil {
			t.Fatalf("send: %v", err)
		}
		sent++
	}
	cliAddr, srvAddr := cli.LocalAddr(), srv.LocalAddr()

	ch := goClientHello(t)
	var realDCIDs int
	// First, before any Initial makes the address pair a tracked
	// connection, a datagram that cannot start a QUIC packet (high bit
	// clear): not_quic must count it whatever the seed. Later garbage on the
	// same pair may count as a short-header packet of the connection.
	first := randBytes(rng, 1+rng.IntN(1500))
	first[0] = first[0]&0x7f | 0x01
	send(cli, srvAddr, first)
	for i := range rounds {
		// Plain garbage both ways.
		send(cli, srvAddr, randBytes(rng, 1+rng.IntN(1500)))
		send(srv, cliAddr, randBytes(rng, 1+rng.IntN(1500)))
		// A long header of a random version and type, random body.
		send(cli, srvAddr, randomLongHeader(rng))
		// An Initial that authenticates but holds garbage.
		dcid := randBytes(rng, 8+rng.IntN(13))
		version := uint32(1)
		if rng.IntN(3) == 0 {
			version = 0x6b3343cf // QUIC v2
		}
		ck, sk := initialKeys(t, version, dcid)
		scid := randBytes(rng, rng.IntN(21))
		switch i % 4 {
		case 0: // random frames; and the same packet with one bit flipped
			pkt := ck.seal(version, dcid, scid, 0, randBytes(rng, 1+rng.IntN(1100)), 1200)
			send(cli, srvAddr, pkt)
			bad := append([]byte(nil), pkt...)
			bad[len(bad)-1-rng.IntN(100)] ^= 1 << rng.IntN(8)
			send(cli, srvAddr, bad)
		case 1: // CRYPTO frames at wild offsets, with wild lengths
			var f []byte
			for range 1 + rng.IntN(4) {
				off := rng.Uint64() >> (2 + rng.IntN(62))
				f = appendCrypto(f, off, randBytes(rng, rng.IntN(300)))
			}
			send(cli, srvAddr, ck.seal(version, dcid, scid, uint64(rng.IntN(4)), f, 1200))
		case 2: // a ClientHello that claims 16 MiB, then garbage
			f := appendCrypto(nil, 0, append([]byte{1, 0xff, 0xff, 0xff}, randBytes(rng, 600)...))
			send(cli, srvAddr, ck.seal(version, dcid, scid, 0, f, 1200))
		case 3: // a real ClientHello over two Initials, answered by garbage
			realDCIDs++
			half := len(ch) / 2
			send(cli, srvAddr, ck.seal(version, dcid, scid, 1, appendCrypto(nil, uint64(half), ch[half:]), 1200))
			send(cli, srvAddr, ck.seal(version, dcid, scid, 0, appendCrypto(nil, 0, ch[:half]), 1200))
			sScid := randBytes(rng, 8)
			switch rng.IntN(3) {
			case 0: // random frames
				send(srv, cliAddr, sk.seal(version, scid, sScid, 0, randBytes(rng, 1+rng.IntN(900)), 0))
			case 1: // a "ServerHello" of random bytes
				send(srv, cliAddr, sk.seal(version, scid, sScid, 0, appendCrypto(nil, 0, append([]byte{2, 0, 0, 200}, randBytes(rng, 200)...)), 0))
			case 2: // CONNECTION_CLOSE with a random code
				f := appendVarint([]byte{0x1c}, rng.Uint64()>>2)
				f = appendVarint(appendVarint(f, 0), 0)
				send(srv, cliAddr, sk.seal(version, scid, sScid, 0, f, 0))
			}
		}
	}
	settle()
	capture.Stop()
	keep(t, capture.File, "garbage.pcap")

	recs, fs, st := readCapture(t, capture.File)
	q := st.QUIC
	t.Logf("sent %d datagrams; captured %d packets (%d UDP); records %d; errors %v; quic %v",
		sent, fs.Packets, st.UDPPackets, st.Records, st.Errors, nonZero(q))

	complete := fs.Packets == uint64(sent)
	if !complete {
		t.Logf("capture holds %d of %d datagrams sent (tcpdump dropped some)", fs.Packets, sent)
	}
	if q["datagrams"] != st.UDPPackets || st.UDPPackets != fs.Packets {
		t.Errorf("quic datagrams %d, UDP packets %d, captured %d: want all equal", q["datagrams"], st.UDPPackets, fs.Packets)
	}
	if q["not_quic"] == 0 {
		t.Error("not_quic 0 after random datagrams")
	}
	if q["decrypt_failed"] == 0 {
		t.Error("decrypt_failed 0 after Initials with a flipped bit")
	}
	if q["unknown_version"] == 0 || q["malformed"] == 0 {
		t.Errorf("unknown_version %d malformed %d: random long headers not counted", q["unknown_version"], q["malformed"])
	}
	if q["frame_error"]+q["unexpected_frame"] == 0 {
		t.Error("no frame_error or unexpected_frame after authenticated Initials with random frames")
	}
	// Every datagram leaves a trace: at least one counter of what became
	// of it (a datagram with several packets can leave more).
	var accounted uint64
	for _, k := range []string{"not_quic", "short_header", "malformed", "unknown_version", "decrypt_failed",
		"initial_packets", "retry", "version_negotiation", "skipped_0rtt", "skipped_handshake"} {
		accounted += q[k]
	}
	if accounted < q["datagrams"] {
		t.Errorf("%d datagrams, but only %d counted by reason: %v", q["datagrams"], accounted, nonZero(q))
	}
	// The real ClientHellos come out as records; nothing else may pretend
	// to be a completed handshake.
	real := 0
	for _, r := range recs {
		if r.Transport != record.TransportQUIC {
			t.Errorf("record with transport %q from UDP garbage", r.Transport)
		}
		// A broken ServerHello still ends the handshake as "ok" (as on
		// TCP: a ServerHello was seen), but garbage never yields a
		// negotiated version or group.
		if r.Version != "" || r.Group != "" || r.PQ || r.ServerHelloBytes != 0 {
			js, _ := json.Marshal(r)
			t.Errorf("garbage negotiated something: %s", js)
		}
		if r.ClientHelloBytes == len(ch) && len(r.KeyShares) > 0 && r.KeyShares[0].Group == "X25519MLKEM768" {
			real++
			if r.ClientHelloSegments != 2 {
				t.Errorf("real ClientHello in %d segments, want 2", r.ClientHelloSegments)
			}
		}
	}
	switch {
	case complete && real != realDCIDs:
		t.Errorf("%d records of the %d real ClientHellos sent", real, realDCIDs)
	case real == 0:
		t.Errorf("none of the %d real ClientHellos sent came out as a record", realDCIDs)
	}
	if ok, bad := countOutcome(recs, record.OutcomeOK), st.Errors["malformed_server_hello"]; ok != int(bad) {
		t.Errorf("%d records with outcome ok, %d malformed_server_hello: every ok here comes from a broken ServerHello", ok, bad)
	}
	if n := len(recs); n > 0 {
		js, _ := json.Marshal(recs[0])
		t.Logf("first of %d records: %s", n, js)
	}
}

// goClientHello returns a ClientHello from crypto/tls's QUIC API, with the
// hybrid X25519MLKEM768 share, as Chromium would send it.
func goClientHello(t *testing.T) []byte {
	t.Helper()
	qc := tls.QUICClient(&tls.QUICConfig{TLSConfig: &tls.Config{
		ServerName: "garbage.test", NextProtos: []string{"h3"}, MinVersion: tls.VersionTLS13,
		CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.X25519},
	}})
	qc.SetTransportParameters([]byte{0x04, 0x04, 0x80, 0x10, 0x00, 0x00}) // initial_max_data
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := qc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer qc.Close()
	for {
		ev := qc.NextEvent()
		switch ev.Kind {
		case tls.QUICWriteData:
			if ev.Level == tls.QUICEncryptionLevelInitial {
				return append([]byte(nil), ev.Data...)
			}
		case tls.QUICNoEvent:
			t.Fatal("crypto/tls produced no ClientHello")
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randomLongHeader is a long header packet of a random (often known)
// version and type with random connection IDs, lengths and body.
func randomLongHeader(rng *rand.Rand) []byte {
	versions := []uint32{1, 0x6b3343cf, 0, 0xff00001d, 0x1a2a3a4a, rng.Uint32()}
	b := []byte{0x80 | byte(rng.IntN(128))}
	b = binary.BigEndian.AppendUint32(b, versions[rng.IntN(len(versions))])
	for range 2 { // DCID, SCID; lengths up to 255 (only 20 are valid)
		n := rng.IntN(24)
		if rng.IntN(10) == 0 {
			n = rng.IntN(256)
		}
		b = append(b, byte(n))
		b = append(b, randBytes(rng, n)...)
	}
	b = appendVarint(b, rng.Uint64()>>(2+rng.IntN(62))) // token length or whatever
	b = appendVarint(b, rng.Uint64()>>(2+rng.IntN(62))) // length
	b = append(b, randBytes(rng, rng.IntN(1200))...)
	if rng.IntN(4) == 0 {
		b = append(b, randomTail(rng)...) // a coalesced second packet
	}
	return b
}

func randomTail(rng *rand.Rand) []byte {
	b := []byte{0xc0 | byte(rng.IntN(64))}
	b = binary.BigEndian.AppendUint32(b, 1)
	return append(b, randBytes(rng, rng.IntN(200))...)
}

func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return binary.BigEndian.AppendUint16(b, uint16(v)|0x4000)
	case v < 1<<30:
		return binary.BigEndian.AppendUint32(b, uint32(v)|0x80000000)
	default:
		return binary.BigEndian.AppendUint64(b, v&(1<<62-1)|0xc000000000000000)
	}
}

func appendCrypto(b []byte, off uint64, data []byte) []byte {
	b = append(b, 0x06)
	b = appendVarint(b, off)
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

// sealer is one direction's Initial packet protection (RFC 9001 §5),
// written here from the RFC so the test does not trust pqwatch's own key
// schedule to build its inputs.
type sealer struct {
	aead cipher.AEAD
	iv   []byte
	hp   cipher.Block
}

// initialKeys derives the client and server Initial keys for dcid
// (RFC 9001 §5.2, RFC 9369 §3.3.1 for v2).
func initialKeys(t *testing.T, version uint32, dcid []byte) (client, server *sealer) {
	t.Helper()
	salt, prefix := []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}, "quic "
	if version == 0x6b3343cf {
		salt, prefix = []byte{0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9}, "quicv2 "
	}
	initial, err := hkdf.Extract(sha256.New, dcid, salt)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(label string) *sealer {
		secret := expandLabel(t, initial, label, 32)
		block, err := aes.NewCipher(expandLabel(t, secret, prefix+"key", 16))
		if err != nil {
			t.Fatal(err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			t.Fatal(err)
		}
		hp, err := aes.NewCipher(expandLabel(t, secret, prefix+"hp", 16))
		if err != nil {
			t.Fatal(err)
		}
		return &sealer{aead: aead, iv: expandLabel(t, secret, prefix+"iv", 12), hp: hp}
	}
	return mk("client in"), mk("server in")
}

func expandLabel(t *testing.T, secret []byte, label string, n int) []byte {
	full := "tls13 " + label
	info := binary.BigEndian.AppendUint16(nil, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	out, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seal builds a protected Initial packet carrying frames, padded with
// PADDING frames to at least minLen bytes.
func (s *sealer) seal(version uint32, dcid, scid []byte, pn uint64, frames []byte, minLen int) []byte {
	const pnLen = 4
	typ := byte(0x00) // Initial in v1
	if version == 0x6b3343cf {
		typ = 0x01 // Initial in v2
	}
	hdr := []byte{0xc0 | typ<<4 | (pnLen - 1)}
	hdr = binary.BigEndian.AppendUint32(hdr, version)
	hdr = append(hdr, byte(len(dcid)))
	hdr = append(hdr, dcid...)
	hdr = append(hdr, byte(len(scid)))
	hdr = append(hdr, scid...)
	hdr = append(hdr, 0) // no token
	overhead := len(hdr) + 2 + pnLen + s.aead.Overhead()
	if pad := minLen - overhead - len(frames); pad > 0 {
		frames = append(frames, make([]byte, pad)...)
	}
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(pnLen+len(frames)+s.aead.Overhead())|0x4000)
	pnOff := len(hdr)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(pn))
	nonce := make([]byte, 12)
	copy(nonce, s.iv)
	for i := range 8 {
		nonce[4+i] ^= byte(pn >> (56 - 8*i))
	}
	pkt := s.aead.Seal(hdr, nonce, frames, hdr)
	mask := make([]byte, 16)
	s.hp.Encrypt(mask, pkt[pnOff+4:pnOff+20])
	pkt[0] ^= mask[0] & 0x0f
	for i := range pnLen {
		pkt[pnOff+i] ^= mask[1+i]
	}
	return pkt
}

func countOutcome(recs []*record.Handshake, outcome string) int {
	n := 0
	for _, r := range recs {
		if r.Outcome == outcome {
			n++
		}
	}
	return n
}
