package sniffer_test

// Table tests of resumption (record field resumed) and of why a completed
// handshake has no group (group_missing), over real crypto/tls transcripts
// and over crafted handshake records for what crypto/tls does not send
// (resumption by session ID only, psk_ke, DHE); and of bytes that the
// capture lost although the peer acknowledged them (capture_gap).

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

var (
	res13Once sync.Once
	hs13Res   transcript // a TLS 1.3 resumption (psk_dhe_ke)
)

// resumed13 makes a TLS 1.3 resumption transcript: a first connection
// leaves a ticket (the client reads past the handshake to take it), the
// second resumes with it.
func resumed13(t *testing.T) transcript {
	certs(t)
	res13Once.Do(func() {
		srv := &tls.Config{Certificates: []tls.Certificate{ecCert}, NextProtos: []string{"h2", "http/1.1"}}
		cli := &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test", NextProtos: []string{"h2", "http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s := tls.Server(c, srv)
			_ = s.SetDeadline(time.Now().Add(10 * time.Second))
			if s.Handshake() == nil {
				_, _ = s.Write([]byte{1})
			}
			s.Close()
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), cli)
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Read(make([]byte, 1)) // takes the NewSessionTicket that came first
		c.Close()
		hs13Res = realHandshake(t, srv, cli)
	})
	if hs13Res.err != nil || !hs13Res.state.DidResume || hs13Res.state.Version != tls.VersionTLS13 {
		t.Fatalf("TLS 1.3 resumption transcript: err %v resumed %v version %#x", hs13Res.err, hs13Res.state.DidResume, hs13Res.state.Version)
	}
	return hs13Res
}

// ---- crafted handshake records --------------------------------------------

func hsRecord(msgs ...[]byte) []byte {
	var body []byte
	for _, m := range msgs {
		body = append(body, m...)
	}
	return append([]byte{22, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
}

var ccsRecord = []byte{20, 3, 3, 0, 1, 1}

func hsMsg(typ uint8, body []byte) []byte {
	var b cryptobyte.Builder
	b.AddUint8(typ)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(body) })
	return b.BytesOrPanic()
}

type tlsExt struct {
	typ  uint16
	data []byte
}

func addExts(b *cryptobyte.Builder, exts []tlsExt) {
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, e := range exts {
			b.AddUint16(e.typ)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
		}
	})
}

// craftCH is a ClientHello record offering x25519 and secp256r1, with
// session_id sid and, when ticket is not nil, a session_ticket extension.
func craftCH(sid, ticket []byte, suites []uint16, more ...tlsExt) []byte {
	exts := []tlsExt{{tlsparse.ExtSupportedGroups, []byte{0, 4, 0, 0x1d, 0, 0x17}}}
	if ticket != nil {
		exts = append(exts, tlsExt{tlsparse.ExtSessionTicket, ticket})
	}
	exts = append(exts, more...)
	var b cryptobyte.Builder
	b.AddUint16(0x0303)
	b.AddBytes(make([]byte, 32))
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(sid) })
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, s := range suites {
			b.AddUint16(s)
		}
	})
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
	addExts(&b, exts)
	return hsRecord(hsMsg(tlsparse.TypeClientHello, b.BytesOrPanic()))
}

// craftSH is a ServerHello message.
func craftSH(sid []byte, suite uint16, exts ...tlsExt) []byte {
	var b cryptobyte.Builder
	b.AddUint16(0x0303)
	b.AddBytes(make([]byte, 32))
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(sid) })
	b.AddUint16(suite)
	b.AddUint8(0)
	addExts(&b, exts)
	return hsMsg(tlsparse.TypeServerHello, b.BytesOrPanic())
}

func craftCert() []byte {
	return hsMsg(tlsparse.TypeCertificate, append([]byte{0, 2, 0x5b, 0, 2, 0x58}, make([]byte, 600)...))
}

func craftSKEx25519() []byte {
	body := append([]byte{3, 0, 0x1d, 32}, make([]byte, 32)...)
	body = append(body, 0x04, 0x03, 0, 64)
	return hsMsg(tlsparse.TypeServerKeyExchange, append(body, make([]byte, 64)...))
}

func craftSKEDHE() []byte {
	var b cryptobyte.Builder
	// A 2048-bit prime of the server's own (not RFC 7919's), g = 2.
	for i, n := range []int{256, 1, 256} {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			v := make([]byte, n)
			v[0] = 2
			if i == 0 {
				v[0] = 0xff
			}
			b.AddBytes(v)
		})
	}
	b.AddUint16(0x0804)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 256)) })
	return hsMsg(tlsparse.TypeServerKeyExchange, b.BytesOrPanic())
}

var (
	shd      = hsMsg(tlsparse.TypeServerHelloDone, nil)
	nst      = hsMsg(tlsparse.TypeNewSessionTicket, append([]byte{0, 0, 0x1c, 0x20, 0, 16}, make([]byte, 16)...))
	sid32    = []byte("0123456789abcdef0123456789abcdef")
	otherSID = []byte("fedcba9876543210fedcba9876543210")
	ticket   = []byte("a ticket from an earlier session")
	suites12 = []uint16{0xc02f, 0x009e, 0x009c}
)

const (
	ecdheRSA = 0xc02f // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
	dheRSA   = 0x009e // TLS_DHE_RSA_WITH_AES_128_GCM_SHA256
)

// wantCrafted is the record of a crafted flow sent by craftedFlow.
func wantCrafted(t testing.TB, cli, srv []byte, version string, cipher uint16, group string) record.Handshake {
	return record.Handshake{
		Transport: "tcp", Client: cli4.String(), Server: srv4.String(), OfferedGroups: []string{"x25519", "secp256r1"},
		Version: version, Cipher: tlsparse.CipherSuiteName(cipher), Group: group,
		ClientHelloBytes: msgOfType(cli, 1, false), ServerHelloBytes: msgOfType(srv, 2, true),
		ClientHelloSegments: 1, ClientHelloWireSegments: 1, Outcome: "ok", JA4: ja4(t, cli),
	}
}

// craftedFlow sends the ClientHello, the server's bytes in one segment,
// then ends with a RST from the server (rst) or a close from both sides.
func craftedFlow(t *testing.T, cli, srv []byte, rst bool) (*capture, time.Time, time.Time) {
	c := newCapture(t, cli, srv)
	c.handshake3()
	chTS := c.seg(0, 0, -1)
	shTS := c.seg(1, 0, -1)
	if rst {
		c.ctl(1, 0x14)
	} else {
		c.closeBoth()
	}
	return c, chTS, shTS
}

func crafted(name string, cli []byte, srv []byte, rst bool, version string, cipher uint16, group string, edit func(w *record.Handshake), errs map[string]uint64) rcase {
	return rcase{name: name, build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
		c, chTS, shTS := craftedFlow(t, cli, srv, rst)
		w := wantCrafted(t, cli, srv, version, cipher, group)
		w.TS, w.HandshakeRTTMicros = chTS, rtt(chTS, shTS)
		if edit != nil {
			edit(&w)
		}
		return c, []record.Handshake{w}, errs
	}}
}

func resumedAs(reason string) func(w *record.Handshake) {
	return func(w *record.Handshake) { w.Resumed, w.GroupMissing = true, reason }
}

func missing(reason string) func(w *record.Handshake) {
	return func(w *record.Handshake) { w.GroupMissing = reason }
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func resumptionCases() []rcase {
	skeMissing := map[string]uint64{"server_key_exchange_missing": 1}
	full := func(sid []byte, suite uint16, ske []byte) []byte {
		return cat(hsRecord(craftSH(sid, suite)), hsRecord(craftCert()), hsRecord(ske), hsRecord(shd))
	}
	return []rcase{
		crafted("TLS 1.2 resumed by session ID: echoed, then ChangeCipherSpec",
			craftCH(sid32, nil, suites12), cat(hsRecord(craftSH(sid32, ecdheRSA)), ccsRecord), false,
			"TLS1.2", ecdheRSA, "", resumedAs(record.GroupMissingResumed), nil),
		crafted("TLS 1.2 session ID echoed, reset before anything else: resumed",
			craftCH(sid32, nil, suites12), hsRecord(craftSH(sid32, ecdheRSA)), true,
			"TLS1.2", ecdheRSA, "", resumedAs(record.GroupMissingResumed), nil),
		crafted("TLS 1.2 session ID echoed but a Certificate follows: a full handshake",
			craftCH(sid32, nil, suites12), full(sid32, ecdheRSA, craftSKEx25519()), false,
			"TLS1.2", ecdheRSA, "x25519", nil, nil),
		crafted("TLS 1.2 new session ID: a full handshake",
			craftCH(sid32, nil, suites12), full(otherSID, ecdheRSA, craftSKEx25519()), false,
			"TLS1.2", ecdheRSA, "x25519", nil, nil),
		crafted("TLS 1.2 resumed by ticket: NewSessionTicket straight after the ServerHello",
			craftCH(nil, ticket, suites12), cat(hsRecord(craftSH(nil, ecdheRSA), nst), ccsRecord), false,
			"TLS1.2", ecdheRSA, "", resumedAs(record.GroupMissingResumed), nil),
		crafted("TLS 1.2 resumed by ticket: ChangeCipherSpec straight after the ServerHello",
			craftCH(nil, ticket, suites12), cat(hsRecord(craftSH(nil, ecdheRSA)), ccsRecord), false,
			"TLS1.2", ecdheRSA, "", resumedAs(record.GroupMissingResumed), nil),
		crafted("TLS 1.2 ticket refused: Certificate after the ServerHello",
			craftCH(nil, ticket, suites12), full(nil, ecdheRSA, craftSKEx25519()), false,
			"TLS1.2", ecdheRSA, "x25519", nil, nil),
		crafted("TLS 1.2 ticket offered, reset after the ServerHello: not known resumed, the group unknown",
			craftCH(nil, ticket, suites12), hsRecord(craftSH(nil, ecdheRSA)), true,
			"TLS1.2", ecdheRSA, "", missing(record.GroupMissingUnknown), skeMissing),
		crafted("TLS 1.2 empty session_ticket asks for one, nothing to resume: ChangeCipherSpec is not a resumption",
			craftCH(nil, []byte{}, suites12), cat(hsRecord(craftSH(nil, ecdheRSA)), ccsRecord), false,
			"TLS1.2", ecdheRSA, "", missing(record.GroupMissingUnknown), skeMissing),
		crafted("TLS 1.2 ECDHE, reset after the ServerHello: group unknown, ServerKeyExchange counted missing",
			craftCH(nil, nil, suites12), hsRecord(craftSH(otherSID, ecdheRSA)), true,
			"TLS1.2", ecdheRSA, "", missing(record.GroupMissingUnknown), skeMissing),
		crafted("TLS 1.2 DHE: the group is named by the ServerKeyExchange's prime (dhe and its size)",
			craftCH(nil, nil, suites12), full(otherSID, dheRSA, craftSKEDHE()), false,
			"TLS1.2", dheRSA, "dhe2048", nil, nil),
		crafted("TLS 1.2 RSA key transport, ServerHelloDone",
			craftCH(nil, nil, suites12), cat(hsRecord(craftSH(otherSID, 0x009c)), hsRecord(craftCert()), hsRecord(shd)), false,
			"TLS1.2", 0x009c, "", missing(record.GroupMissingNoKeyExchange), nil),
		crafted("TLS 1.3 psk_ke: pre_shared_key, no key_share",
			craftCH(sid32, nil, []uint16{0x1301}, tlsExt{tlsparse.ExtSupportedVersions, []byte{2, 3, 4}}, tlsExt{tlsparse.ExtPSKModes, []byte{1, 0}}),
			hsRecord(craftSH(sid32, 0x1301, tlsExt{tlsparse.ExtSupportedVersions, []byte{3, 4}}, tlsExt{tlsparse.ExtPreSharedKey, []byte{0, 0}})), false,
			"TLS1.3", 0x1301, "", resumedAs(record.GroupMissingNoKeyExchange), nil),
		crafted("TLS 1.3 echoes the session ID: not a resumption",
			craftCH(sid32, nil, []uint16{0x1301}, tlsExt{tlsparse.ExtSupportedVersions, []byte{2, 3, 4}}),
			hsRecord(craftSH(sid32, 0x1301, tlsExt{tlsparse.ExtSupportedVersions, []byte{3, 4}}, tlsExt{tlsparse.ExtKeyShare, append([]byte{0, 0x1d, 0, 32}, make([]byte, 32)...)})), false,
			"TLS1.3", 0x1301, "x25519", nil, nil),
		{name: "TLS 1.3 resumption (crypto/tls, psk_dhe_ke): resumed, the group kept", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := resumed13(t)
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			n := len(tlsRecords(tr.cli)[0])
			chTS := c.seg(0, 0, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.OfferedGroups, w.KeyShares, w.PQOffered, w.PQ = []string{"x25519", "secp256r1"}, []record.KeyShare{{Group: "x25519", Bytes: 32}}, false, false
			w.Group, w.Cipher, w.Resumed = "x25519", tls.CipherSuiteName(tr.state.CipherSuite), true
			w.ClientHelloBytes, w.ServerHelloBytes, w.JA4 = msgOfType(tr.cli, 1, false), msgOfType(tr.srv, 2, true), ja4(t, tr.cli)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
	}
}

// gapCases lose bytes of the server's TLS 1.2 flight in the capture (the
// client acknowledges them, so they will not come again).
func gapCases() []rcase {
	// flight sends the ClientHello and the server's flight with [lostA,
	// lostB) missing, then (after, when set) the client's second flight,
	// whose ACK tells that the hole was delivered; ackFirst puts that ACK
	// before the bytes after the hole.
	flight := func(t *testing.T, tr transcript, lostA, lostB int, ackFirst bool) (*capture, time.Time, time.Time) {
		c := newCapture(t, tr.cli, tr.srv)
		c.handshake3()
		n := len(tlsRecords(tr.cli)[0])
		chTS := c.seg(0, 0, n)
		shTS := c.segs(1, 0, lostA, 1400)
		c.lost(1, lostA, lostB)
		if ackFirst {
			c.frame(0, c.isn[0]+1+uint32(n), 0x10, nil)
		}
		c.segs(1, lostB, -1, 1400)
		c.seg(0, n, -1)
		c.closeBoth()
		return c, chTS, shTS
	}
	// recOffsets: where each of the server's records begins.
	recOffsets := func(tr transcript) []int {
		var offs []int
		o := 0
		for _, r := range tlsRecords(tr.srv) {
			offs = append(offs, o)
			o += len(r)
		}
		return offs
	}
	inCert := func(ackFirst bool) func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
		return func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12
			offs := recOffsets(tr)
			if tr.srv[offs[1]+5] != tlsparse.TypeCertificate || tr.srv[offs[2]+5] != tlsparse.TypeServerKeyExchange {
				t.Fatal("the server's second record is not its Certificate, or the third not its ServerKeyExchange")
			}
			c, chTS, shTS := flight(t, tr, offs[1]+40, offs[2]-10, ackFirst)
			w := want12(t, tr, "x25519")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, map[string]uint64{"capture_gap": 1}
		}
	}
	return []rcase{
		{name: "capture lost the middle of the Certificate: stepped over, the ServerKeyExchange parsed", build: inCert(false)},
		{name: "capture lost the middle of the Certificate, the ACK captured before what follows: stepped over", build: inCert(true)},
		{name: "one record holds the whole flight (as OpenSSL sends it), hole inside the Certificate: stepped over", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			cli := craftCH(nil, nil, suites12)
			srv := hsRecord(craftSH(otherSID, ecdheRSA), craftCert(), craftSKEx25519(), shd)
			cert := 5 + len(craftSH(otherSID, ecdheRSA))
			c := newCapture(t, cli, srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			shTS := c.seg(1, 0, cert+100)
			c.lost(1, cert+100, cert+500)
			c.seg(1, cert+500, -1)
			c.frame(0, c.isn[0]+1+uint32(len(cli)), 0x10, nil)
			c.closeBoth()
			w := wantCrafted(t, cli, srv, "TLS1.2", ecdheRSA, "x25519")
			w.TS, w.HandshakeRTTMicros = chTS, rtt(chTS, shTS)
			return c, []record.Handshake{w}, map[string]uint64{"capture_gap": 1}
		}},
		{name: "capture lost the ServerKeyExchange: completed, group unknown, both counted", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12
			offs := recOffsets(tr)
			c, chTS, shTS := flight(t, tr, offs[2], offs[3], false)
			w := want12(t, tr, "")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			w.GroupMissing = record.GroupMissingUnknown
			return c, []record.Handshake{w}, map[string]uint64{"capture_gap": 1, "server_key_exchange_missing": 1}
		}},
		{name: "capture lost the Certificate's header: not stepped over", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12
			offs := recOffsets(tr)
			c, chTS, shTS := flight(t, tr, offs[1]+2, offs[1]+100, false)
			w := want12(t, tr, "")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			w.GroupMissing = record.GroupMissingUnknown
			return c, []record.Handshake{w}, map[string]uint64{"capture_gap": 1, "server_key_exchange_missing": 1}
		}},
		{name: "capture lost the end of the ClientHello, the server acknowledged it: truncated", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, 1000)
			c.lost(0, 1000, len(hsHybridCH))
			c.frame(1, c.isn[1]+1, 0x10, nil) // the server's ACK of the whole ClientHello
			c.ctl(1, 0x14)
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(),
				ClientHelloBytes: msgOfType(hsHybrid.cli, 1, false), Outcome: "truncated"}
			return c, []record.Handshake{w}, map[string]uint64{"capture_gap": 1}
		}},
	}
}

func TestResumption(t *testing.T) {
	transcripts(t)
	for _, tc := range resumptionCases() {
		t.Run(tc.name, func(t *testing.T) { runCase(t, tc, nil) })
	}
}

func TestCaptureGaps(t *testing.T) {
	transcripts(t)
	for _, tc := range gapCases() {
		t.Run(tc.name, func(t *testing.T) { runCase(t, tc, nil) })
	}
}

// TestCaptureGapEveryPosition loses every run of a server's TLS 1.2 flight
// in turn (the client acknowledging it), for crypto/tls's flight (a record
// per message) and for one record holding the flight (as OpenSSL sends it):
// one record always; the group is x25519 when the hole lies inside the
// Certificate's body and never when it touches the ServerKeyExchange (zeros
// are never read as a message); a completed record without it says unknown
// and counts the ServerKeyExchange missing.
func TestCaptureGapEveryPosition(t *testing.T) {
	transcripts(t)
	type flight struct {
		name              string
		cli, srv          []byte
		shEnd             int // where the ServerHello is parsed from: the end of its record
		certBody, certEnd int // the Certificate's body, after its record and message headers
		skeEnd            int
		oneRecord         bool
	}
	recs := tlsRecords(hs12.srv)
	sh, cert := len(recs[0]), len(recs[1])
	one := hsRecord(craftSH(otherSID, ecdheRSA), craftCert(), craftSKEx25519(), shd)
	oneCert := 5 + len(craftSH(otherSID, ecdheRSA))
	for _, fl := range []flight{
		{"crypto/tls", hs12.cli, hs12.srv, sh, sh + 5 + 4, sh + cert, sh + cert + len(recs[2]), false},
		{"one record", craftCH(nil, nil, suites12), one, len(one), oneCert + 4, oneCert + len(craftCert()), oneCert + len(craftCert()) + len(craftSKEx25519()), true},
	} {
		n := len(tlsRecords(fl.cli)[0])
		for _, size := range []int{1, 40, 300} {
			for a := 0; a+size <= fl.skeEnd+20 && a+size <= len(fl.srv); a += 7 {
				b := a + size
				c := newCapture(t, fl.cli, fl.srv)
				c.handshake3()
				c.seg(0, 0, n)
				if a > 0 {
					c.segs(1, 0, a, 1400)
				}
				c.lost(1, a, b)
				c.segs(1, b, -1, 1400)
				if n < len(fl.cli) {
					c.seg(0, n, -1)
				} else {
					c.frame(0, c.isn[0]+1+uint32(n), 0x10, nil)
				}
				c.closeBoth()
				got, st, _ := feed(sniffer.Config{}, c.link(), c.pkts, true)
				if len(got) != 1 {
					t.Fatalf("%s, hole [%d,%d): %d records", fl.name, a, b, len(got))
				}
				r := got[0]
				inCert := a >= fl.certBody && b <= fl.certEnd
				switch {
				case inCert:
					if r.Group != "x25519" || st.Errors["capture_gap"] != 1 {
						t.Errorf("%s, hole [%d,%d) inside the Certificate: group %q, errors %v", fl.name, a, b, r.Group, st.Errors)
					}
				case b > fl.certEnd && a < fl.skeEnd:
					if r.Group != "" {
						t.Errorf("%s, hole [%d,%d) over the ServerKeyExchange: group %q", fl.name, a, b, r.Group)
					}
				}
				if r.Outcome == record.OutcomeOK && r.Group == "" && (r.GroupMissing != record.GroupMissingUnknown || st.Errors["server_key_exchange_missing"] != 1) {
					t.Errorf("%s, hole [%d,%d): no group, group_missing %q, errors %v", fl.name, a, b, r.GroupMissing, st.Errors)
				}
				if ok := r.Outcome == record.OutcomeOK; (a >= fl.shEnd || inCert) != ok {
					t.Errorf("%s, hole [%d,%d): outcome %s", fl.name, a, b, r.Outcome)
				}
			}
		}
	}
}
