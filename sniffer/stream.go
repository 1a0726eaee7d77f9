package sniffer

import (
	"time"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// stream reassembles the first bytes of one TCP direction. It keeps a
// contiguous prefix (buf, stream offset 0 = first byte after the SYN, or the
// first data byte seen when the SYN was not captured) plus a bounded list of
// out-of-order segments waiting for the gap before them to fill. Retransmitted
// and overlapping bytes are taken once: the first copy captured wins (see add).
type stream struct {
	isnKnown bool
	synSeen  bool
	fin      bool   // first: a decided flow's FIN reads only this line
	isn      uint32 // sequence number of stream offset 0
	buf      []byte
	pending  []segment
	pendBy   int
	// gap is set when bytes were lost for good (snaplen cut, buffer cap):
	// parsing stops at the gap.
	gap      bool
	overflow bool
	// lostTo is the stream offset up to which the peer acknowledged this
	// direction's bytes, when that is past the prefix: bytes it holds
	// that the capture never delivered (0 when none).
	lostTo      int
	holeCounted bool  // capture_gap counted for this direction
	holes       uint8 // capture holes stepped over (bounded)

	firstTS time.Time // capture time of the segment carrying offset 0
	// firstTTL is the IP TTL (hop limit) of the segment carrying offset
	// 0, lastTTL of the last segment that brought new bytes.
	firstTTL, lastTTL uint8
	// starts records the distinct stream offsets at which data segments
	// began (bounded), to count the segments that carried a message, and
	// startTS and startTTL their capture times and IP TTLs.
	starts   []uint32
	startTS  []time.Time
	startTTL []uint8
	// tlsStart is the stream offset where TLS begins: 0 normally, later
	// after a plaintext prelude (STARTTLS, CONNECT, database SSL
	// requests); -1 while unknown.
	tlsStart int

	// TLS record-layer cursor over buf, and the handshake-message stream
	// built from handshake records.
	recOff int
	hs     []byte
	hsOff  int
	// hsInPlace: hs is, for the moment, the body of the record being
	// parsed (a slice of buf), not a buffer of its own (see parseRecords).
	hsInPlace bool
	// bufInPlace: buf is, for the moment, the payload of the packet being
	// handled (add's borrow), and spare the empty buffer it had; settle
	// copies what is still needed before the packet goes.
	bufInPlace bool
	spare      []byte
	recMap     []recSpan // handshake bytes -> stream offset, first records only
	encrypted  bool      // past ChangeCipherSpec / application data: stop
}

type segment struct {
	off  uint32
	data []byte
	ts   time.Time
	ttl  uint8
}

type recSpan struct {
	hsEnd     int // end offset in hs of this record's payload
	streamEnd int // end offset in the stream of this record
}

const maxStarts = 64

// release resets the stream and hands its buffers to pool (or to the
// garbage collector): a tombstone, or a flow in the free list, keeps none.
func (s *stream) release(pool *bufPool) {
	if s.bufInPlace {
		pool.put(s.spare)
	} else {
		pool.put(s.buf)
	}
	if !s.hsInPlace {
		pool.put(s.hs)
	}
	pend, starts, sts, sttl, rm := s.pending[:0], s.starts[:0], s.startTS[:0], s.startTTL[:0], s.recMap[:0]
	clear(pend[:cap(pend)]) // the segments' data goes
	*s = stream{pending: pend, starts: starts, startTS: sts, startTTL: sttl, recMap: rm, tlsStart: -1}
}

// bufPool keeps a bounded number of bytes of freed stream buffers for new
// flows, so short connections reuse memory and a flood's memory is
// returned once its flows are gone.
type bufPool struct {
	bufs  [][]byte
	bytes int
}

const (
	poolMaxBytes = 4 << 20  // all buffers the pool keeps
	poolMaxCap   = 16 << 10 // the largest one it keeps
)

func (p *bufPool) put(b []byte) {
	if c := cap(b); c >= 256 && c <= poolMaxCap && p.bytes+c <= poolMaxBytes {
		p.bufs = append(p.bufs, b[:0])
		p.bytes += c
	}
}

// get returns an empty buffer, nil when the pool has none.
func (p *bufPool) get() []byte {
	n := len(p.bufs)
	if n == 0 {
		return nil
	}
	b := p.bufs[n-1]
	p.bufs[n-1] = nil
	p.bufs = p.bufs[:n-1]
	p.bytes -= cap(b)
	return b
}

// mem is the buffer bytes the stream holds.
func (s *stream) mem() int { return cap(s.buf) + cap(s.hs) + s.pendBy }

// add places a data segment with sequence number seq, captured at ts in an
// IP packet with TTL (hop limit) ttl. It reports whether the contiguous
// prefix grew. limit caps the bytes kept per direction.
//
// Overlaps resolve one way whatever the capture order: every stream byte
// keeps the first copy captured. A segment's bytes that the prefix or a
// pending segment already hold are dropped before the rest is stored, so
// the prefix and the pending segments never overlap; a segment that brings
// no new byte (a retransmission, repacketised or not) is not a new segment
// for the starts list either.
//
// With borrow, a segment that starts the empty stream with nothing pending
// is not copied: buf is the segment itself until settle, which the caller
// must call before data goes.
func (s *stream) add(seq uint32, data []byte, ts time.Time, ttl uint8, limit int, truncated, borrow bool) bool {
	if len(data) == 0 {
		return false
	}
	if !s.isnKnown {
		s.isn = seq
		s.isnKnown = true
	}
	rel := int64(int32(seq - s.isn))
	if rel < 0 {
		if s.synSeen || -rel > int64(limit) || s.recOff > 0 || s.tlsStart >= 0 {
			// Before the SYN's sequence number, far back, or before bytes
			// already parsed: trim the part before offset 0
			// (retransmission of old data).
			if -rel >= int64(len(data)) {
				return false
			}
			data = data[-rel:]
			rel = 0
		} else {
			// The SYN was not captured and an earlier segment arrived
			// late: rebase offset 0 onto it.
			s.rebase(uint32(-rel))
			rel = 0
		}
	}
	if rel > int64(limit) {
		s.overflow = true
		return false
	}
	off := int(rel)
	end := off + len(data)
	if end > limit {
		data = data[:limit-off]
		end = limit
		s.overflow = true
	}
	// Store the pieces of [off, end) that nothing holds yet.
	grew, fresh := false, false
	for pos := max(off, len(s.buf)); pos < end; {
		next, covered := end, false
		for _, sg := range s.pending {
			a, b := int(sg.off), int(sg.off)+len(sg.data)
			if a <= pos && pos < b {
				pos, covered = b, true
				break
			}
			if a > pos && a < next {
				next = a
			}
		}
		if covered {
			continue
		}
		fresh = true
		piece := data[pos-off : next-off]
		switch {
		case pos == len(s.buf):
			if pos == 0 {
				s.firstTS, s.firstTTL = ts, ttl
			}
			if pos == 0 && borrow && next == end && len(s.pending) == 0 {
				// The capacity ends with the piece: an append copies.
				s.spare, s.buf, s.bufInPlace = s.buf, piece[:len(piece):len(piece)], true
			} else {
				s.buf = append(s.buf, piece...)
			}
			grew = true
		case s.pendBy+len(piece) > limit || len(s.pending) >= 64:
			s.overflow = true
		default:
			s.pending = append(s.pending, segment{off: uint32(pos), data: append([]byte(nil), piece...), ts: ts, ttl: ttl})
			s.pendBy += len(piece)
		}
		pos = next
	}
	if !fresh {
		return false
	}
	s.lastTTL = ttl
	if len(s.starts) < maxStarts && !containsU32(s.starts, uint32(off)) {
		s.starts = append(s.starts, uint32(off))
		s.startTS = append(s.startTS, ts)
		s.startTTL = append(s.startTTL, ttl)
	}
	if truncated {
		s.gap = true
	}
	return s.merge() || grew
}

// settle gives buf a buffer of its own when it is a borrowed segment.
func (s *stream) settle(pool *bufPool) {
	if !s.bufInPlace {
		return
	}
	b := s.spare
	if b == nil {
		b = pool.get()
	}
	s.buf, s.spare, s.bufInPlace = append(b, s.buf...), nil, false
}

// merge moves pending segments that now touch the prefix onto it and
// reports whether the prefix grew.
func (s *stream) merge() bool {
	grew := false
	for merged := true; merged && len(s.pending) > 0; {
		merged = false
		for i := 0; i < len(s.pending); i++ {
			sg := s.pending[i]
			if int(sg.off) > len(s.buf) {
				continue
			}
			if e := int(sg.off) + len(sg.data); e > len(s.buf) {
				if len(s.buf) == 0 {
					s.firstTS, s.firstTTL = sg.ts, sg.ttl
				}
				s.buf = append(s.buf, sg.data[len(s.buf)-int(sg.off):]...)
				grew = true
			}
			s.pendBy -= len(sg.data)
			s.pending[i] = s.pending[len(s.pending)-1]
			s.pending = s.pending[:len(s.pending)-1]
			merged = true
			i--
		}
	}
	return grew
}

// nextPending is the lowest offset of a pending segment, -1 when none.
func (s *stream) nextPending() int {
	next := -1
	for _, sg := range s.pending {
		if next < 0 || int(sg.off) < next {
			next = int(sg.off)
		}
	}
	return next
}

// stepOver fills the prefix with zeros up to off, a hole the capture lost
// for good, and merges what was pending after it. The caller has checked
// that nothing reads the hole's bytes.
func (s *stream) stepOver(off int) {
	s.buf = append(s.buf, make([]byte, off-len(s.buf))...)
	s.holes++
	s.merge()
}

// rebase moves offset 0 back by d bytes: the prefix becomes pending data.
func (s *stream) rebase(d uint32) {
	s.isn -= d
	for i := range s.pending {
		s.pending[i].off += d
	}
	for i := range s.starts {
		s.starts[i] += d
	}
	if s.lostTo > 0 {
		s.lostTo += int(d)
	}
	if len(s.buf) > 0 {
		s.pending = append(s.pending, segment{off: d, data: append([]byte(nil), s.buf...), ts: s.firstTS, ttl: s.firstTTL})
		s.pendBy += len(s.buf)
		s.buf = s.buf[:0]
	}
	s.firstTS = time.Time{}
}

// looksLikeHello reports whether b begins with a TLS handshake record
// holding a ClientHello (client) or ServerHello (server), or, for a
// server, a 2-byte plaintext alert record.
func looksLikeHello(b []byte, server bool) bool {
	if len(b) < 6 {
		return false
	}
	if b[0] == tlsparse.ContentAlert {
		return server && b[1] == 3 && b[2] <= 4 && b[3] == 0 && b[4] == 2
	}
	want := uint8(tlsparse.TypeClientHello)
	if server {
		want = tlsparse.TypeServerHello
	}
	return tlsparse.LooksLikeTLS(b) && b[5] == want
}

// segmentsIn counts the distinct captured segments that began in
// [from, end).
func (s *stream) segmentsIn(from, end int) int {
	n := 0
	for _, o := range s.starts {
		if int(o) >= from && int(o) < end {
			n++
		}
	}
	return n
}

// tsAt is the capture time of the segment that began at offset off, or
// firstTS when it is not known.
func (s *stream) tsAt(off int) time.Time {
	for i, o := range s.starts {
		if int(o) == off {
			return s.startTS[i]
		}
	}
	return s.firstTS
}

// ttlAt is the IP TTL of the segment that began at offset off, or
// firstTTL when it is not known (offset 0), or the last segment's.
func (s *stream) ttlAt(off int) uint8 {
	for i, o := range s.starts {
		if int(o) == off {
			return s.startTTL[i]
		}
	}
	if off == 0 && !s.firstTS.IsZero() {
		return s.firstTTL
	}
	return s.lastTTL
}

// findTLS looks for the start of TLS in a prefix that did not begin with
// it: a segment boundary where a handshake record of one of the wanted
// types (or, for a server, a plaintext alert) begins. It reports the
// offset, or -1.
func (s *stream) findTLS(server bool) int {
	best := -1
	for _, o := range s.starts {
		off := int(o)
		if off == 0 || off+6 > len(s.buf) || (best >= 0 && off > best) {
			continue
		}
		b := s.buf[off:]
		if looksLikeHello(b, server) {
			best = off
		}
	}
	return best
}

// streamEndOf maps an end offset in the handshake stream to the stream
// offset where the record holding that byte ends.
func (s *stream) streamEndOf(hsEnd int) int {
	for _, r := range s.recMap {
		if r.hsEnd >= hsEnd {
			return r.streamEnd
		}
	}
	return -1
}

func containsU32(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Verdicts of clientHelloStart.
const (
	helloMore = iota // too few bytes to tell yet
	helloOK
	helloBad
)

// minClientHello is the smallest ClientHello message, header included:
// version, random, an empty session_id, one cipher suite and one
// compression method (RFC 5246 7.4.1.2).
const minClientHello = 4 + 2 + 32 + 1 + 2 + 2 + 1 + 1

// clientHelloStart judges the first bytes of a client's TLS: a handshake
// record (type 22) of version 0x0300-0x0304 whose first message is a
// ClientHello (type 1) with a length a ClientHello can have, at least its
// fixed fields and at most maxLen (the stream cap).
func clientHelloStart(b []byte, maxLen int) int {
	if len(b) >= 1 && b[0] != tlsparse.ContentHandshake ||
		len(b) >= 2 && b[1] != 3 ||
		len(b) >= 3 && b[2] > 4 {
		return helloBad
	}
	if len(b) < 9 {
		return helloMore
	}
	recLen := int(b[3])<<8 | int(b[4])
	hsLen := 4 + (int(b[6])<<16 | int(b[7])<<8 | int(b[8]))
	if recLen < 4 || recLen > tlsparse.MaxRecordLen || b[5] != tlsparse.TypeClientHello ||
		hsLen < minClientHello || hsLen > maxLen {
		return helloBad
	}
	return helloOK
}
