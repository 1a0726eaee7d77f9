package sniffer_test

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// halfHellos builds n connections that each send a SYN and the first
// bytes (about 14 KB in 10 segments) of a 16,000-byte ClientHello, never
// the rest: the costliest flows a flood can open within the stream cap.
func halfHellos(t *testing.T, n int, reset bool) []pkt {
	body := helloHeader(16000)
	body = append(body, make([]byte, 14000-len(body))...)
	var pkts []pkt
	for i := range n {
		c := newCapture(t, body, nil)
		c.cli = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), 40000)
		c.now = t0
		c.handshake3()
		c.segs(0, 0, -1, 1400)
		if reset {
			c.ctl(1, 0x14)
		}
		pkts = append(pkts, c.pkts...)
	}
	return pkts
}

// TestMemoryBudget: a flood of half-sent ClientHellos stays within
// MaxBufferedBytes, the oldest unfinished flows are evicted first (their
// records end truncated, never a failure) and counted, and a real
// handshake after the flood is recorded correctly.
func TestMemoryBudget(t *testing.T) {
	transcripts(t)
	const budget = 4 << 20
	n := 2000
	if soak() {
		n = 20000
	}
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{MaxBufferedBytes: budget, OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	pkts := halfHellos(t, n, false)
	peak := 0
	for _, p := range pkts {
		s.Packet(p.ts, sniffer.LinkEthernet, p.data)
		peak = max(peak, s.Stats().BufferedBytes)
	}
	st := s.Stats()
	t.Logf("%d half ClientHellos: peak buffered %d bytes (budget %d), errors %v, %d records", n, peak, budget, st.Errors, len(recs))
	if peak > budget+64<<10 {
		t.Errorf("peak buffered %d bytes, budget %d", peak, budget)
	}
	if st.Errors["memory_evicted"] == 0 || int(st.Errors["memory_evicted"]) != len(recs) {
		t.Errorf("memory_evicted %d, %d records: want every eviction counted and ended as a record", st.Errors["memory_evicted"], len(recs))
	}
	for i, r := range recs {
		if r.Outcome != record.OutcomeTruncated {
			t.Fatalf("evicted flow's record has outcome %s, want truncated", r.Outcome)
		}
		if want := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}); r.ClientAddr != want.As16() {
			t.Fatalf("eviction %d took %s, want the oldest, %s", i, r.ClientText(), want)
		}
	}
	// A real handshake after the flood.
	recs = recs[:0]
	c := newCapture(t, hsHybrid.cli, hsHybrid.srv)
	c.handshake3()
	c.segs(0, 0, len(hsHybridCH), 1000)
	c.segs(1, 0, -1, 1400)
	c.closeBoth()
	for _, p := range c.pkts {
		s.Packet(p.ts, c.link(), p.data)
	}
	real := 0
	for _, r := range recs {
		switch {
		case r.ClientText() == c.cli.String():
			real++
			if r.Outcome != record.OutcomeOK || r.Group != "X25519MLKEM768" {
				t.Errorf("the real handshake after the flood: %+v", *r)
			}
		case r.Outcome != record.OutcomeTruncated:
			t.Errorf("a flood flow evicted for the real one ended %s, want truncated", r.Outcome)
		}
	}
	if real != 1 {
		t.Errorf("the real handshake after the flood: %d records", real)
	}
}

// TestMemoryReturned: once a flood's flows are gone, the sniffer holds no
// buffers and the heap returns to near where it was (the pool of freed
// flows keeps only small buffers).
func TestMemoryReturned(t *testing.T) {
	n := 3000
	pkts := halfHellos(t, n, true)
	s := sniffer.New(sniffer.Config{MaxBufferedBytes: 1 << 30, OnRecord: func(*record.Handshake) {}})
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	// Feed all but the resets first: every flow holds its half hello.
	var resets []pkt
	peak := 0
	for _, p := range pkts {
		if isRST(p.data) {
			resets = append(resets, p)
			continue
		}
		s.Packet(p.ts, sniffer.LinkEthernet, p.data)
	}
	peak = s.Stats().BufferedBytes
	// Shrink keeps every live flow and its buffers.
	f0, b0 := s.Held()
	s.Shrink()
	if f, b := s.Held(); f != f0 || b != b0 {
		t.Errorf("Shrink during the flood: %d flows %d bytes, was %d flows %d bytes", f, b, f0, b0)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	during := ms.HeapAlloc
	for _, p := range resets {
		s.Packet(p.ts, sniffer.LinkEthernet, p.data)
	}
	st := s.Stats()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	after := ms.HeapAlloc
	t.Logf("errors %v", st.Errors)
	t.Logf("%d flows: buffered %d bytes at the peak, %d after; heap %d -> %d -> %d", n, peak, st.BufferedBytes, before, during, after)
	if peak < n*14000 {
		t.Fatalf("peak buffered %d, want the flood's %d bytes held", peak, n*14000)
	}
	if st.BufferedBytes != 0 || st.FlowsActive != 0 {
		t.Errorf("after every flow ended: %d bytes buffered, %d flows", st.BufferedBytes, st.FlowsActive)
	}
	if grown := int64(after) - int64(before); grown > int64(peak)/5 {
		t.Errorf("heap grew %d bytes after the flood ended (peak buffers %d): memory kept", grown, peak)
	}
	// Shrink (the agent's call once a flood is over) gives up the pools
	// and the tables' peak buckets too; the sniffer works on after it.
	s.Shrink()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	shrunk := ms.HeapAlloc
	t.Logf("heap after Shrink %d (%d before the flood)", shrunk, before)
	if grown := int64(shrunk) - int64(before); grown > 1<<20 {
		t.Errorf("heap grew %d bytes after Shrink: memory kept", grown)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(pkts)
}

// isRST reports a TCP RST in an Ethernet/IPv4 frame.
func isRST(b []byte) bool {
	return len(b) >= 14+20+14 && b[14+9] == 6 && b[14+20+13]&0x04 != 0
}
