package quic

import (
	"bytes"
	"testing"
)

// fuzzSeeds are datagrams from the table tests: the RFC packets, coalesced
// and garbage datagrams.
func fuzzSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{nil, {0xc0}, []byte("GET / HTTP/1.1\r\n\r\n")}
	for _, tc := range rfcCases {
		seeds = append(seeds, unhex(t, tc.packet))
	}
	tc := newTestConn(t, Version1, "\x83\x94\xc8\xf0\x3e\x51\x57\x08")
	ch := handshakeMsg(1, 400)
	seeds = append(seeds,
		tc.client(nil, cryptoFrame(100, ch[100:]), []byte{FramePing}, cryptoFrame(0, ch[:100])),
		append(tc.server(cryptoFrame(0, handshakeMsg(2, 90))), unhex(t, "e00000000100000100")...),
		tc.server(closeFrame(0x128)),
		unhex(t, "80 00000000 0401020304 00 00000001"),
		unhex(t, "f0 00000001 00 04 01020304 aa 00000000000000000000000000000000"),
	)
	return seeds
}

// FuzzDatagram: ConnTable.Datagram never panics, whatever the bytes and
// direction, and never tracks a connection from bytes that do not decrypt.
func FuzzDatagram(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		delivered := 0
		tr := NewConnTable(Config{MaxConns: 4, MaxCryptoBytes: 4096, OnConn: func(*Conn) { delivered++ }})
		orig := bytes.Clone(data)
		tr.Datagram(t0, cliAddr, srvAddr, data)
		tr.Datagram(t0, srvAddr, cliAddr, data)
		if len(data) > 1 {
			tr.Datagram(t0, cliAddr, srvAddr, data[1:])
		}
		tr.Flush()
		if !bytes.Equal(data, orig) {
			t.Fatal("Datagram modified its input")
		}
		if st := tr.Stats(); st["conns_total"] != st["delivered"] || uint64(delivered) != st["delivered"] {
			t.Fatalf("created %d, delivered %d/%d", st["conns_total"], st["delivered"], delivered)
		}
	})
}

// FuzzDecryptInitial: header parsing and decryption of arbitrary packets with
// the RFC keys never panic; and arbitrary plaintext frames, sealed into valid
// client and server Initials, go through frame parsing and CRYPTO reassembly
// without panicking.
func FuzzDecryptInitial(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Add(unhex(f, rfcClientFrames))
	f.Add(unhex(f, rfcServerFrames))
	f.Add(bytes.Join([][]byte{cryptoFrame(5, []byte("hello")), cryptoFrame(0, []byte{1, 0, 0, 5}), {2, 0, 0, 0, 0}}, nil))
	ck, sk, err := DeriveInitialKeys(Version1, unhex(f, rfcDCID))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Raw bytes as a protected packet.
		if h, err := ParseLongHeader(data); err == nil && h.Type == PacketInitial {
			if plain, _, _, err := ck.Open(nil, data, &h, -1); err == nil {
				for len(plain) > 0 {
					if _, plain, err = NextFrame(plain); err != nil {
						break
					}
				}
			}
		}
		// Raw bytes as plaintext frames of authentic packets.
		if len(data) > 4000 {
			data = data[:4000]
		}
		tr := NewConnTable(Config{MaxCryptoBytes: 2048})
		dcid := unhex(t, rfcDCID)
		tr.Datagram(t0, cliAddr, srvAddr, sealPacket(t, ck, Version1, PacketInitial, dcid, nil, nil, 0, data, 1200))
		tr.Datagram(t0, srvAddr, cliAddr, sealPacket(t, sk, Version1, PacketInitial, nil, nil, nil, 0, data, 0))
		tr.Datagram(t0, cliAddr, srvAddr, sealPacket(t, ck, Version1, PacketInitial, dcid, nil, nil, 1, data, 1200))
		tr.Flush()
		if st := tr.Stats(); st["conns_total"] != 1 || st["delivered"] != 1 {
			t.Fatalf("stats %v", st)
		}
	})
}
