package sniffer_test

import (
	"math/rand/v2"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

func synFrame(tb testing.TB, src net.IP, sport uint16) []byte {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: net.IPv4(10, 0, 0, 1)}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 443, Seq: 1, SYN: true, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		tb.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// TestSYNFloodBounded: a flood of SYNs from distinct sources, with real
// handshake packets sprinkled in, never grows the flow table past its cap;
// every eviction is counted; memory stays flat.
func TestSYNFloodBounded(t *testing.T) {
	const maxFlows = 1000
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{MaxFlows: maxFlows, OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	real := genPackets(t, 20, 0)
	ts := time.Unix(1700000000, 0)
	var ms0, ms1 runtime.MemStats
	const flood = 200000
	frames := make([][]byte, 256)
	for i := range frames {
		frames[i] = synFrame(t, net.IPv4(192, 0, 2, byte(i)), 1)
	}
	for i := 0; i < flood; i++ {
		f := frames[i%256]
		// Vary the source port in place: a distinct flow per packet.
		f[34], f[35] = byte(i>>8), byte(i)
		f[29] = byte(i >> 16)
		s.Packet(ts, sniffer.LinkEthernet, f)
		if i == flood/10 {
			runtime.GC()
			runtime.ReadMemStats(&ms0)
		}
		if j := i / (flood / len(real)); i%(flood/len(real)) == 0 && j < len(real) {
			s.Packet(ts, sniffer.LinkEthernet, real[j].data)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	st := s.Stats()
	if st.FlowsActive > maxFlows {
		t.Errorf("flow table holds %d flows, cap %d", st.FlowsActive, maxFlows)
	}
	if st.FlowsEvicted < flood-maxFlows-100 {
		t.Errorf("evicted %d, want about %d", st.FlowsEvicted, flood-maxFlows)
	}
	if grow := int64(ms1.HeapInuse) - int64(ms0.HeapInuse); grow > 8<<20 {
		t.Errorf("heap grew %d bytes during the flood", grow)
	}
	t.Logf("flood: %d SYNs, %d flows active, %d evicted, heap %d -> %d KB", flood, st.FlowsActive, st.FlowsEvicted, ms0.HeapInuse>>10, ms1.HeapInuse>>10)
}

// TestGarbageCounted: random bytes as frames of every link type are counted
// by reason, never a panic, never a record.
func TestGarbageCounted(t *testing.T) {
	n := 0
	s := sniffer.New(sniffer.Config{OnRecord: func(*record.Handshake) { n++ }})
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1600)
	for i := range 50000 {
		b := buf[:r.IntN(len(buf))]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		s.Packet(time.Unix(1700000000, int64(i)), []int{1, 113, 276, 101, 0, 108, 999}[i%7], b)
	}
	s.Flush()
	st := s.Stats()
	var errs uint64
	for _, v := range st.Errors {
		errs += v
	}
	if errs == 0 {
		t.Error("no garbage counted")
	}
	t.Logf("records %d, errors %v", n, st.Errors)
}
