package sniffer_test

// Table tests of TCP reassembly and the TLS state machine over synthesised
// packets. The TLS bytes are real: a crypto/tls client and server complete
// (or fail) each handshake over loopback and every byte each side wrote is
// kept; only the link, IP and TCP headers are synthesised (gopacket
// serialises them), so each case can cut, reorder, repeat, corrupt or frame
// the same bytes as it needs and assert the exact record.

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// ---- real handshakes -------------------------------------------------------

// transcript is one real handshake: every byte each side wrote.
type transcript struct {
	cli, srv []byte // client->server and server->client byte streams
	state    tls.ConnectionState
	err      error // the client's handshake error
}

// realHandshake runs a crypto/tls handshake over loopback and keeps the
// bytes. The server's side is tapped so both directions are exact.
func realHandshake(t testing.TB, srv, cli *tls.Config) transcript {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type side struct{ in, out []byte }
	done := make(chan side, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- side{}
			return
		}
		tc := &tapConn{Conn: c}
		s := tls.Server(tc, srv)
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		_ = s.Handshake()
		c.Close()
		tc.mu.Lock()
		done <- side{tc.in, tc.out}
		tc.mu.Unlock()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, cli)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	tr := transcript{err: tc.Handshake()}
	tr.state = tc.ConnectionState()
	s := <-done // the server has read all it will read: safe to close raw
	tr.cli, tr.srv = s.in, s.out
	return tr
}

var (
	certOnce           sync.Once
	ecCert, rsaCert    tls.Certificate
	bigChain           tls.Certificate // ECDSA leaf followed by many certificates: a ~12 KB Certificate message
	errCert            error
	transcriptsOnce    sync.Once
	hsHybrid, hsHRR    transcript
	hs12, hs12RSA      transcript
	hs12Big, hs12Res   transcript
	hsAlert            transcript
	hsHybridCH         []byte // the ClientHello record of hsHybrid
	clientCurvesHybrid = []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256}
)

func certs(t testing.TB) {
	certOnce.Do(func() {
		ecCert, errCert = pcapgen.SelfSigned("pqwatch.test")
		if errCert != nil {
			return
		}
		bigChain = ecCert
		for range 30 {
			bigChain.Certificate = append(bigChain.Certificate, ecCert.Certificate[0])
		}
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			errCert = err
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pqwatch.test"}, DNSNames: []string{"pqwatch.test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			errCert = err
			return
		}
		rsaCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	if errCert != nil {
		t.Fatal(errCert)
	}
}

// transcripts makes every real handshake the cases use, once.
func transcripts(t testing.TB) {
	certs(t)
	transcriptsOnce.Do(func() {
		alpn := []string{"h2", "http/1.1"}
		srv := func(c tls.Certificate, curves []tls.CurveID, maxV uint16) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{c}, CurvePreferences: curves, MaxVersion: maxV, NextProtos: alpn, SessionTicketsDisabled: true}
		}
		cli := func(curves []tls.CurveID, maxV uint16) *tls.Config {
			return &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test", CurvePreferences: curves, MaxVersion: maxV, NextProtos: alpn}
		}
		hsHybrid = realHandshake(t, srv(ecCert, nil, 0), cli(clientCurvesHybrid, 0))
		// crypto/tls sends a P-256 share; the server wants P-384: HelloRetryRequest.
		hsHRR = realHandshake(t, srv(ecCert, []tls.CurveID{tls.CurveP384}, 0), cli([]tls.CurveID{tls.CurveP256, tls.CurveP384}, 0))
		hs12 = realHandshake(t, srv(ecCert, nil, 0), cli([]tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12))
		hs12Big = realHandshake(t, srv(bigChain, nil, 0), cli([]tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12))
		rsaSrv := srv(rsaCert, nil, tls.VersionTLS12)
		rsaSrv.CipherSuites = []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}
		rsaCli := cli([]tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12)
		rsaCli.CipherSuites = []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}
		hs12RSA = realHandshake(t, rsaSrv, rsaCli)
		// TLS 1.2 resumption: a first handshake leaves a ticket in the cache.
		resSrv := srv(ecCert, nil, tls.VersionTLS12)
		resSrv.SessionTicketsDisabled = false
		resCli := cli([]tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12)
		resCli.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		realHandshake(t, resSrv, resCli)
		hs12Res = realHandshake(t, resSrv, resCli)
		// A P-256-only client against an X25519-only server: handshake_failure alert.
		hsAlert = realHandshake(t, srv(ecCert, []tls.CurveID{tls.X25519}, 0), cli([]tls.CurveID{tls.CurveP256}, 0))
	})
	for name, tr := range map[string]transcript{"hybrid": hsHybrid, "hrr": hsHRR, "tls12": hs12, "tls12big": hs12Big, "tls12rsa": hs12RSA, "tls12res": hs12Res} {
		if tr.err != nil {
			t.Fatalf("%s: %v", name, tr.err)
		}
	}
	if hsAlert.err == nil {
		t.Fatal("alert case: handshake succeeded")
	}
	if !hsHRR.state.HelloRetryRequest || !hs12Res.state.DidResume || hs12RSA.state.CipherSuite != tls.TLS_RSA_WITH_AES_128_GCM_SHA256 {
		t.Fatalf("transcripts are not what the cases need: hrr %v resumed %v rsa %#x", hsHRR.state.HelloRetryRequest, hs12Res.state.DidResume, hs12RSA.state.CipherSuite)
	}
	hsHybridCH = tlsRecords(hsHybrid.cli)[0]
}

// tlsRecords splits a byte stream into whole TLS records (header included).
func tlsRecords(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 5 {
		n := 5 + int(binary.BigEndian.Uint16(b[3:5]))
		if len(b) < n {
			break
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// msgLen is the first handshake message's length, header included, in a
// stream of handshake records (groundtruth_test.go's handshakeMsgs).
func msgOfType(stream []byte, typ byte, last bool) int {
	n := 0
	for _, m := range handshakeMsgs(stream) {
		if m[0] == typ {
			n = len(m)
			if !last {
				return n
			}
		}
	}
	return n
}

// refragment re-frames the leading handshake records' payload into
// handshake records of at most size bytes each (size 0: one record); the
// rest of the stream follows unchanged.
func refragment(stream []byte, count, size int) []byte {
	recs := tlsRecords(stream)
	var hs []byte
	used := 0
	for _, r := range recs[:count] {
		hs = append(hs, r[5:]...)
		used += len(r)
	}
	if size <= 0 {
		size = len(hs)
	}
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, 22, 3, 3, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return append(out, stream[used:]...)
}

// ---- packets -------------------------------------------------------------

// Framing of a capture.
type framing int

const (
	fEther framing = iota
	fVLAN
	fQinQ
	fSLL
	fSLL2
	fRaw
	fNull
)

var linkOf = map[framing]int{fEther: sniffer.LinkEthernet, fVLAN: sniffer.LinkEthernet, fQinQ: sniffer.LinkEthernet,
	fSLL: sniffer.LinkLinuxSLL, fSLL2: sniffer.LinkLinuxSLL2, fRaw: sniffer.LinkRaw, fNull: sniffer.LinkNull}

var (
	cli4 = netip.MustParseAddrPort("10.0.0.2:40000")
	srv4 = netip.MustParseAddrPort("10.0.0.1:443")
	cli6 = netip.MustParseAddrPort("[2001:db8::2]:40000")
	srv6 = netip.MustParseAddrPort("[2001:db8::1]:443")
	t0   = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
)

// capture builds one connection's packets. stream[0] is what the client
// sends, stream[1] the server; offsets are stream offsets (0 = the byte
// after the SYN).
type capture struct {
	t        testing.TB
	framing  framing
	v6, ext  bool // IPv6; IPv6 with hop-by-hop and destination options
	cli, srv netip.AddrPort
	isn      [2]uint32
	mss      [2]uint16 // MSS option in each direction's SYN (0: none)
	tsOpt    bool      // timestamp option on every segment
	snap     int       // snaplen: frames are cut to this many bytes (0: none)
	ttl      uint8     // IP TTL (hop limit) of the next frames (0: 64)
	stream   [2][]byte
	sent     [2]int // highest stream offset sent, for FIN/RST sequence numbers
	now      time.Time
	pkts     []pkt
}

func newCapture(t testing.TB, cli, srv []byte) *capture {
	return &capture{t: t, cli: cli4, srv: srv4, isn: [2]uint32{0xfffffa00, 77777}, mss: [2]uint16{1460, 1460},
		stream: [2][]byte{cli, srv}, now: t0}
}

func (c *capture) link() int { return linkOf[c.framing] }

// tick advances capture time by 10 µs per packet (or by d) and returns it.
func (c *capture) tick() time.Time      { c.now = c.now.Add(10 * time.Microsecond); return c.now }
func (c *capture) wait(d time.Duration) { c.now = c.now.Add(d) }

// frame serialises one TCP segment and adds it to the capture.
func (c *capture) frame(dir int, seq uint32, flags uint8, payload []byte) time.Time {
	src, dst := c.cli, c.srv
	if dir == 1 {
		src, dst = dst, src
	}
	// Each segment acknowledges all that the other side has sent so far
	// (lost says what the capture dropped after it was sent).
	ack := c.isn[1-dir] + 1 + uint32(c.sent[1-dir])
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: seq, Ack: ack, Window: 65535,
		SYN: flags&0x02 != 0, ACK: flags&0x10 != 0, FIN: flags&0x01 != 0, RST: flags&0x04 != 0, PSH: len(payload) > 0}
	if flags&0x02 != 0 && c.mss[dir] != 0 {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: binary.BigEndian.AppendUint16(nil, c.mss[dir])})
	}
	if c.tsOpt {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindNop}, layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)})
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ip gopacket.SerializableLayer
	if c.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		l := &layers.IPv6{Version: 6, HopLimit: cmp.Or(c.ttl, 64), NextHeader: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(l)
		ip = l
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		l := &layers.IPv4{Version: 4, TTL: cmp.Or(c.ttl, 64), Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice(), Flags: layers.IPv4DontFragment}
		_ = tcp.SetNetworkLayerForChecksum(l)
		ip = l
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		c.t.Fatal(err)
	}
	b := append([]byte(nil), buf.Bytes()...)
	if c.v6 && c.ext {
		// Hop-by-hop (PadN) then destination options (PadN), 8 bytes each.
		ext := []byte{60, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0}
		ipb := b[14:]
		binary.BigEndian.PutUint16(ipb[4:6], binary.BigEndian.Uint16(ipb[4:6])+uint16(len(ext)))
		ipb[6] = 0 // hop-by-hop
		b = append(append(append([]byte(nil), b[:14+40]...), ext...), b[14+40:]...)
	}
	b = c.reframe(b, dir)
	if c.snap > 0 && len(b) > c.snap {
		b = b[:c.snap]
	}
	ts := c.tick()
	c.pkts = append(c.pkts, pkt{ts, b})
	return ts
}

// reframe turns an Ethernet frame into the capture's framing.
func (c *capture) reframe(b []byte, dir int) []byte {
	etype, ip := b[12:14], b[14:]
	var hdr []byte
	switch c.framing {
	case fEther:
		return b
	case fVLAN:
		hdr = append(append(append([]byte(nil), b[:12]...), 0x81, 0x00, 0x00, 0x64), etype...)
	case fQinQ:
		hdr = append(append(append([]byte(nil), b[:12]...), 0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x64), etype...)
	case fSLL:
		hdr = []byte{0, byte(dir * 4), 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}
		hdr = append(hdr, etype...)
	case fSLL2:
		hdr = append(append([]byte(nil), etype...), 0, 0, 0, 0, 0, 1, 0, 1, byte(dir*4), 6, 2, 0, 0, 0, 0, 1, 0, 0)
	case fRaw:
		return ip
	case fNull:
		fam := uint32(2)
		if c.v6 {
			fam = 30 // AF_INET6 on Darwin
		}
		hdr = binary.LittleEndian.AppendUint32(nil, fam)
	}
	return append(hdr, ip...)
}

func (c *capture) syn(dir int) time.Time {
	fl := uint8(0x02)
	if dir == 1 {
		fl |= 0x10
	}
	return c.frame(dir, c.isn[dir], fl, nil)
}

// handshake3 adds SYN, SYN-ACK and ACK.
func (c *capture) handshake3() {
	c.syn(0)
	c.syn(1)
	c.frame(0, c.isn[0]+1, 0x10, nil)
}

// seg sends stream bytes [off, end) of one direction as one segment.
func (c *capture) seg(dir, off, end int) time.Time {
	if end < 0 || end > len(c.stream[dir]) {
		end = len(c.stream[dir])
	}
	c.sent[dir] = max(c.sent[dir], end)
	return c.frame(dir, c.isn[dir]+1+uint32(off), 0x18, c.stream[dir][off:end])
}

// lost marks stream bytes [off, end) of one direction as sent but not
// captured: the peer's later segments acknowledge them.
func (c *capture) lost(dir, off, end int) {
	if end < 0 || end > len(c.stream[dir]) {
		end = len(c.stream[dir])
	}
	c.sent[dir] = max(c.sent[dir], end)
}

// segData sends arbitrary bytes at a stream offset (overlap tests).
func (c *capture) segData(dir, off int, data []byte) time.Time {
	return c.frame(dir, c.isn[dir]+1+uint32(off), 0x18, data)
}

// segs sends [off, end) in segments of size bytes and returns the first
// segment's time.
func (c *capture) segs(dir, off, end, size int) time.Time {
	if end < 0 || end > len(c.stream[dir]) {
		end = len(c.stream[dir])
	}
	var first time.Time
	for o := off; o < end; o += size {
		ts := c.seg(dir, o, min(o+size, end))
		if first.IsZero() {
			first = ts
		}
	}
	return first
}

// ctl sends a FIN, RST (or FIN|ACK) after what dir has sent.
func (c *capture) ctl(dir int, flags uint8) time.Time {
	return c.frame(dir, c.isn[dir]+1+uint32(c.sent[dir]), flags, nil)
}

func (c *capture) closeBoth() {
	c.ctl(0, 0x11)
	c.ctl(1, 0x11)
	c.frame(0, c.isn[0]+2+uint32(c.sent[0]), 0x10, nil)
}

// feed runs packets through a fresh Sniffer.
func feed(cfg sniffer.Config, link int, pkts []pkt, flush bool) ([]*record.Handshake, sniffer.Stats, *sniffer.Sniffer) {
	var recs []*record.Handshake
	cfg.OnRecord = func(r *record.Handshake) { recs = append(recs, r) }
	s := sniffer.New(cfg)
	for _, p := range pkts {
		s.Packet(p.ts, link, p.data)
	}
	if flush {
		s.Flush()
	}
	return recs, s.Stats(), s
}

// ---- expectations ----------------------------------------------------------

// ja4 is tlsparse's JA4 of a transcript's first ClientHello (JA4 itself is
// proven against FoxIO in tlsparse and conformance; here it only has to
// survive reassembly unchanged).
func ja4(t testing.TB, cli []byte) string {
	var ch tlsparse.ClientHello
	if err := ch.Parse(handshakeMsgs(cli)[0]); err != nil {
		t.Fatal(err)
	}
	return string(tlsparse.AppendJA4(nil, &ch, 't'))
}

// want13 is the record of hsHybrid when everything went right.
func wantHybrid(t testing.TB) record.Handshake {
	return record.Handshake{
		Transport: "tcp", Client: cli4.String(), Server: srv4.String(), SNI: "pqwatch.test", ALPN: []string{"h2", "http/1.1"},
		OfferedGroups: []string{"X25519MLKEM768", "x25519", "secp256r1"},
		KeyShares:     []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}},
		PQOffered:     true, Version: "TLS1.3", Cipher: tls.CipherSuiteName(hsHybrid.state.CipherSuite), Group: "X25519MLKEM768", PQ: true,
		ClientHelloBytes: msgOfType(hsHybrid.cli, 1, false), ServerHelloBytes: msgOfType(hsHybrid.srv, 2, true),
		Outcome: "ok", JA4: ja4(t, hsHybrid.cli),
	}
}

func want12(t testing.TB, tr transcript, group string) record.Handshake {
	return record.Handshake{
		Transport: "tcp", Client: cli4.String(), Server: srv4.String(), SNI: "pqwatch.test", ALPN: []string{"h2", "http/1.1"},
		OfferedGroups: []string{"x25519", "secp256r1"}, Version: "TLS1.2", Cipher: tls.CipherSuiteName(tr.state.CipherSuite), Group: group,
		ClientHelloBytes: msgOfType(tr.cli, 1, false), ServerHelloBytes: msgOfType(tr.srv, 2, true), Outcome: "ok", JA4: ja4(t, tr.cli),
	}
}

// jsonMap is a record as its JSONL line says it.
func jsonMap(t testing.TB, r *record.Handshake) map[string]any {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkRecord compares every field of the JSONL line.
func checkRecord(t testing.TB, got *record.Handshake, want record.Handshake) {
	t.Helper()
	g, w := jsonMap(t, got), jsonMap(t, &want)
	for k, wv := range w {
		if gv, ok := g[k]; !ok {
			t.Errorf("%s: missing, want %v", k, wv)
		} else if !reflect.DeepEqual(gv, wv) {
			t.Errorf("%s: got %v, want %v", k, gv, wv)
		}
	}
	for k, gv := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("%s: got %v, want it omitted", k, gv)
		}
	}
}

// sniOff is where the server name's bytes start in hsHybrid's ClientHello.
func sniOff(t testing.TB) int {
	i := bytes.Index(hsHybridCH, []byte("pqwatch.test"))
	if i < 101 {
		t.Fatalf("server name at %d", i)
	}
	return i
}

// withSNI is a copy of b with the server name at off replaced (same length).
func withSNI(b []byte, off int, name string) []byte {
	b = append([]byte(nil), b...)
	copy(b[off:], name)
	return b
}

func ceil(a, b int) int { return (a + b - 1) / b }

func rtt(ch, sh time.Time) int64 { return sh.Sub(ch).Microseconds() }

// ---- the cases -------------------------------------------------------------

type rcase struct {
	name string
	cfg  sniffer.Config
	// build makes the capture and returns the expected records (in emit
	// order) and expected error counts; flush says whether the capture
	// ends with Flush.
	build  func(t *testing.T) (c *capture, want []record.Handshake, errs map[string]uint64)
	noFlsh bool
	check  func(t *testing.T, st sniffer.Stats, s *sniffer.Sniffer)
}

// hybridFlow is the common shape: 3-way handshake, the ClientHello in
// segments of chSeg bytes, the server's flight in segments of 1400, close.
func hybridFlow(t *testing.T, chSeg int, setup func(c *capture)) (*capture, record.Handshake) {
	c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
	if setup != nil {
		setup(c)
	}
	c.handshake3()
	chLen := len(hsHybridCH)
	chTS := c.segs(0, 0, chLen, chSeg)
	c.wait(300 * time.Microsecond)
	shTS := c.segs(1, 0, -1, 1400)
	c.segs(0, chLen, -1, 1400)
	c.closeBoth()
	w := wantHybrid(t)
	w.TS = chTS
	w.ClientHelloSegments = ceil(chLen, chSeg)
	w.ClientHelloWireSegments = ceil(chLen, 1460)
	w.HandshakeRTTMicros = rtt(chTS, shTS)
	return c, w
}

func reassemblyCases() []rcase {
	return []rcase{
		{name: "in order, ClientHello split across segments", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c, w := hybridFlow(t, 1000, nil)
			return c, []record.Handshake{w}, nil
		}},
		{name: "ClientHello in 100-byte segments", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c, w := hybridFlow(t, 100, nil)
			return c, []record.Handshake{w}, nil
		}},
		{name: "out of order: second ClientHello segment first", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			c.seg(0, 1000, n)
			chTS := c.seg(0, 0, 1000) // the first byte's segment, captured later
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "retransmissions counted once, first capture time kept", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			chTS := c.seg(0, 0, 700)
			c.seg(0, 0, 700)
			c.seg(0, 700, n)
			c.seg(0, 0, n) // a coalesced retransmission of both
			c.seg(0, 700, n)
			shTS := c.seg(1, 0, 1400)
			c.seg(1, 0, 1400)
			c.segs(1, 1400, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "repacketised retransmission at a new boundary is not a segment", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			chTS := c.seg(0, 0, 700)
			c.seg(0, 300, 600) // carries no new byte
			c.seg(0, 700, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "overlap: the first-captured bytes win over a later in-order segment", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n, sni := len(hsHybridCH), sniOff(t)
			c.seg(0, sni, n) // correct bytes, out of order
			bad := withSNI(hsHybrid.cli[:sni+12], sni, "XXXXXXX.test")
			chTS := c.segData(0, 0, bad) // differs where [sni, sni+12) was captured first
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "overlap: the first-captured bytes win between out-of-order segments", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n, sni := len(hsHybridCH), sniOff(t)
			c.seg(0, sni, sni+12) // correct, first
			bad := withSNI(hsHybrid.cli[:n], sni, "XXXXXXX.test")
			c.segData(0, sni-100, bad[sni-100:]) // differs only where [sni, sni+12) was already captured
			chTS := c.seg(0, 0, sni-100)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 3, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "overlap: a different first copy wins over a later correct one", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n, sni := len(hsHybridCH), sniOff(t)
			bad := withSNI(hsHybrid.cli[:n], sni, "XXXXXXX.test")
			c.seg(0, sni+12, n)
			chTS := c.segData(0, 0, bad[:sni+6])
			c.seg(0, 0, n) // correct, complete, but after the first copy of [0, sni+6); a retransmission: not a new segment
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.SNI = "XXXXXXX.test"[:6] + "pqwatch.test"[6:]
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "overlap: a corrupt first copy wins, the ClientHello is counted malformed, no record", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			bad := append([]byte(nil), hsHybrid.cli[:n]...)
			bad[9+2+32] = 200 // session id length beyond the message
			chTS := c.segData(0, 0, bad[:1000])
			c.seg(0, 0, 1000) // the correct copy comes too late
			c.seg(0, 1000, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			// The ClientHello the capture holds does not parse: it is
			// not a real ClientHello, so there is no record (what the
			// server answered is not read without one).
			_, _ = chTS, shTS
			return c, nil, map[string]uint64{"malformed_client_hello": 1}
		}},
		{name: "SYN not captured: mid-stream start", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			n := len(hsHybridCH)
			chTS := c.segs(0, 0, n, 1000)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.HandshakeRTTMicros = chTS, 2, rtt(chTS, shTS) // no MSS: wire segments omitted
			return c, []record.Handshake{w}, nil
		}},
		{name: "SYN not captured, first segment reordered", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			n := len(hsHybridCH)
			c.seg(0, 1000, n)
			chTS := c.seg(0, 0, 1000)
			c.seg(1, 1400, -1) // the server's flight, reordered too
			shTS := c.seg(1, 0, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.HandshakeRTTMicros = chTS, 2, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "the ClientHello's last segment captured after the ServerHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			chTS := c.seg(0, 0, 1000)
			shTS := c.segs(1, 0, -1, 1400)
			c.seg(0, 1000, n)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "SYN not captured: a stray earlier segment after the ClientHello changes nothing", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			n := len(hsHybridCH)
			chTS := c.seg(0, 0, n)
			c.frame(0, c.isn[0]+1-100, 0x18, make([]byte, 100)) // 100 bytes before the ClientHello
			shTS := c.segs(1, 0, -1, 1400)
			c.seg(0, n, -1)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.HandshakeRTTMicros = chTS, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "the ClientHello's second segment never arrives, then RST: incomplete, with its size", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, 1000)
			c.wait(3 * time.Second)
			c.ctl(1, 0x14)
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(),
				ClientHelloBytes: msgOfType(hsHybrid.cli, 1, false), Outcome: "incomplete"}
			return c, []record.Handshake{w}, nil
		}},
		{name: "the ClientHello's second segment never arrives, capture ends: truncated", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, 1000)
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(),
				ClientHelloBytes: msgOfType(hsHybrid.cli, 1, false), Outcome: "truncated"}
			return c, []record.Handshake{w}, nil
		}},
		{name: "ServerHello captured before the ClientHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			n := len(hsHybridCH)
			c.segs(1, 0, -1, 1400)
			chTS := c.segs(0, 0, n, 1000)
			c.closeBoth()
			w := wantHybrid(t)
			// The RTT would be negative: omitted, not faked.
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments = chTS, 2, ceil(n, 1460)
			return c, []record.Handshake{w}, nil
		}},
		{name: "ClientHello split across 512-byte TLS records", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			cli := refragment(hsHybrid.cli, 1, 512)
			c := newCapture(t, cli, hsHybrid.srv)
			c.mss = [2]uint16{1460, 1000}
			c.handshake3()
			chMsg := msgOfType(hsHybrid.cli, 1, false)
			recBytes := chMsg + 5*ceil(chMsg, 512)
			chTS := c.segs(0, 0, recBytes, 1000)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, ceil(recBytes, 1000), ceil(recBytes, 1000), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "timestamps on both SYNs: 12 bytes less per segment", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			n := len(hsHybridCH)
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.tsOpt = true
			c.mss = [2]uint16{1460, uint16(n + 6)} // fits without timestamps, not with
			c.handshake3()
			chTS := c.seg(0, 0, n) // one GRO-sized segment as captured
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 2, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "no timestamps: the same MSS fits the ClientHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			n := len(hsHybridCH)
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.mss = [2]uint16{1460, uint16(n + 6)}
			c.handshake3()
			chTS := c.seg(0, 0, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "SYN-ACK not captured: the client's MSS", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			n := len(hsHybridCH)
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.mss = [2]uint16{536, 1460}
			c.syn(0)
			chTS := c.seg(0, 0, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, ceil(n, 536), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "HelloRetryRequest then the final ServerHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hsHRR
			crec, srec := tlsRecords(tr.cli), tlsRecords(tr.srv)
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			ch1 := len(crec[0])
			chTS := c.seg(0, 0, ch1)
			hrrTS := c.seg(1, 0, len(srec[0])+len(srec[1])) // HRR + CCS
			c.seg(0, ch1, -1)                               // CCS + second ClientHello (+ Finished)
			c.wait(time.Millisecond)
			c.seg(1, len(srec[0])+len(srec[1]), -1)
			c.closeBoth()
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(), SNI: "pqwatch.test", ALPN: []string{"h2", "http/1.1"},
				OfferedGroups: []string{"secp256r1", "secp384r1"}, KeyShares: []record.KeyShare{{Group: "secp256r1", Bytes: 65}},
				Version: "TLS1.3", Cipher: tls.CipherSuiteName(tr.state.CipherSuite), Group: "secp384r1", HRR: true, HRRGroup: "secp384r1",
				ClientHelloBytes: msgOfType(tr.cli, 1, false), ServerHelloBytes: msgOfType(tr.srv, 2, true),
				ClientHelloSegments: 1, ClientHelloWireSegments: 1, Outcome: "ok", HandshakeRTTMicros: rtt(chTS, hrrTS), JA4: ja4(t, tr.cli)}
			if w.ClientHelloBytes == w.ServerHelloBytes || msgOfType(tr.srv, 2, false) == w.ServerHelloBytes {
				t.Log("HRR and ServerHello have the same size: server_hello_bytes does not tell them apart here")
			}
			return c, []record.Handshake{w}, nil
		}},
		{name: "TLS 1.2: ServerKeyExchange after a large Certificate over many segments", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12Big
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			n := len(tlsRecords(tr.cli)[0])
			chTS := c.seg(0, 0, n)
			shTS := c.seg(1, 0, 500)
			// The rest of the flight in 700-byte segments, the last two swapped.
			var offs []int
			for o := 500; o < len(tr.srv); o += 700 {
				offs = append(offs, o)
			}
			offs[len(offs)-1], offs[len(offs)-2] = offs[len(offs)-2], offs[len(offs)-1]
			for _, o := range offs {
				c.seg(1, o, min(o+700, len(tr.srv)))
			}
			c.closeBoth()
			if len(tr.srv) < 10000 {
				t.Fatalf("server flight only %d bytes", len(tr.srv))
			}
			w := want12(t, tr, "x25519")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "TLS 1.2: several handshake messages in one record", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12
			srv := refragment(tr.srv, 4, 0) // ServerHello, Certificate, ServerKeyExchange, ServerHelloDone
			if len(tlsRecords(srv)[0]) != len(tlsRecords(tr.srv)[0])+len(tlsRecords(tr.srv)[1])+len(tlsRecords(tr.srv)[2])+len(tlsRecords(tr.srv)[3])-15 {
				t.Fatal("the server flight is not four records")
			}
			c := newCapture(t, tr.cli, srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := want12(t, tr, "x25519")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "TLS 1.2: one message split across records", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12
			srv := refragment(tr.srv, 4, 100) // the Certificate spans many records
			c := newCapture(t, tr.cli, srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := want12(t, tr, "x25519")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "TLS 1.2 RSA key exchange: ServerHelloDone, no group", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12RSA
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := want12(t, tr, "")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			w.GroupMissing = record.GroupMissingNoKeyExchange
			return c, []record.Handshake{w}, nil
		}},
		{name: "TLS 1.2 resumption: ChangeCipherSpec after ServerHello, no group", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12Res
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			n := len(tlsRecords(tr.cli)[0])
			chTS := c.seg(0, 0, n)
			shTS := c.segs(1, 0, -1, 1400)
			c.seg(0, n, -1)
			c.closeBoth()
			w := want12(t, tr, "")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			w.Resumed, w.GroupMissing = true, record.GroupMissingResumed
			return c, []record.Handshake{w}, nil
		}},
		{name: "alert before ServerHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hsAlert
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			c.seg(1, 0, -1)
			c.closeBoth()
			if len(tr.srv) != 7 || tr.srv[0] != 21 {
				t.Fatalf("server sent % x, want one alert record", tr.srv)
			}
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(), SNI: "pqwatch.test", ALPN: []string{"h2", "http/1.1"},
				OfferedGroups: []string{"secp256r1"}, KeyShares: []record.KeyShare{{Group: "secp256r1", Bytes: 65}},
				ClientHelloBytes: msgOfType(tr.cli, 1, false), ClientHelloSegments: 1, ClientHelloWireSegments: 1,
				Outcome: "alert", Alert: "handshake_failure", JA4: ja4(t, tr.cli)}
			return c, []record.Handshake{w}, nil
		}},
		{name: "RST before ServerHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, len(hsHybridCH))
			c.ctl(1, 0x14)
			c.segs(1, 0, -1, 1400) // late bytes after the reset change nothing
			w := wantHybrid(t)
			w = noServer(w)
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS, 1, ceil(len(hsHybridCH), 1460), "reset"
			return c, []record.Handshake{w}, nil
		}},
		{name: "FIN before ServerHello", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, len(hsHybridCH))
			c.ctl(1, 0x11)
			w := noServer(wantHybrid(t))
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS, 1, ceil(len(hsHybridCH), 1460), "reset"
			return c, []record.Handshake{w}, nil
		}},
		{name: "idle flow expires: timeout", noFlsh: true, build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, len(hsHybridCH))
			// 31 s later another connection's packet moves capture time on.
			c.wait(31 * time.Second)
			c.cli = netip.MustParseAddrPort("10.0.0.3:40001")
			c.syn(0)
			w := noServer(wantHybrid(t))
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS, 1, ceil(len(hsHybridCH), 1460), "timeout"
			return c, []record.Handshake{w}, nil
		}, check: func(t *testing.T, st sniffer.Stats, s *sniffer.Sniffer) {
			if st.FlowsExpired != 1 || st.FlowsActive != 1 {
				t.Errorf("expired %d active %d, want 1 and 1", st.FlowsExpired, st.FlowsActive)
			}
		}},
		{name: "end of capture: truncated", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.handshake3()
			chTS := c.seg(0, 0, len(hsHybridCH))
			w := noServer(wantHybrid(t))
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS, 1, ceil(len(hsHybridCH), 1460), "truncated"
			return c, []record.Handshake{w}, nil
		}},
		{name: "snaplen cuts the ServerHello: truncated, not reset", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.snap = 14 + 20 + 20 + 60 // Ethernet, IPv4, TCP, 60 bytes of payload
			c.handshake3()
			n := len(hsHybridCH)
			chTS := c.segs(0, 0, n, 60)
			c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := noServer(wantHybrid(t))
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS, ceil(n, 60), ceil(n, 1460), "truncated"
			return c, []record.Handshake{w}, map[string]uint64{"snaplen_truncated": uint64(ceil(len(hsHybrid.srv), 1400))}
		}},
		{name: "snaplen cuts the ClientHello: a truncated record with its size", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
			c.snap = 14 + 20 + 20 + 200
			c.handshake3()
			n := len(hsHybridCH)
			chTS := c.segs(0, 0, n, 1000)
			c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := record.Handshake{TS: chTS, Transport: "tcp", Client: cli4.String(), Server: srv4.String(),
				ClientHelloBytes: msgOfType(hsHybrid.cli, 1, false), Outcome: "truncated"}
			return c, []record.Handshake{w}, map[string]uint64{"snaplen_truncated": uint64(2 + ceil(len(hsHybrid.srv), 1400))}
		}},
		{name: "MaxStreamBytes: overflow counted, the group stays unknown", cfg: sniffer.Config{MaxStreamBytes: 4096}, build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			tr := hs12Big
			c := newCapture(t, tr.cli, tr.srv)
			c.handshake3()
			chTS := c.seg(0, 0, -1)
			shTS := c.segs(1, 0, -1, 1400)
			c.closeBoth()
			w := want12(t, tr, "")
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 1, 1, rtt(chTS, shTS)
			w.GroupMissing = record.GroupMissingUnknown
			return c, []record.Handshake{w}, map[string]uint64{"stream_overflow": 1, "server_key_exchange_missing": 1}
		}},
		{name: "STARTTLS prelude, ClientHello at a segment boundary", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			cpre := []byte("EHLO client.example\r\nSTARTTLS\r\n")
			spre := []byte("220 mx.example ESMTP ready\r\n250-mx.example\r\n250 STARTTLS\r\n220 2.0.0 Ready to start TLS\r\n")
			cli := append(append([]byte(nil), cpre...), hsHybrid.cli...)
			srv := append(append([]byte(nil), spre...), hsHybrid.srv...)
			c := newCapture(t, cli, srv)
			c.cli, c.srv = netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:25")
			c.handshake3()
			c.seg(1, 0, 28)
			c.seg(0, 0, 21)
			c.seg(1, 28, 59)
			c.seg(0, 21, 31)
			c.seg(1, 59, len(spre))
			n := len(hsHybridCH)
			chTS := c.segs(0, len(cpre), len(cpre)+n, 1000)
			shTS := c.segs(1, len(spre), -1, 1400)
			c.closeBoth()
			w := wantHybrid(t)
			w.Server = "10.0.0.1:25"
			w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.HandshakeRTTMicros = chTS, 2, ceil(n, 1460), rtt(chTS, shTS)
			return c, []record.Handshake{w}, nil
		}},
		{name: "plain HTTP is ignored", build: func(t *testing.T) (*capture, []record.Handshake, map[string]uint64) {
			c := newCapture(t, []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			c.srv = netip.MustParseAddrPort("10.0.0.1:80")
			c.handshake3()
			c.seg(0, 0, -1)
			c.seg(1, 0, -1)
			c.closeBoth()
			return c, nil, nil
		}},
	}
}

// noServer strips what only the server's reply gives.
func noServer(w record.Handshake) record.Handshake {
	w.Version, w.Cipher, w.Group, w.PQ, w.ServerHelloBytes, w.HandshakeRTTMicros = "", "", "", false, 0, 0
	return w
}

func runCase(t *testing.T, tc rcase, mutate func(c *capture)) {
	c, want, errs := tc.build(t)
	if mutate != nil {
		mutate(c)
	}
	recs, st, s := feed(tc.cfg, c.link(), c.pkts, !tc.noFlsh)
	if len(recs) != len(want) {
		for _, r := range recs {
			t.Logf("got %+v", *r)
		}
		t.Fatalf("%d records, want %d (stats %+v)", len(recs), len(want), st)
	}
	for i := range want {
		checkRecord(t, recs[i], want[i])
	}
	if errs == nil {
		errs = map[string]uint64{}
	}
	if !reflect.DeepEqual(st.Errors, errs) {
		t.Errorf("errors %v, want %v", st.Errors, errs)
	}
	if st.Records != uint64(len(want)) {
		t.Errorf("Stats.Records %d, want %d", st.Records, len(want))
	}
	if tc.check != nil {
		tc.check(t, st, s)
	}
}

// TestReassembly: every case, over Ethernet/IPv4.
func TestReassembly(t *testing.T) {
	transcripts(t)
	for _, tc := range reassemblyCases() {
		t.Run(tc.name, func(t *testing.T) { runCase(t, tc, nil) })
	}
}

// TestFramings: the same handshake in every link framing and over IPv6 with
// extension headers gives the same record (addresses aside).
func TestFramings(t *testing.T) {
	transcripts(t)
	for _, fr := range []struct {
		name    string
		framing framing
		v6, ext bool
	}{
		{"ethernet", fEther, false, false}, {"802.1Q", fVLAN, false, false}, {"QinQ", fQinQ, false, false},
		{"Linux SLL", fSLL, false, false}, {"Linux SLL2", fSLL2, false, false}, {"raw IP", fRaw, false, false},
		{"BSD loopback", fNull, false, false}, {"IPv6", fEther, true, false}, {"IPv6 hop-by-hop + destination options", fEther, true, true},
		{"IPv6 in QinQ", fQinQ, true, true}, {"IPv6 SLL2", fSLL2, true, true}, {"IPv6 raw", fRaw, true, true}, {"IPv6 BSD loopback", fNull, true, false},
	} {
		t.Run(fr.name, func(t *testing.T) {
			c, w := hybridFlow(t, 1000, func(c *capture) {
				c.framing, c.v6, c.ext = fr.framing, fr.v6, fr.ext
				if fr.v6 {
					c.cli, c.srv = cli6, srv6
				}
			})
			if fr.v6 {
				w.Client, w.Server = "[2001:db8::2]:40000", "[2001:db8::1]:443"
			}
			recs, st, _ := feed(sniffer.Config{}, c.link(), c.pkts, true)
			if len(recs) != 1 {
				t.Fatalf("%d records (stats %+v)", len(recs), st)
			}
			checkRecord(t, recs[0], w)
			if len(st.Errors) != 0 {
				t.Errorf("errors %v", st.Errors)
			}
		})
	}
}

// TestPortFilter: Config.Ports narrows what is examined.
func TestPortFilter(t *testing.T) {
	transcripts(t)
	for _, tc := range []struct {
		ports []uint16
		recs  int
	}{{nil, 1}, {[]uint16{443}, 1}, {[]uint16{8443, 40000}, 1}, {[]uint16{8443}, 0}} {
		t.Run(fmt.Sprint(tc.ports), func(t *testing.T) {
			c, _ := hybridFlow(t, 1000, nil)
			recs, st, _ := feed(sniffer.Config{Ports: tc.ports}, c.link(), c.pkts, true)
			if len(recs) != tc.recs {
				t.Errorf("%d records, want %d", len(recs), tc.recs)
			}
			if wantF := uint64(len(c.pkts) * (1 - tc.recs)); st.Filtered != wantF {
				t.Errorf("filtered %d, want %d", st.Filtered, wantF)
			}
		})
	}
}

// TestFlowTableCap: the least recently active flow is evicted (outcome
// timeout) when the table is full, and counted.
func TestFlowTableCap(t *testing.T) {
	transcripts(t)
	var pkts []pkt
	var chTS []time.Time
	now := t0
	for i := range 3 {
		c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
		c.now = now
		c.cli = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + i)}), uint16(40000+i))
		c.handshake3()
		chTS = append(chTS, c.seg(0, 0, len(hsHybridCH)))
		now = c.now
		pkts = append(pkts, c.pkts...)
	}
	recs, st, _ := feed(sniffer.Config{MaxFlows: 2}, sniffer.LinkEthernet, pkts, false)
	if st.FlowsEvicted != 1 || st.FlowsActive != 2 || len(recs) != 1 {
		t.Fatalf("evicted %d active %d records %d, want 1, 2, 1", st.FlowsEvicted, st.FlowsActive, len(recs))
	}
	w := noServer(wantHybrid(t))
	w.TS, w.ClientHelloSegments, w.ClientHelloWireSegments, w.Outcome = chTS[0], 1, ceil(len(hsHybridCH), 1460), "timeout"
	checkRecord(t, recs[0], w)
}

// TestExpireDirect: Expire finishes idle flows by capture time; a flow
// with activity after the cut survives.
func TestExpireDirect(t *testing.T) {
	transcripts(t)
	c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
	c.handshake3()
	chTS := c.seg(0, 0, len(hsHybridCH))
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{FlowTimeout: 5 * time.Second, OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	for _, p := range c.pkts {
		s.Packet(p.ts, c.link(), p.data)
	}
	s.Expire(chTS.Add(5 * time.Second))
	if len(recs) != 0 {
		t.Fatalf("expired early: %+v", *recs[0])
	}
	s.Expire(chTS.Add(5*time.Second + time.Nanosecond))
	st := s.Stats()
	if len(recs) != 1 || recs[0].Outcome != "timeout" || st.FlowsExpired != 1 || st.FlowsActive != 0 {
		t.Fatalf("records %d, stats %+v", len(recs), st)
	}
}

// TestNonTLSNoAllocs: packets of a plaintext flow, once it is classified,
// cost no allocation (TestPacketPathNoAllocs covers a finished TLS flow).
func TestNonTLSNoAllocs(t *testing.T) {
	body := make([]byte, 64<<10)
	copy(body, "GET /big HTTP/1.1\r\nHost: example\r\n\r\n")
	c := newCapture(t, body[:40], body)
	c.srv = netip.MustParseAddrPort("10.0.0.1:80")
	c.handshake3()
	c.seg(0, 0, -1)
	c.segs(1, 0, -1, 1400)
	s := sniffer.New(sniffer.Config{})
	for _, p := range c.pkts[:6] {
		s.Packet(p.ts, c.link(), p.data)
	}
	rest := c.pkts[6:]
	allocs := testing.AllocsPerRun(50, func() {
		for _, p := range rest {
			s.Packet(p.ts, c.link(), p.data)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per %d plaintext packets, want 0", allocs, len(rest))
	}
	// An unclassified mid-stream flow that never shows TLS costs nothing
	// either once it is given up on.
	c2 := newCapture(t, nil, make([]byte, 64<<10)) // not HTTP, not TLS: given up after MaxPlaintextScan
	c2.cli = netip.MustParseAddrPort("10.0.0.9:40009")
	c2.segs(1, 0, -1, 1400)
	for _, p := range c2.pkts[:8] {
		s.Packet(p.ts, c2.link(), p.data)
	}
	rest = c2.pkts[8:]
	allocs = testing.AllocsPerRun(50, func() {
		for _, p := range rest {
			s.Packet(p.ts, c2.link(), p.data)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per %d packets of a given-up flow, want 0", allocs, len(rest))
	}
}

// TestPortReuseWithoutClose: a connection on the endpoints of a finished
// one whose FINs were never captured (the eBPF capture filter keeps a
// decided flow's FINs out of the rings; a client reuses its port) gets its
// own record; the first connection's SYN seen again is a retransmission
// and changes nothing.
func TestPortReuseWithoutClose(t *testing.T) {
	transcripts(t)
	var pkts []pkt
	now := t0
	for i := range 2 {
		c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
		c.now = now
		c.isn = [2]uint32{1000 + uint32(i)*100000, 77777 + uint32(i)*100000}
		c.handshake3()
		c.seg(0, 0, -1)
		c.seg(1, 0, -1)
		if i == 0 {
			c.syn(0) // a stray copy of the first SYN after the record
		}
		now = c.now.Add(time.Second)
		pkts = append(pkts, c.pkts...)
	}
	recs, st, _ := feed(sniffer.Config{}, sniffer.LinkEthernet, pkts, false)
	if len(recs) != 2 || st.Flows != 2 {
		t.Fatalf("%d records from %d flows, want 2 and 2", len(recs), st.Flows)
	}
	for _, r := range recs {
		if r.Outcome != "ok" || r.Group != "X25519MLKEM768" {
			t.Errorf("record %s %s, want ok X25519MLKEM768", r.Outcome, r.Group)
		}
	}
}
