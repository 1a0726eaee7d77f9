package quic

import (
	"testing"
	"time"
)

// TestConnIdentity: a connection's Conn has the DCID of the client's first
// Initial (kept after a Retry changes it) and the TTL of the datagram that
// carried byte 0 of its CRYPTO stream.
func TestConnIdentity(t *testing.T) {
	ch := handshakeMsg(1, 1500)
	tc := newTestConn(t, Version1, "\x11\x22\x33\x44\x55\x66\x77\x88")
	var got *Conn
	tr := NewConnTable(Config{OnConn: func(c *Conn) { got = c }})
	t0 := time.Unix(100, 0)
	// The second half first, with another TTL: byte 0 decides.
	tr.DatagramTTL(t0, cliAddr, srvAddr, 58, tc.client(nil, cryptoFrame(1000, ch[1000:])))
	tr.DatagramTTL(t0.Add(time.Millisecond), cliAddr, srvAddr, 61, tc.client(nil, cryptoFrame(0, ch[:1000])))
	tr.Flush()
	if got == nil {
		t.Fatal("no connection delivered")
	}
	if string(got.DCID[:got.DCIDLen]) != "\x11\x22\x33\x44\x55\x66\x77\x88" || got.TTL != 61 || !got.FirstTS.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("DCID %x TTL %d FirstTS %v", got.DCID[:got.DCIDLen], got.TTL, got.FirstTS)
	}
}
