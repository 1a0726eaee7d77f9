// Package pcapgen writes capture files of real TLS handshakes without a
// network or privileges: a crypto/tls client and server talk over an
// in-memory pipe, and every byte each side writes becomes TCP segments (at a
// chosen MSS, with SYN, ACKs and FIN) in a pcap file. The handshakes are real
// — real key shares, real HelloRetryRequests, real alerts — only the packet
// headers are synthesised. pqwatch uses it for the demo's fallback, for the
// testdata capture and for benchmark captures with bulk traffic.
package pcapgen

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Client describes one connection's client.
type Client struct {
	Name   string
	Curves []tls.CurveID // key-share preference; nil = Go's default (hybrid first)
	MaxTLS uint16        // 0 = TLS 1.3
	SNI    string
	// BulkBytes of application data the server sends after the handshake.
	BulkBytes int
}

// Result is what the client itself saw, the ground truth for tests.
type Result struct {
	Client     string
	ClientAddr netip.AddrPort
	Group      tls.CurveID // negotiated (0 when the handshake failed)
	HRR        bool
	Version    uint16
	Err        error
}

// Config describes a capture.
type Config struct {
	// ServerCurves is the server's preference; nil = Go's default.
	ServerCurves []tls.CurveID
	Clients      []Client
	// MSS of the synthesised segments. Default 1460 (Ethernet).
	MSS int
	// Start is the first packet's time; zero = a fixed date, so output is
	// reproducible apart from the cryptographic randomness.
	Start time.Time
	// Server address; clients get 10.0.0.2.. with ports from 40000.
	Server netip.AddrPort
	// Certificate is the server's; nil: a fresh ECDSA P-256 one
	// (SelfSigned). ECDSA signatures vary in length by a byte or two, and
	// with them the segments and times of a capture; with
	// FixedCertificate every message has the same size in every run, so
	// the records analyze writes are the same bytes (the golden tests).
	Certificate *tls.Certificate
}

// Writer emits Ethernet/IPv4/TCP frames into a pcap.
type Writer struct {
	w   *pcapgo.Writer
	now time.Time
	buf gopacket.SerializeBuffer
}

// NewWriter writes a pcap header (Ethernet link type) to w.
func NewWriter(w io.Writer, start time.Time) (*Writer, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcapgen: %w", err)
	}
	return &Writer{w: pw, now: start, buf: gopacket.NewSerializeBuffer()}, nil
}

// tcpConn is one synthesised connection's sequence state.
type tcpConn struct {
	w        *Writer
	cli, srv netip.AddrPort
	seq      [2]uint32 // next sequence number per direction (0 = client)
	mss      int
}

func (c *tcpConn) frame(dir int, flags uint8, payload []byte, mss uint16) error {
	src, dst := c.cli, c.srv
	if dir == 1 {
		src, dst = dst, src
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(dir + 1)}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(2 - dir)}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice(), Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: c.seq[dir], Ack: c.seq[1-dir], Window: 65535,
		SYN: flags&0x02 != 0, ACK: flags&0x10 != 0, FIN: flags&0x01 != 0, PSH: len(payload) > 0, RST: flags&0x04 != 0}
	if flags&0x02 != 0 && flags&0x10 == 0 {
		tcp.Ack = 0
		tcp.ACK = false
	}
	if mss > 0 {
		tcp.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: binary.BigEndian.AppendUint16(nil, mss)}}
	}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	if err := gopacket.SerializeLayers(c.w.buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		return err
	}
	data := c.w.buf.Bytes()
	c.w.now = c.w.now.Add(20 * time.Microsecond)
	if err := c.w.w.WritePacket(gopacket.CaptureInfo{Timestamp: c.w.now, CaptureLength: len(data), Length: len(data)}, data); err != nil {
		return err
	}
	c.seq[dir] += uint32(len(payload))
	if flags&(0x02|0x01) != 0 {
		c.seq[dir]++
	}
	return nil
}

func (c *tcpConn) data(dir int, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), c.mss)
		if err := c.frame(dir, 0x10, b[:n], 0); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Generate runs every client in turn against a fresh server and writes the
// capture. It returns what each client saw.
func Generate(ctx context.Context, out io.Writer, cfg Config) ([]Result, error) {
	if cfg.MSS <= 0 {
		cfg.MSS = 1460
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	}
	if !cfg.Server.IsValid() {
		cfg.Server = netip.MustParseAddrPort("10.0.0.1:443")
	}
	w, err := NewWriter(out, cfg.Start)
	if err != nil {
		return nil, err
	}
	var cert tls.Certificate
	if cfg.Certificate != nil {
		cert = *cfg.Certificate
	} else if cert, err = SelfSigned("pqwatch.test"); err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(cfg.Clients))
	base := cfg.Server.Addr().As4()
	for i, cl := range cfg.Clients {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		ca := base
		ca[3] = byte(2 + i%200)
		conn := &tcpConn{w: w, cli: netip.AddrPortFrom(netip.AddrFrom4(ca), uint16(40000+i%20000)), srv: cfg.Server, mss: cfg.MSS,
			seq: [2]uint32{uint32(1000 + i*7919), uint32(5000 + i*104729)}}
		res, err := conn.run(cfg, cl, cert)
		if err != nil {
			return results, err
		}
		res.ClientAddr = conn.cli
		results = append(results, res)
		w.now = w.now.Add(time.Millisecond)
	}
	return results, nil
}

type chunk struct {
	dir  int
	data []byte
}

// tap records what one side writes.
type tap struct {
	net.Conn
	dir int
	mu  *sync.Mutex
	log *[]chunk
}

func (t *tap) Write(b []byte) (int, error) {
	t.mu.Lock()
	*t.log = append(*t.log, chunk{t.dir, append([]byte(nil), b...)})
	t.mu.Unlock()
	return t.Conn.Write(b)
}

func (c *tcpConn) run(cfg Config, cl Client, cert tls.Certificate) (Result, error) {
	res := Result{Client: cl.Name}
	cp, sp := pipe()
	var mu sync.Mutex
	var log []chunk
	srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: cfg.ServerCurves, SessionTicketsDisabled: true}
	cliCfg := &tls.Config{InsecureSkipVerify: true, CurvePreferences: cl.Curves, ServerName: cl.SNI, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	srvCfg.NextProtos = []string{"http/1.1"}
	if cl.MaxTLS != 0 {
		cliCfg.MaxVersion = cl.MaxTLS
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(&tap{Conn: sp, dir: 1, mu: &mu, log: &log}, srvCfg)
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		if err := s.Handshake(); err != nil {
			sp.Close()
			return
		}
		buf := make([]byte, 512)
		if _, err := s.Read(buf); err == nil && cl.BulkBytes > 0 {
			body := make([]byte, cl.BulkBytes)
			_, _ = s.Write(body)
		}
		_ = s.Close()
		sp.Close()
	}()
	tc := tls.Client(&tap{Conn: cp, dir: 0, mu: &mu, log: &log}, cliCfg)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	err := tc.Handshake()
	if err != nil {
		res.Err = err
	} else {
		st := tc.ConnectionState()
		res.Group = st.CurveID
		res.HRR = st.HelloRetryRequest
		res.Version = st.Version
		_, _ = tc.Write([]byte("GET / HTTP/1.1\r\nHost: pqwatch.test\r\n\r\n"))
		// Read the response and the server's close_notify; the server
		// closes its end after that.
		_, _ = io.Copy(io.Discard, tc)
	}
	_ = tc.Close()
	cp.Close()
	<-done
	// Synthesise the TCP conversation.
	mss := uint16(c.mss)
	if err := c.frame(0, 0x02, nil, mss); err != nil {
		return res, err
	}
	if err := c.frame(1, 0x12, nil, mss); err != nil {
		return res, err
	}
	if err := c.frame(0, 0x10, nil, 0); err != nil {
		return res, err
	}
	for _, ch := range log {
		if err := c.data(ch.dir, ch.data); err != nil {
			return res, err
		}
		c.w.now = c.w.now.Add(100 * time.Microsecond)
	}
	if err := c.frame(0, 0x11, nil, 0); err != nil {
		return res, err
	}
	if err := c.frame(1, 0x11, nil, 0); err != nil {
		return res, err
	}
	return res, c.frame(0, 0x10, nil, 0)
}

// SelfSigned returns a fresh ECDSA P-256 certificate for name.
func SelfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour * 365),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// FixedCertificate returns the same Ed25519 certificate for name on every
// call: a key from a fixed seed, fixed validity (2026 to 2036). Ed25519
// signatures have one length and no randomness, so a capture made with it
// (Config.Certificate) differs from run to run only in the bytes of its
// keys, shares and randoms, never in a size or a time.
func FixedCertificate(name string) (tls.Certificate, error) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name, "localhost"},
		NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// DemoServerCurves is the demo server's preference: hybrid first, no P-256,
// so the client mix below shows every case.
var DemoServerCurves = []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP384}

// DefaultClients is the demo's client mix against DemoServerCurves: hybrid,
// classical-only, one that triggers a HelloRetryRequest (crypto/tls sends a
// P-256 share and lists P-384 second), TLS 1.2, and a P-256-only client the
// server refuses (handshake_failure).
func DefaultClients(n int) []Client {
	mix := []Client{
		{Name: "hybrid", Curves: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}, SNI: "pqwatch.test"},
		{Name: "classical", Curves: []tls.CurveID{tls.X25519}, SNI: "pqwatch.test"},
		{Name: "p256only", Curves: []tls.CurveID{tls.CurveP256}, SNI: "pqwatch.test"},
		{Name: "hrr", Curves: []tls.CurveID{tls.CurveP256, tls.CurveP384}, SNI: "pqwatch.test"},
		{Name: "tls12", Curves: []tls.CurveID{tls.X25519, tls.CurveP256}, MaxTLS: tls.VersionTLS12, SNI: "pqwatch.test"},
	}
	out := make([]Client, 0, n)
	for i := range n {
		out = append(out, mix[i%len(mix)])
	}
	return out
}

// ErrNoClients is returned when Config has no clients.
var ErrNoClients = errors.New("pcapgen: no clients")
