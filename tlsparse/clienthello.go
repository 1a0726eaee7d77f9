package tlsparse

import "golang.org/x/crypto/cryptobyte"

// KeyShare is one key_share entry: the group and the length in bytes of its
// key_exchange field.
type KeyShare struct {
	Group Group
	Len   int
}

// ClientHello is a parsed TLS ClientHello (RFC 8446 section 4.1.2, and the
// TLS 1.0-1.2 forms). Parse resets every field and fills it again; the
// slices keep their backing arrays across calls so that a warmed-up value
// parses without allocating. Byte-slice fields alias the parsed message:
// copy what outlives the input buffer.
//
// Lists keep wire order and GREASE values; consumers filter with IsGREASE.
type ClientHello struct {
	Length              int // whole handshake message, 4-byte header included
	LegacyVersion       uint16
	Random              []byte
	SessionID           []byte
	SessionTicket       []byte // session_ticket's ticket (RFC 5077): a TLS 1.2 session offered for resumption; nil when empty
	CipherSuites        []uint16
	CompressionMethods  []byte
	Extensions          []uint16 // extension types in wire order
	SupportedGroups     []Group
	KeyShares           []KeyShare
	SupportedVersions   []uint16
	ServerName          []byte   // first host_name of server_name
	ALPN                [][]byte // application_layer_protocol_negotiation
	SignatureAlgorithms []uint16
	ECH                 bool // encrypted_client_hello (0xfe0d) present
	PSK                 bool // pre_shared_key present
	EarlyData           bool // early_data present
}

var (
	errCHHeader          = malformed("ClientHello version, random or session_id")
	errCHCipherSuites    = malformed("ClientHello cipher_suites")
	errCHCompression     = malformed("ClientHello compression_methods")
	errCHExtensions      = malformed("ClientHello extensions")
	errCHServerName      = malformed("ClientHello server_name")
	errCHSupportedGroups = malformed("ClientHello supported_groups")
	errCHKeyShare        = malformed("ClientHello key_share")
	errCHVersions        = malformed("ClientHello supported_versions")
	errCHALPN            = malformed("ClientHello application_layer_protocol_negotiation")
	errCHSigAlgs         = malformed("ClientHello signature_algorithms")
)

// Reset clears ch, keeping the capacity of its slices.
func (ch *ClientHello) Reset() {
	*ch = ClientHello{
		CipherSuites:        ch.CipherSuites[:0],
		Extensions:          ch.Extensions[:0],
		SupportedGroups:     ch.SupportedGroups[:0],
		KeyShares:           ch.KeyShares[:0],
		SupportedVersions:   ch.SupportedVersions[:0],
		ALPN:                clearALPN(ch.ALPN),
		SignatureAlgorithms: ch.SignatureAlgorithms[:0],
	}
}

// clearALPN drops references into the previous input before reuse.
func clearALPN(a [][]byte) [][]byte {
	clear(a)
	return a[:0]
}

// Parse parses msg, one complete handshake message starting with its 4-byte
// header, into ch. Exactly the announced length is parsed and trailing bytes
// are ignored. Errors wrap ErrTruncated (msg shorter than announced),
// ErrNotClientHello or ErrMalformed; after an error ch holds whatever was
// parsed before it.
func (ch *ClientHello) Parse(msg []byte) error {
	ch.Reset()
	body, n, err := handshakeBody(msg, TypeClientHello, ErrNotClientHello)
	if err != nil {
		return err
	}
	ch.Length = n
	s := cryptobyte.String(body)

	var sessionID, random cryptobyte.String
	if !s.ReadUint16(&ch.LegacyVersion) ||
		!s.ReadBytes((*[]byte)(&random), 32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) {
		return errCHHeader
	}
	ch.Random, ch.SessionID = random, sessionID

	var suites cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&suites) || len(suites)%2 != 0 {
		return errCHCipherSuites
	}
	for !suites.Empty() {
		var id uint16
		suites.ReadUint16(&id)
		ch.CipherSuites = append(ch.CipherSuites, id)
	}

	var comp cryptobyte.String
	if !s.ReadUint8LengthPrefixed(&comp) {
		return errCHCompression
	}
	ch.CompressionMethods = comp

	if s.Empty() {
		return nil // TLS 1.0/1.1 style: no extensions block
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return errCHExtensions
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return errCHExtensions
		}
		ch.Extensions = append(ch.Extensions, typ)
		if err := ch.parseExtension(typ, data); err != nil {
			return err
		}
	}
	return nil
}

// parseExtension interprets one ClientHello extension body.
func (ch *ClientHello) parseExtension(typ uint16, data cryptobyte.String) error {
	switch typ {
	case ExtServerName:
		// RFC 6066 section 3. Only the first host_name is kept.
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
			return errCHServerName
		}
		for !list.Empty() {
			var nameType uint8
			var name cryptobyte.String
			if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) {
				return errCHServerName
			}
			if nameType == 0 && ch.ServerName == nil {
				ch.ServerName = name
			}
		}
	case ExtSupportedGroups:
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || len(list)%2 != 0 {
			return errCHSupportedGroups
		}
		for !list.Empty() {
			var g uint16
			list.ReadUint16(&g)
			ch.SupportedGroups = append(ch.SupportedGroups, Group(g))
		}
	case ExtKeyShare:
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
			return errCHKeyShare
		}
		for !list.Empty() {
			var g uint16
			var kx cryptobyte.String
			if !list.ReadUint16(&g) || !list.ReadUint16LengthPrefixed(&kx) {
				return errCHKeyShare
			}
			ch.KeyShares = append(ch.KeyShares, KeyShare{Group: Group(g), Len: len(kx)})
		}
	case ExtSupportedVersions:
		var list cryptobyte.String
		if !data.ReadUint8LengthPrefixed(&list) || !data.Empty() || len(list)%2 != 0 {
			return errCHVersions
		}
		for !list.Empty() {
			var v uint16
			list.ReadUint16(&v)
			ch.SupportedVersions = append(ch.SupportedVersions, v)
		}
	case ExtALPN:
		// RFC 7301 section 3.1. Empty names are invalid but kept: JA4 has
		// a rule for them and a passive observer reports what it saw.
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
			return errCHALPN
		}
		for !list.Empty() {
			var proto cryptobyte.String
			if !list.ReadUint8LengthPrefixed(&proto) {
				return errCHALPN
			}
			ch.ALPN = append(ch.ALPN, proto)
		}
	case ExtSignatureAlgorithms:
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || len(list)%2 != 0 {
			return errCHSigAlgs
		}
		for !list.Empty() {
			var alg uint16
			list.ReadUint16(&alg)
			ch.SignatureAlgorithms = append(ch.SignatureAlgorithms, alg)
		}
	case ExtSessionTicket:
		if len(data) > 0 {
			ch.SessionTicket = data
		}
	case ExtECH:
		ch.ECH = true
	case ExtPreSharedKey:
		ch.PSK = true
	case ExtEarlyData:
		ch.EarlyData = true
	}
	return nil
}

// PQOffered reports whether the client offered a post-quantum or hybrid
// group, in supported_groups or in key_share.
func (ch *ClientHello) PQOffered() bool {
	for _, g := range ch.SupportedGroups {
		if g.IsPQ() {
			return true
		}
	}
	for _, ks := range ch.KeyShares {
		if ks.Group.IsPQ() {
			return true
		}
	}
	return false
}
