package quic

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

var (
	cliAddr = netip.MustParseAddrPort("192.0.2.1:50000")
	srvAddr = netip.MustParseAddrPort("[2001:db8::1]:443")
	t0      = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

// collector gathers delivered connections.
type collector struct{ conns []*Conn }

func (c *collector) on(x *Conn) { c.conns = append(c.conns, x) }

func newTestTable(cfg Config) (*ConnTable, *collector) {
	col := &collector{}
	cfg.OnConn = col.on
	return NewConnTable(cfg), col
}

func TestConnTableRFC(t *testing.T) {
	for _, v := range []struct {
		name        string
		client, srv string
		version     uint32
	}{{"v1", rfcClientV1, rfcServerV1, Version1}, {"v2", rfcClientV2, rfcServerV2, Version2}} {
		t.Run(v.name, func(t *testing.T) {
			tr, col := newTestTable(Config{})
			tr.Datagram(t0, cliAddr, srvAddr, unhex(t, v.client))
			if len(col.conns) != 0 {
				t.Fatal("delivered before the ServerHello")
			}
			tr.Datagram(t0.Add(time.Millisecond), srvAddr, cliAddr, unhex(t, v.srv))
			if len(col.conns) != 1 {
				t.Fatalf("delivered %d conns, stats %v", len(col.conns), tr.Stats())
			}
			c := col.conns[0]
			if c.Client != cliAddr || c.Server != srvAddr || c.Version != v.version {
				t.Errorf("addresses/version: %+v", c)
			}
			wantCH := unhex(t, rfcClientFrames)[4:]
			if !bytes.Equal(c.ClientHello, wantCH) || c.ClientHelloPackets != 1 || !c.FirstTS.Equal(t0) {
				t.Errorf("ClientHello %d bytes in %d packets at %v", len(c.ClientHello), c.ClientHelloPackets, c.FirstTS)
			}
			wantSH := unhex(t, rfcServerFrames)[9:]
			if !bytes.Equal(c.ServerHello, wantSH) || !c.ServerHelloTS.Equal(t0.Add(time.Millisecond)) {
				t.Errorf("ServerHello %x at %v", c.ServerHello, c.ServerHelloTS)
			}
			if c.ClientHelloTruncated || c.Retry || c.VersionNegotiation || c.Closed != "" {
				t.Errorf("flags: %+v", c)
			}
			tr.Flush()
			if len(col.conns) != 1 {
				t.Errorf("Flush delivered again")
			}
		})
	}
}

// testConn builds the packets of one synthetic connection.
type testConn struct {
	t       testing.TB
	version uint32
	dcid    []byte
	ck, sk  *Keys
	pn      [2]uint64
}

func newTestConn(t testing.TB, version uint32, dcid string) *testConn {
	tc := &testConn{t: t, version: version, dcid: []byte(dcid)}
	tc.rekey(tc.dcid)
	return tc
}

func (tc *testConn) rekey(dcid []byte) {
	var err error
	if tc.ck, tc.sk, err = DeriveInitialKeys(tc.version, dcid); err != nil {
		tc.t.Fatal(err)
	}
}

func (tc *testConn) client(token []byte, frames ...[]byte) []byte {
	tc.pn[0]++
	return sealPacket(tc.t, tc.ck, tc.version, PacketInitial, tc.dcid, []byte("cli"), token, tc.pn[0], bytes.Join(frames, nil), 1200)
}

func (tc *testConn) server(frames ...[]byte) []byte {
	tc.pn[1]++
	return sealPacket(tc.t, tc.sk, tc.version, PacketInitial, []byte("cli"), []byte("srv-cid"), nil, tc.pn[1], bytes.Join(frames, nil), 0)
}

func TestConnTableReassembly(t *testing.T) {
	ch := handshakeMsg(1, 3000) // a hybrid-PQ sized ClientHello
	sh := handshakeMsg(2, 1200)
	// Three client packets; frames out of order, overlapping, one gap filled
	// by a later datagram, plus PING and PADDING as Chromium sends them.
	tc := newTestConn(t, Version1, "\x01\x02\x03\x04\x05\x06\x07\x08")
	p1 := tc.client(nil, cryptoFrame(1000, ch[1000:1100]), []byte{FramePing}, cryptoFrame(0, ch[:900]), []byte{0, 0, 0}, cryptoFrame(1100, ch[1100:1150]))
	p2 := tc.client(nil, cryptoFrame(2000, ch[2000:]), cryptoFrame(850, ch[850:1000])) // overlap 850-900
	p3 := tc.client(nil, cryptoFrame(1100, ch[1100:2100]))                             // gap 1150-2000 + overlap
	dup := tc.client(nil, cryptoFrame(0, ch[:500]))                                    // retransmission, nothing new
	s1 := tc.server([]byte{FrameACK, 1, 0, 0, 0}, cryptoFrame(600, sh[600:]))
	s2 := tc.server(cryptoFrame(0, sh[:600]))

	tr, col := newTestTable(Config{})
	tr.Datagram(t0, cliAddr, srvAddr, p2)
	tr.Datagram(t0.Add(1), cliAddr, srvAddr, p1)
	tr.Datagram(t0.Add(2), srvAddr, cliAddr, s1)
	tr.Datagram(t0.Add(3), cliAddr, srvAddr, dup)
	tr.Datagram(t0.Add(4), cliAddr, srvAddr, p3)
	if len(col.conns) != 0 {
		t.Fatal("delivered early")
	}
	tr.Datagram(t0.Add(5), srvAddr, cliAddr, s2)
	if len(col.conns) != 1 {
		t.Fatalf("delivered %d, stats %v", len(col.conns), tr.Stats())
	}
	c := col.conns[0]
	if !bytes.Equal(c.ClientHello, ch) || !bytes.Equal(c.ServerHello, sh) {
		t.Errorf("CH %d bytes, SH %d bytes", len(c.ClientHello), len(c.ServerHello))
	}
	if c.ClientHelloPackets != 3 {
		t.Errorf("ClientHelloPackets = %d, want 3", c.ClientHelloPackets)
	}
	if !c.FirstTS.Equal(t0.Add(1)) || !c.ServerHelloTS.Equal(t0.Add(2)) {
		t.Errorf("FirstTS %v ServerHelloTS %v", c.FirstTS, c.ServerHelloTS)
	}
}

func TestConnTableCoalesced(t *testing.T) {
	for _, version := range []uint32{Version1, Version2} {
		tc := newTestConn(t, version, "coalesce")
		ch := handshakeMsg(1, 500)
		init := sealPacket(t, tc.ck, version, PacketInitial, tc.dcid, []byte("cli"), nil, 0, cryptoFrame(0, ch), 0)
		zeroRTT := sealPacket(t, tc.ck, version, Packet0RTT, tc.dcid, []byte("cli"), nil, 1, []byte{1}, 0) // keys do not matter
		dgram := append(append(init, zeroRTT...), make([]byte, 1200-len(init)-len(zeroRTT))...)
		sInit := sealPacket(t, tc.sk, version, PacketInitial, []byte("cli"), []byte("srv"), nil, 0, cryptoFrame(0, handshakeMsg(2, 90)), 0)
		hs := sealPacket(t, tc.sk, version, PacketHandshake, []byte("cli"), []byte("srv"), nil, 0, []byte{1}, 0)
		short := []byte{0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}
		sDgram := append(append(sInit, hs...), short...)

		tr, col := newTestTable(Config{})
		tr.Datagram(t0, cliAddr, srvAddr, dgram)
		tr.Datagram(t0, srvAddr, cliAddr, sDgram)
		st := tr.Stats()
		if len(col.conns) != 1 || col.conns[0].ServerHello == nil || len(col.conns[0].ClientHello) != 504 {
			t.Fatalf("v%x: conns %+v stats %v", version, col.conns, st)
		}
		if st["skipped_0rtt"] != 1 || st["skipped_handshake"] != 1 || st["short_header"] != 1 || st["malformed"] != 0 {
			t.Errorf("v%x: stats %v", version, st)
		}
	}
}

func TestConnTableRetry(t *testing.T) {
	ch := handshakeMsg(1, 1500)
	tc := newTestConn(t, Version1, "original")
	a1 := tc.client(nil, cryptoFrame(0, ch[:1000]))
	a2 := tc.client(nil, cryptoFrame(1000, ch[1000:]))
	retry := []byte{0xf0, 0, 0, 0, 1, 3, 'c', 'l', 'i', 8}
	retry = append(retry, "retrycid"...)
	retry = append(retry, "token-bytes"...)
	retry = append(retry, make([]byte, 16)...)
	// A second Retry with another connection ID, which the client ignores
	// (suricata's quic-retry capture has one).
	retry2 := bytes.Replace(bytes.Clone(retry), []byte("retrycid"), []byte("ignoreme"), 1)
	tc.dcid = []byte("retrycid")
	tc.rekey(tc.dcid)
	b1 := tc.client([]byte("token-bytes"), cryptoFrame(0, ch[:1000]))
	b2 := tc.client([]byte("token-bytes"), cryptoFrame(1000, ch[1000:]))
	sh := tc.server(cryptoFrame(0, handshakeMsg(2, 90)))

	tr, col := newTestTable(Config{})
	tr.Datagram(t0, cliAddr, srvAddr, a1)
	tr.Datagram(t0, cliAddr, srvAddr, a2)
	tr.Datagram(t0, srvAddr, cliAddr, retry)
	tr.Datagram(t0, srvAddr, cliAddr, retry2)
	tr.Datagram(t0, cliAddr, srvAddr, b1)
	tr.Datagram(t0, cliAddr, srvAddr, b2)
	tr.Datagram(t0, srvAddr, cliAddr, sh)
	if len(col.conns) != 1 {
		t.Fatalf("conns %d stats %v", len(col.conns), tr.Stats())
	}
	c := col.conns[0]
	if !c.Retry || !bytes.Equal(c.ClientHello, ch) || c.ServerHello == nil || c.ClientHelloPackets != 2 {
		t.Errorf("conn %+v", c)
	}
	if st := tr.Stats(); st["conns_total"] != 1 || st["decrypt_failed"] != 0 || st["retry"] != 2 {
		t.Errorf("stats %v", st)
	}
}

func TestConnTableVersionNegotiation(t *testing.T) {
	tc := newTestConn(t, Version1, "vn-dcid")
	p1 := tc.client(nil, cryptoFrame(0, handshakeMsg(1, 300)))
	vn := []byte{0x80, 0, 0, 0, 0, 3, 'c', 'l', 'i', 7}
	vn = append(vn, "vn-dcid"...)
	vn = append(vn, 0x6b, 0x33, 0x43, 0xcf)
	tc.version = Version2
	tc.rekey(tc.dcid)
	p2 := tc.client(nil, cryptoFrame(0, handshakeMsg(1, 300)))
	sh := tc.server(cryptoFrame(0, handshakeMsg(2, 90)))

	tr, col := newTestTable(Config{})
	tr.Datagram(t0, cliAddr, srvAddr, p1)
	tr.Datagram(t0, srvAddr, cliAddr, vn)
	tr.Datagram(t0, cliAddr, srvAddr, p2)
	tr.Datagram(t0, srvAddr, cliAddr, sh)
	if len(col.conns) != 1 {
		t.Fatalf("conns %d stats %v", len(col.conns), tr.Stats())
	}
	if c := col.conns[0]; !c.VersionNegotiation || c.Version != Version2 || c.ServerHello == nil {
		t.Errorf("conn %+v", c)
	}
}

func TestConnTableCloseAndHRR(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		tc := newTestConn(t, Version1, "close-me")
		tr, col := newTestTable(Config{})
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 300))))
		tr.Datagram(t0, srvAddr, cliAddr, tc.server(closeFrame(0x128)))
		if len(col.conns) != 1 || col.conns[0].Closed != "0x0128" || col.conns[0].ServerHello != nil {
			t.Fatalf("conns %+v", col.conns)
		}
		// Later packets of the closed connection change nothing.
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, []byte{FramePing}))
		tr.Flush()
		if len(col.conns) != 1 {
			t.Errorf("delivered %d times", len(col.conns))
		}
	})
	t.Run("hrr", func(t *testing.T) {
		hrr := handshakeMsg(2, 60)
		copy(hrr[6:], hrrRandom)
		sh := handshakeMsg(2, 90)
		ch1, ch2 := handshakeMsg(1, 300), handshakeMsg(1, 1400)
		tc := newTestConn(t, Version1, "hrr-conn")
		tr, col := newTestTable(Config{})
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, ch1)))
		tr.Datagram(t0, srvAddr, cliAddr, tc.server(cryptoFrame(0, hrr)))
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(uint64(len(ch1)), ch2)))
		tr.Datagram(t0, srvAddr, cliAddr, tc.server(cryptoFrame(uint64(len(hrr)), sh)))
		if len(col.conns) != 1 {
			t.Fatalf("conns %d", len(col.conns))
		}
		c := col.conns[0]
		if !bytes.Equal(c.ClientHello, ch1) || !bytes.Equal(c.HelloRetryRequest, hrr) || !bytes.Equal(c.ServerHello, sh) {
			t.Errorf("CH %d HRR %d SH %d", len(c.ClientHello), len(c.HelloRetryRequest), len(c.ServerHello))
		}
	})
}

func TestConnTableNotQUIC(t *testing.T) {
	tr, col := newTestTable(Config{})
	dns := unhex(t, "abcd01000001000000000000076578616d706c6503636f6d0000010001")
	for _, p := range [][]byte{
		nil, dns, {0xff}, bytes.Repeat([]byte{0xc0}, 1200),
		unhex(t, "c0000000010800000000000000000000"), // Initial-shaped garbage
	} {
		tr.Datagram(t0, cliAddr, srvAddr, p)
	}
	// A server Initial whose connection was never seen cannot be decrypted.
	tr.Datagram(t0, srvAddr, cliAddr, unhex(t, rfcServerV1))
	tr.Flush()
	st := tr.Stats()
	if len(col.conns) != 0 || st["conns"] != 0 || st["conns_total"] != 0 {
		t.Errorf("state created: %v", st)
	}
	if st["not_quic"] != 4 || st["unknown_version"] != 1 || st["decrypt_failed"] != 1 {
		t.Errorf("stats %v", st)
	}
}

func TestConnTableBounds(t *testing.T) {
	t.Run("max conns", func(t *testing.T) {
		tr, col := newTestTable(Config{MaxConns: 2})
		for i := range 3 {
			tc := newTestConn(t, Version1, "conn-"+string(rune('a'+i)))
			src := netip.AddrPortFrom(cliAddr.Addr(), uint16(1000+i))
			tr.Datagram(t0.Add(time.Duration(i)), src, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
		}
		st := tr.Stats()
		if st["evicted"] != 1 || st["conns"] != 2 || len(col.conns) != 1 || col.conns[0].Client.Port() != 1000 {
			t.Errorf("stats %v delivered %d", st, len(col.conns))
		}
	})
	t.Run("crypto cap", func(t *testing.T) {
		tr, col := newTestTable(Config{MaxCryptoBytes: 1024})
		tc := newTestConn(t, Version1, "big-hello")
		ch := handshakeMsg(1, 2000)
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, ch[:1000])))
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(1000, ch[1000:])))
		tr.Flush()
		// No ClientHello is longer than the cap: this one is not
		// plausible, so the connection carries no handshake.
		if len(col.conns) != 1 || col.conns[0].ClientHelloStarted || col.conns[0].ClientHelloTruncated || col.conns[0].ClientHello != nil {
			t.Fatalf("conns %+v", col.conns)
		}
		if tr.Stats()["crypto_overflow"] == 0 {
			t.Errorf("stats %v", tr.Stats())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		tr, col := newTestTable(Config{Timeout: time.Second})
		tc := newTestConn(t, Version1, "slowpoke")
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
		tr.Expire(t0.Add(500 * time.Millisecond))
		if len(col.conns) != 0 {
			t.Fatal("expired too early")
		}
		tr.Expire(t0.Add(2 * time.Second))
		if len(col.conns) != 1 || tr.Stats()["expired"] != 1 || tr.Stats()["conns"] != 0 {
			t.Fatalf("delivered %d stats %v", len(col.conns), tr.Stats())
		}
		if c := col.conns[0]; c.ClientHello == nil || c.ServerHello != nil || c.ClientHelloTruncated {
			t.Errorf("conn %+v", c)
		}
	})
	t.Run("auto expire", func(t *testing.T) {
		tr, col := newTestTable(Config{Timeout: time.Second})
		tc := newTestConn(t, Version1, "first")
		tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
		other := newTestConn(t, Version1, "second")
		tr.Datagram(t0.Add(time.Minute), cliAddr, netip.MustParseAddrPort("192.0.2.9:443"), other.client(nil, []byte{1}))
		if len(col.conns) != 1 {
			t.Errorf("idle connection not expired by capture time: %d", len(col.conns))
		}
	})
}

func TestConnTableReusedTuple(t *testing.T) {
	tr, col := newTestTable(Config{})
	a := newTestConn(t, Version1, "conn-one")
	b := newTestConn(t, Version1, "conn-two")
	tr.Datagram(t0, cliAddr, srvAddr, a.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
	tr.Datagram(t0, srvAddr, cliAddr, a.server(cryptoFrame(0, handshakeMsg(2, 90))))
	// The client's later Initials (new DCID, same keys) belong to the first.
	tr.Datagram(t0, cliAddr, srvAddr, a.client(nil, []byte{FrameACK, 0, 0, 0, 0}))
	tr.Datagram(t0, cliAddr, srvAddr, b.client(nil, cryptoFrame(0, handshakeMsg(1, 200))))
	tr.Datagram(t0, srvAddr, cliAddr, b.server(cryptoFrame(0, handshakeMsg(2, 90))))
	if len(col.conns) != 2 || len(col.conns[1].ClientHello) != 204 {
		t.Fatalf("conns %d stats %v", len(col.conns), tr.Stats())
	}
	if st := tr.Stats(); st["decrypt_failed"] != 0 {
		t.Errorf("stats %v", st)
	}
}

func TestConnTableZeroAllocs(t *testing.T) {
	tr, _ := newTestTable(Config{})
	tc := newTestConn(t, Version1, "alloc-free")
	tr.Datagram(t0, cliAddr, srvAddr, tc.client(nil, cryptoFrame(0, handshakeMsg(1, 100))))
	ack := tc.client(nil, []byte{FrameACK, 0, 0, 0, 0}, cryptoFrame(0, handshakeMsg(1, 100)[:50]))
	sPart := tc.server(cryptoFrame(0, handshakeMsg(2, 90)[:40]))
	notQUIC := []byte("GET / HTTP/1.1\r\n\r\n")
	short := append([]byte{0x41}, make([]byte, 40)...)
	tr.Datagram(t0, srvAddr, cliAddr, sPart) // warm up the server stream
	for name, d := range map[string]struct {
		src, dst netip.AddrPort
		p        []byte
	}{
		"client initial": {cliAddr, srvAddr, ack},
		"server initial": {srvAddr, cliAddr, sPart},
		"not quic":       {cliAddr, netip.MustParseAddrPort("192.0.2.7:53"), notQUIC},
		"short header":   {srvAddr, cliAddr, short},
	} {
		if n := testing.AllocsPerRun(100, func() { tr.Datagram(t0, d.src, d.dst, d.p) }); n != 0 {
			t.Errorf("%s: %v allocs per datagram", name, n)
		}
	}
}
