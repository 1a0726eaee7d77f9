// SPDX-License-Identifier: GPL-2.0
/* filter.c: the capture's socket filter (SO_ATTACH_BPF on every AF_PACKET
 * ring). It does what the classic filter of filter.go does (ports, the
 * outgoing copy on loopback, pure ACKs and application-data segments), and
 * keeps a flow's packets out of the ring once the sniffer has everything it
 * needs from it, deciding from the packets' bytes itself:
 *
 *  - a segment whose payload is a whole TLS record holding a whole final
 *    ServerHello (not a HelloRetryRequest) that selects TLS 1.3: the sniffer
 *    finishes the record at that ServerHello;
 *  - for a final ServerHello of TLS 1.2 or older (whole in its segment), the
 *    client's first new data after it (sequence number at or past the
 *    ServerHello segment's acknowledgement): TLS 1.0-1.2 has no early data,
 *    so the client sends it only after the server's whole first flight
 *    (ServerKeyExchange, ServerHelloDone, or the ChangeCipherSpec of a
 *    resumed session), which therefore went past this tap before it;
 *  - a plaintext alert record at the start of a segment, from either side.
 *
 * Only a connection whose SYN and SYN-ACK this filter saw is ever decided,
 * and only by a segment inside its sequence window: the ServerHello from
 * the server within 64 KiB of its first data byte, an alert within 64 KiB
 * of its side's, the TLS 1.2 client's data within 64 KiB past the
 * ServerHello's acknowledgement. So a segment forged by someone who does
 * not see the connection (who must guess a sequence number within 2^16 of
 * 2^32) cannot hide the rest of it from the capture; the sniffer, which
 * reassembles by sequence number, ignores such a segment too.
 *
 * The deciding packet is kept; every later packet of the flow is dropped,
 * FIN and RST included, until a SYN starts a new connection on the same
 * addresses. Anything else (a ServerHello split over segments, an unknown
 * layout, a connection whose handshake was not seen) decides nothing:
 * those flows pass as with the classic filter.
 * Flows are keyed by interface and canonical endpoints in a small LRU map;
 * an evicted entry only lets the flow's packets through again. */
#include "filter.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#define SNAP_ALL 0x40000
#define PACKET_OUTGOING 4
#define LOOPBACK_IFINDEX 1

/* Set by the loader (capture/ebpf.go). */
volatile const __u64 ports[1024]; /* bitset of the ports; unused when any_port */
volatile const __u8 any_port;
/* 0: no loopback check; 1: the socket is bound to loopback (drop every
 * outgoing copy); 2: bound to no device (drop the outgoing copy on lo). */
volatile const __u8 loop_mode;
/* Where the network header starts in the socket's data: 14 on a SOCK_RAW
 * socket of an Ethernet device (or loopback), 0 on SOCK_DGRAM. */
volatile const __u32 net_off;

struct flow_key {
	__u32 ifindex;
	__u16 port_lo, port_hi; /* host order */
	__u8 addr_lo[16], addr_hi[16]; /* IPv4 in the first 4 bytes */
};

#define ST_AWAIT 1   /* TLS <= 1.2 ServerHello seen: wait for the client */
#define ST_DECIDED 2 /* drop the flow's packets */
#define ST_SYN 3     /* the client's SYN seen: wait for the SYN-ACK */
#define ST_OPEN 4    /* SYN and SYN-ACK seen: both initial sequence numbers known */

/* WINDOW: how far past its side's first data byte a deciding segment may
 * start (a TLS handshake's first flight is far shorter). */
#define WINDOW 0x10000

struct flow_val {
	__u8 state;
	__u8 server_lo; /* the server is the key's lo endpoint */
	__u16 pad;
	__u32 ack;  /* ST_AWAIT: the ServerHello segment's acknowledgement */
	__u32 cseq; /* the client's first data byte (its ISN + 1) */
	__u32 sseq; /* the server's first data byte (ST_OPEN and after) */
};

/* in_window reports seq in [first, first + WINDOW). */
static __always_inline int in_window(__u32 seq, __u32 first)
{
	return seq - first < WINDOW;
}

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
} flows SEC(".maps");

/* Counters, per CPU: keep in step with the Counter* names in ebpf.go. */
enum {
	C_DECIDED_TLS13,
	C_DECIDED_TLS12,
	C_DECIDED_ALERT,
	C_AWAIT,
	C_DROPPED, /* packets of decided flows dropped */
	C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		*v += 1;
}

/* Legacy packet loads (BPF_LD_ABS/IND): offsets from the start of the
 * socket's data; half and word come in host order. */
unsigned long long load_byte(void *skb, unsigned long long off) asm("llvm.bpf.load.byte");
unsigned long long load_half(void *skb, unsigned long long off) asm("llvm.bpf.load.half");
unsigned long long load_word(void *skb, unsigned long long off) asm("llvm.bpf.load.word");

static __always_inline int port_in(__u16 p)
{
	return (ports[(p >> 6) & 1023] >> (p & 63)) & 1;
}

/* load reads len bytes at off from the network header. Not
 * bpf_skb_load_bytes_relative: it reads only the linear part of the skb,
 * and a TCP payload (on loopback, for one) sits in page fragments. */
static __always_inline int load(struct __sk_buff *skb, __u32 off, void *to, __u32 len)
{
	return bpf_skb_load_bytes(skb, net_off + off, to, len);
}

/* The HelloRetryRequest random, RFC 8446 section 4.1.3. */
const __u8 hrr_random[32] = {
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
};

#define SH_NONE 0  /* not a whole, well-formed final ServerHello */
#define SH_TLS13 1 /* and its record is whole in the segment */
#define SH_TLS12 2
#define MAX_EXTS 32

/* server_hello reads the payload at off (len bytes, starting 16 03 xx LL LL 02). */
static __always_inline int server_hello(struct __sk_buff *skb, __u32 off, __u32 len)
{
	__u8 h[44];
	if (len < sizeof(h) || load(skb, off, h, sizeof(h)) < 0)
		return SH_NONE;
	__u32 rec = (__u32)h[3] << 8 | h[4];
	__u32 msg = 4 + ((__u32)h[6] << 16 | (__u32)h[7] << 8 | h[8]);
	if (h[5] != 2 || msg > rec || 5 + msg > len)
		return SH_NONE; /* the ServerHello is not whole here */
	int hrr = 1;
	for (int i = 0; i < 32; i++)
		if (h[11 + i] != hrr_random[i])
			hrr = 0;
	if (hrr)
		return SH_NONE;
	__u32 end = 5 + msg; /* payload offset past the message */
	__u32 sid = h[43];
	if (sid > 32)
		return SH_NONE;
	__u32 p = 44 + sid; /* cipher suite */
	__u16 version = (__u16)h[9] << 8 | h[10];
	if (p + 3 > end)
		return SH_NONE;
	p += 3;
	if (p < end) {
		__u8 e[4];
		if (p + 2 > end || load(skb, off + p, e, 2) < 0)
			return SH_NONE;
		__u32 xend = p + 2 + ((__u32)e[0] << 8 | e[1]);
		if (xend != end)
			return SH_NONE;
		p += 2;
		for (int i = 0; i < MAX_EXTS && p < xend; i++) {
			if (p + 4 > xend || load(skb, off + p, e, 4) < 0)
				return SH_NONE;
			__u16 typ = (__u16)e[0] << 8 | e[1];
			__u32 n = (__u32)e[2] << 8 | e[3];
			if (p + 4 + n > xend)
				return SH_NONE;
			if (typ == 43) { /* supported_versions */
				if (n != 2 || load(skb, off + p + 4, e, 2) < 0)
					return SH_NONE;
				version = (__u16)e[0] << 8 | e[1];
			}
			p += 4 + n;
		}
		if (p != xend)
			return SH_NONE; /* more extensions than MAX_EXTS */
	}
	if (version == 0x0304)
		return 5 + rec <= len ? SH_TLS13 : SH_NONE;
	return SH_TLS12;
}

SEC("socket")
int capture_filter(struct __sk_buff *skb)
{
	__u32 proto = bpf_ntohs(skb->protocol);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD || proto == 0x9100)
		return SNAP_ALL; /* VLAN-tagged, not looked into (as the classic filter) */
	if (loop_mode == 1 || (loop_mode == 2 && skb->ifindex == LOOPBACK_IFINDEX))
		if (skb->pkt_type == PACKET_OUTGOING)
			return 0;

	struct flow_key k = {};
	__u8 l4;
	__u32 l4off, plen; /* plen: IP payload length */
	int v6 = 0;
	if (proto == ETH_P_IP) {
		/* Header fields through LD_ABS-style loads: inline reads of the
		 * skb's linear part (where headers are), as the classic filter's;
		 * a read past the packet ends the program with 0 (dropped), as
		 * there. bpf_skb_load_bytes is a helper call per read. */
		__u32 vihl = load_byte(skb, net_off);
		if (vihl >> 4 != 4)
			return 0;
		l4 = load_byte(skb, net_off + 9);
		if (l4 != IPPROTO_TCP && l4 != IPPROTO_UDP)
			return 0;
		if (load_half(skb, net_off + 6) & 0x1fff)
			return SNAP_ALL; /* a fragment after the first: no ports */
		l4off = (vihl & 0xf) * 4;
		plen = (__u32)load_half(skb, net_off + 2) - l4off; /* may wrap: TSO */
		__u32 a = load_word(skb, net_off + 12), b = load_word(skb, net_off + 16);
		__builtin_memcpy(k.addr_lo, &a, 4);
		__builtin_memcpy(k.addr_hi, &b, 4);
	} else if (proto == ETH_P_IPV6) {
		__u8 ip[40];
		if (load(skb, 0, ip, sizeof(ip)) < 0 || ip[0] >> 4 != 6)
			return 0;
		l4 = ip[6];
		if (l4 != IPPROTO_TCP && l4 != IPPROTO_UDP)
			return 0;
		l4off = 40;
		plen = (__u32)ip[4] << 8 | ip[5];
		__builtin_memcpy(k.addr_lo, ip + 8, 16);
		__builtin_memcpy(k.addr_hi, ip + 24, 16);
		v6 = 1;
	} else {
		return 0;
	}
	__u32 t = net_off + l4off; /* the TCP/UDP header in the socket's data */
	__u16 sport = load_half(skb, t), dport = load_half(skb, t + 2);
	if (!any_port && !port_in(sport) && !port_in(dport))
		return 0;
	if (l4 != IPPROTO_TCP)
		return SNAP_ALL;
	__u8 flags = load_byte(skb, t + 13);

	/* Noise, as the classic filter: pure ACKs, application data. */
	__u32 doff = (load_byte(skb, t + 12) >> 4) * 4;
	__u32 len = plen - doff; /* TCP payload length; wraps with TSO */
	int noise = 0;
	if (!(flags & 0x07) && plen >= doff) { /* SYN, FIN and RST are kept */
		if (len == 0) {
			noise = 1;
		} else if (len >= 3 && len < 0x10000) {
			__u8 b[9];
			if (load(skb, l4off + doff, b, 3) == 0) {
				if (b[0] == 0x17 && b[1] == 3 && b[2] == 3)
					noise = 1;
				else if (b[0] == 0x14 && len >= 9 && load(skb, l4off + doff, b, 9) == 0 &&
					 b[1] == 3 && b[2] == 3 && b[3] == 0 && b[4] == 1 && b[5] == 1 &&
					 b[6] == 0x17 && b[7] == 3 && b[8] == 3)
					noise = 1;
			}
		}
	}
	if (noise)
		return 0; /* dropped whatever the flow's state: no key, no lookup */

	/* Canonical endpoints: lo is the smaller (address, port). */
	int src_lo = 1;
	int alen = v6 ? 16 : 4;
	for (int i = 0; i < 16; i++) {
		if (i >= alen)
			break;
		if (k.addr_lo[i] != k.addr_hi[i]) {
			src_lo = k.addr_lo[i] < k.addr_hi[i];
			break;
		}
		if (i == alen - 1)
			src_lo = sport <= dport;
	}
	k.ifindex = skb->ifindex;
	if (src_lo) {
		k.port_lo = sport;
		k.port_hi = dport;
	} else {
		__u8 tmp[16];
		__builtin_memcpy(tmp, k.addr_lo, 16);
		__builtin_memcpy(k.addr_lo, k.addr_hi, 16);
		__builtin_memcpy(k.addr_hi, tmp, 16);
		k.port_lo = dport;
		k.port_hi = sport;
	}

	__u32 seq = load_word(skb, t + 4), ackn = load_word(skb, t + 8);
	if (flags & 0x02) { /* SYN: a new connection on these endpoints */
		if (!(flags & 0x10)) {
			struct flow_val sv = {.state = ST_SYN, .server_lo = !src_lo, .cseq = seq + 1};
			bpf_map_update_elem(&flows, &k, &sv, BPF_ANY);
		} else {
			struct flow_val *fv = bpf_map_lookup_elem(&flows, &k);
			if (fv && fv->state == ST_SYN && fv->server_lo == src_lo && ackn == fv->cseq) {
				struct flow_val ov = *fv;
				ov.state = ST_OPEN;
				ov.sseq = seq + 1;
				bpf_map_update_elem(&flows, &k, &ov, BPF_ANY);
			}
		}
		return SNAP_ALL;
	}

	struct flow_val *fv = bpf_map_lookup_elem(&flows, &k);
	if (fv && fv->state == ST_DECIDED) {
		count(C_DROPPED);
		return 0;
	}
	if (!fv || fv->state == ST_SYN)
		return SNAP_ALL; /* the handshake was not seen: nothing is decided */
	int from_server = fv->server_lo == src_lo;
	if (plen < doff || len < 6 || len >= 0x10000)
		return SNAP_ALL;

	__u32 poff = l4off + doff;
	__u8 b[6];
	if (load(skb, poff, b, 6) < 0)
		return SNAP_ALL;
	struct flow_val nv = *fv;
	if (b[0] == 0x15 && b[1] == 3 && b[2] <= 4 && b[3] == 0 && b[4] == 2 &&
	    in_window(seq, from_server ? fv->sseq : fv->cseq)) {
		nv.state = ST_DECIDED;
		bpf_map_update_elem(&flows, &k, &nv, BPF_ANY);
		count(C_DECIDED_ALERT);
		return SNAP_ALL;
	}
	if (fv->state == ST_AWAIT) {
		if (!from_server && in_window(seq, fv->ack)) {
			nv.state = ST_DECIDED;
			bpf_map_update_elem(&flows, &k, &nv, BPF_ANY);
			count(C_DECIDED_TLS12);
		}
		return SNAP_ALL;
	}
	if (b[0] == 0x16 && b[1] == 3 && b[5] == 2 && from_server && in_window(seq, fv->sseq)) {
		int sh = server_hello(skb, poff, len);
		if (sh == SH_TLS13) {
			nv.state = ST_DECIDED;
			bpf_map_update_elem(&flows, &k, &nv, BPF_ANY);
			count(C_DECIDED_TLS13);
		} else if (sh == SH_TLS12 && (flags & 0x10) && in_window(ackn, fv->cseq)) {
			nv.state = ST_AWAIT;
			nv.ack = ackn;
			bpf_map_update_elem(&flows, &k, &nv, BPF_ANY);
			count(C_AWAIT);
		}
	}
	return SNAP_ALL;
}
