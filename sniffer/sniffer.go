// Package sniffer turns captured packets into handshake records: link, IP,
// TCP and UDP decoding, a bounded flow table, reassembly of the first
// handshake bytes of each TCP direction, QUIC Initial decryption (package
// sniffer/quic) and the TLS state that decides each connection's outcome.
//
// A Sniffer is not safe for concurrent use: feed it from one goroutine (the
// live agent runs one Sniffer per capture worker, with flow-hashed fanout).
package sniffer

import (
	"net/netip"
	"time"
	"unsafe"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer/quic"
	"github.com/pqwatch/pqwatch/tlsparse"

	"github.com/pqwatch/pqwatch/internal/memlist"
)

// Config bounds the sniffer's state. Zero values take the defaults.
type Config struct {
	// MaxFlows caps the TCP flow table; the least recently active flow is
	// evicted (and counted) when it is full. Default 65536.
	MaxFlows int
	// FlowTimeout expires a flow idle for this long (capture time).
	// Default 30s.
	FlowTimeout time.Duration
	// MaxStreamBytes caps the bytes kept per direction until the
	// handshake is decided. Default 64 KiB.
	MaxStreamBytes int
	// MaxPlaintextScan is how many bytes of a plaintext prelude
	// (STARTTLS, HTTP CONNECT, database SSL requests) a direction may hold
	// while the sniffer looks for a ClientHello after it. Default 4 KiB.
	MaxPlaintextScan int
	// MaxQUICConns caps QUIC connection state. Default 16384.
	MaxQUICConns int
	// MaxBufferedBytes is one budget, in bytes, for everything a flood can
	// grow: TCP reassembly buffers (the prefix, out-of-order segments and
	// handshake messages of each direction) and QUIC CRYPTO buffers. When
	// it is exceeded the oldest unfinished flow or QUIC connection holding
	// buffers is evicted (the table holding more bytes gives one up), its
	// record (if it has one) ends truncated, and it is counted as
	// memory_evicted / quic_memory_evicted. Default: a quarter of the
	// memory limit pqwatch runs under (GOMEMLIMIT, else the cgroup's, v2 or
	// v1) shared by GOMAXPROCS sniffers, at most DefaultMaxBufferedBytes.
	MaxBufferedBytes int
	// Ports, when not empty, narrows the packets examined to TCP/UDP
	// packets with one of these ports on either side.
	Ports []uint16
	// OnRecord receives each finished record. The record is owned by the
	// callee.
	OnRecord func(*record.Handshake)
	// NewRecord, when set, gives the sniffer the memory of each TCP
	// record, which it overwrites whole (a pool of records the pipeline
	// is done with); nil: a new allocation each time.
	NewRecord func() *record.Handshake
}

func (c *Config) defaults() {
	if c.MaxFlows <= 0 {
		c.MaxFlows = 65536
	}
	if c.FlowTimeout <= 0 {
		c.FlowTimeout = 30 * time.Second
	}
	if c.MaxStreamBytes <= 0 {
		c.MaxStreamBytes = 64 << 10
	}
	if c.MaxPlaintextScan <= 0 {
		c.MaxPlaintextScan = 4 << 10
	}
	if c.MaxQUICConns <= 0 {
		c.MaxQUICConns = 16384
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = defaultBudget()
	}
}

// Stats counts what the sniffer saw and dropped. Errors are by reason.
type Stats struct {
	Packets      uint64
	Bytes        uint64
	TCPPackets   uint64
	UDPPackets   uint64
	Filtered     uint64 // outside Config.Ports
	Flows        uint64 // TCP flows created
	FlowsActive  int
	FlowsEvicted uint64
	FlowsExpired uint64
	Records      uint64
	// BufferedBytes is what the sniffer's buffers hold now, as counted
	// against Config.MaxBufferedBytes.
	BufferedBytes int
	Errors        map[string]uint64
	QUIC          map[string]uint64
}

// Sniffer is the packet-to-record pipeline.
type Sniffer struct {
	cfg   Config
	flows flowTable
	// LRU list by last activity: head = most recent.
	head, tail *flow
	free       []*flow
	pool       bufPool // freed stream buffers, bounded in bytes
	pkt        packet
	iface      int32         // the interface of the packet at hand (PacketOn)
	ports      *[1024]uint64 // bitset of Config.Ports, nil = all
	quic       *quic.ConnTable
	lastExpire time.Time
	flushing   bool // inside Flush: QUIC connections end as truncated
	// The last TCP record's server and its text (newRecord).
	lastServer     netip.AddrPort
	lastServerText string
	// Flows holding TCP buffers, oldest first (evicted first when the
	// budget is exceeded), and the bytes they hold.
	buffered memlist.List[flow]
	now      time.Time

	stats Stats
	errs  [len(errReasons)]uint64
	ch    tlsparse.ClientHello
	sh    tlsparse.ServerHello
	ja4   tlsparse.JA4Cache
	strs  tlsparse.Interner // SNI and ALPN values
}

// Error reasons counted per packet or per flow.
const (
	errUnsupportedLink = iota
	errNotIP
	errShortPacket
	errIPFragment
	errOtherProto
	errBadHeader
	errClientHello
	errServerHello
	errServerKeyExchange
	errStreamOverflow
	errSnapTruncated
	errRecord
	errCaptureGap
	errSKEMissing
	errNotClientHello
	errNoSYNIncomplete
	errQUICNoClientHello
	errMemoryEvicted
	errQUICMemoryEvicted
	errCount
)

var errReasons = [errCount]string{
	errUnsupportedLink:   "unsupported_link",
	errNotIP:             "not_ip",
	errShortPacket:       "short_packet",
	errIPFragment:        "ip_fragment",
	errOtherProto:        "other_protocol",
	errBadHeader:         "bad_header",
	errClientHello:       "malformed_client_hello",
	errServerHello:       "malformed_server_hello",
	errServerKeyExchange: "malformed_server_key_exchange",
	errStreamOverflow:    "stream_overflow",
	errSnapTruncated:     "snaplen_truncated",
	errRecord:            "malformed_record",
	// Handshake bytes the peer acknowledged that the capture never
	// delivered (dropped by the capture, not by the network: TCP does not
	// resend what was acknowledged). Counted once per direction; pqwatch
	// steps over the hole when it lies inside a message it does not read
	// (a Certificate) and parses what follows.
	errCaptureGap: "capture_gap",
	// A completed TLS 1.0-1.2 (EC)DHE handshake whose ServerKeyExchange
	// was not seen (lost in a capture gap, past the stream cap, or after
	// the flow ended): its record has group_missing "unknown".
	errSKEMissing: "server_key_exchange_missing",
	// A client direction whose first TLS bytes are not the header of a
	// ClientHello of a plausible length (record type 22, version
	// 0x0300-0x0304, handshake type 1, a length between a ClientHello's
	// fixed fields and MaxStreamBytes): never a record.
	errNotClientHello: "not_client_hello",
	// A ClientHello that started on a connection whose SYN was not
	// captured and never completed: nothing shows that the connection
	// existed (forged segments look exactly like this), so no record.
	errNoSYNIncomplete: "no_syn_incomplete",
	// A QUIC connection (a client Initial that decrypted) whose CRYPTO
	// stream never began at offset 0 with a plausible ClientHello header:
	// never a record. Initial keys derive from the public DCID, so anyone
	// can forge such packets.
	errQUICNoClientHello: "quic_no_client_hello",
	// Unfinished flows and QUIC connections evicted, oldest first, to
	// keep the buffers within Config.MaxBufferedBytes.
	errMemoryEvicted:     "memory_evicted",
	errQUICMemoryEvicted: "quic_memory_evicted",
}

// ErrorReasons lists every reason Stats.Errors can hold, so metrics can be
// initialised at zero.
func ErrorReasons() []string { return errReasons[:] }

// New returns a Sniffer with cfg's bounds.
func New(cfg Config) *Sniffer {
	cfg.defaults()
	// The flow table starts small and grows with the flows: a few
	// hundred live at a time in steady state stay in the CPU's caches,
	// where a table presized for thousands spread each lookup over a
	// cold 70 kB (4.45 -> 4.28 us per handshake at 3,000/s).
	s := &Sniffer{cfg: cfg, flows: newFlowTable(0),
		buffered: memlist.New(func(f *flow) *memlist.Link[flow] { return &f.buffered })}
	if len(cfg.Ports) > 0 {
		s.ports = new([1024]uint64)
		for _, p := range cfg.Ports {
			s.ports[p>>6] |= 1 << (p & 63)
		}
	}
	s.quic = quic.NewConnTable(quic.Config{
		MaxConns: cfg.MaxQUICConns,
		Timeout:  cfg.FlowTimeout,
		OnConn:   s.quicConn,
	})
	return s
}

// Packet processes one captured frame. data may be reused by the caller
// after Packet returns.
func (s *Sniffer) Packet(ts time.Time, link int, data []byte) { s.PacketOn(ts, link, 0, data) }

// PacketOn is Packet for a packet captured on interface iface (an index
// above 0) by a capture with one ring per interface: a connection seen on
// several interfaces is a flow on each, never one flow fed two
// interleaved copies of its packets. 0: the interface is not known or does
// not matter (a capture of every interface in one ring, a file).
func (s *Sniffer) PacketOn(ts time.Time, link, iface int, data []byte) {
	s.iface = int32(iface)
	s.stats.Packets++
	s.stats.Bytes += uint64(len(data))
	if ts.After(s.now) {
		s.now = ts
	}
	p := &s.pkt
	if r := decode(link, data, p); r != decodeOK {
		switch r {
		case decodeUnsupportedLink:
			s.errs[errUnsupportedLink]++
		case decodeNotIP:
			s.errs[errNotIP]++
		case decodeShort:
			s.errs[errShortPacket]++
		case decodeFragment:
			s.errs[errIPFragment]++
		case decodeOtherProto:
			s.errs[errOtherProto]++
		case decodeBadHeader:
			s.errs[errBadHeader]++
		}
	} else if s.ports != nil && s.ports[p.sport>>6]&(1<<(p.sport&63)) == 0 && s.ports[p.dport>>6]&(1<<(p.dport&63)) == 0 {
		s.stats.Filtered++
	} else {
		switch p.proto {
		case protoTCP:
			s.stats.TCPPackets++
			if f := s.tcp(ts, p); f != nil && f.live {
				s.account(f)
			}
			s.enforce()
		case protoUDP:
			s.stats.UDPPackets++
			if len(p.payload) > 0 {
				s.quic.DatagramTTL(ts, netip.AddrPortFrom(p.src, p.sport), netip.AddrPortFrom(p.dst, p.dport), p.ttl, p.payload)
				s.enforce()
			}
		}
	}
	if s.now.Sub(s.lastExpire) >= time.Second {
		s.Expire(s.now)
	}
}

// Expire finishes flows idle since before now-FlowTimeout with outcome
// timeout.
func (s *Sniffer) Expire(now time.Time) {
	s.lastExpire = now
	cut := now.Add(-s.cfg.FlowTimeout)
	for f := s.tail; f != nil && f.lastSeen.Before(cut); f = s.tail {
		s.finish(f, record.OutcomeTimeout)
		s.stats.FlowsExpired++
		s.remove(f)
	}
	s.quic.Expire(now)
}

// Flush finishes every open flow as the end of a capture: handshakes still
// waiting for their ServerHello get outcome truncated.
func (s *Sniffer) Flush() {
	for f := s.tail; f != nil; f = s.tail {
		s.finish(f, record.OutcomeTruncated)
		s.remove(f)
	}
	s.flushing = true
	s.quic.Flush()
	s.flushing = false
}

// Stats returns a snapshot of the counters.
func (s *Sniffer) Stats() Stats {
	st := s.stats
	st.FlowsActive = s.flows.len()
	st.BufferedBytes = s.buffered.Bytes() + s.quic.Buffered()
	st.Errors = make(map[string]uint64)
	for i, n := range s.errs {
		if n > 0 {
			st.Errors[errReasons[i]] = n
		}
	}
	st.QUIC = s.quic.Stats()
	return st
}

func (s *Sniffer) emit(r *record.Handshake) {
	s.stats.Records++
	if s.cfg.OnRecord != nil {
		s.cfg.OnRecord(r)
	}
}

// Budget is the sniffer's memory budget in bytes (Config.MaxBufferedBytes
// after defaults).
func (s *Sniffer) Budget() int { return s.cfg.MaxBufferedBytes }

// Shrink gives up memory a flood left behind once its flows are gone: the
// pool of freed buffers and freed flows, and the flow and QUIC tables'
// buckets (a Go map keeps its peak size when entries are deleted), rebuilt
// at the size they hold now. It costs one pass over the tables; the agent
// calls it, at most every 30 s, when a flood is over.
func (s *Sniffer) Shrink() {
	s.pool = bufPool{}
	clear(s.free)
	s.free = s.free[:0:0]
	s.flows = s.flows.rebuilt(0)
	s.quic.Shrink()
}

// Held is what the sniffer holds now: TCP flows in its table and the
// bytes of its buffers (TCP and QUIC); cheap, unlike Stats.
func (s *Sniffer) Held() (flows, bufferedBytes int) {
	return s.flows.len(), s.buffered.Bytes() + s.quic.Buffered()
}

// FlowBytes is the memory a TCP flow in the table holds besides its
// buffers: the flow itself and its table slot.
const FlowBytes = int(unsafe.Sizeof(flow{})) + 16

// account brings s.buffered up to date with f's buffers.
// Most packets change nothing: no call then.
func (s *Sniffer) account(f *flow) {
	if m := f.dir[0].mem() + f.dir[1].mem(); m != f.buffered.Mem() {
		s.buffered.Account(f, m)
	}
}

// enforce evicts, oldest first, unfinished flows or QUIC connections that
// hold buffers until the buffers fit Config.MaxBufferedBytes. The table
// holding more bytes gives one up.
func (s *Sniffer) enforce() {
	for s.buffered.Bytes()+s.quic.Buffered() > s.cfg.MaxBufferedBytes {
		if s.buffered.Bytes() >= s.quic.Buffered() {
			if !s.evictOldest() {
				return
			}
			s.errs[errMemoryEvicted]++
		} else {
			if !s.quic.EvictOldest() {
				return
			}
			s.errs[errQUICMemoryEvicted]++
		}
	}
}

// evictOldest finishes and drops the flow that has held buffers longest
// (a handshake still unfinished: finished flows hold none); its record (if
// any) ends truncated: pqwatch's loss, not the server's.
func (s *Sniffer) evictOldest() bool {
	f := s.buffered.Oldest()
	if f == nil {
		return false
	}
	f.dir[0].gap, f.dir[1].gap = true, true // lost for good: truncated
	s.finish(f, record.OutcomeTruncated)
	s.remove(f)
	return true
}
