package sniffer

import (
	"net/netip"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// flowKey is a TCP connection's endpoints in canonical order (lo < hi), so
// both directions find the same flow.
type flowKey struct {
	lo, hi netip.AddrPort
}

func makeKey(src, dst netip.AddrPort) (flowKey, int) {
	if c := src.Addr().Compare(dst.Addr()); c < 0 || (c == 0 && src.Port() < dst.Port()) {
		return flowKey{src, dst}, 0
	}
	return flowKey{dst, src}, 1
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
	prev, next *flow
	lastSeen   time.Time
	synTS      time.Time // the flow's first packet when it was a SYN; zero when the capture began mid-connection
	state      uint8
	clientDir  int8 // 0: lo->hi is the client, 1: hi->lo, -1 unknown
	dir        [2]stream
	mss        [2]uint16 // MSS announced in each direction's SYN
	ts         [2]bool   // timestamp option in each direction's SYN
	rec        *record.Handshake
	chDone     bool // first ClientHello parsed (or failed)
	shFinal    bool // final ServerHello seen
	tls12Wait  bool // TLS 1.2: waiting for ServerKeyExchange
	shFirstTS  time.Time
	alert      string
	rst        bool
}

func (s *Sniffer) tcp(ts time.Time, p *packet) {
	src := netip.AddrPortFrom(p.src, p.sport)
	dst := netip.AddrPortFrom(p.dst, p.dport)
	key, d := makeKey(src, dst)
	f := s.flows[key]
	if f == nil {
		// A flow begins with a SYN or with data; a bare ACK/FIN/RST for an
		// unknown flow creates no state (SYN floods cost one entry each,
		// bounded by MaxFlows).
		if len(p.payload) == 0 && p.flags&flagSYN == 0 {
			return
		}
		f = s.newFlow(key)
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
		return
	}
	if p.truncated {
		s.errs[errSnapTruncated]++
	}
	if len(p.payload) > 0 {
		seq := p.seq
		if p.flags&flagSYN != 0 {
			seq++ // data on a SYN (TFO) starts after it
		}
		if st.add(seq, p.payload, ts, s.cfg.MaxStreamBytes, p.truncated) {
			s.advance(f, d, ts)
		}
		if st.overflow && !st.gap {
			st.gap = true
			s.errs[errStreamOverflow]++
		}
	}
	if f.state == stFinished || f.state == stIgnore {
		return
	}
	if p.flags&flagRST != 0 {
		f.rst = true
		s.finish(f, record.OutcomeReset)
		s.remove(f)
		return
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
				s.newRecord(f, handshakeLen(b[5:]))
			}
			return
		}
		body := b[5 : 5+hdr.Length]
		st.recOff += 5 + hdr.Length
		switch hdr.ContentType {
		case tlsparse.ContentHandshake:
			if len(st.hs) < s.cfg.MaxStreamBytes {
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
				// TLS 1.2 abbreviated handshake (resumption): no key exchange.
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
		s.newRecord(f, n)
	}
	if len(b) < n {
		return
	}
	f.chDone = true
	st.hsOff += n
	r := f.rec
	if b[0] != tlsparse.TypeClientHello {
		s.errs[errClientHello]++
		return
	}
	if err := s.ch.Parse(b[:n]); err != nil {
		s.errs[errClientHello]++
		return
	}
	s.fillClientHello(r, &s.ch, 't')
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
					r.HRRGroup = s.sh.Group.String()
				}
				continue
			}
			f.shFinal = true
			r.ServerHelloBytes = n
			r.Version = tlsparse.VersionName(s.sh.Version)
			r.Cipher = tlsparse.CipherSuiteName(s.sh.CipherSuite)
			if s.sh.Version == 0x0304 {
				if s.sh.Group != 0 {
					r.Group = s.sh.Group.String()
					r.PQ = s.sh.Group.IsPQ()
				}
				s.finish(f, record.OutcomeOK)
				return
			}
			f.tls12Wait = true
		case tlsparse.TypeServerKeyExchange:
			if f.shFinal {
				g, ok, err := tlsparse.ParseServerKeyExchangeGroup(msg)
				if err != nil {
					s.errs[errServerKeyExchange]++
				} else if ok {
					r.Group = g.String()
					r.PQ = g.IsPQ()
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

// newRecord starts the record when the first ClientHello header is seen.
func (s *Sniffer) newRecord(f *flow, chLen int) {
	c := int(f.clientDir)
	client, server := f.key.lo, f.key.hi
	if c == 1 {
		client, server = server, client
	}
	st := &f.dir[c]
	r := &record.Handshake{
		TS:               st.tsAt(st.tlsStart).UTC(),
		FlowStart:        f.synTS,
		Transport:        record.TransportTCP,
		Client:           client.String(),
		Server:           server.String(),
		ClientHelloBytes: chLen,
		ClientAddr:       client.Addr().As16(),
		ClientPort:       client.Port(),
		ServerPort:       server.Port(),
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
	r := f.rec
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
	default:
		r.Outcome = outcome
	}
	f.state = stFinished
	f.rec = nil
	s.emit(r)
	// Drop the buffers: a finished flow is only a tombstone.
	f.dir[0].reset()
	f.dir[1].reset()
}

// lostBytes reports a gap that hides what decides the outcome: in the
// server's direction, or in the client's before its ClientHello was parsed.
func (s *Sniffer) lostBytes(f *flow) bool {
	c := int(f.clientDir)
	return f.dir[1-c].gap || (!f.chDone && f.dir[c].gap)
}

func (s *Sniffer) ignore(f *flow) {
	f.state = stIgnore
	f.dir[0].reset()
	f.dir[1].reset()
}

// fillClientHello copies what the record needs out of a parsed ClientHello.
// Strings that repeat from client to client (SNI, ALPN, JA4) are shared
// through the sniffer's interner and JA4 cache; each list is allocated once.
func (s *Sniffer) fillClientHello(r *record.Handshake, ch *tlsparse.ClientHello, transport byte) {
	if len(ch.ServerName) > 0 {
		r.SNI = s.strs.String(ch.ServerName)
	}
	if len(ch.ALPN) > 0 {
		r.ALPN = make([]string, 0, len(ch.ALPN))
		for _, a := range ch.ALPN {
			r.ALPN = append(r.ALPN, s.strs.String(a))
		}
	}
	if n := len(ch.SupportedGroups); n > 0 {
		r.OfferedGroups = make([]string, 0, n)
		r.OfferedIDs = make([]uint16, 0, n)
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
	if n := len(ch.KeyShares); n > 0 {
		r.KeyShares = make([]record.KeyShare, 0, n)
		r.KeyShareIDs = make([]uint16, 0, n)
	}
	for _, k := range ch.KeyShares {
		if tlsparse.IsGREASE(uint16(k.Group)) {
			continue
		}
		r.KeyShares = append(r.KeyShares, record.KeyShare{Group: k.Group.String(), Bytes: k.Len})
		r.KeyShareIDs = append(r.KeyShareIDs, uint16(k.Group))
	}
	r.JA4 = s.ja4.JA4(ch, transport)
}

// LRU list and table maintenance.

func (s *Sniffer) newFlow(key flowKey) *flow {
	if len(s.flows) >= s.cfg.MaxFlows && s.tail != nil {
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
	f.clientDir = -1
	f.dir[0].tlsStart, f.dir[1].tlsStart = -1, -1
	s.flows[key] = f
	s.stats.Flows++
	f.next = s.head
	if s.head != nil {
		s.head.prev = f
	}
	s.head = f
	if s.tail == nil {
		s.tail = f
	}
	return f
}

func (s *Sniffer) touch(f *flow) {
	if s.head == f {
		return
	}
	s.unlink(f)
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
	delete(s.flows, f.key)
	d0, d1 := f.dir[0], f.dir[1]
	d0.reset()
	d1.reset()
	*f = flow{dir: [2]stream{d0, d1}}
	if len(s.free) < 1024 {
		s.free = append(s.free, f)
	}
}

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
