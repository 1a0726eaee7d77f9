package quic

// Frame types that may appear in Initial packets (RFC 9000 section 12.4).
const (
	FramePadding         = 0x00
	FramePing            = 0x01
	FrameACK             = 0x02
	FrameACKECN          = 0x03
	FrameCrypto          = 0x06
	FrameConnectionClose = 0x1c
	FrameAppClose        = 0x1d // application CONNECTION_CLOSE; not allowed in Initial, accepted anyway
)

// Frame is one decoded frame. Only the fields of its Type are set; Data
// aliases the packet buffer.
type Frame struct {
	Type      uint64
	Offset    uint64 // CRYPTO
	Data      []byte // CRYPTO data, or CONNECTION_CLOSE reason phrase
	ErrorCode uint64 // CONNECTION_CLOSE
}

// NextFrame decodes the first frame of b and returns it with the rest of b.
// A run of PADDING bytes is returned as one frame. It fails with ErrFrame
// when the frame is malformed and with ErrUnexpectedFrame when its type is
// not one an Initial packet carries.
func NextFrame(b []byte) (f Frame, rest []byte, err error) {
	typ, n := readVarint(b)
	if n == 0 {
		return f, nil, ErrFrame
	}
	f.Type = typ
	b = b[n:]
	switch typ {
	case FramePadding:
		i := 0
		for i < len(b) && b[i] == 0 {
			i++
		}
		return f, b[i:], nil
	case FramePing:
		return f, b, nil
	case FrameACK, FrameACKECN:
		// Largest Acknowledged, ACK Delay, ACK Range Count, First ACK Range.
		var cnt uint64
		for i := range 4 {
			v, n := readVarint(b)
			if n == 0 {
				return f, nil, ErrFrame
			}
			if i == 2 {
				cnt = v
			}
			b = b[n:]
		}
		// Each range is at least two bytes: bound cnt before looping.
		if cnt > uint64(len(b))/2 {
			return f, nil, ErrFrame
		}
		fields := 2 * cnt
		if typ == FrameACKECN {
			fields += 3
		}
		for range fields {
			_, n := readVarint(b)
			if n == 0 {
				return f, nil, ErrFrame
			}
			b = b[n:]
		}
		return f, b, nil
	case FrameCrypto:
		off, n := readVarint(b)
		if n == 0 {
			return f, nil, ErrFrame
		}
		b = b[n:]
		l, n := readVarint(b)
		if n == 0 || uint64(len(b)-n) < l {
			return f, nil, ErrFrame
		}
		b = b[n:]
		if off+l > 1<<62-1 {
			return f, nil, ErrFrame
		}
		f.Offset = off
		f.Data = b[:l:l]
		return f, b[l:], nil
	case FrameConnectionClose, FrameAppClose:
		code, n := readVarint(b)
		if n == 0 {
			return f, nil, ErrFrame
		}
		b = b[n:]
		if typ == FrameConnectionClose {
			if _, n = readVarint(b); n == 0 {
				return f, nil, ErrFrame
			}
			b = b[n:]
		}
		l, n := readVarint(b)
		if n == 0 || uint64(len(b)-n) < l {
			return f, nil, ErrFrame
		}
		b = b[n:]
		f.ErrorCode = code
		f.Data = b[:l:l]
		return f, b[l:], nil
	}
	return f, nil, ErrUnexpectedFrame
}
