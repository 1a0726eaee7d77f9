package tlsparse

import (
	"bytes"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// helloRetryRequestRandom is the ServerHello.random that marks a
// HelloRetryRequest (RFC 8446 section 4.1.3): SHA-256("HelloRetryRequest").
var helloRetryRequestRandom = []byte{
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11,
	0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e,
	0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
}

// ServerHello is a parsed ServerHello or HelloRetryRequest. Parse resets
// every field and fills it again; Extensions keeps its backing array across
// calls. ALPN aliases the parsed message.
type ServerHello struct {
	Length        int // whole handshake message, 4-byte header included
	LegacyVersion uint16
	// SessionID is legacy_session_id (TLS 1.2: equal to a non-empty
	// ClientHello session_id when the server resumes that session; TLS 1.3
	// echoes the client's value whatever happens).
	SessionID []byte
	// Version is the negotiated version: supported_versions'
	// selected_version when present, else LegacyVersion.
	Version     uint16
	CipherSuite uint16
	// HRR reports that random is the HelloRetryRequest magic value.
	HRR bool
	// Group is the key_share group: the server's share for a ServerHello,
	// the selected_group for a HelloRetryRequest; 0 when absent (TLS 1.2).
	Group Group
	// KeyShareLen is the length of the server's key_exchange (0 for HRR).
	KeyShareLen int
	// PSK reports a pre_shared_key extension: the TLS 1.3 server accepted
	// one of the client's pre-shared keys (a resumption). Without a
	// key_share (Group 0) it is psk_ke, with no key exchange at all.
	PSK        bool
	Extensions []uint16
	ALPN       []byte // the selected protocol, when sent
}

var (
	errSHHeader     = malformed("ServerHello version, random, session_id, cipher_suite or compression_method")
	errSHExtensions = malformed("ServerHello extensions")
	errSHVersions   = malformed("ServerHello supported_versions")
	errSHKeyShare   = malformed("ServerHello key_share")
	errSHALPN       = malformed("ServerHello application_layer_protocol_negotiation")
)

// Reset clears sh, keeping the capacity of Extensions.
func (sh *ServerHello) Reset() {
	*sh = ServerHello{Extensions: sh.Extensions[:0]}
}

// Parse parses msg, one complete handshake message starting with its 4-byte
// header, into sh. Exactly the announced length is parsed and trailing bytes
// are ignored. Errors wrap ErrTruncated, ErrNotServerHello or ErrMalformed.
func (sh *ServerHello) Parse(msg []byte) error {
	sh.Reset()
	body, n, err := handshakeBody(msg, TypeServerHello, ErrNotServerHello)
	if err != nil {
		return err
	}
	sh.Length = n
	s := cryptobyte.String(body)

	var random, sessionID cryptobyte.String
	var compression uint8
	if !s.ReadUint16(&sh.LegacyVersion) ||
		!s.ReadBytes((*[]byte)(&random), 32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) ||
		!s.ReadUint16(&sh.CipherSuite) ||
		!s.ReadUint8(&compression) {
		return errSHHeader
	}
	sh.SessionID = sessionID
	sh.Version = sh.LegacyVersion
	sh.HRR = bytes.Equal(random, helloRetryRequestRandom)

	if s.Empty() {
		return nil
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return errSHExtensions
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return errSHExtensions
		}
		sh.Extensions = append(sh.Extensions, typ)
		switch typ {
		case ExtSupportedVersions:
			if !data.ReadUint16(&sh.Version) || !data.Empty() {
				return errSHVersions
			}
		case ExtKeyShare:
			var g uint16
			if !data.ReadUint16(&g) {
				return errSHKeyShare
			}
			sh.Group = Group(g)
			if sh.HRR {
				if !data.Empty() {
					return errSHKeyShare
				}
				break
			}
			var kx cryptobyte.String
			if !data.ReadUint16LengthPrefixed(&kx) || !data.Empty() {
				return errSHKeyShare
			}
			sh.KeyShareLen = len(kx)
		case ExtALPN:
			var list, proto cryptobyte.String
			if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() ||
				!list.ReadUint8LengthPrefixed(&proto) || !list.Empty() {
				return errSHALPN
			}
			sh.ALPN = proto
		case ExtPreSharedKey:
			// RFC 8446 section 4.2.11: selected_identity. Its presence is
			// what counts; a draft-era body is not a reason to lose the
			// rest of the ServerHello.
			sh.PSK = true
		}
	}
	return nil
}

var errSKE = malformed("ServerKeyExchange")

// ParseServerKeyExchangeGroup returns the named curve of a TLS 1.0-1.2
// ECDHE ServerKeyExchange (RFC 8422 section 5.4: curve_type named_curve(3),
// then the group). msg is one complete handshake message with its header.
//
// A ServerKeyExchange does not say which key exchange it belongs to, so the
// whole ECDHE layout is checked (point, then an optional signature that must
// end the message). When it does not fit but a DHE layout (RFC 5246
// section 7.4.3: dh_p, dh_g, dh_Ys, signature) does, ok is false and err is
// nil; explicit-curve ECDHE (curve_type 1 or 2) also gives ok false. Callers
// that know the negotiated suite can skip the call when
// !IsECDHECipherSuite(suite).
func ParseServerKeyExchangeGroup(msg []byte) (g Group, ok bool, err error) {
	body, _, err := handshakeBody(msg, TypeServerKeyExchange, ErrNotServerKeyExchange)
	if err != nil {
		return 0, false, err
	}
	if g, ok := parseECDHEParams(body); ok {
		return g, true, nil
	}
	if len(body) > 0 && (body[0] == 1 || body[0] == 2) {
		return 0, false, nil // explicit_prime / explicit_char2 curve
	}
	if looksLikeDHEParams(body) {
		return 0, false, nil
	}
	return 0, false, errSKE
}

// parseECDHEParams checks a named_curve ServerECDHParams followed by an
// optional digitally-signed struct that ends the body.
func parseECDHEParams(body []byte) (Group, bool) {
	s := cryptobyte.String(body)
	var curveType uint8
	var g uint16
	var point cryptobyte.String
	if !s.ReadUint8(&curveType) || curveType != 3 || !s.ReadUint16(&g) ||
		!s.ReadUint8LengthPrefixed(&point) || point.Empty() {
		return 0, false
	}
	if !signatureEnds(s) {
		return 0, false
	}
	return Group(g), true
}

// looksLikeDHEParams checks a ServerDHParams followed by an optional
// signature that ends the body.
func looksLikeDHEParams(body []byte) bool {
	s := cryptobyte.String(body)
	var p, gen, ys cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&p) || p.Empty() ||
		!s.ReadUint16LengthPrefixed(&gen) || gen.Empty() ||
		!s.ReadUint16LengthPrefixed(&ys) || ys.Empty() {
		return false
	}
	return signatureEnds(s)
}

// signatureEnds reports whether s is empty (anonymous key exchange), a
// TLS 1.0/1.1 signature (opaque<0..2^16-1>) or a TLS 1.2 signature
// (SignatureAndHashAlgorithm then opaque<0..2^16-1>), with nothing after.
func signatureEnds(s cryptobyte.String) bool {
	if s.Empty() {
		return true
	}
	t := s
	var sig cryptobyte.String
	if t.ReadUint16LengthPrefixed(&sig) && t.Empty() {
		return true
	}
	var alg uint16
	return s.ReadUint16(&alg) && s.ReadUint16LengthPrefixed(&sig) && s.Empty()
}

// IsDHECipherSuite reports whether the TLS 1.0-1.2 suite id uses an
// ephemeral finite-field Diffie-Hellman key exchange (DHE_* or DH_anon_*),
// whose ServerKeyExchange carries the server's prime rather than a group
// name.
func IsDHECipherSuite(id uint16) bool {
	name := cipherSuiteName(id)
	return strings.HasPrefix(name, "TLS_DHE_") || strings.HasPrefix(name, "TLS_DH_anon_")
}

// KnownCipherSuite reports whether id is an assigned suite (so its key
// exchange is known from its name).
func KnownCipherSuite(id uint16) bool { return cipherSuiteName(id) != "" }

// IsECDHECipherSuite reports whether the TLS 1.0-1.2 suite id uses an
// ephemeral elliptic-curve key exchange (ECDHE_* or ECDH_anon_*), whose
// ServerKeyExchange names the curve. TLS 1.3 suites report false: their
// group comes from the ServerHello key_share.
func IsECDHECipherSuite(id uint16) bool {
	name := cipherSuiteName(id)
	return strings.HasPrefix(name, "TLS_ECDHE_") || strings.HasPrefix(name, "TLS_ECDH_anon_")
}
