package sniffer

import (
	"encoding/binary"
	"net/netip"
)

// Link types (pcap LINKTYPE_ values) the decoder understands.
const (
	LinkNull      = 0   // BSD loopback, host byte order family
	LinkEthernet  = 1   // Ethernet II
	LinkPPP       = 9   // PPP (RFC 1661), optionally HDLC-framed
	LinkPPPHDLC   = 50  // PPP in HDLC-like framing
	LinkRaw       = 101 // raw IPv4/IPv6
	LinkRawAlt    = 12  // DLT_RAW on some BSDs
	LinkLoop      = 108 // OpenBSD loopback, network byte order family
	LinkLinuxSLL  = 113 // Linux cooked v1
	LinkIPv4      = 228
	LinkIPv6      = 229
	LinkLinuxSLL2 = 276 // Linux cooked v2
)

// IP protocol numbers.
const (
	protoTCP = 6
	protoUDP = 17
)

// TCP flags.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagACK = 0x10
)

// packet is one decoded packet. It is filled in place by decode and aliases
// the packet buffer: nothing in it may outlive the buffer.
type packet struct {
	src, dst     netip.Addr
	proto        uint8
	ttl          uint8 // IPv4 TTL, IPv6 hop limit
	sport, dport uint16
	// TCP only
	seq, ack uint32
	flags    uint8
	mss      uint16 // MSS option, 0 if absent
	tsOpt    bool   // timestamp option present
	payload  []byte
	// truncated is set when the capture cut the packet short (snaplen) so
	// the payload is shorter than the IP header says.
	truncated bool
}

// decodeResult tells why a packet was not decoded into TCP or UDP.
type decodeResult uint8

const (
	decodeOK decodeResult = iota
	decodeUnsupportedLink
	decodeNotIP
	decodeShort
	decodeFragment
	decodeOtherProto
	decodeBadHeader
)

var decodeReasons = [...]string{
	decodeOK:              "ok",
	decodeUnsupportedLink: "unsupported_link",
	decodeNotIP:           "not_ip",
	decodeShort:           "short_packet",
	decodeFragment:        "ip_fragment",
	decodeOtherProto:      "other_protocol",
	decodeBadHeader:       "bad_header",
}

func (r decodeResult) String() string { return decodeReasons[r] }

// decode fills p from one captured frame of the given link type. It never
// panics on malformed input: every read is bounds checked.
func decode(link int, b []byte, p *packet) decodeResult {
	p.payload = nil
	p.truncated = false
	p.mss = 0
	p.tsOpt = false
	p.flags = 0
	var etherType uint16
	switch link {
	case LinkEthernet:
		if len(b) < 14 {
			return decodeShort
		}
		etherType = binary.BigEndian.Uint16(b[12:14])
		b = b[14:]
	case LinkLinuxSLL:
		if len(b) < 16 {
			return decodeShort
		}
		etherType = binary.BigEndian.Uint16(b[14:16])
		b = b[16:]
	case LinkLinuxSLL2:
		if len(b) < 20 {
			return decodeShort
		}
		etherType = binary.BigEndian.Uint16(b[0:2])
		b = b[20:]
	case LinkRaw, LinkRawAlt, LinkIPv4, LinkIPv6:
		return decodeIP(b, p)
	case LinkPPP, LinkPPPHDLC:
		if len(b) >= 2 && b[0] == 0xff && b[1] == 0x03 {
			b = b[2:] // HDLC address and control
		}
		return decodePPP(b, p)
	case LinkNull, LinkLoop:
		if len(b) < 4 {
			return decodeShort
		}
		// The family is in host order (NULL) or network order (LOOP); both
		// orders are checked since captures travel between machines.
		fam := binary.LittleEndian.Uint32(b)
		if link == LinkLoop || fam > 0xffff {
			fam = binary.BigEndian.Uint32(b)
		}
		switch fam {
		case 2, 24, 28, 30: // AF_INET, AF_INET6 on BSDs/Darwin
			return decodeIP(b[4:], p)
		case 10: // AF_INET6 on Linux
			return decodeIP(b[4:], p)
		}
		return decodeNotIP
	default:
		return decodeUnsupportedLink
	}
	// VLAN tags: 802.1Q, 802.1ad (QinQ) and the old 0x9100, any depth.
	for etherType == 0x8100 || etherType == 0x88a8 || etherType == 0x9100 {
		if len(b) < 4 {
			return decodeShort
		}
		etherType = binary.BigEndian.Uint16(b[2:4])
		b = b[4:]
	}
	switch etherType {
	case 0x0800, 0x86dd:
		return decodeIP(b, p)
	case 0x8864: // PPPoE session: 6-byte header, then PPP
		if len(b) < 6 {
			return decodeShort
		}
		return decodePPP(b[6:], p)
	}
	return decodeNotIP
}

// decodePPP reads the PPP protocol field (1 or 2 bytes, RFC 1661 §6.5).
func decodePPP(b []byte, p *packet) decodeResult {
	if len(b) < 1 {
		return decodeShort
	}
	var proto uint16
	if b[0]&1 == 1 { // compressed 1-byte protocol
		proto, b = uint16(b[0]), b[1:]
	} else {
		if len(b) < 2 {
			return decodeShort
		}
		proto, b = binary.BigEndian.Uint16(b), b[2:]
	}
	switch proto {
	case 0x0021, 0x0057:
		return decodeIP(b, p)
	}
	return decodeNotIP
}

func decodeIP(b []byte, p *packet) decodeResult {
	if len(b) < 1 {
		return decodeShort
	}
	switch b[0] >> 4 {
	case 4:
		return decodeIPv4(b, p)
	case 6:
		return decodeIPv6(b, p)
	}
	return decodeNotIP
}

func decodeIPv4(b []byte, p *packet) decodeResult {
	if len(b) < 20 {
		return decodeShort
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return decodeBadHeader
	}
	if len(b) < ihl {
		return decodeShort
	}
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if total == 0 {
		// TSO/GRO captures may carry a zero total length; trust the capture.
		total = len(b)
	}
	if total < ihl {
		return decodeBadHeader
	}
	if total < len(b) {
		b = b[:total] // strip Ethernet padding
	} else if total > len(b) {
		p.truncated = true
	}
	fragOff := binary.BigEndian.Uint16(b[6:8])
	if fragOff&0x1fff != 0 || fragOff&0x2000 != 0 {
		return decodeFragment
	}
	p.src = netip.AddrFrom4([4]byte(b[12:16]))
	p.dst = netip.AddrFrom4([4]byte(b[16:20]))
	p.proto = b[9]
	p.ttl = b[8]
	return decodeL4(b[ihl:], p)
}

func decodeIPv6(b []byte, p *packet) decodeResult {
	if len(b) < 40 {
		return decodeShort
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	next := b[6]
	p.ttl = b[7]
	p.src = netip.AddrFrom16([16]byte(b[8:24]))
	p.dst = netip.AddrFrom16([16]byte(b[24:40]))
	b = b[40:]
	if plen != 0 { // 0: jumbogram or TSO capture; trust the capture
		if plen < len(b) {
			b = b[:plen]
		} else if plen > len(b) {
			p.truncated = true
		}
	}
	// Extension headers: hop-by-hop, routing, destination options,
	// fragment, mobility, HIP, shim6. Bounded by the packet length.
	for range 16 {
		switch next {
		case 0, 43, 60, 135, 139, 140:
			if len(b) < 8 {
				return decodeShort
			}
			n := (int(b[1]) + 1) * 8
			if len(b) < n {
				return decodeShort
			}
			next = b[0]
			b = b[n:]
		case 44: // fragment
			if len(b) < 8 {
				return decodeShort
			}
			off := binary.BigEndian.Uint16(b[2:4])
			if off&0xfff8 != 0 || off&1 != 0 {
				return decodeFragment
			}
			next = b[0]
			b = b[8:]
		case 51: // AH: length in 4-octet units minus 2
			if len(b) < 8 {
				return decodeShort
			}
			n := (int(b[1]) + 2) * 4
			if len(b) < n {
				return decodeShort
			}
			next = b[0]
			b = b[n:]
		default:
			p.proto = next
			return decodeL4(b, p)
		}
	}
	return decodeBadHeader
}

func decodeL4(b []byte, p *packet) decodeResult {
	switch p.proto {
	case protoTCP:
		if len(b) < 20 {
			return decodeShort
		}
		p.sport = binary.BigEndian.Uint16(b[0:2])
		p.dport = binary.BigEndian.Uint16(b[2:4])
		p.seq = binary.BigEndian.Uint32(b[4:8])
		p.ack = binary.BigEndian.Uint32(b[8:12])
		off := int(b[12]>>4) * 4
		p.flags = b[13]
		if off < 20 {
			return decodeBadHeader
		}
		if len(b) < off {
			return decodeShort
		}
		if off > 20 {
			parseTCPOptions(b[20:off], p)
		}
		p.payload = b[off:]
		return decodeOK
	case protoUDP:
		if len(b) < 8 {
			return decodeShort
		}
		p.sport = binary.BigEndian.Uint16(b[0:2])
		p.dport = binary.BigEndian.Uint16(b[2:4])
		ulen := int(binary.BigEndian.Uint16(b[4:6]))
		b = b[8:]
		if ulen >= 8 && ulen-8 < len(b) {
			b = b[:ulen-8]
		} else if ulen > 8 && ulen-8 > len(b) {
			p.truncated = true
		}
		p.payload = b
		return decodeOK
	}
	return decodeOtherProto
}

func parseTCPOptions(o []byte, p *packet) {
	for len(o) > 0 {
		kind := o[0]
		switch kind {
		case 0: // end of options
			return
		case 1: // NOP
			o = o[1:]
			continue
		}
		if len(o) < 2 {
			return
		}
		l := int(o[1])
		if l < 2 || l > len(o) {
			return
		}
		switch kind {
		case 2:
			if l == 4 {
				p.mss = binary.BigEndian.Uint16(o[2:4])
			}
		case 8:
			p.tsOpt = true
		}
		o = o[l:]
	}
}
