package capture

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

type tcpSpec struct {
	v6, raw, udp, ipOpts bool
	syn, fin, rst        bool
	dport                uint16
	payload              []byte
}

func tcpFrame(t *testing.T, s tcpSpec) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if !s.raw {
		et := layers.EthernetTypeIPv4
		if s.v6 {
			et = layers.EthernetTypeIPv6
		}
		ls = append(ls, &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: et})
	}
	proto := layers.IPProtocolTCP
	if s.udp {
		proto = layers.IPProtocolUDP
	}
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")}
		ls, nl = append(ls, ip), ip
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.IPv4(192, 0, 2, 1), DstIP: net.IPv4(192, 0, 2, 2)}
		if s.ipOpts {
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		}
		ls, nl = append(ls, ip), ip
	}
	if s.udp {
		u := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(s.dport)}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	} else {
		tc := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(s.dport), ACK: true, SYN: s.syn, FIN: s.fin, RST: s.rst, Window: 100,
			Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	}
	ls = append(ls, gopacket.Payload(s.payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFilterSkipNoise: with skipNoise the kernel filter keeps every SYN,
// FIN, RST, UDP datagram and segment that may carry handshake bytes, and
// drops pure ACKs and segments that begin with a TLS application-data
// record — over IPv4 (with and without options) and IPv6, Ethernet and raw.
func TestFilterSkipNoise(t *testing.T) {
	appData := []byte{0x17, 0x03, 0x03, 0x00, 0x20, 1, 2, 3}
	cases := []struct {
		name string
		s    tcpSpec
		want bool
	}{
		{"syn", tcpSpec{syn: true}, true},
		{"pure ack", tcpSpec{}, false},
		{"fin", tcpSpec{fin: true}, true},
		{"rst", tcpSpec{rst: true}, true},
		{"client hello record", tcpSpec{payload: []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}}, true},
		{"application data record", tcpSpec{payload: appData}, false},
		{"application data with fin", tcpSpec{fin: true, payload: appData}, true},
		{"two payload bytes", tcpSpec{payload: []byte{0x17, 0x03}}, true},
		{"mid-record continuation", tcpSpec{payload: []byte{0x9a, 0x17, 0x03, 0x03}}, true},
		{"plaintext", tcpSpec{payload: []byte("EHLO x\r\n")}, true},
		{"udp", tcpSpec{udp: true, payload: appData}, true},
		{"tls 1.3 client ccs + finished", tcpSpec{payload: []byte{0x14, 3, 3, 0, 1, 1, 0x17, 3, 3, 0, 0x35, 9}}, false},
		{"ccs + second client hello (hrr)", tcpSpec{payload: []byte{0x14, 3, 3, 0, 1, 1, 0x16, 3, 3, 2, 0, 1}}, true},
		{"ccs + tls 1.2 finished", tcpSpec{payload: []byte{0x14, 3, 3, 0, 1, 1, 0x16, 3, 3, 0, 0x28}}, true},
		{"lone ccs", tcpSpec{payload: []byte{0x14, 3, 3, 0, 1, 1}}, true},
		{"ccs + 2 bytes", tcpSpec{payload: []byte{0x14, 3, 3, 0, 1, 1, 0x17, 3}}, true},
		{"ccs of another length", tcpSpec{payload: []byte{0x14, 3, 3, 0, 2, 1, 1, 0x17, 3, 3}}, true},
		{"other port", tcpSpec{dport: 80, syn: true}, false},
	}
	for _, link := range []int{LinkEthernet, LinkRaw} {
		for _, v6 := range []bool{false, true} {
			for _, opts := range []bool{false, true} {
				if v6 && opts {
					continue
				}
				for _, ports := range [][]uint16{{443}, nil} {
					prog, err := FilterWith(link, ports, true)
					if err != nil {
						t.Fatal(err)
					}
					for _, tc := range cases {
						if tc.s.dport == 0 {
							tc.s.dport = 443
						}
						want := tc.want
						if ports == nil && tc.s.dport == 80 {
							want = true // no port filter: only the noise rule
						}
						tc.s.v6, tc.s.raw, tc.s.ipOpts = v6, link == LinkRaw, opts
						if got := runFilter(t, prog, tcpFrame(t, tc.s)); got != want {
							t.Errorf("link %d v6 %v ipopts %v ports %v %s: accept %v, want %v", link, v6, opts, ports, tc.name, got, want)
						}
					}
				}
			}
		}
	}
}
