package sniffer

import (
	"net/netip"
	"testing"
)

// TestFlowTableCollision: flows whose keys share a hash (forced here; 2^-64
// a pair in life) are told apart by their keys, and each is found until it
// is deleted, whichever goes first.
func TestFlowTableCollision(t *testing.T) {
	key := func(s string) flowKey {
		k, _ := makeKey(netip.MustParseAddrPort(s), netip.MustParseAddrPort("192.0.2.1:443"), 0)
		return k
	}
	// An IPv4 flow and one of its v4-mapped IPv6 form share a flatKey,
	// so a real collision of hashes too.
	ka, kb, kc := key("198.51.100.7:50000"), key("[::ffff:198.51.100.7]:50000"), key("198.51.100.8:50000")
	tab := newFlowTable(4)
	if tab.hash(ka) != tab.hash(kb) {
		t.Fatal("an IPv4 key and its v4-mapped form should hash alike")
	}
	const h = 42
	a, b, c := &flow{key: ka}, &flow{key: kb}, &flow{key: kc}
	for _, f := range []*flow{a, b, c} {
		if got := tab.lookup(f.key, h); got != nil {
			t.Fatalf("lookup before put = %v", got.key)
		}
		tab.put(f, h)
	}
	if tab.len() != 3 {
		t.Fatalf("len = %d, want 3", tab.len())
	}
	for _, f := range []*flow{a, b, c} {
		if got := tab.lookup(f.key, h); got != f {
			t.Fatalf("lookup(%v) = %v", f.key, got)
		}
	}
	tab.del(a) // the one in the fast map goes: the spilled ones stay found
	if tab.lookup(ka, h) != nil || tab.lookup(kb, h) != b || tab.lookup(kc, h) != c {
		t.Fatal("after deleting the first flow")
	}
	d := &flow{key: ka}
	tab.put(d, h) // takes the free fast slot
	n := tab.rebuilt(1)
	for _, f := range []*flow{b, c, d} {
		if n.lookup(f.key, h) != f {
			t.Fatalf("rebuilt table lost %v", f.key)
		}
	}
	n.del(b)
	n.del(c)
	n.del(d)
	if n.len() != 0 {
		t.Fatalf("len after deleting all = %d", n.len())
	}
}

// BenchmarkFlowTableGet is a packet's flow lookup: the key's hash and the
// map access, in a table of 256 live flows.
func BenchmarkFlowTableGet(b *testing.B) {
	tab := newFlowTable(0)
	keys := make([]flowKey, 256)
	for i := range keys {
		keys[i], _ = makeKey(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(40000+i)), netip.MustParseAddrPort("192.0.2.1:443"), 0)
		_, h := tab.get(keys[i])
		tab.put(&flow{key: keys[i]}, h)
	}
	i := 0
	for b.Loop() {
		if f, _ := tab.get(keys[i&255]); f == nil {
			b.Fatal("miss")
		}
		i++
	}
}
