package sniffer

import (
	"bytes"
	"net/netip"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"

	"github.com/pqwatch/pqwatch/internal/memlist"
)

// flowKey is a TCP connection's endpoints in canonical order (lo < hi), so
// both directions find the same flow.
// flowKey is a TCP connection as one interface's capture sees it: the
// views of one connection on several interfaces (a node's uplink, bridge
// and pod veth, captured with one ring each and read block by block, not in
// time order) are flows of their own, merged later (package merge).
type flowKey struct {
	lo, hi netip.AddrPort
	iface  int32 // PacketOn's interface; 0: one capture of every interface, or a file
}

func makeKey(src, dst netip.AddrPort, iface int32) (flowKey, int) {
	if c := src.Addr().Compare(dst.Addr()); c < 0 || (c == 0 && src.Port() < dst.Port()) {
		return flowKey{src, dst, iface}, 0
	}
	return flowKey{dst, src, iface}, 1
}

// Flow state.
const (
	stNew      = iota // nothing classified yet
	stTLS             // client stream starts with a ClientHello record
	stIgnore          // not TLS: only kept so it is not re-examined
	stFinished        // record emitted; tombstone until close or expiry
)

type flow struct {
	key        flowKey
	hash       uint64 // key's hash in the flow table
	prev, next *flow
	lastSeen   time.Time
	state      uint8
	clientDir  int8 // 0: lo->hi is the client, 1: hi->lo, -1 unknown
	live       bool // in the table (false once removed)
	// buffered: in Sniffer.buffered while the flow holds buffers. Here,
	// with live and state, in the lines every packet of the flow reads
	// (key, the table and list links, lastSeen and state fill the first
	// two).
	buffered  memlist.Link[flow]
	synTS     time.Time // the flow's first packet when it was a SYN; zero when the capture began mid-connection
	dir       [2]stream
	mss       [2]uint16 // MSS announced in each direction's SYN
	synSeq    [2]uint32 // sequence number of each direction's SYN (synSeen says which were seen)
	synSeen   [2]bool
	ts        [2]bool // timestamp option in each direction's SYN
	rec       *record.Handshake
	chDone    bool // first ClientHello parsed (or failed)
	shFinal   bool // final ServerHello seen
	tls12Wait bool // TLS 1.2: waiting for ServerKeyExchange
	shFirstTS time.Time
	alert     string
	rst       bool

	// What tells a resumed session and why a record has no group.
	chSID    [32]byte // the ClientHello's session_id
	chSIDLen uint8
	ticket   bool   // the ClientHello offered a session ticket
	shOK     bool   // the final ServerHello parsed
	shVer    uint16 // its version
	shSuite  uint16 // its cipher suite
	shPSK    bool   // TLS 1.3: it accepted a pre-shared key
	sidEcho  bool   // TLS 1.0-1.2: it echoed the client's non-empty session_id
	afterSH  uint8  // TLS 1.0-1.2: what came next (afterSH* values)
	skeSeen  bool   // a ServerKeyExchange was parsed (or failed to)
}

// What followed a TLS 1.0-1.2 ServerHello.
const (
	afterSHNothing     = iota // nothing seen yet
	afterSHFull               // Certificate, ServerKeyExchange, ...: a full handshake
	afterSHAbbreviated        // ChangeCipherSpec or NewSessionTicket: the session was resumed
)

// tcp handles one TCP segment and returns its flow when the segment may
// have changed the flow's buffers (nil when none, or they did not change).
func (s *Sniffer) tcp(ts time.Time, p *packet) *flow {
	src := netip.AddrPortFrom(p.src, p.sport)
	dst := netip.AddrPortFrom(p.dst, p.dport)
	key, d := makeKey(src, dst, s.iface)
	f, h := s.flows.get(key)
	if f != nil && p.flags&(flagSYN|flagACK) == flagSYN && (f.state == stFinished || f.state == stIgnore) &&
		!(f.synSeen[d] && f.synSeq[d] == p.seq) {
		// A new connection on the endpoints of one whose record is done
		// (or that is not TLS) and whose close was not seen: a capture
		// filter that keeps decided flows' FINs out of the rings, a lost
		// FIN, a client reusing its port. Start afresh; the same SYN again
		// is a retransmission.
		s.remove(f)
		f = nil
	}
	if f == nil {
		// A flow begins with a SYN or with data; a bare ACK/FIN/RST for an
		// unknown flow creates no state (SYN floods cost one entry each,
		// bounded by MaxFlows).
		if len(p.payload) == 0 && p.flags&flagSYN == 0 {
			return f
		}
		f = s.newFlow(key, h)
		if p.flags&flagSYN != 0 {
			f.synTS = ts
		}
	}
	f.lastSeen = ts
	s.touch(f)
	st := &f.dir[d]
	if p.flags&flagSYN != 0 {
		st.isn = p.seq + 1
		st.isnKnown = true
		st.synSeen = true
		f.mss[d] = p.mss
		f.ts[d] = p.tsOpt
		f.synSeq[d], f.synSeen[d] = p.seq, true
		if p.flags&flagACK == 0 && f.clientDir < 0 {
			f.clientDir = int8(d)
		}
	}
	if f.state == stIgnore || f.state == stFinished {
		if p.flags&(flagRST|flagFIN) != 0 {
			if p.flags&flagRST != 0 || f.dir[1-d].fin {
				s.remove(f)
			} else {
				st.fin = true
			}
		}
		// A decided flow gains no buffers, and what it holds was
		// accounted after the packet that decided it: nothing for the
		// caller to account (its stream lines stay untouched).
		return nil
	}
	if p.truncated {
		s.errs[errSnapTruncated]++
	}
	if len(p.payload) > 0 {
		seq := p.seq
		if p.flags&flagSYN != 0 {
			seq++ // data on a SYN (TFO) starts after it
		}
		if st.buf == nil {
			st.buf = s.pool.get()
		}
		// The packet's bytes are read in place while they are all the
		// stream has (a hello in one segment, most often): only what the
		// flow still needs afterwards is copied.
		if st.add(seq, p.payload, ts, p.ttl, s.cfg.MaxStreamBytes, p.truncated, true) {
			s.advance(f, d, ts)
		}
		st.settle(&s.pool)
		if st.overflow && !st.gap {
			st.gap = true
			s.errs[errStreamOverflow]++
		}
		if st.lostTo > len(st.buf) {
			s.checkLost(f, d, ts)
		}
	}
	if f.state == stTLS && p.flags&flagACK != 0 {
		s.acked(f, 1-d, p.ack, ts)
	}
	if f.state == stFinished || f.state == stIgnore {
		return f
	}
	if p.flags&flagRST != 0 {
		f.rst = true
		s.finish(f, record.OutcomeReset)
		s.remove(f)
		return f
	}
	if p.flags&flagFIN != 0 {
		st.fin = true
		if f.state == stTLS {
			// A close before the handshake was decided.
			s.finish(f, record.OutcomeReset)
		}
		if f.dir[1-d].fin {
			s.remove(f)
		}
	}
	return f
}

// advance parses whatever new bytes direction d's prefix holds.
func (s *Sniffer) advance(f *flow, d int, ts time.Time) {
	st := &f.dir[d]
	if f.state == stNew {
		if len(st.buf) < 6 {
			return
		}
		if st.tlsStart < 0 {
			switch {
			case looksLikeHello(st.buf, false):
				st.tlsStart = 0
			case looksLikeHello(st.buf, true) && int(f.clientDir) == d:
				// A ServerHello (or alert) from the side that sent the
				// SYN: not a handshake.
				s.errs[errNotClientHello]++
				s.ignore(f)
				return
			case looksLikeHello(st.buf, true):
				// Server bytes seen before any client bytes: wait for
				// the client's ClientHello to decide.
				if f.clientDir < 0 {
					f.clientDir = int8(1 - d)
				}
				return
			case plainHTTP(st.buf):
				s.ignore(f)
				return
			case st.buf[0] == tlsparse.ContentHandshake && st.buf[1] == 3 && (f.clientDir < 0 || int(f.clientDir) == d):
				// Handshake bytes from the client that are not a
				// ClientHello: junk (no plaintext prelude starts so).
				s.errs[errNotClientHello]++
				s.ignore(f)
				return
			default:
				// A plaintext prelude (STARTTLS, HTTP CONNECT, a
				// database's SSL request) may come first: look for a
				// ClientHello at a later segment boundary, for a while.
				if off := st.findTLS(false); off > 0 {
					st.tlsStart = off
				} else {
					if len(st.buf) > s.cfg.MaxPlaintextScan || len(st.starts) >= maxStarts {
						s.ignore(f)
					}
					return
				}
			}
		}
		if f.clientDir >= 0 && int(f.clientDir) != d {
			// The side that sent the SYN is the client; a ClientHello
			// from the other side is not a handshake we understand.
			if f.dir[1-d].synSeen && !f.dir[d].synSeen {
				s.ignore(f)
				return
			}
		}
		switch clientHelloStart(st.buf[st.tlsStart:], s.cfg.MaxStreamBytes) {
		case helloMore:
			return
		case helloBad:
			s.errs[errNotClientHello]++
			s.ignore(f)
			return
		}
		f.clientDir = int8(d)
		f.state = stTLS
		st.recOff = st.tlsStart
	}
	if f.state != stTLS {
		return
	}
	c := int(f.clientDir)
	// Always parse the client first: the record is created from its
	// ClientHello. The server's messages wait until the ClientHello is
	// parsed: capture order may put a ServerHello (or the ClientHello's
	// last segment) after it, and a server message consumed earlier would
	// be lost or would finish a record without its ClientHello.
	s.parseRecords(f, c)
	if f.state == stTLS && f.chDone {
		s.parseRecords(f, 1-c)
	}
}

// parseRecords walks the TLS records of one direction's prefix.
func (s *Sniffer) parseRecords(f *flow, d int) {
	st := &f.dir[d]
	isClient := d == int(f.clientDir)
	if st.tlsStart < 0 {
		// The server's TLS has not been located yet (a plaintext prelude
		// may precede it).
		switch {
		case len(st.buf) < 6:
			return
		case looksLikeHello(st.buf, !isClient):
			st.tlsStart = 0
		default:
			off := st.findTLS(!isClient)
			if off < 0 {
				if len(st.buf) > s.cfg.MaxPlaintextScan {
					st.encrypted = true // give up on this direction
				}
				return
			}
			st.tlsStart = off
		}
		st.recOff = st.tlsStart
	}
	for !st.encrypted && f.state == stTLS {
		b := st.buf[st.recOff:]
		if len(b) < 5 {
			return
		}
		hdr, err := tlsparse.ParseRecordHeader(b)
		if err != nil || hdr.Length > 16384+2048 {
			s.errs[errRecord]++
			st.encrypted = true
			return
		}
		if len(b) < 5+hdr.Length {
			if isClient && f.rec == nil && hdr.ContentType == tlsparse.ContentHandshake && len(b) >= 9 && b[5] == tlsparse.TypeClientHello {
				// Start the record from the ClientHello's header, so a
				// ClientHello that never completes (snaplen, capture end,
				// reset) is still a record, with its size.
				s.newRecord(f, b[5:])
			}
			return
		}
		body := b[5 : 5+hdr.Length]
		st.recOff += 5 + hdr.Length
		switch hdr.ContentType {
		case tlsparse.ContentHandshake:
			if len(st.hs) == 0 && len(st.recMap) == 0 {
				// The direction's first handshake record (a ClientHello,
				// a ServerHello, most often whole in it): its messages
				// are read where they are, and only what they leave
				// over is copied.
				s.messagesInPlace(f, st, isClient, body)
				continue
			}
			if len(st.hs) < s.cfg.MaxStreamBytes {
				if st.hs == nil {
					st.hs = s.pool.get()
				}
				st.hs = append(st.hs, body...)
				if len(st.recMap) < 32 {
					st.recMap = append(st.recMap, recSpan{hsEnd: len(st.hs), streamEnd: st.recOff})
				}
			}
			if isClient {
				s.clientMessages(f, st)
			} else {
				s.serverMessages(f, st)
			}
		case tlsparse.ContentAlert:
			if len(body) == 2 && !f.shFinal && f.alert == "" {
				f.alert = tlsparse.AlertName(body[1])
				s.finish(f, record.OutcomeAlert)
				return
			}
		case tlsparse.ContentChangeCipherSpec:
			if !isClient && f.shFinal {
				if f.afterSH == afterSHNothing {
					// Straight after the ServerHello: the TLS 1.2
					// abbreviated handshake of a resumed session.
					f.afterSH = afterSHAbbreviated
				}
				s.finish(f, record.OutcomeOK)
				return
			}
		default:
			st.encrypted = true
			if !isClient && f.shFinal {
				s.finish(f, record.OutcomeOK)
			}
			return
		}
	}
}

// messagesInPlace reads the messages of a direction's first handshake
// record from body, a slice of st.buf, as though body had been appended
// to the empty st.hs; then copies what they left unread (a message that
// continues in the next record) into a buffer of st's own. A flow the
// messages finished has released st meanwhile.
func (s *Sniffer) messagesInPlace(f *flow, st *stream, isClient bool, body []byte) {
	st.hs, st.hsInPlace = body, true
	st.recMap = append(st.recMap, recSpan{hsEnd: len(body), streamEnd: st.recOff})
	if isClient {
		s.clientMessages(f, st)
	} else {
		s.serverMessages(f, st)
	}
	if !st.hsInPlace {
		return // released
	}
	st.hsInPlace = false
	if st.hsOff == len(st.hs) {
		// All read: nothing to keep, and the next handshake record is
		// the first again (recMap maps only the ClientHello's records,
		// which are read by now).
		st.hs, st.hsOff, st.recMap = nil, 0, st.recMap[:0]
		return
	}
	// A message continues past the record: the state is what appending
	// the body would have made.
	st.hs = append(s.pool.get(), st.hs...)
}

func (s *Sniffer) clientMessages(f *flow, st *stream) {
	if f.chDone {
		return
	}
	b := st.hs[st.hsOff:]
	if len(b) < 4 {
		return
	}
	n := handshakeLen(b)
	if f.rec == nil {
		s.newRecord(f, b)
	}
	if len(b) < n {
		return
	}
	f.chDone = true
	st.hsOff += n
	r := f.rec
	if b[0] != tlsparse.TypeClientHello || s.ch.Parse(b[:n]) != nil {
		// Not a real ClientHello: no record.
		s.errs[errClientHello]++
		f.rec = nil
		s.ignore(f)
		return
	}
	s.fillClientHello(r, &s.ch, 't')
	if !r.View.Known {
		r.View.Known = copy(r.View.Random[:], s.ch.Random) == len(r.View.Random)
	}
	if len(s.ch.SessionID) <= len(f.chSID) {
		f.chSIDLen = uint8(copy(f.chSID[:], s.ch.SessionID))
	}
	f.ticket = len(s.ch.SessionTicket) > 0
	end := st.streamEndOf(n)
	if end > 0 {
		r.ClientHelloSegments = st.segmentsIn(st.tlsStart, end)
		c := int(f.clientDir)
		mss := int(f.mss[1-c]) // what the server said it can receive
		if mss == 0 {
			mss = int(f.mss[c])
		}
		if mss > 0 {
			if f.ts[0] && f.ts[1] {
				mss -= 12
			}
			if mss > 0 {
				r.ClientHelloWireSegments = (end - st.tlsStart + mss - 1) / mss
			}
		}
	}
}

func (s *Sniffer) serverMessages(f *flow, st *stream) {
	for f.state == stTLS {
		b := st.hs[st.hsOff:]
		if len(b) < 4 {
			return
		}
		n := handshakeLen(b)
		if len(b) < n {
			return
		}
		r := f.rec
		if r == nil {
			return // no ClientHello yet: keep the message for later
		}
		st.hsOff += n
		msg := b[:n]
		if f.shFinal && f.afterSH == afterSHNothing {
			f.afterSH = afterSHFull
			if b[0] == tlsparse.TypeNewSessionTicket {
				f.afterSH = afterSHAbbreviated
			}
		}
		switch b[0] {
		case tlsparse.TypeServerHello:
			if f.shFirstTS.IsZero() {
				f.shFirstTS = st.tsAt(st.tlsStart)
				r.HandshakeRTTMicros = f.shFirstTS.Sub(r.TS).Microseconds()
				if r.HandshakeRTTMicros < 0 {
					r.HandshakeRTTMicros = 0
				}
			}
			if err := s.sh.Parse(msg); err != nil {
				s.errs[errServerHello]++
				s.finish(f, record.OutcomeOK) // a ServerHello was seen, though broken
				return
			}
			if s.sh.HRR {
				r.HRR = true
				if s.sh.Group != 0 {
					r.SetHRRGroup(s.sh.Group)
				}
				continue
			}
			f.shFinal = true
			f.shOK, f.shVer, f.shSuite, f.shPSK = true, s.sh.Version, s.sh.CipherSuite, s.sh.PSK
			r.ServerHelloBytes = n
			r.Version = tlsparse.VersionName(s.sh.Version)
			r.Cipher = tlsparse.CipherSuiteName(s.sh.CipherSuite)
			if s.sh.Version == 0x0304 {
				r.Resumed = s.sh.PSK
				if s.sh.Group != 0 {
					r.SetGroup(s.sh.Group)
				}
				s.finish(f, record.OutcomeOK)
				return
			}
			f.sidEcho = len(s.sh.SessionID) > 0 && bytes.Equal(s.sh.SessionID, f.chSID[:f.chSIDLen])
			f.tls12Wait = true
		case tlsparse.TypeNewSessionTicket:
			if f.shFinal && f.afterSH == afterSHAbbreviated {
				// A resumed session that gets a new ticket: NewSessionTicket,
				// then ChangeCipherSpec. Nothing more to learn.
				s.finish(f, record.OutcomeOK)
				return
			}
		case tlsparse.TypeServerKeyExchange:
			if f.shFinal {
				f.skeSeen = true
				g, ok, err := tlsparse.ParseServerKeyExchangeGroup(msg)
				if err != nil {
					s.errs[errServerKeyExchange]++
				} else if ok {
					r.SetGroup(g)
				} else if tlsparse.IsDHECipherSuite(f.shSuite) {
					// A finite-field group: ffdhe* by its prime, or dhe
					// and the prime's size (no codepoint).
					if g, name, ok := tlsparse.ParseServerKeyExchangeDHE(msg); ok && g != 0 {
						r.SetGroup(g)
					} else if ok {
						r.Group = name
					}
				}
				s.finish(f, record.OutcomeOK)
				return
			}
		case 14: // ServerHelloDone: no ServerKeyExchange (RSA key transport)
			if f.shFinal {
				s.finish(f, record.OutcomeOK)
				return
			}
		}
	}
}

// newRecord starts the record when the first ClientHello header is seen:
// hello is the start of the ClientHello message (its 4-byte header at
// least; its random when it holds it).
func (s *Sniffer) newRecord(f *flow, hello []byte) {
	chLen := handshakeLen(hello)
	c := int(f.clientDir)
	client, server := f.key.lo, f.key.hi
	if c == 1 {
		client, server = server, client
	}
	st := &f.dir[c]
	// A node serves from a few addresses: the last one's text is reused.
	if server != s.lastServer || s.lastServerText == "" {
		s.lastServer, s.lastServerText = server, server.String()
	}
	var r *record.Handshake
	if s.cfg.NewRecord != nil {
		r = s.cfg.NewRecord()
	} else {
		r = new(record.Handshake)
	}
	// A reused record's slices keep their memory for fillClientHello.
	alpn, offered, shares, offeredIDs, shareIDs := r.ALPN[:0], r.OfferedGroups[:0], r.KeyShares[:0], r.OfferedIDs[:0], r.KeyShareIDs[:0]
	*r = record.Handshake{
		ALPN: alpn, OfferedGroups: offered, KeyShares: shares, OfferedIDs: offeredIDs, KeyShareIDs: shareIDs,
		TS:               st.tsAt(st.tlsStart).UTC(),
		FlowStart:        f.synTS,
		Transport:        record.TransportTCP,
		Client:           record.ClientField(client),
		Server:           s.lastServerText,
		ClientHelloBytes: chLen,
		ClientAddr:       client.Addr().As16(),
		ServerAddr:       server.Addr().As16(),
		ClientPort:       client.Port(),
		ServerPort:       server.Port(),
		// The ClientHello's first byte: its sequence number and the TTL
		// of the segment that carried it identify this view of the
		// handshake (record.View).
		View: record.View{Seq: st.isn + uint32(st.tlsStart), TTL: st.ttlAt(st.tlsStart)},
	}
	// version (2 bytes), then the random (32), after the 4-byte header.
	if len(hello) >= 4+2+32 {
		copy(r.View.Random[:], hello[6:38])
		r.View.Known = true
	}
	f.rec = r
}

// finish emits f's record once, with outcome unless a better one is known.
func (s *Sniffer) finish(f *flow, outcome string) {
	if f.state != stTLS || f.rec == nil {
		if f.state == stTLS {
			f.state = stFinished
		}
		return
	}
	if f.chDone && s.stepOverAtEnd(f) {
		return // what came after a hole finished the record
	}
	r := f.rec
	s.countLost(f)
	if !f.chDone && !f.dir[0].synSeen && !f.dir[1].synSeen {
		// A ClientHello that never completed on a connection whose SYN
		// was not captured: nothing shows it was a connection at all.
		s.errs[errNoSYNIncomplete]++
		s.drop(f)
		return
	}
	switch {
	case f.shFinal:
		r.Outcome = record.OutcomeOK
	case f.alert != "":
		r.Outcome = record.OutcomeAlert
		r.Alert = f.alert
	case outcome == record.OutcomeOK:
		r.Outcome = record.OutcomeOK
	case s.lostBytes(f):
		// Bytes that may have held the ServerHello (or the rest of the
		// ClientHello) were lost for good (snaplen, MaxStreamBytes): the
		// capture cannot tell how the handshake went, whether the flow
		// then idled, ended or was reset.
		r.Outcome = record.OutcomeTruncated
	case !f.chDone && outcome != record.OutcomeTruncated:
		// Reset, closed, timed out or evicted before the ClientHello
		// itself completed: the client's (or the path's) doing, not a
		// server's failure.
		r.Outcome = record.OutcomeIncomplete
	default:
		r.Outcome = outcome
	}
	if r.Outcome == record.OutcomeOK {
		s.explain(f, r)
	}
	s.drop(f)
	s.emit(r)
}

// drop ends f's handshake without (or after) its record: a finished flow is
// only a tombstone, its buffers dropped.
func (s *Sniffer) drop(f *flow) {
	f.state = stFinished
	f.rec = nil
	f.dir[0].release(&s.pool)
	f.dir[1].release(&s.pool)
}

// lostBytes reports a gap that hides what decides the outcome: in the
// server's direction, or in the client's before its ClientHello was parsed.
func (s *Sniffer) lostBytes(f *flow) bool {
	c := int(f.clientDir)
	return f.dir[1-c].gap || (!f.chDone && f.dir[c].gap)
}

// explain sets resumed for a TLS 1.0-1.2 record and, when a completed
// record has no group, says why in group_missing.
func (s *Sniffer) explain(f *flow, r *record.Handshake) {
	tls13 := f.shVer == 0x0304 || f.shVer>>8 == 0x7f || f.shSuite>>8 == 0x13
	if f.shOK && !tls13 {
		// By session ID the echo decides (RFC 5246 section 7.4.1.3),
		// unless a full handshake followed; by ticket only the
		// abbreviated handshake shows that the server took it.
		switch f.afterSH {
		case afterSHAbbreviated:
			r.Resumed = f.sidEcho || f.ticket
		case afterSHNothing:
			r.Resumed = f.sidEcho
		}
	}
	if r.Group != "" {
		return
	}
	switch {
	case !f.shOK:
		r.GroupMissing = record.GroupMissingUnknown
	case tls13:
		r.GroupMissing = groupMissing13(f.shVer, f.shPSK)
	case r.Resumed:
		r.GroupMissing = record.GroupMissingResumed
	case tlsparse.IsECDHECipherSuite(f.shSuite) || tlsparse.IsDHECipherSuite(f.shSuite):
		r.GroupMissing = record.GroupMissingUnknown
		if !f.skeSeen {
			s.errs[errSKEMissing]++
		}
	case tlsparse.KnownCipherSuite(f.shSuite):
		r.GroupMissing = record.GroupMissingNoKeyExchange // RSA key transport, static DH, PSK, SRP
	default:
		r.GroupMissing = record.GroupMissingUnknown
	}
}

// groupMissing13 says why a TLS 1.3 ServerHello (version ver) has no
// key_share: psk_ke, a resumption without key exchange, or not known (a
// draft version, whose key_share pqwatch does not read).
func groupMissing13(ver uint16, psk bool) string {
	if ver == 0x0304 && psk {
		return record.GroupMissingNoKeyExchange
	}
	return record.GroupMissingUnknown
}

// acked notes that direction d's peer acknowledged d's bytes up to
// sequence number ack.
func (s *Sniffer) acked(f *flow, d int, ack uint32, ts time.Time) {
	st := &f.dir[d]
	if !st.isnKnown || st.encrypted || st.gap {
		return
	}
	rel := int64(int32(ack - st.isn))
	if rel <= int64(len(st.buf)) || rel <= int64(st.lostTo) || rel > int64(s.cfg.MaxStreamBytes)+1 {
		return
	}
	st.lostTo = int(rel)
	s.checkLost(f, d, ts)
}

// checkLost handles a hole that direction d's peer acknowledged but the
// capture never delivered: such bytes will not come again. When the hole
// lies inside a message that nothing reads (a server's Certificate) and the
// bytes after it were captured, the parser steps over it; otherwise the
// direction stops at the gap.
func (s *Sniffer) checkLost(f *flow, d int, ts time.Time) {
	st := &f.dir[d]
	end := len(st.buf)
	next := st.nextPending()
	if f.state != stTLS || st.encrypted || st.gap || next < 0 || next > st.lostTo || next <= end {
		return // nothing captured after the hole yet, or not all of it known lost
	}
	if !st.holeCounted && (d != int(f.clientDir) || !f.chDone) {
		st.holeCounted = true
		s.errs[errCaptureGap]++
	}
	if st.holes < 8 && s.canStepOver(f, d, end, next) {
		st.stepOver(next)
		s.advance(f, d, ts)
		if f.state == stTLS && st.lostTo > len(st.buf) {
			s.checkLost(f, d, ts) // the next hole
		}
		return
	}
	st.gap = true
	if d != int(f.clientDir) && f.shFinal {
		// The rest of the server's flight cannot be parsed: the record
		// is as complete as it will get.
		s.finish(f, record.OutcomeOK)
	}
}

// stepOverAtEnd handles, when a flow ends, a hole in the server's flight
// with bytes captured after it: nothing will fill it now, so it is a hole
// the capture lost as much as an acknowledged one. It reports whether
// parsing past it finished the record.
func (s *Sniffer) stepOverAtEnd(f *flow) bool {
	st := &f.dir[1-int(f.clientDir)]
	if len(st.pending) == 0 || st.gap || st.encrypted {
		return false
	}
	for _, sg := range st.pending {
		st.lostTo = max(st.lostTo, int(sg.off)+len(sg.data))
	}
	s.checkLost(f, 1-int(f.clientDir), f.lastSeen)
	return f.state != stTLS
}

// countLost counts, when a record is finished, a hole that the peer
// acknowledged with nothing captured after it (checkLost never saw it), and
// marks it lost for good for the outcome. One sequence number past the
// prefix is a FIN's, not a lost byte.
func (s *Sniffer) countLost(f *flow) {
	for d := range f.dir {
		st := &f.dir[d]
		if st.holeCounted || st.lostTo <= len(st.buf)+1 || (d == int(f.clientDir) && f.chDone) {
			continue
		}
		st.holeCounted, st.gap = true, true
		s.errs[errCaptureGap]++
	}
}

// canStepOver reports whether the server's bytes [a, b), lost by the
// capture, can be stepped over: they lie inside the body of the handshake
// record the parser waits on, and inside the body of a handshake message
// that pqwatch does not read (Certificate, CertificateStatus), so that
// every record and message header after them is where the lengths say.
// The messages before the hole may share its record (OpenSSL sends a TLS
// 1.2 flight as one record): the ServerHello is parsed once that record is
// complete.
func (s *Sniffer) canStepOver(f *flow, d, a, b int) bool {
	st := &f.dir[d]
	if d == int(f.clientDir) || !f.chDone || st.tlsStart < 0 || st.recOff+5 > a || len(st.hs) >= s.cfg.MaxStreamBytes {
		return false
	}
	hdr, err := tlsparse.ParseRecordHeader(st.buf[st.recOff:])
	body := st.recOff + 5
	if err != nil || hdr.ContentType != tlsparse.ContentHandshake || b > body+hdr.Length {
		return false
	}
	// Handshake bytes not yet consumed: st.hs[st.hsOff:], then this
	// record's body up to the hole.
	at := func(i int) byte {
		if i < len(st.hs) {
			return st.hs[i]
		}
		return st.buf[body+i-len(st.hs)]
	}
	ha, hb := len(st.hs)+a-body, len(st.hs)+b-body // the hole, in handshake-stream offsets
	for pos := st.hsOff; ; {
		if pos+4 > ha {
			return false // a message header in the hole
		}
		typ := at(pos)
		end := pos + 4 + (int(at(pos+1))<<16 | int(at(pos+2))<<8 | int(at(pos+3)))
		if end <= ha {
			pos = end
			continue
		}
		return end >= hb && (typ == tlsparse.TypeCertificate || typ == tlsparse.TypeCertificateStatus)
	}
}

func (s *Sniffer) ignore(f *flow) {
	f.state = stIgnore
	f.dir[0].release(&s.pool)
	f.dir[1].release(&s.pool)
}

// fillClientHello copies what the record needs out of a parsed ClientHello.
// Strings that repeat from client to client (SNI, ALPN, JA4) are shared
// through the sniffer's interner and JA4 cache; the string lists share one
// allocation, and so do the code point lists (each sliced to its own
// capacity).
func (s *Sniffer) fillClientHello(r *record.Handshake, ch *tlsparse.ClientHello, transport byte) {
	if len(ch.ServerName) > 0 {
		r.SNI = s.strs.String(ch.ServerName)
	}
	na, ng, nk := len(ch.ALPN), len(ch.SupportedGroups), len(ch.KeyShares)
	if cap(r.ALPN) >= na && cap(r.OfferedGroups) >= ng && cap(r.OfferedIDs) >= ng && cap(r.KeyShares) >= nk && cap(r.KeyShareIDs) >= nk {
		// A reused record (pqwatch run) whose slices hold this hello: no
		// allocation (and no fresh heap page).
		r.ALPN, r.OfferedGroups, r.OfferedIDs, r.KeyShares, r.KeyShareIDs = r.ALPN[:0], r.OfferedGroups[:0], r.OfferedIDs[:0], r.KeyShares[:0], r.KeyShareIDs[:0]
	} else {
		// Two allocations for the five slices (three with key shares),
		// each slice capped so that appending to one never writes into
		// another.
		var strs []string
		if na+ng > 0 {
			strs = make([]string, 0, na+ng)
		}
		var ids []uint16
		if ng+nk > 0 {
			ids = make([]uint16, 0, ng+nk)
		}
		r.ALPN, r.OfferedGroups = strs[0:0:na], strs[na:na:na+ng]
		r.OfferedIDs, r.KeyShareIDs = ids[0:0:ng], ids[ng:ng:ng+nk]
		r.KeyShares = nil
		if nk > 0 {
			r.KeyShares = make([]record.KeyShare, 0, nk)
		}
	}
	for _, a := range ch.ALPN {
		r.ALPN = append(r.ALPN, s.strs.String(a))
	}
	for _, g := range ch.SupportedGroups {
		if tlsparse.IsGREASE(uint16(g)) {
			continue
		}
		r.OfferedGroups = append(r.OfferedGroups, g.String())
		r.OfferedIDs = append(r.OfferedIDs, uint16(g))
		if g.IsPQ() {
			r.PQOffered = true
		}
	}
	for _, k := range ch.KeyShares {
		if tlsparse.IsGREASE(uint16(k.Group)) {
			continue
		}
		r.KeyShares = append(r.KeyShares, record.KeyShare{Group: k.Group.String(), Bytes: k.Len})
		r.KeyShareIDs = append(r.KeyShareIDs, uint16(k.Group))
	}
	// Nothing of a kind: nil, as a record that never had the memory.
	if len(r.ALPN) == 0 {
		r.ALPN = nil
	}
	if len(r.OfferedGroups) == 0 {
		r.OfferedGroups, r.OfferedIDs = nil, nil
	}
	if len(r.KeyShares) == 0 {
		r.KeyShares, r.KeyShareIDs = nil, nil
	}
	r.JA4 = s.ja4.JA4(ch, transport)
}

// LRU list and table maintenance.

func (s *Sniffer) newFlow(key flowKey, h uint64) *flow {
	if s.flows.len() >= s.cfg.MaxFlows && s.tail != nil {
		old := s.tail
		s.finish(old, record.OutcomeTimeout)
		s.remove(old)
		s.stats.FlowsEvicted++
	}
	var f *flow
	if n := len(s.free); n > 0 {
		f = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		f = &flow{}
	}
	f.key = key
	f.live = true
	f.clientDir = -1
	f.dir[0].tlsStart, f.dir[1].tlsStart = -1, -1
	s.flows.put(f, h)
	s.stats.Flows++
	s.pushFront(f)
	return f
}

// touch makes f the most recently active flow.
func (s *Sniffer) touch(f *flow) {
	if s.head == f {
		return
	}
	s.unlink(f)
	s.pushFront(f)
}

// pushFront puts f, linked nowhere, at the head of the activity list (the
// tail is evicted first).
func (s *Sniffer) pushFront(f *flow) {
	f.next = s.head
	if s.head != nil {
		s.head.prev = f
	}
	s.head = f
	if s.tail == nil {
		s.tail = f
	}
}

func (s *Sniffer) unlink(f *flow) {
	if f.prev != nil {
		f.prev.next = f.next
	} else if s.head == f {
		s.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else if s.tail == f {
		s.tail = f.prev
	}
	f.prev, f.next = nil, nil
}

func (s *Sniffer) remove(f *flow) {
	s.unlink(f)
	s.flows.del(f)
	s.buffered.Account(f, 0)
	d0, d1 := f.dir[0], f.dir[1]
	d0.release(&s.pool)
	d1.release(&s.pool)
	*f = flow{dir: [2]stream{d0, d1}}
	// A small pool of flows without buffers (those go to s.pool, bounded
	// in bytes), so memory a flood took is returned once its flows are
	// gone.
	if len(s.free) < maxFree {
		s.free = append(s.free, f)
	}
}

// maxFree bounds the pool of freed flows.
const maxFree = 256

// plainHTTP reports a plaintext HTTP request or response (never followed
// by TLS on the same connection; CONNECT is not matched, it precedes TLS).
func plainHTTP(b []byte) bool {
	for _, p := range [...]string{"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "PRI "} {
		if len(b) >= len(p) && string(b[:len(p)]) == p {
			return true
		}
	}
	return false
}

// handshakeLen is a handshake message's total length, 4-byte header
// included; b must hold at least the header.
func handshakeLen(b []byte) int {
	_, n, _ := tlsparse.ParseHandshakeHeader(b)
	return n
}
