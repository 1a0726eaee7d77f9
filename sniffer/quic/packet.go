package quic

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w; test with errors.Is.
var (
	ErrNotLongHeader   = errors.New("quic: not a long header packet")
	ErrTruncated       = errors.New("quic: truncated packet")
	ErrUnknownVersion  = errors.New("quic: unknown version")
	ErrNotInitial      = errors.New("quic: not an Initial packet")
	ErrDecrypt         = errors.New("quic: decryption failed")
	ErrFrame           = errors.New("quic: malformed frame")
	ErrUnexpectedFrame = errors.New("quic: frame type not allowed in Initial packets")
)

// PacketType is the type of a long header packet, independent of the
// version's bit encoding.
type PacketType uint8

// Long header packet types.
const (
	PacketInitial PacketType = iota
	Packet0RTT
	PacketHandshake
	PacketRetry
	PacketVersionNegotiation
)

func (t PacketType) String() string {
	switch t {
	case PacketInitial:
		return "Initial"
	case Packet0RTT:
		return "0-RTT"
	case PacketHandshake:
		return "Handshake"
	case PacketRetry:
		return "Retry"
	case PacketVersionNegotiation:
		return "VersionNegotiation"
	}
	return fmt.Sprintf("PacketType(%d)", uint8(t))
}

// MaxCIDLen is the longest connection ID QUIC v1 and v2 allow.
const MaxCIDLen = 20

// Header is a parsed long header. Its slices alias the datagram it was
// parsed from.
type Header struct {
	Version  uint32
	Type     PacketType
	DCID     []byte
	SCID     []byte
	Token    []byte // Initial: the token; Retry: the retry token
	PNOffset int    // offset of the (protected) packet number; 0 for Retry and Version Negotiation
	Len      int    // bytes of this packet in the datagram; the next coalesced packet starts here
}

// ParseLongHeader parses the long header packet at the start of datagram b.
// Version Negotiation and Retry packets, and packets of versions this package
// cannot decrypt, take the rest of the datagram. For unknown versions it
// returns the header (Version, DCID, SCID, Len) with ErrUnknownVersion.
func ParseLongHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < 7 {
		return h, ErrTruncated
	}
	if b[0]&0x80 == 0 {
		return h, ErrNotLongHeader
	}
	h.Version = binary.BigEndian.Uint32(b[1:5])
	off := 5
	dl := int(b[off])
	off++
	if h.Version != 0 && KnownVersion(h.Version) && dl > MaxCIDLen {
		return h, ErrTruncated
	}
	if len(b) < off+dl+1 {
		return h, ErrTruncated
	}
	h.DCID = b[off : off+dl]
	off += dl
	sl := int(b[off])
	off++
	if h.Version != 0 && KnownVersion(h.Version) && sl > MaxCIDLen {
		return h, ErrTruncated
	}
	if len(b) < off+sl {
		return h, ErrTruncated
	}
	h.SCID = b[off : off+sl]
	off += sl
	if h.Version == 0 {
		h.Type = PacketVersionNegotiation
		h.Len = len(b)
		return h, nil
	}
	p := params(h.Version)
	if p == nil {
		h.Len = len(b)
		return h, ErrUnknownVersion
	}
	bits := b[0] >> 4 & 3
	if p.v2Type {
		// RFC 9369 section 3.2: Initial 0b01, 0-RTT 0b10, Handshake 0b11, Retry 0b00.
		h.Type = PacketType((bits + 3) & 3)
	} else {
		h.Type = PacketType(bits)
	}
	if h.Type == PacketRetry {
		if len(b)-off < 16 {
			return h, ErrTruncated
		}
		h.Token = b[off : len(b)-16]
		h.Len = len(b)
		return h, nil
	}
	if h.Type == PacketInitial {
		tl, n := readVarint(b[off:])
		if n == 0 || uint64(len(b)-off-n) < tl {
			return h, ErrTruncated
		}
		off += n
		h.Token = b[off : off+int(tl)]
		off += int(tl)
	}
	length, n := readVarint(b[off:])
	if n == 0 {
		return h, ErrTruncated
	}
	off += n
	if uint64(len(b)-off) < length {
		return h, ErrTruncated
	}
	h.PNOffset = off
	h.Len = off + int(length)
	return h, nil
}

// readVarint decodes a QUIC variable-length integer (RFC 9000 section 16).
// n is 0 when b is too short.
func readVarint(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	n = 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for i := 1; i < n; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, n
}

// DecodePacketNumber expands a truncated packet number of pnLen bytes given
// the largest packet number successfully processed so far in its space
// (-1 if none), per RFC 9000 appendix A.3.
func DecodePacketNumber(largest int64, truncated uint64, pnLen int) int64 {
	expected := largest + 1
	win := int64(1) << (8 * pnLen)
	hwin := win / 2
	mask := win - 1
	candidate := expected&^mask | int64(truncated)
	switch {
	case candidate <= expected-hwin && candidate < (1<<62)-win:
		return candidate + win
	case candidate > expected+hwin && candidate >= win:
		return candidate - win
	}
	return candidate
}

// Open removes header protection from and decrypts the protected packet pkt
// (exactly h.Len bytes, as parsed by ParseLongHeader) with k. pkt is not
// modified: it is copied into dst (grown when too small) and decrypted there.
// largest is the largest packet number processed so far in this direction, -1
// if none. Open returns the plaintext frames, which alias the returned
// buffer, and the full packet number. It allocates only when dst is too small.
func (k *Keys) Open(dst, pkt []byte, h *Header, largest int64) (plain, buf []byte, pn int64, err error) {
	if k.aead == nil || h.PNOffset <= 0 || h.Len <= h.PNOffset || h.Len > len(pkt) {
		return nil, dst, 0, ErrTruncated
	}
	pkt = pkt[:h.Len]
	// The header protection sample starts 4 bytes after the packet number
	// and needs 16 bytes (RFC 9001 section 5.4.2).
	if h.PNOffset+4+16 > len(pkt) {
		return nil, dst, 0, ErrTruncated
	}
	if cap(dst) < len(pkt) {
		dst = make([]byte, len(pkt), max(len(pkt), 1500))
	}
	b := dst[:len(pkt)]
	copy(b, pkt)
	k.hp.Encrypt(k.mask[:], b[h.PNOffset+4:h.PNOffset+20])
	b[0] ^= k.mask[0] & 0x0f
	pnLen := int(b[0]&3) + 1
	var trunc uint64
	for i := range pnLen {
		b[h.PNOffset+i] ^= k.mask[1+i]
		trunc = trunc<<8 | uint64(b[h.PNOffset+i])
	}
	pn = DecodePacketNumber(largest, trunc, pnLen)
	hdrLen := h.PNOffset + pnLen
	if len(b)-hdrLen < k.aead.Overhead() {
		return nil, dst, 0, ErrTruncated
	}
	k.nonce = k.IV
	for i := range 8 {
		k.nonce[11-i] ^= byte(uint64(pn) >> (8 * i))
	}
	plain, err = k.aead.Open(b[hdrLen:hdrLen], k.nonce[:], b[hdrLen:], b[:hdrLen])
	if err != nil {
		return nil, dst, 0, ErrDecrypt
	}
	return plain, dst, pn, nil
}
