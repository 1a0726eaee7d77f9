package quic

import (
	"net/netip"
	"testing"
	"time"
)

// TestBudget: the table counts the CRYPTO bytes it holds, EvictOldest drops
// the connection that has held buffers longest (and marks it), and nothing
// stays counted once connections are delivered.
func TestBudget(t *testing.T) {
	tr, col := newTestTable(Config{})
	ch := handshakeMsg(1, 3000)
	for i := range 100 {
		tc := newTestConn(t, Version1, "budget-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		src := netip.AddrPortFrom(cliAddr.Addr(), uint16(1000+i))
		tr.Datagram(t0.Add(time.Duration(i)), src, srvAddr, tc.client(nil, cryptoFrame(0, ch[:1000])))
	}
	held := tr.Buffered()
	if held < 100*1000 {
		t.Fatalf("Buffered %d after 100 half ClientHellos of 1000 bytes", held)
	}
	for i := range 10 {
		if !tr.EvictOldest() {
			t.Fatal("EvictOldest found nothing")
		}
		c := col.conns[len(col.conns)-1]
		if !c.MemoryEvicted || c.Client.Port() != uint16(1000+i) || !c.ClientHelloTruncated {
			t.Errorf("evicted %v (memory %v, truncated %v), want the oldest, port %d", c.Client, c.MemoryEvicted, c.ClientHelloTruncated, 1000+i)
		}
	}
	if tr.Buffered() >= held || tr.Stats()["memory_evicted"] != 10 {
		t.Errorf("Buffered %d (was %d), stats %v", tr.Buffered(), held, tr.Stats())
	}
	tr.Flush()
	if tr.Buffered() != 0 || tr.EvictOldest() {
		t.Errorf("after Flush: Buffered %d, want 0 and nothing to evict", tr.Buffered())
	}
}
