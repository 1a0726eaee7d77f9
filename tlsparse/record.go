// Package tlsparse parses the cleartext part of TLS handshakes: record
// headers, ClientHello, ServerHello (including HelloRetryRequest) and the
// TLS 1.2 ECDHE ServerKeyExchange, and names what it finds with the IANA
// registries (supported groups, cipher suites, alerts). It also computes the
// JA4 client fingerprint.
//
// Everything here is a pure function over bytes: no I/O, no packet decoding,
// and no imports of the rest of pqwatch. Parsers read through
// golang.org/x/crypto/cryptobyte, in the shape of crypto/tls, so every read is
// bounds-checked and every length-prefixed field must be consumed exactly.
//
// The per-packet paths allocate nothing once warmed up: parse targets are
// reset-then-fill structs whose slices are reused across calls, and byte
// slice fields alias the input buffer. Callers copy what must outlive it.
package tlsparse

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them; test with errors.Is.
var (
	// ErrTruncated means the input ends before the structure it announces:
	// more bytes (TCP segments, CRYPTO frames) are needed.
	ErrTruncated = errors.New("tlsparse: truncated")
	// ErrMalformed means the input is complete but violates the wire format.
	ErrMalformed = errors.New("tlsparse: malformed")
	// ErrNotClientHello means the handshake message type is not client_hello.
	ErrNotClientHello = errors.New("tlsparse: not a ClientHello")
	// ErrNotServerHello means the handshake message type is not server_hello.
	ErrNotServerHello = errors.New("tlsparse: not a ServerHello")
	// ErrNotServerKeyExchange means the handshake message type is not
	// server_key_exchange.
	ErrNotServerKeyExchange = errors.New("tlsparse: not a ServerKeyExchange")
)

// malformed builds a wrapped ErrMalformed once, at package init, so that the
// error paths of the parsers do not allocate either.
func malformed(what string) error { return fmt.Errorf("%w: %s", ErrMalformed, what) }

// Record content types.
const (
	ContentChangeCipherSpec uint8 = 20
	ContentAlert            uint8 = 21
	ContentHandshake        uint8 = 22
	ContentApplicationData  uint8 = 23
	ContentHeartbeat        uint8 = 24
)

// Record and handshake framing sizes.
const (
	// RecordHeaderLen is the length of a TLS record header.
	RecordHeaderLen = 5
	// HandshakeHeaderLen is the length of a TLS handshake message header.
	HandshakeHeaderLen = 4
	// MaxRecordLen is the largest record payload any TLS version permits
	// (2^14 plus 2048 bytes of TLS 1.2 expansion).
	MaxRecordLen = 16384 + 2048
)

var (
	errRecordType    = malformed("record content type")
	errRecordVersion = malformed("record version")
	errRecordLength  = malformed("record length")
)

// RecordHeader is a TLS record header.
type RecordHeader struct {
	ContentType uint8
	Version     uint16
	Length      int // payload length, header excluded
}

// ParseRecordHeader parses the 5-byte record header at the start of b. It
// fails with ErrTruncated when b is shorter than 5 bytes and with
// ErrMalformed when the content type is not 20..24, the version's major byte
// is not 3, or the length exceeds MaxRecordLen.
func ParseRecordHeader(b []byte) (RecordHeader, error) {
	if len(b) < RecordHeaderLen {
		return RecordHeader{}, ErrTruncated
	}
	h := RecordHeader{
		ContentType: b[0],
		Version:     uint16(b[1])<<8 | uint16(b[2]),
		Length:      int(b[3])<<8 | int(b[4]),
	}
	switch {
	case h.ContentType < ContentChangeCipherSpec || h.ContentType > ContentHeartbeat:
		return h, errRecordType
	case b[1] != 3:
		return h, errRecordVersion
	case h.Length > MaxRecordLen:
		return h, errRecordLength
	}
	return h, nil
}

// LooksLikeTLS reports whether b plausibly starts with a TLS handshake
// record: content type 22, record version 0x0300..0x0304, a non-zero length
// of at most MaxRecordLen and, when the first payload byte is present, a
// handshake type of client_hello or server_hello. It is the cheap test that
// finds TLS by content on any port.
func LooksLikeTLS(b []byte) bool {
	if len(b) < RecordHeaderLen || b[0] != ContentHandshake || b[1] != 3 || b[2] > 4 {
		return false
	}
	n := int(b[3])<<8 | int(b[4])
	if n == 0 || n > MaxRecordLen {
		return false
	}
	if len(b) > RecordHeaderLen {
		t := b[RecordHeaderLen]
		return t == TypeClientHello || t == TypeServerHello
	}
	return true
}

// ParseHandshakeHeader parses the 4-byte handshake message header at the
// start of b and returns the message type and the length of the whole
// message, header included. It fails only with ErrTruncated (fewer than 4
// bytes); the caller compares the length with what it has buffered.
func ParseHandshakeHeader(b []byte) (typ uint8, msgLen int, err error) {
	if len(b) < HandshakeHeaderLen {
		return 0, 0, ErrTruncated
	}
	return b[0], HandshakeHeaderLen + (int(b[1])<<16 | int(b[2])<<8 | int(b[3])), nil
}

// handshakeBody checks the header of msg for type want and returns the body
// (exactly the announced length; trailing bytes are ignored) and the whole
// message length including the header.
func handshakeBody(msg []byte, want uint8, wrong error) (body []byte, n int, err error) {
	if len(msg) >= 1 && msg[0] != want {
		return nil, 0, wrong
	}
	_, n, err = ParseHandshakeHeader(msg)
	if err != nil {
		return nil, 0, err
	}
	if len(msg) < n {
		return nil, 0, ErrTruncated
	}
	return msg[HandshakeHeaderLen:n], n, nil
}
