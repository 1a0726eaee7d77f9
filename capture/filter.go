package capture

import (
	"fmt"
	"slices"

	"golang.org/x/net/bpf"
)

// Link types handed to the packet handler: pcap LINKTYPE_ numbers, the same
// values as package sniffer's LinkEthernet and LinkRaw.
const (
	LinkEthernet = 1   // Ethernet II (Ethernet devices, veths, and Linux loopback)
	LinkRaw      = 101 // raw IPv4/IPv6, no link header (cooked sockets)
)

// MaxPorts is the largest port set a filter accepts: classic BPF jumps are
// at most 255 instructions long, and every port costs two.
const MaxPorts = 100

const (
	snapAll    = 0x40000 // accept: keep the whole packet (the ring truncates)
	etherHdr   = 14
	ipv6Hdr    = 40
	protoTCP   = 6
	protoUDP   = 17
	ethIPv4    = 0x0800
	ethIPv6    = 0x86dd
	ethVLAN    = 0x8100
	ethQinQ    = 0x88a8
	ethQinQOld = 0x9100
)

// asm is a tiny classic-BPF assembler with forward labels.
type asm struct {
	ins    []bpf.Instruction
	fixups []fixup
	labels map[string]int
}

type fixup struct {
	at          int
	ifTrue, els string // label names; "" = next instruction
	always      bool   // an unconditional ja (32-bit reach)
}

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, i) }

// jump adds a conditional jump on A against val; the targets are labels at
// most 255 instructions ahead.
func (a *asm) jump(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	a.fixups = append(a.fixups, fixup{at: len(a.ins), ifTrue: ifTrue, els: ifFalse})
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

// ja adds an unconditional jump to a label at any distance.
func (a *asm) ja(to string) {
	a.fixups = append(a.fixups, fixup{at: len(a.ins), ifTrue: to, always: true})
	a.ins = append(a.ins, bpf.Jump{})
}

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	for _, f := range a.fixups {
		dist := func(l string) (int, error) {
			if l == "" {
				return 0, nil
			}
			to, ok := a.labels[l]
			if !ok {
				return 0, fmt.Errorf("capture: filter: no label %q", l)
			}
			d := to - f.at - 1
			if d < 0 || (!f.always && d > 255) {
				return 0, fmt.Errorf("capture: filter: jump to %q out of reach (%d)", l, d)
			}
			return d, nil
		}
		t, err := dist(f.ifTrue)
		if err != nil {
			return nil, err
		}
		if f.always {
			a.ins[f.at] = bpf.Jump{Skip: uint32(t)}
			continue
		}
		e, err := dist(f.els)
		if err != nil {
			return nil, err
		}
		j := a.ins[f.at].(bpf.JumpIf)
		j.SkipTrue, j.SkipFalse = uint8(t), uint8(e)
		a.ins[f.at] = j
	}
	return bpf.Assemble(a.ins)
}

// portCheck loads the 16-bit port at off (relative to X when indexed) and
// jumps to accept when it is in ports, falling through otherwise.
func (a *asm) portCheck(off uint32, indexed bool, ports []uint16, accept string) {
	if indexed {
		a.op(bpf.LoadIndirect{Off: off, Size: 2})
	} else {
		a.op(bpf.LoadAbsolute{Off: off, Size: 2})
	}
	for _, p := range ports {
		a.jump(bpf.JumpEqual, uint32(p), accept, "")
	}
}

// Filter returns the classic BPF program that accepts TCP and UDP packets
// with a source or destination port in ports, over IPv4 (any header length)
// and IPv6 (TCP/UDP directly after the fixed header; extension headers are
// not followed), for frames of the given link type: LinkEthernet (data
// starts at the Ethernet header) or LinkRaw (data starts at the IP header,
// as on a SOCK_DGRAM packet socket). IPv4 fragments after the first carry
// no ports and are accepted, as are VLAN-tagged Ethernet frames (the filter
// does not look inside them). With no ports it returns nil (capture
// everything) for Ethernet, and an IPv4/IPv6-only program for LinkRaw.
func Filter(linkType int, ports []uint16) ([]bpf.RawInstruction, error) {
	return FilterWith(linkType, ports, false)
}

// FilterWith is Filter with an option: skipNoise also drops, in the kernel,
// the TCP segments a handshake tracker never needs: pure ACKs (no payload,
// no SYN/FIN/RST), segments whose payload begins with a TLS
// application-data record header (17 03 03), and those that begin with a
// lone ChangeCipherSpec record followed by application data (a TLS 1.3
// client's second flight). What remains is every SYN, FIN and RST and
// every segment that may carry handshake bytes (a continuation segment
// starts mid-record and is kept).
func FilterWith(linkType int, ports []uint16, skipNoise bool) ([]bpf.RawInstruction, error) {
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if len(ports) > MaxPorts {
		return nil, fmt.Errorf("capture: filter: %d ports, at most %d", len(ports), MaxPorts)
	}
	var l3 uint32 // offset of the IP header
	a := &asm{}
	switch linkType {
	case LinkEthernet:
		if len(ports) == 0 && !skipNoise {
			return nil, nil
		}
		l3 = etherHdr
		a.op(bpf.LoadAbsolute{Off: 12, Size: 2})
		a.jump(bpf.JumpEqual, ethIPv6, "", "noip6")
		a.ja("ip6")
		a.label("noip6")
		a.jump(bpf.JumpEqual, ethIPv4, "ip4", "")
		a.jump(bpf.JumpEqual, ethVLAN, "accept", "")
		a.jump(bpf.JumpEqual, ethQinQ, "accept", "")
		a.jump(bpf.JumpEqual, ethQinQOld, "accept", "reject")
	case LinkRaw:
		a.op(bpf.LoadAbsolute{Off: 0, Size: 1})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
		if len(ports) == 0 && !skipNoise {
			a.jump(bpf.JumpEqual, 0x40, "accept", "")
			a.jump(bpf.JumpEqual, 0x60, "accept", "reject")
			break
		}
		a.jump(bpf.JumpEqual, 0x60, "", "noip6")
		a.ja("ip6")
		a.label("noip6")
		a.jump(bpf.JumpEqual, 0x40, "ip4", "reject")
	default:
		return nil, fmt.Errorf("capture: filter: unsupported link type %d", linkType)
	}
	a.label("reject")
	a.op(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.op(bpf.RetConstant{Val: snapAll})
	if len(ports) == 0 && !skipNoise {
		return a.assemble()
	}

	a.label("ip4")
	a.op(bpf.LoadAbsolute{Off: l3 + 9, Size: 1}) // protocol
	a.jump(bpf.JumpEqual, protoTCP, "ip4ports", "")
	a.jump(bpf.JumpEqual, protoUDP, "ip4ports", "reject4")
	a.label("ip4ports")
	a.op(bpf.LoadAbsolute{Off: l3 + 6, Size: 2}) // flags + fragment offset
	a.jump(bpf.JumpBitsSet, 0x1fff, "accept4", "")
	a.op(bpf.LoadMemShift{Off: l3}) // X = IHL*4
	if len(ports) == 0 {
		a.ja("match4")
	} else {
		a.portCheck(l3, true, ports, "match4")
		a.portCheck(l3+2, true, ports, "match4")
	}
	a.label("reject4")
	a.op(bpf.RetConstant{Val: 0})
	a.label("match4")
	if skipNoise {
		// X = IHL*4 still. TCP only: UDP (QUIC) is never noise here.
		a.op(bpf.LoadAbsolute{Off: l3 + 9, Size: 1})
		a.jump(bpf.JumpEqual, protoTCP, "", "accept4")
		a.op(bpf.LoadIndirect{Off: l3 + 13, Size: 1}) // TCP flags
		a.jump(bpf.JumpBitsSet, 0x07, "accept4", "")  // FIN, SYN, RST
		a.op(bpf.LoadIndirect{Off: l3 + 12, Size: 1}) // data offset
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
		a.op(bpf.ALUOpX{Op: bpf.ALUOpAdd}) // A = IHL*4 + TCP header
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
		a.op(bpf.LoadAbsolute{Off: l3 + 2, Size: 2}) // total length
		a.op(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
		a.op(bpf.ALUOpX{Op: bpf.ALUOpSub}) // A = payload length
		a.jump(bpf.JumpEqual, 0, "drop4", "")
		a.jump(bpf.JumpGreaterOrEqual, 0x10000, "accept4", "") // underflow: TSO/zero length
		a.jump(bpf.JumpGreaterOrEqual, 3, "", "accept4")
		a.noiseRecords(l3, "4")
		a.label("drop4")
		a.op(bpf.RetConstant{Val: 0})
	}
	a.label("accept4")
	a.op(bpf.RetConstant{Val: snapAll})

	a.label("ip6")
	a.op(bpf.LoadAbsolute{Off: l3 + 6, Size: 1}) // next header
	a.jump(bpf.JumpEqual, protoTCP, "ip6ports", "")
	a.jump(bpf.JumpEqual, protoUDP, "ip6ports", "reject6")
	a.label("ip6ports")
	if len(ports) == 0 {
		a.ja("match6")
	} else {
		a.portCheck(l3+ipv6Hdr, false, ports, "match6")
		a.portCheck(l3+ipv6Hdr+2, false, ports, "match6")
	}
	a.label("reject6")
	a.op(bpf.RetConstant{Val: 0})
	a.label("match6")
	if skipNoise {
		t := l3 + ipv6Hdr
		a.op(bpf.LoadAbsolute{Off: l3 + 6, Size: 1})
		a.jump(bpf.JumpEqual, protoTCP, "", "accept6")
		a.op(bpf.LoadAbsolute{Off: t + 13, Size: 1})
		a.jump(bpf.JumpBitsSet, 0x07, "accept6", "")
		a.op(bpf.LoadAbsolute{Off: t + 12, Size: 1})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
		a.op(bpf.TAX{})                              // X = TCP header length
		a.op(bpf.LoadAbsolute{Off: l3 + 4, Size: 2}) // payload length
		a.op(bpf.ALUOpX{Op: bpf.ALUOpSub})
		a.jump(bpf.JumpEqual, 0, "drop6", "")
		a.jump(bpf.JumpGreaterOrEqual, 0x10000, "accept6", "")
		a.jump(bpf.JumpGreaterOrEqual, 3, "", "accept6")
		a.noiseRecords(t, "6")
		a.label("drop6")
		a.op(bpf.RetConstant{Val: 0})
	}
	a.label("accept6")
	a.op(bpf.RetConstant{Val: snapAll})
	return a.assemble()
}

// noiseRecords jumps to drop<sfx> when the payload (at X+off, A holding its
// length, at least 3) begins with a TLS application-data record header
// (17 03 03), or with a lone ChangeCipherSpec record followed by one
// (14 03 03 00 01 01 17 03 03: a TLS 1.3 client's compatibility CCS and its
// encrypted Finished); to accept<sfx> otherwise. A CCS followed by a
// handshake record (the second ClientHello after a HelloRetryRequest, a
// TLS 1.2 Finished) is kept.
func (a *asm) noiseRecords(off uint32, sfx string) {
	drop, accept, ccs := "drop"+sfx, "accept"+sfx, "ccs"+sfx
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 1})
	a.op(bpf.LoadIndirect{Off: off, Size: 1}) // first payload byte
	a.jump(bpf.JumpEqual, 0x14, ccs, "")
	a.jump(bpf.JumpEqual, 0x17, "", accept)
	a.op(bpf.LoadIndirect{Off: off + 1, Size: 2})
	a.jump(bpf.JumpEqual, 0x0303, drop, accept)
	a.label(ccs)
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 1})
	a.jump(bpf.JumpGreaterOrEqual, 9, "", accept)
	a.op(bpf.LoadIndirect{Off: off + 1, Size: 4}) // 03 03 00 01
	a.jump(bpf.JumpEqual, 0x03030001, "", accept)
	a.op(bpf.LoadIndirect{Off: off + 5, Size: 2}) // 01 17
	a.jump(bpf.JumpEqual, 0x0117, "", accept)
	a.op(bpf.LoadIndirect{Off: off + 7, Size: 2}) // 03 03
	a.jump(bpf.JumpEqual, 0x0303, drop, accept)
}

// rejectAll drops every packet; a socket carries it until its fanout group
// is complete, so no packet is seen twice while rings are set up.
var rejectAll = []bpf.RawInstruction{{Op: 0x6, K: 0}} // ret #0

// Loopback handling: on Linux every packet on lo passes the packet taps
// twice, once outgoing and once incoming. Like libpcap, drop the outgoing
// copy in the kernel.
const (
	loopNone   = iota
	loopDevice // the socket is bound to a loopback device
	loopAny    // the socket sees every device; check the device type
)

const (
	packetOutgoing = 4   // PACKET_OUTGOING, skb->pkt_type
	arphrdLoopback = 772 // ARPHRD_LOOPBACK, dev->type
)

// socketFilter is Filter plus the loopback de-duplication for the socket
// kind; nil means no filter.
func socketFilter(linkType int, ports []uint16, skipNoise bool, loop int) ([]bpf.RawInstruction, error) {
	prog, err := FilterWith(linkType, ports, skipNoise)
	if err != nil || loop == loopNone {
		return prog, err
	}
	var pre []bpf.Instruction
	if loop == loopAny {
		pre = append(pre,
			bpf.LoadExtension{Num: bpf.ExtLinkLayerType},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: arphrdLoopback, SkipFalse: 3},
		)
	}
	pre = append(pre,
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: packetOutgoing, SkipFalse: 1},
		bpf.RetConstant{Val: 0},
	)
	if prog == nil {
		pre = append(pre, bpf.RetConstant{Val: snapAll})
	}
	raw, err := bpf.Assemble(pre)
	if err != nil {
		return nil, err
	}
	return append(raw, prog...), nil
}
