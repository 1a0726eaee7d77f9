package tlsparse

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

var update = flag.Bool("update", false, "rewrite testdata golden handshake captures from a live crypto/tls handshake")

// ---------------------------------------------------------------------------
// Synthetic message builders (cryptobyte.Builder, as crypto/tls marshals).

type ext struct {
	typ  uint16
	data []byte
}

type chSpec struct {
	legacyVersion uint16
	sessionIDLen  int
	ciphers       []uint16
	compression   []byte
	noExtensions  bool
	exts          []ext
}

func buildClientHello(s chSpec) []byte {
	var b cryptobyte.Builder
	b.AddUint8(TypeClientHello)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(s.legacyVersion)
		b.AddBytes(make([]byte, 32))
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, s.sessionIDLen)) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, c := range s.ciphers {
				b.AddUint16(c)
			}
		})
		comp := s.compression
		if comp == nil {
			comp = []byte{0}
		}
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(comp) })
		if s.noExtensions {
			return
		}
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range s.exts {
				b.AddUint16(e.typ)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
			}
		})
	})
	return b.BytesOrPanic()
}

func u16list(prefixLen int, vs ...uint16) []byte {
	var b cryptobyte.Builder
	add := func(b *cryptobyte.Builder) {
		for _, v := range vs {
			b.AddUint16(v)
		}
	}
	if prefixLen == 1 {
		b.AddUint8LengthPrefixed(add)
	} else {
		b.AddUint16LengthPrefixed(add)
	}
	return b.BytesOrPanic()
}

func sniExt(name string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(0)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(name)) })
	})
	return ext{ExtServerName, b.BytesOrPanic()}
}

func alpnExt(protos ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, p := range protos {
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(p)) })
		}
	})
	return ext{ExtALPN, b.BytesOrPanic()}
}

func keyShareExt(shares ...KeyShare) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, s := range shares {
			b.AddUint16(uint16(s.Group))
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, s.Len)) })
		}
	})
	return ext{ExtKeyShare, b.BytesOrPanic()}
}

func groupsExt(gs ...uint16) ext   { return ext{ExtSupportedGroups, u16list(2, gs...)} }
func versionsExt(vs ...uint16) ext { return ext{ExtSupportedVersions, u16list(1, vs...)} }
func sigAlgsExt(vs ...uint16) ext  { return ext{ExtSignatureAlgorithms, u16list(2, vs...)} }

// chromeSigAlgs is Chrome's signature_algorithms list.
var chromeSigAlgs = []uint16{0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601}

// chromeLikeClientHello is shaped like a Chrome 13x ClientHello offering
// X25519MLKEM768 with GREASE and ECH: about 1.9 KB, 16 extensions.
func chromeLikeClientHello() []byte {
	return buildClientHello(chSpec{
		legacyVersion: VersionTLS12,
		sessionIDLen:  32,
		ciphers: []uint16{0x4a4a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8,
			0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		exts: []ext{
			{0x3a3a, nil},
			{ExtPSKModes, []byte{1, 1}},
			keyShareExt(KeyShare{0x2a2a, 1}, KeyShare{GroupX25519MLKEM768, 1216}, KeyShare{GroupX25519, 32}),
			alpnExt("h2", "http/1.1"),
			{ExtECH, make([]byte, 250)},
			{ExtExtendedMasterSecret, nil},
			{0x44cd, []byte{0, 3, 2, 'h', '2'}},
			sniExt("www.example.com"),
			{ExtECPointFormats, []byte{1, 0}},
			groupsExt(0x2a2a, 0x11ec, 0x001d, 0x0017, 0x0018),
			versionsExt(0x9a9a, VersionTLS13, VersionTLS12),
			{ExtRenegotiationInfo, []byte{0}},
			{ExtSessionTicket, nil},
			{ExtSCT, nil},
			{ExtStatusRequest, []byte{1, 0, 0, 0, 0}},
			sigAlgsExt(chromeSigAlgs...),
			{ExtCompressCertificate, []byte{2, 0, 2}},
			{0xdada, []byte{0}},
		},
	})
}

type shSpec struct {
	version   uint16
	random    []byte
	sessionID []byte // nil: 32 zero bytes
	cipher    uint16
	exts      []ext
}

func buildServerHello(s shSpec) []byte {
	var b cryptobyte.Builder
	b.AddUint8(TypeServerHello)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(s.version)
		r := s.random
		if r == nil {
			r = make([]byte, 32)
		}
		b.AddBytes(r)
		sid := s.sessionID
		if sid == nil {
			sid = make([]byte, 32)
		}
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(sid) })
		b.AddUint16(s.cipher)
		b.AddUint8(0)
		if s.exts == nil {
			return
		}
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range s.exts {
				b.AddUint16(e.typ)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
			}
		})
	})
	return b.BytesOrPanic()
}

// tls13ServerHello is a TLS 1.3 ServerHello selecting g with a key share of n bytes.
func tls13ServerHello(g Group, n int) []byte {
	var ks cryptobyte.Builder
	ks.AddUint16(uint16(g))
	ks.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, n)) })
	return buildServerHello(shSpec{
		version: VersionTLS12,
		cipher:  0x1301,
		exts: []ext{
			{ExtSupportedVersions, []byte{3, 4}},
			{ExtKeyShare, ks.BytesOrPanic()},
		},
	})
}

func handshakeMsg(typ uint8, body []byte) []byte {
	var b cryptobyte.Builder
	b.AddUint8(typ)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(body) })
	return b.BytesOrPanic()
}

// ecdheSKE builds an ECDHE named-curve ServerKeyExchange with a TLS 1.2 signature.
func ecdheSKE(g Group, pointLen int) []byte {
	var b cryptobyte.Builder
	b.AddUint8(3)
	b.AddUint16(uint16(g))
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, pointLen)) })
	b.AddUint16(0x0403)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 71)) })
	return handshakeMsg(TypeServerKeyExchange, b.BytesOrPanic())
}

// dheSKE builds a DHE ServerKeyExchange with a prime of pLen bytes.
func dheSKE(pLen int) []byte {
	var b cryptobyte.Builder
	for _, n := range []int{pLen, 1, pLen} {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			v := make([]byte, n)
			v[0] = 3
			b.AddBytes(v)
		})
	}
	b.AddUint16(0x0804)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 256)) })
	return handshakeMsg(TypeServerKeyExchange, b.BytesOrPanic())
}

// ---------------------------------------------------------------------------
// Live capture of crypto/tls handshakes over net.Pipe.

// tapConn records what the client writes (its flight) and reads (the server's).
type tapConn struct {
	net.Conn
	mu            sync.Mutex
	wrote, readIn []byte
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.readIn = append(c.readIn, p[:n]...)
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.wrote = append(c.wrote, p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func selfSignedCert(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "example.com"},
		DNSNames:     []string{"example.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// captureHandshake runs a full crypto/tls handshake over loopback TCP (the
// kernel buffers both directions, which the TLS 1.3 middlebox-compatibility
// flights need) and returns the handshake messages each side sent in
// cleartext records.
func captureHandshake(t testing.TB, ccfg, scfg *tls.Config) (client, server [][]byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	scfg = scfg.Clone()
	scfg.SessionTicketsDisabled = true
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		_ = c.SetDeadline(deadline)
		srv := tls.Server(c, scfg)
		errc <- srv.Handshake()
		_ = srv.Close()
	}()
	c1, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c1.SetDeadline(deadline)
	tap := &tapConn{Conn: c1}
	cli := tls.Client(tap, ccfg)
	cerr := cli.Handshake()
	if cerr == nil {
		// Read until the server closes so its whole flight is recorded.
		_, _ = io.Copy(io.Discard, cli)
	}
	_ = cli.Close()
	if serr := <-errc; serr != nil || cerr != nil {
		t.Fatalf("handshake: client %v, server %v", cerr, serr)
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return splitHandshakes(t, tap.wrote), splitHandshakes(t, tap.readIn)
}

// splitHandshakes reassembles the cleartext handshake records at the start
// of a TLS byte stream (skipping change_cipher_spec) and splits them into
// messages. It stops at the first other record (encrypted from there on).
func splitHandshakes(t testing.TB, stream []byte) [][]byte {
	t.Helper()
	var hs []byte
	for len(stream) >= RecordHeaderLen {
		h, err := ParseRecordHeader(stream)
		if err != nil || len(stream) < RecordHeaderLen+h.Length {
			break
		}
		payload := stream[RecordHeaderLen : RecordHeaderLen+h.Length]
		stream = stream[RecordHeaderLen+h.Length:]
		if h.ContentType == ContentChangeCipherSpec {
			continue
		}
		if h.ContentType != ContentHandshake {
			break
		}
		hs = append(hs, payload...)
	}
	var msgs [][]byte
	for len(hs) >= HandshakeHeaderLen {
		_, n, _ := ParseHandshakeHeader(hs)
		if len(hs) < n {
			break
		}
		msgs = append(msgs, hs[:n:n])
		hs = hs[n:]
	}
	return msgs
}

func findMsg(msgs [][]byte, typ uint8) []byte {
	for _, m := range msgs {
		if m[0] == typ {
			return m
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Golden captures under testdata/ (hex, one message per file).

type goldenCapture struct {
	name    string
	typ     uint8
	which   int // 0: client flight, 1: server flight
	nth     int // nth message of typ in that flight
	capture func(t testing.TB) (client, server [][]byte)
}

func goClientConfig(curves ...tls.CurveID) *tls.Config {
	return &tls.Config{ServerName: "example.com", InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}, CurvePreferences: curves}
}

var goldenCaptures = []goldenCapture{
	{"go_mlkem_ch", TypeClientHello, 0, 0, captureMLKEM},
	{"go_mlkem_sh", TypeServerHello, 1, 0, captureMLKEM},
	{"go_hrr_ch2", TypeClientHello, 0, 1, captureHRR},
	{"go_hrr_hrr", TypeServerHello, 1, 0, captureHRR},
	{"go_hrr_sh", TypeServerHello, 1, 1, captureHRR},
	{"go_tls12_ch", TypeClientHello, 0, 0, captureTLS12},
	{"go_tls12_sh", TypeServerHello, 1, 0, captureTLS12},
	{"go_tls12_ske", TypeServerKeyExchange, 1, 0, captureTLS12},
}

func captureMLKEM(t testing.TB) ([][]byte, [][]byte) {
	cert := selfSignedCert(t)
	return captureHandshake(t,
		goClientConfig(tls.X25519MLKEM768, tls.X25519, tls.CurveP256),
		&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
}

func captureHRR(t testing.TB) ([][]byte, [][]byte) {
	cert := selfSignedCert(t)
	return captureHandshake(t,
		goClientConfig(tls.X25519MLKEM768, tls.X25519, tls.CurveP256),
		&tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: []tls.CurveID{tls.CurveP256}})
}

func captureTLS12(t testing.TB) ([][]byte, [][]byte) {
	cert := selfSignedCert(t)
	ccfg := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CurvePreferences: []tls.CurveID{tls.CurveP256, tls.X25519}}
	return captureHandshake(t, ccfg,
		&tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: []tls.CurveID{tls.CurveP256}})
}

func nthMsg(msgs [][]byte, typ uint8, nth int) []byte {
	for _, m := range msgs {
		if m[0] == typ {
			if nth == 0 {
				return m
			}
			nth--
		}
	}
	return nil
}

// loadGolden returns the named capture from testdata, regenerating all of
// them first when -update is set.
func loadGolden(t testing.TB, name string) []byte {
	t.Helper()
	goldenOnce.Do(func() {
		if *update {
			writeGolden(t)
		}
	})
	b, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	if err != nil {
		t.Fatalf("golden %s: %v (run go test -run TestGolden -update)", name, err)
	}
	msg, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("golden %s: %v", name, err)
	}
	return msg
}

var goldenOnce sync.Once

func writeGolden(t testing.TB) {
	flights := map[string][2][][]byte{}
	for _, g := range goldenCaptures {
		key := fmt.Sprintf("%p", g.capture)
		f, ok := flights[key]
		if !ok {
			c, s := g.capture(t)
			f = [2][][]byte{c, s}
			flights[key] = f
		}
		msg := nthMsg(f[g.which], g.typ, g.nth)
		if msg == nil {
			t.Fatalf("capture %s: no message of type %d", g.name, g.typ)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", g.name+".hex"), []byte(hex.EncodeToString(msg)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ---------------------------------------------------------------------------
// An independent, string-based JA4: the spec read literally, used as oracle.

func refJA4(ch *ClientHello, transport byte) (hashed, raw string) {
	notGrease := func(vs []uint16) []string {
		var out []string
		for _, v := range vs {
			if !IsGREASE(v) {
				out = append(out, fmt.Sprintf("%04x", v))
			}
		}
		return out
	}
	ver := ch.LegacyVersion
	if sv := notGrease(ch.SupportedVersions); len(sv) > 0 {
		sort.Strings(sv)
		fmt.Sscanf(sv[len(sv)-1], "%04x", &ver)
	}
	vs := map[uint16]string{0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3", 0x0002: "s2", 0xfeff: "d1", 0xfefd: "d2", 0xfefc: "d3"}[ver]
	if vs == "" {
		vs = "00"
	}
	sni := "i"
	var exts []string
	for _, e := range notGrease(ch.Extensions) {
		if e == "0000" {
			sni = "d"
		}
		if e != "0000" && e != "0010" {
			exts = append(exts, e)
		}
	}
	ciphers := notGrease(ch.CipherSuites)
	alpn := "00"
	if len(ch.ALPN) > 0 && len(ch.ALPN[0]) > 0 {
		a := ch.ALPN[0]
		f, l := a[0], a[len(a)-1]
		alnum := func(c byte) bool {
			return strings.IndexByte("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", c) >= 0
		}
		if alnum(f) && alnum(l) {
			alpn = string([]byte{f, l})
		} else {
			h := hex.EncodeToString(a)
			alpn = h[:1] + h[len(h)-1:]
		}
	}
	a := fmt.Sprintf("%c%s%s%02d%02d%s", transport, vs, sni, min(len(ciphers), 99), min(len(notGrease(ch.Extensions)), 99), alpn)
	sort.Strings(ciphers)
	sort.Strings(exts)
	cs := strings.Join(ciphers, ",")
	es := strings.Join(exts, ",")
	if sigs := notGrease(ch.SignatureAlgorithms); len(sigs) > 0 {
		es += "_" + strings.Join(sigs, ",")
	}
	h12 := func(s string, empty bool) string {
		if empty {
			return "000000000000"
		}
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])[:12]
	}
	hashed = a + "_" + h12(cs, len(ciphers) == 0) + "_" + h12(es, len(exts) == 0)
	raw = a + "_" + cs + "_" + es
	return hashed, raw
}
