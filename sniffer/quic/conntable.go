// Package quic finds TLS handshakes inside QUIC: it decrypts the Initial
// packets of QUIC v1 (RFC 9000, RFC 9001) and v2 (RFC 9369), reassembles the
// CRYPTO streams of both directions, and hands out the first complete
// ClientHello and ServerHello of each connection as bytes. It does not parse
// TLS messages (package tlsparse does) and never decrypts anything beyond the
// Initial packet number space, whose keys any observer can derive.
//
// A ConnTable follows connections by client and server address. Its state is
// bounded: a cap on connections (oldest evicted first), a cap on buffered
// CRYPTO bytes per connection, and an idle timeout. Whatever it drops or
// cannot read is counted by reason in Stats. After a connection's keys are
// derived, processing further packets of it allocates nothing.
package quic

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/pqwatch/pqwatch/internal/memlist"
)

// Defaults for zero Config fields.
const (
	DefaultMaxConns       = 65536
	DefaultMaxCryptoBytes = 64 << 10
	DefaultTimeout        = 30 * time.Second
)

// Config bounds a ConnTable and receives its results.
type Config struct {
	// MaxConns caps tracked connections; when full the least recently seen
	// one is delivered and evicted. Default DefaultMaxConns.
	MaxConns int
	// MaxCryptoBytes caps the CRYPTO bytes buffered per direction of a
	// connection; a hello longer than that is counted as crypto_overflow and
	// reported truncated. Buffers grow only as data arrives, so the worst
	// case, 2*MaxConns*MaxCryptoBytes, is far from the typical few KiB per
	// connection. Default DefaultMaxCryptoBytes.
	MaxCryptoBytes int
	// Timeout is the idle time after which Expire delivers and drops a
	// connection. Default DefaultTimeout.
	Timeout time.Duration
	// OnConn receives every connection exactly once, from inside Datagram,
	// Expire or Flush. The Conn and its slices are never written again, so
	// OnConn may keep them.
	OnConn func(*Conn)
}

// Conn is what a ConnTable learned about one QUIC connection's Initial
// exchange. It is handed to Config.OnConn once and never modified afterwards.
type Conn struct {
	Client, Server netip.AddrPort // Client sent the first Initial
	Version        uint32         // QUIC version of the last client Initial decrypted
	// FirstTS is the capture time of the datagram that carried byte 0 of the
	// client's CRYPTO stream.
	FirstTS time.Time
	// ClientHello is the first complete ClientHello handshake message, 4-byte
	// header included; nil if it never completed.
	ClientHello []byte
	// ClientHelloPackets counts the Initial packets that brought new bytes of
	// the ClientHello.
	ClientHelloPackets int
	// HelloRetryRequest is set when the server's first handshake message was
	// a HelloRetryRequest (a ServerHello with the RFC 8446 magic random).
	HelloRetryRequest []byte
	// ServerHello is the first complete ServerHello that is not a
	// HelloRetryRequest, header included; nil if not seen.
	ServerHello []byte
	// ServerHelloTS is the capture time of the first server Initial that
	// carried CRYPTO bytes.
	ServerHelloTS      time.Time
	Retry              bool   // the server sent a Retry
	VersionNegotiation bool   // the server sent a Version Negotiation packet
	Closed             string // CONNECTION_CLOSE error code seen in an Initial, e.g. "0x0128"
	// ClientHelloStarted is true when byte 0 of the client's CRYPTO stream
	// was captured and begins a ClientHello (handshake type 1) of a
	// plausible length: at least a ClientHello's fixed fields, at most
	// MaxCryptoBytes. Without it the connection carries no handshake: a
	// capture that began after the first Initial, or forged Initials
	// (their keys derive from the public DCID).
	ClientHelloStarted bool
	// ClientHelloTruncated is true when a ClientHello started
	// (ClientHelloStarted) but the message never completed.
	ClientHelloTruncated bool
	// MemoryEvicted is true when EvictOldest dropped the connection to
	// stay within a memory budget: pqwatch's loss, not the server's.
	MemoryEvicted bool
	// DCID is the Destination Connection ID of the client's first Initial
	// (DCIDLen bytes): with the ClientHello's random it identifies the
	// connection in every view of it (NAT changes addresses, not the
	// DCID).
	DCID    [MaxCIDLen]byte
	DCIDLen uint8
	// TTL is the IP TTL (hop limit) of the datagram that carried byte 0
	// of the client's CRYPTO stream (DatagramTTL), or of the first one
	// that carried ClientHello bytes when byte 0 was never captured.
	TTL uint8
}

// minClientHello is the smallest ClientHello message, header included:
// version, random, an empty session_id, one cipher suite and one
// compression method.
const minClientHello = 4 + 2 + 32 + 1 + 2 + 2 + 1 + 1

// maxRetries is how many Retry connection IDs a connection remembers.
const maxRetries = 4

type flowKey struct{ client, server netip.AddrPort }

const (
	dirClient = 0
	dirServer = 1
)

type conn struct {
	pub     *Conn
	key     flowKey
	version uint32
	keys    [2]*Keys
	largest [2]int64
	streams [2]cryptoStream
	// Source Connection IDs of the Retry packets seen. A client acts on
	// the first Retry only, but a capture can hold several (a server may
	// send more than one): remember a few and accept any of them.
	retrySCID [maxRetries][MaxCIDLen]byte
	retryLen  [maxRetries]uint8
	retries   int
	chStarted bool
	// chFirstSeen is when the first ClientHello bytes (any offset) were
	// captured: FirstTS when byte 0 itself was never captured.
	chFirstSeen time.Time
	chFirstTTL  uint8
	chDone      bool
	chDead      bool // can never complete (overflow, not a ClientHello)
	chNotHello  bool // the client handshake stream is not a ClientHello: no record
	shDone      bool
	shOff       int // server stream offset of the next message
	done        bool
	buffered    memlist.Link[conn] // in ConnTable.buffered while it holds CRYPTO buffers
	lastSeen    time.Time
	prev, next  *conn
}

// Stat names, in the order of the counters.
const (
	statDatagrams = iota
	statNotQUIC
	statShortHeader
	statMalformed
	statUnknownVersion
	statDecryptFailed
	statFrameError
	statUnexpectedFrame
	statCryptoOverflow
	statBadHandshake
	statSkipped0RTT
	statSkippedHandshake
	statRetry
	statVersionNegotiation
	statInitialPackets
	statConnsTotal
	statDelivered
	statEvicted
	statExpired
	statClosed
	statMemoryEvicted
	numStats
)

var statNames = [numStats]string{
	"datagrams", "not_quic", "short_header", "malformed", "unknown_version",
	"decrypt_failed", "frame_error", "unexpected_frame", "crypto_overflow",
	"bad_handshake", "skipped_0rtt", "skipped_handshake", "retry",
	"version_negotiation", "initial_packets", "conns_total", "delivered",
	"evicted", "expired", "closed", "memory_evicted",
}

// ConnTable is the table of QUIC connections whose Initial packets are being
// decrypted and reassembled, keyed by client and server address. It is not
// safe for concurrent use.
type ConnTable struct {
	cfg        Config
	conns      map[flowKey]*conn
	head, tail *conn // least and most recently seen
	buf        []byte
	stats      [numStats]uint64
	lastExpire time.Time
	// Connections holding CRYPTO buffers, oldest first (evicted first by
	// EvictOldest), and the bytes they hold.
	buffered memlist.List[conn]

	// One derived key pair for a DCID not yet tied to a connection, so a
	// burst of undecryptable Initials for the same DCID derives once.
	cacheVersion uint32
	cacheDCID    [MaxCIDLen]byte
	cacheLen     int
	cacheKeys    [2]*Keys

	ttl uint8 // of the datagram being handled (DatagramTTL)
}

// NewConnTable returns a ConnTable; zero Config fields take their defaults.
func NewConnTable(cfg Config) *ConnTable {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxCryptoBytes <= 0 {
		cfg.MaxCryptoBytes = DefaultMaxCryptoBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &ConnTable{
		cfg:      cfg,
		conns:    make(map[flowKey]*conn),
		buf:      make([]byte, 0, 2048),
		buffered: memlist.New(func(c *conn) *memlist.Link[conn] { return &c.buffered }),
	}
}

// Shrink rebuilds the connection map at the size it holds now (a Go map
// keeps its peak size when entries are deleted): memory a flood of
// Initials left behind is given up.
func (t *ConnTable) Shrink() {
	m := make(map[flowKey]*conn, len(t.conns))
	for k, c := range t.conns {
		m[k] = c
	}
	t.conns = m
}

// Stats returns the counters by reason, plus "conns" (connections tracked
// now, delivered ones included until they expire).
func (t *ConnTable) Stats() map[string]uint64 {
	m := make(map[string]uint64, numStats+1)
	for i, n := range statNames {
		m[n] = t.stats[i]
	}
	m["conns"] = uint64(len(t.conns))
	return m
}

// lookup finds the connection of a datagram and the direction it travels.
func (t *ConnTable) lookup(src, dst netip.AddrPort) (*conn, int) {
	if c := t.conns[flowKey{src, dst}]; c != nil {
		return c, dirClient
	}
	if c := t.conns[flowKey{dst, src}]; c != nil {
		return c, dirServer
	}
	return nil, 0
}

// Datagram processes one UDP payload captured at ts from src to dst. payload
// is only read, never kept. Non-QUIC datagrams are rejected after a byte or
// two and never create state: a connection is tracked only once a client
// Initial decrypted and authenticated. As capture time advances by a quarter
// of the Timeout, Datagram expires idle connections itself, so offline
// analysis needs no Expire calls; live capture should still call Expire on a
// wall-clock ticker for quiet periods.
func (t *ConnTable) Datagram(ts time.Time, src, dst netip.AddrPort, payload []byte) {
	t.DatagramTTL(ts, src, dst, 0, payload)
}

// DatagramTTL is Datagram for a datagram whose IP packet had TTL (hop
// limit) ttl: the connection's Conn.TTL is the one of its ClientHello's
// first bytes.
func (t *ConnTable) DatagramTTL(ts time.Time, src, dst netip.AddrPort, ttl uint8, payload []byte) {
	t.ttl = ttl
	t.stats[statDatagrams]++
	if ts.Sub(t.lastExpire) >= t.cfg.Timeout/4 || ts.Before(t.lastExpire) {
		t.Expire(ts)
		t.lastExpire = ts
	}
	if len(payload) == 0 || payload[0]&0x80 == 0 {
		// Not a long header: a short header packet of a tracked connection,
		// or not QUIC at all.
		if c, _ := t.lookup(src, dst); c != nil {
			t.stats[statShortHeader]++
			t.touch(c, ts)
		} else {
			t.stats[statNotQUIC]++
		}
		return
	}
	c, dir := t.lookup(src, dst)
	if c == nil && payload[0]&0x40 == 0 {
		// A connection starts with an Initial, whose fixed bit is set.
		t.stats[statNotQUIC]++
		return
	}
	b := payload
	for first := true; len(b) > 0; first = false {
		if b[0]&0x80 == 0 {
			if !allZero(b) {
				t.stats[statShortHeader]++
			}
			return
		}
		h, err := ParseLongHeader(b)
		if err != nil {
			switch {
			case errors.Is(err, ErrUnknownVersion):
				t.stats[statUnknownVersion]++
			case first && c == nil:
				t.stats[statNotQUIC]++
			default:
				t.stats[statMalformed]++
			}
			return
		}
		pkt := b[:h.Len]
		b = b[h.Len:]
		switch h.Type {
		case PacketVersionNegotiation:
			t.stats[statVersionNegotiation]++
			if c != nil && dir == dirServer && !c.done {
				c.pub.VersionNegotiation = true
				t.touch(c, ts)
			}
		case PacketRetry:
			t.stats[statRetry]++
			if c != nil && dir == dirServer && !c.done && len(h.SCID) <= MaxCIDLen {
				c.pub.Retry = true
				if c.retries < maxRetries {
					c.retryLen[c.retries] = uint8(copy(c.retrySCID[c.retries][:], h.SCID))
					c.retries++
				}
				t.touch(c, ts)
			}
		case Packet0RTT:
			t.stats[statSkipped0RTT]++
		case PacketHandshake:
			t.stats[statSkippedHandshake]++
		case PacketInitial:
			c, dir = t.initial(ts, src, dst, c, dir, &h, pkt)
		}
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// initial handles one Initial packet and returns the connection (possibly new)
// it belongs to.
func (t *ConnTable) initial(ts time.Time, src, dst netip.AddrPort, c *conn, dir int, h *Header, pkt []byte) (*conn, int) {
	if c == nil {
		keys := t.derive(h.Version, h.DCID)
		if keys[0] == nil {
			t.stats[statDecryptFailed]++
			return nil, 0
		}
		plain, pn, ok := t.open(keys[0], pkt, h, -1)
		if !ok {
			return nil, 0
		}
		c = t.newConn(ts, flowKey{src, dst}, h.Version, h.DCID, keys)
		c.largest[dirClient] = pn
		t.frames(c, dirClient, ts, plain)
		return c, dirClient
	}
	t.touch(c, ts)
	if dir == dirServer {
		if c.done {
			return c, dir
		}
		plain, pn, ok := t.open(c.keys[dirServer], pkt, h, c.largest[dirServer])
		if !ok {
			return c, dir
		}
		c.largest[dirServer] = max(c.largest[dirServer], pn)
		t.frames(c, dirServer, ts, plain)
		return c, dir
	}
	if h.Version == c.version {
		plain, nb, pn, err := c.keys[dirClient].Open(t.buf, pkt, h, c.largest[dirClient])
		t.buf = nb
		if err == nil {
			t.stats[statInitialPackets]++
			c.largest[dirClient] = max(c.largest[dirClient], pn)
			if !c.done {
				t.frames(c, dirClient, ts, plain)
			}
			return c, dir
		}
	}
	// The connection's keys do not open this packet: keys from a Retry's
	// connection ID, a new version after Version Negotiation, or a new
	// connection reusing the 4-tuple.
	keys := t.derive(h.Version, h.DCID)
	if keys[0] == nil {
		t.stats[statDecryptFailed]++
		return c, dir
	}
	plain, pn, ok := t.open(keys[0], pkt, h, c.largest[dirClient])
	if !ok {
		return c, dir
	}
	same := !c.done && (c.retryMatch(h.DCID) ||
		(c.pub.VersionNegotiation && h.Version != c.version))
	if same {
		t.cacheLen = -1 // the keys now belong to c
		c.keys = keys
		c.version = h.Version
		c.pub.Version = h.Version
		c.retries = 0
		c.largest[dirClient] = max(c.largest[dirClient], pn)
		c.largest[dirServer] = -1
		t.frames(c, dirClient, ts, plain)
		return c, dir
	}
	// A new connection on the same addresses: finish the old one. The
	// plaintext lives in t.buf, which neither deliver nor newConn touches.
	t.deliver(c)
	t.remove(c)
	c = t.newConn(ts, flowKey{src, dst}, h.Version, h.DCID, keys)
	c.largest[dirClient] = pn
	t.frames(c, dirClient, ts, plain)
	return c, dirClient
}

// retryMatch reports whether dcid is the Source Connection ID of a Retry
// the connection received.
func (c *conn) retryMatch(dcid []byte) bool {
	for i := range c.retries {
		if bytes.Equal(dcid, c.retrySCID[i][:c.retryLen[i]]) {
			return true
		}
	}
	return false
}

// open decrypts with k, counting the outcome.
func (t *ConnTable) open(k *Keys, pkt []byte, h *Header, largest int64) ([]byte, int64, bool) {
	plain, nb, pn, err := k.Open(t.buf, pkt, h, largest)
	t.buf = nb
	if err != nil {
		t.stats[statDecryptFailed]++
		return nil, 0, false
	}
	t.stats[statInitialPackets]++
	return plain, pn, true
}

// derive returns the Initial keys of (version, dcid), derived once per DCID.
func (t *ConnTable) derive(version uint32, dcid []byte) [2]*Keys {
	if t.cacheLen >= 0 && t.cacheVersion == version && len(dcid) == t.cacheLen &&
		subtle.ConstantTimeCompare(dcid, t.cacheDCID[:t.cacheLen]) == 1 && t.cacheKeys[0] != nil {
		return t.cacheKeys
	}
	t.cacheLen = -1
	if len(dcid) > MaxCIDLen {
		return [2]*Keys{}
	}
	ck, sk, err := DeriveInitialKeys(version, dcid)
	if err != nil {
		return [2]*Keys{}
	}
	t.cacheVersion = version
	t.cacheLen = copy(t.cacheDCID[:], dcid)
	t.cacheKeys = [2]*Keys{ck, sk}
	return t.cacheKeys
}

func (t *ConnTable) newConn(ts time.Time, key flowKey, version uint32, dcid []byte, keys [2]*Keys) *conn {
	t.cacheLen = -1 // the cached keys now belong to the connection
	for len(t.conns) >= t.cfg.MaxConns && t.head != nil {
		old := t.head
		t.stats[statEvicted]++
		t.deliver(old)
		t.remove(old)
	}
	c := &conn{
		pub:     &Conn{Client: key.client, Server: key.server, Version: version},
		key:     key,
		version: version,
		keys:    keys,
		largest: [2]int64{-1, -1},
	}
	c.pub.DCIDLen = uint8(copy(c.pub.DCID[:], dcid))
	c.streams[dirClient].limit = t.cfg.MaxCryptoBytes
	c.streams[dirServer].limit = t.cfg.MaxCryptoBytes
	t.conns[key] = c
	t.stats[statConnsTotal]++
	c.lastSeen = ts
	t.pushBack(c)
	return c
}

// frames applies the frames of one decrypted Initial packet.
func (t *ConnTable) frames(c *conn, dir int, ts time.Time, plain []byte) {
	s := &c.streams[dir]
	carried := false
	closed := false
	for len(plain) > 0 {
		f, rest, err := NextFrame(plain)
		if err != nil {
			if errors.Is(err, ErrUnexpectedFrame) {
				t.stats[statUnexpectedFrame]++
			} else {
				t.stats[statFrameError]++
			}
			break
		}
		plain = rest
		switch f.Type {
		case FrameCrypto:
			if (dir == dirClient && (c.chDone || c.chDead)) || (dir == dirServer && c.shDone) {
				continue
			}
			added, err := s.add(f.Offset, f.Data)
			if err != nil {
				t.stats[statCryptoOverflow]++
			}
			if !added {
				continue
			}
			carried = true
			if dir == dirClient {
				c.chStarted = true
				if f.Offset == 0 && c.pub.FirstTS.IsZero() {
					c.pub.FirstTS, c.pub.TTL = ts, t.ttl
				}
				if c.chFirstSeen.IsZero() {
					c.chFirstSeen, c.chFirstTTL = ts, t.ttl
				}
			} else if c.pub.ServerHelloTS.IsZero() {
				c.pub.ServerHelloTS = ts
			}
		case FrameConnectionClose, FrameAppClose:
			if c.pub.Closed == "" {
				c.pub.Closed = fmt.Sprintf("0x%04x", f.ErrorCode)
			}
			closed = true
		}
	}
	if carried {
		if dir == dirClient {
			c.pub.ClientHelloPackets++
			t.clientHello(c)
		} else {
			t.serverHello(c)
		}
	}
	if closed {
		t.stats[statClosed]++
	}
	if closed || (c.chDone && c.shDone) {
		t.deliver(c)
	}
	t.account(c)
}

// account brings t.buffered up to date with c's CRYPTO buffers.
func (t *ConnTable) account(c *conn) {
	if m := cap(c.streams[dirClient].buf) + cap(c.streams[dirServer].buf); m != c.buffered.Mem() {
		t.buffered.Account(c, m)
	}
}

// Buffered reports the CRYPTO buffer bytes the table holds.
func (t *ConnTable) Buffered() int { return t.buffered.Bytes() }

// EvictOldest delivers and drops the connection that has held CRYPTO
// buffers longest (an unfinished hello: delivered ones hold none); it
// reports whether there was one. The connection's Conn has MemoryEvicted
// set.
func (t *ConnTable) EvictOldest() bool {
	c := t.buffered.Oldest()
	if c == nil {
		return false
	}
	t.stats[statMemoryEvicted]++
	if c.pub != nil {
		c.pub.MemoryEvicted = true
	}
	t.deliver(c)
	t.remove(c)
	return true
}

func (t *ConnTable) clientHello(c *conn) {
	s := &c.streams[dirClient]
	msg, need := s.message(0)
	if need == 0 {
		return
	}
	if s.buf[0] != 1 || need < minClientHello { // not a ClientHello
		t.stats[statBadHandshake]++
		c.chDead = true
		c.chNotHello = true
		s.release()
		return
	}
	if need > s.limit {
		t.stats[statCryptoOverflow]++
		c.chDead = true
		c.chNotHello = true // no ClientHello is that long
		s.release()
		return
	}
	c.pub.ClientHelloStarted = true
	if msg != nil {
		c.pub.ClientHello = msg
		c.chDone = true
		s.release()
	}
}

// hrrRandom is the ServerHello.random of a HelloRetryRequest (RFC 8446 4.1.3).
var hrrRandom = []byte{
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
}

func (t *ConnTable) serverHello(c *conn) {
	s := &c.streams[dirServer]
	for !c.shDone {
		msg, need := s.message(c.shOff)
		if need == 0 {
			return
		}
		if s.buf[c.shOff] != 2 || c.shOff+need > s.limit {
			t.stats[statBadHandshake]++
			c.shDone = true
			s.release()
			return
		}
		if msg == nil {
			return
		}
		if len(msg) >= 38 && bytes.Equal(msg[6:38], hrrRandom) && c.pub.HelloRetryRequest == nil {
			c.pub.HelloRetryRequest = msg
			c.shOff += need
			continue
		}
		c.pub.ServerHello = msg
		c.shDone = true
		s.release()
	}
}

// deliver hands c to OnConn once; c stays as a tombstone that absorbs the
// rest of the connection's packets until it expires.
func (t *ConnTable) deliver(c *conn) {
	if c.done {
		return
	}
	c.done = true
	p := c.pub
	c.pub = nil
	p.ClientHelloTruncated = p.ClientHelloStarted && !c.chDone
	if p.FirstTS.IsZero() {
		p.FirstTS, p.TTL = c.chFirstSeen, c.chFirstTTL
	}
	c.streams[dirClient].release()
	c.streams[dirServer].release()
	t.account(c)
	t.stats[statDelivered]++
	if t.cfg.OnConn != nil {
		t.cfg.OnConn(p)
	}
}

// Expire delivers and drops the connections idle since before now-Timeout.
func (t *ConnTable) Expire(now time.Time) {
	limit := now.Add(-t.cfg.Timeout)
	for c := t.head; c != nil && c.lastSeen.Before(limit); c = t.head {
		if !c.done {
			t.stats[statExpired]++
		}
		t.deliver(c)
		t.remove(c)
	}
}

// Flush delivers every connection not delivered yet and drops all state.
func (t *ConnTable) Flush() {
	for c := t.head; c != nil; c = t.head {
		t.deliver(c)
		t.remove(c)
	}
}

func (t *ConnTable) touch(c *conn, ts time.Time) {
	if ts.After(c.lastSeen) {
		c.lastSeen = ts
	}
	if t.tail == c {
		return
	}
	t.unlink(c)
	t.pushBack(c)
}

func (t *ConnTable) pushBack(c *conn) {
	c.prev, c.next = t.tail, nil
	if t.tail != nil {
		t.tail.next = c
	} else {
		t.head = c
	}
	t.tail = c
}

func (t *ConnTable) unlink(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		t.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		t.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

func (t *ConnTable) remove(c *conn) {
	t.unlink(c)
	delete(t.conns, c.key)
	t.buffered.Account(c, 0)
}
