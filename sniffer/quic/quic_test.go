package quic

import (
	"bytes"
	"errors"
	"testing"
)

func TestDeriveInitialKeys(t *testing.T) {
	dcid := unhex(t, rfcDCID)
	for _, tc := range []struct {
		name           string
		version        uint32
		ckey, civ, chp string
		skey, siv, shp string
	}{{
		name: "v1", version: Version1,
		ckey: "1f369613dd76d5467730efcbe3b1a22d", civ: "fa044b2f42a3fd3b46fb255c", chp: "9f50449e04a0e810283a1e9933adedd2",
		skey: "cf3a5331653c364c88f0f379b6067e37", siv: "0ac1493ca1905853b0bba03e", shp: "c206b8d9b9f0f37644430b490eeaa314",
	}, {
		name: "v2", version: Version2,
		ckey: "8b1a0bc121284290a29e0971b5cd045d", civ: "91f73e2351d8fa91660e909f", chp: "45b95e15235d6f45a6b19cbcb0294ba9",
		skey: "82db637861d55e1d011f19ea71d5d2a7", siv: "dd13c276499c0249d3310652", shp: "edf6d05c83121201b436e16877593c3a",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, err := DeriveInitialKeys(tc.version, dcid)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name      string
				got, want []byte
			}{
				{"client key", c.Key[:], unhex(t, tc.ckey)}, {"client iv", c.IV[:], unhex(t, tc.civ)}, {"client hp", c.HP[:], unhex(t, tc.chp)},
				{"server key", s.Key[:], unhex(t, tc.skey)}, {"server iv", s.IV[:], unhex(t, tc.siv)}, {"server hp", s.HP[:], unhex(t, tc.shp)},
			} {
				if !bytes.Equal(f.got, f.want) {
					t.Errorf("%s = %x, want %x", f.name, f.got, f.want)
				}
			}
		})
	}
	if _, _, err := DeriveInitialKeys(0x1a2a3a4a, dcid); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("grease version: err = %v, want ErrUnknownVersion", err)
	}
}

// rfcCase is one protected packet of the RFC appendices.
type rfcCase struct {
	name     string
	version  uint32
	server   bool
	packet   string
	frames   string
	padTo    int
	pn       int64
	scid     string
	dcidWant string
}

var rfcCases = []rfcCase{
	{name: "v1 client", version: Version1, packet: rfcClientV1, frames: rfcClientFrames, padTo: 1162, pn: 2, dcidWant: rfcDCID},
	{name: "v2 client", version: Version2, packet: rfcClientV2, frames: rfcClientFrames, padTo: 1162, pn: 2, dcidWant: rfcDCID},
	{name: "v1 server", version: Version1, server: true, packet: rfcServerV1, frames: rfcServerFrames, pn: 1, scid: "f067a5502a4262b5"},
	{name: "v2 server", version: Version2, server: true, packet: rfcServerV2, frames: rfcServerFrames, pn: 1, scid: "f067a5502a4262b5"},
}

func TestOpenRFCVectors(t *testing.T) {
	for _, tc := range rfcCases {
		t.Run(tc.name, func(t *testing.T) {
			ck, sk, err := DeriveInitialKeys(tc.version, unhex(t, rfcDCID))
			if err != nil {
				t.Fatal(err)
			}
			k := ck
			if tc.server {
				k = sk
			}
			pkt := unhex(t, tc.packet)
			orig := bytes.Clone(pkt)
			h, err := ParseLongHeader(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if h.Version != tc.version || h.Type != PacketInitial || h.Len != len(pkt) {
				t.Fatalf("header = %+v", h)
			}
			if tc.dcidWant != "" && !bytes.Equal(h.DCID, unhex(t, tc.dcidWant)) {
				t.Errorf("DCID = %x", h.DCID)
			}
			if tc.scid != "" && !bytes.Equal(h.SCID, unhex(t, tc.scid)) {
				t.Errorf("SCID = %x", h.SCID)
			}
			plain, _, pn, err := k.Open(nil, pkt, &h, tc.pn-1)
			if err != nil {
				t.Fatal(err)
			}
			if pn != tc.pn {
				t.Errorf("pn = %d, want %d", pn, tc.pn)
			}
			want := unhex(t, tc.frames)
			for len(want) < tc.padTo {
				want = append(want, 0)
			}
			if !bytes.Equal(plain, want) {
				t.Errorf("plaintext\n got %x\nwant %x", plain, want)
			}
			if !bytes.Equal(pkt, orig) {
				t.Error("Open modified its input")
			}
			// The wrong direction's keys must fail authentication.
			other := sk
			if tc.server {
				other = ck
			}
			if _, _, _, err := other.Open(nil, pkt, &h, -1); !errors.Is(err, ErrDecrypt) {
				t.Errorf("wrong keys: err = %v, want ErrDecrypt", err)
			}
			// A flipped ciphertext bit must fail authentication.
			pkt[len(pkt)-20] ^= 1
			if _, _, _, err := k.Open(nil, pkt, &h, tc.pn-1); !errors.Is(err, ErrDecrypt) {
				t.Errorf("corrupted: err = %v, want ErrDecrypt", err)
			}
		})
	}
}

func TestSealRoundTrip(t *testing.T) {
	// The test sealer must reproduce the RFC client packet: it guards the
	// synthetic packets the ConnTable tests build.
	ck, _, err := DeriveInitialKeys(Version1, unhex(t, rfcDCID))
	if err != nil {
		t.Fatal(err)
	}
	pkt := sealPacket(t, ck, Version1, PacketInitial, unhex(t, rfcDCID), nil, nil, 7, cryptoFrame(0, handshakeMsg(1, 300)), 1200)
	h, err := ParseLongHeader(pkt)
	if err != nil {
		t.Fatal(err)
	}
	plain, _, pn, err := ck.Open(make([]byte, 0, 2000), pkt, &h, 5)
	if err != nil || pn != 7 {
		t.Fatalf("pn %d err %v", pn, err)
	}
	f, _, err := NextFrame(plain)
	if err != nil || f.Type != FrameCrypto || len(f.Data) != 304 {
		t.Fatalf("frame %+v err %v", f, err)
	}
}

func TestParseLongHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    string
		err  error
		typ  PacketType
	}{
		{"empty", "", ErrTruncated, 0},
		{"short header", "4000000000000000", ErrNotLongHeader, 0},
		{"version negotiation", "80 00000000 0401020304 00 00000001", nil, PacketVersionNegotiation},
		{"grease version", "c0 1a2a3a4a 00 00 0000", ErrUnknownVersion, 0},
		{"dcid too long", "c0 00000001 15 000000000000000000000000000000000000000000 00", ErrTruncated, 0},
		{"truncated dcid", "c0 00000001 08 0102", ErrTruncated, 0},
		{"truncated token", "c0 00000001 00 00 05 00", ErrTruncated, 0},
		{"length beyond datagram", "c0 00000001 00 00 00 4100 00", ErrTruncated, 0},
		{"v1 handshake", "e0 00000001 00 00 01 00", nil, PacketHandshake},
		{"v1 0-rtt", "d0 00000001 00 00 01 00", nil, Packet0RTT},
		{"v2 handshake", "f0 6b3343cf 00 00 01 00", nil, PacketHandshake},
		{"v2 initial", "d0 6b3343cf 00 00 00 01 00", nil, PacketInitial},
		{"v1 retry", "f0 00000001 00 04 01020304 aa 00000000000000000000000000000000", nil, PacketRetry},
		{"v2 retry", "c0 6b3343cf 00 04 01020304 aa 00000000000000000000000000000000", nil, PacketRetry},
		{"retry without tag", "f0 00000001 00 04 01020304 aa", ErrTruncated, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseLongHeader(unhex(t, tc.b))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && h.Type != tc.typ {
				t.Errorf("type = %v, want %v", h.Type, tc.typ)
			}
		})
	}
}

func TestDecodePacketNumber(t *testing.T) {
	for _, tc := range []struct {
		largest int64
		trunc   uint64
		n       int
		want    int64
	}{
		{-1, 0, 1, 0},
		{-1, 2, 4, 2},
		{0xa82f30ea, 0x9b32, 2, 0xa82f9b32}, // RFC 9000 A.3
		{250, 2, 1, 258},
		{300, 250, 1, 250},
	} {
		if got := DecodePacketNumber(tc.largest, tc.trunc, tc.n); got != tc.want {
			t.Errorf("DecodePacketNumber(%d, %#x, %d) = %#x, want %#x", tc.largest, tc.trunc, tc.n, got, tc.want)
		}
	}
}

func TestNextFrame(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    string
		typ  uint64
		err  error
		data string
		code uint64
		rest int
	}{
		{"padding run", "000000000001", FramePadding, nil, "", 0, 1},
		{"ping", "01", FramePing, nil, "", 0, 0},
		{"ack", "02 05 00 00 05", FrameACK, nil, "", 0, 0},
		{"ack ranges", "02 10 00 01 02 01 01", FrameACK, nil, "", 0, 0},
		{"ack ecn", "03 05 00 00 05 01 02 03", FrameACKECN, nil, "", 0, 0},
		{"ack huge count", "02 10 00 bfffffffffffffff 02", 0, ErrFrame, "", 0, 0},
		{"ack truncated", "02 10 00", 0, ErrFrame, "", 0, 0},
		{"crypto", "06 00 03 aabbcc 01", FrameCrypto, nil, "aabbcc", 0, 1},
		{"crypto 2-byte offset", "06 4100 01 dd", FrameCrypto, nil, "dd", 0, 0},
		{"crypto truncated", "06 00 05 aabb", 0, ErrFrame, "", 0, 0},
		{"close", "1c 4128 06 02 6869", FrameConnectionClose, nil, "6869", 0x128, 0},
		{"app close", "1d 01 00", FrameAppClose, nil, "", 1, 0},
		{"close truncated", "1c 4128", 0, ErrFrame, "", 0, 0},
		{"stream frame", "08 00", 0, ErrUnexpectedFrame, "", 0, 0},
		{"bad varint", "40", 0, ErrFrame, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, rest, err := NextFrame(unhex(t, tc.b))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if f.Type != tc.typ || !bytes.Equal(f.Data, unhex(t, tc.data)) || f.ErrorCode != tc.code || len(rest) != tc.rest {
				t.Errorf("got %+v rest %d", f, len(rest))
			}
		})
	}
}
