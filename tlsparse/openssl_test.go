package tlsparse

import (
	"context"
	"io"
	"net"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestOpenSSLClientHello parses a ClientHello sent by a real OpenSSL
// s_client to a loopback listener that reads it and hangs up.
func TestOpenSSLClientHello(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl binary not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", ln.Addr().String(),
		"-servername", "example.com", "-alpn", "h2,http/1.1", "-groups", "X25519:P-256")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var stream []byte
	buf := make([]byte, 4096)
	var msg []byte
	for msg == nil {
		n, err := c.Read(buf)
		stream = append(stream, buf[:n]...)
		if m, ok := firstHandshakeMessage(stream); ok {
			msg = m
			break
		}
		if err == io.EOF || err != nil {
			t.Fatalf("after %d bytes: %v", len(stream), err)
		}
	}
	if !LooksLikeTLS(stream) {
		t.Errorf("LooksLikeTLS(%x...) = false", stream[:6])
	}
	var ch ClientHello
	if err := ch.Parse(msg); err != nil {
		t.Fatal(err)
	}
	if string(ch.ServerName) != "example.com" || len(ch.ALPN) != 2 || string(ch.ALPN[0]) != "h2" {
		t.Errorf("SNI %q ALPN %q", ch.ServerName, ch.ALPN)
	}
	if !slices.Equal(ch.SupportedGroups, []Group{GroupX25519, GroupSecp256r1}) {
		t.Errorf("SupportedGroups = %v", ch.SupportedGroups)
	}
	if len(ch.KeyShares) != 1 || ch.KeyShares[0] != (KeyShare{GroupX25519, 32}) {
		t.Errorf("KeyShares = %v", ch.KeyShares)
	}
	if ch.PQOffered() {
		t.Error("PQOffered = true for X25519:P-256")
	}
	got := string(AppendJA4(nil, &ch, TransportTCP))
	if want, _ := refJA4(&ch, TransportTCP); got != want {
		t.Errorf("JA4 %s, reference %s", got, want)
	}
	t.Logf("OpenSSL ClientHello: %d bytes, JA4 %s", ch.Length, got)
}
