package quic

import "errors"

// errStreamOverflow reports CRYPTO data beyond the configured buffer cap or
// too fragmented to track.
var errStreamOverflow = errors.New("quic: crypto stream overflow")

// maxRanges bounds how many disjoint byte ranges a stream tracks; real
// clients send a handful (Chromium shuffles a ClientHello into ~10 pieces).
const maxRanges = 64

type span struct{ start, end int }

// cryptoStream reassembles one direction's Initial CRYPTO stream: data may
// arrive out of order, overlapping, with gaps, spread over many packets. It
// buffers at most limit bytes from offset 0.
type cryptoStream struct {
	buf    []byte
	ranges []span // sorted, disjoint, non-adjacent
	limit  int
}

// add stores data at offset off. It reports whether any byte was new.
func (s *cryptoStream) add(off uint64, data []byte) (added bool, err error) {
	if len(data) == 0 {
		return false, nil
	}
	if off >= uint64(s.limit) {
		return false, errStreamOverflow
	}
	start := int(off)
	end := start + len(data)
	if end > s.limit {
		end = s.limit
		data = data[:end-start]
		err = errStreamOverflow
	}
	if s.covered(start, end) {
		return false, err
	}
	if end > len(s.buf) {
		if end > cap(s.buf) {
			nb := make([]byte, end, min(s.limit, max(end, 2*cap(s.buf), 2048)))
			copy(nb, s.buf)
			s.buf = nb
		}
		s.buf = s.buf[:end]
	}
	copy(s.buf[start:end], data)
	if !s.insert(start, end) {
		return true, errStreamOverflow
	}
	return true, err
}

// covered reports whether [start,end) was already received in full.
func (s *cryptoStream) covered(start, end int) bool {
	for _, r := range s.ranges {
		if r.start <= start && end <= r.end {
			return true
		}
		if r.start > start {
			break
		}
	}
	return false
}

// insert merges [start,end) into the range set; false when the set is full.
func (s *cryptoStream) insert(start, end int) bool {
	i := 0
	for i < len(s.ranges) && s.ranges[i].end < start {
		i++
	}
	j := i
	for j < len(s.ranges) && s.ranges[j].start <= end {
		start = min(start, s.ranges[j].start)
		end = max(end, s.ranges[j].end)
		j++
	}
	if i == j {
		if len(s.ranges) >= maxRanges {
			return false
		}
		s.ranges = append(s.ranges, span{})
		copy(s.ranges[i+1:], s.ranges[i:])
		s.ranges[i] = span{start, end}
		return true
	}
	s.ranges[i] = span{start, end}
	s.ranges = append(s.ranges[:i+1], s.ranges[j:]...)
	return true
}

// contiguous returns how many bytes from offset 0 have been received.
func (s *cryptoStream) contiguous() int {
	if len(s.ranges) == 0 || s.ranges[0].start != 0 {
		return 0
	}
	return s.ranges[0].end
}

// message returns the complete handshake message starting at off, if all of
// it has arrived. need is the message's total length once its 4-byte header
// is known (0 before).
func (s *cryptoStream) message(off int) (msg []byte, need int) {
	have := s.contiguous()
	if have < off+4 {
		return nil, 0
	}
	need = 4 + (int(s.buf[off+1])<<16 | int(s.buf[off+2])<<8 | int(s.buf[off+3]))
	if have < off+need {
		return nil, need
	}
	return s.buf[off : off+need : off+need], need
}

// release drops the buffer; slices handed out by message stay valid.
func (s *cryptoStream) release() {
	s.buf = nil
	s.ranges = nil
}
