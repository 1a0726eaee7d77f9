package capture

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// pkt builds a frame: link header (Ethernet unless raw), IP header, and an
// 8-byte TCP/UDP-like header with the ports.
type pktSpec struct {
	raw        bool
	v6         bool
	vlan       bool
	proto      uint8
	sport      uint16
	dport      uint16
	ihl        int    // IPv4 header length in bytes (default 20)
	fragOff    uint16 // IPv4 fragment offset (8-byte units)
	etherType  uint16 // override
	payloadLen int
}

func buildPkt(s pktSpec) []byte {
	var b []byte
	if !s.raw {
		b = make([]byte, 12, 64)
		et := uint16(ethIPv4)
		if s.v6 {
			et = ethIPv6
		}
		if s.vlan {
			b = binary.BigEndian.AppendUint16(b, ethVLAN)
			b = binary.BigEndian.AppendUint16(b, 42)
		}
		if s.etherType != 0 {
			et = s.etherType
		}
		b = binary.BigEndian.AppendUint16(b, et)
	}
	if s.v6 {
		h := make([]byte, 40)
		h[0] = 0x60
		h[6] = s.proto
		h[7] = 64
		b = append(b, h...)
	} else {
		ihl := s.ihl
		if ihl == 0 {
			ihl = 20
		}
		h := make([]byte, ihl)
		h[0] = 0x40 | byte(ihl/4)
		h[9] = s.proto
		binary.BigEndian.PutUint16(h[6:], s.fragOff)
		b = append(b, h...)
	}
	b = binary.BigEndian.AppendUint16(b, s.sport)
	b = binary.BigEndian.AppendUint16(b, s.dport)
	b = append(b, make([]byte, 16+s.payloadLen)...)
	return b
}

func runFilter(t *testing.T, raw []bpf.RawInstruction, pkt []byte) bool {
	t.Helper()
	if raw == nil {
		return true
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("disassemble failed")
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	n, err := vm.Run(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestFilter(t *testing.T) {
	ports := []uint16{443, 8443}
	cases := []struct {
		name string
		pkt  pktSpec
		want bool
	}{
		{"v4 tcp dst", pktSpec{proto: protoTCP, sport: 40000, dport: 443}, true},
		{"v4 tcp src", pktSpec{proto: protoTCP, sport: 8443, dport: 40000}, true},
		{"v4 udp dst", pktSpec{proto: protoUDP, sport: 5000, dport: 443}, true},
		{"v4 tcp other", pktSpec{proto: protoTCP, sport: 40000, dport: 80}, false},
		{"v4 udp other", pktSpec{proto: protoUDP, sport: 53, dport: 5353}, false},
		{"v4 icmp", pktSpec{proto: 1, sport: 443, dport: 443}, false},
		{"v4 options", pktSpec{proto: protoTCP, ihl: 24, sport: 1, dport: 443}, true},
		{"v4 options other", pktSpec{proto: protoTCP, ihl: 60, sport: 1, dport: 444}, false},
		{"v4 later fragment", pktSpec{proto: protoUDP, fragOff: 185, sport: 1, dport: 2}, true},
		{"v6 tcp dst", pktSpec{v6: true, proto: protoTCP, sport: 50000, dport: 8443}, true},
		{"v6 udp src", pktSpec{v6: true, proto: protoUDP, sport: 443, dport: 50000}, true},
		{"v6 tcp other", pktSpec{v6: true, proto: protoTCP, sport: 50000, dport: 80}, false},
		{"v6 ext header", pktSpec{v6: true, proto: 0, sport: 443, dport: 443}, false},
		{"vlan passes", pktSpec{vlan: true, proto: protoTCP, sport: 1, dport: 2}, true},
		{"arp", pktSpec{etherType: 0x0806, proto: protoTCP, sport: 443, dport: 443}, false},
	}
	for _, link := range []int{LinkEthernet, LinkRaw} {
		prog, err := Filter(link, ports)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			if link == LinkRaw && (tc.pkt.vlan || tc.pkt.etherType != 0) {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				s := tc.pkt
				s.raw = link == LinkRaw
				if got := runFilter(t, prog, buildPkt(s)); got != tc.want {
					t.Errorf("link %d: accepted=%v, want %v", link, got, tc.want)
				}
			})
		}
	}
}

func TestFilterNoPorts(t *testing.T) {
	prog, err := Filter(LinkEthernet, nil)
	if err != nil || prog != nil {
		t.Fatalf("ethernet, no ports: %v %v; want no filter", prog, err)
	}
	prog, err = Filter(LinkRaw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !runFilter(t, prog, buildPkt(pktSpec{raw: true, proto: protoTCP})) ||
		!runFilter(t, prog, buildPkt(pktSpec{raw: true, v6: true, proto: protoUDP})) {
		t.Error("raw no-ports filter rejects IP")
	}
	if runFilter(t, prog, []byte{0x00, 0x01, 0x08, 0x00, 6, 4, 0, 1}) { // ARP body
		t.Error("raw no-ports filter accepts ARP")
	}
}

func TestFilterManyPorts(t *testing.T) {
	ports := make([]uint16, MaxPorts)
	for i := range ports {
		ports[i] = uint16(1000 + 3*i)
	}
	for _, link := range []int{LinkEthernet, LinkRaw} {
		prog, err := Filter(link, ports)
		if err != nil {
			t.Fatal(err)
		}
		last := ports[len(ports)-1]
		for _, v6 := range []bool{false, true} {
			s := pktSpec{raw: link == LinkRaw, v6: v6, proto: protoUDP, sport: 9, dport: last}
			if !runFilter(t, prog, buildPkt(s)) {
				t.Errorf("link %d v6=%v: last port rejected", link, v6)
			}
			s.dport = last + 1
			if runFilter(t, prog, buildPkt(s)) {
				t.Errorf("link %d v6=%v: port %d accepted", link, v6, s.dport)
			}
		}
	}
	if _, err := Filter(LinkEthernet, append(ports, 1)); err == nil {
		t.Error("too many ports accepted")
	}
}
