// Package capture is the agent's live packet source: AF_PACKET TPACKET_V3
// rings (github.com/gopacket/gopacket/afpacket, pure Go), one ring per
// interface per worker, joined in a PACKET_FANOUT group (hash with defrag)
// so that both directions of a flow always reach the same worker.
//
// The -ports filter runs in the kernel: packets on other ports never reach a
// ring and are not counted. With Config.SkipNoise it is, where the kernel
// allows, the eBPF socket filter of bpf/filter.c (compiled with bpf2go; the
// object and bindings are committed), which also keeps a flow's packets out
// of the rings once its handshake is decided; otherwise classic BPF
// assembled in Go (golang.org/x/net/bpf, no libpcap). See Filter,
// Config.Filter and Capture.Filter.
//
// Interfaces come from netlink in the network namespace New was called in.
// With Config.Ifaces nil every interface that is up is captured, and Run
// follows link changes: a link that appears (or is renamed into a wanted
// name's place and is up) gets rings, a link that is deleted or moved to
// another namespace has its rings closed; its counters stay in the totals.
// Named interfaces that do not exist yet are captured when they appear.
//
// Link types. Ethernet devices, veths and loopback are read with SOCK_RAW
// sockets and reported as LinkEthernet (Linux loopback frames carry an
// Ethernet header with zero MACs). Every other device (tun, WireGuard, IP
// tunnels, PPP) and the "any" mode use SOCK_DGRAM: data starts at the IP
// header and is reported as LinkRaw, whatever the device. "any" is one
// fanout group of sockets bound to no interface: the cheapest way to
// watch a host with many pod veths, at the price of per-interface counters
// (Stats shows one "any" entry). On loopback every packet passes the taps
// twice (outgoing and incoming); the outgoing copy is dropped in the
// kernel filter, as libpcap does.
//
// Memory: each ring maps BlockSize*NumBlocks bytes (8 MiB by default: 8 blocks of 1 MiB; each block handed over is a wakeup, and at 600 handshakes a second 1 MiB blocks woke pqwatch 200 times in 5 s against 330 with 256 KiB ones), and
// there are Workers rings per captured interface.
package capture
