package quic

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
)

// QUIC versions this package can decrypt.
const (
	Version1 uint32 = 0x00000001 // RFC 9000
	Version2 uint32 = 0x6b3343cf // RFC 9369
)

var (
	saltV1      = []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}
	saltV2      = []byte{0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9}
	saltDraft29 = []byte{0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0, 0x43, 0x90, 0xa8, 0x99}
	saltDraft23 = []byte{0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7, 0xd2, 0x43, 0x2b, 0xb4, 0x63, 0x65, 0xbe, 0xf9, 0xf5, 0x02}
)

// versionParams describes how a QUIC version protects Initial packets.
type versionParams struct {
	salt   []byte
	key    string // HKDF labels
	iv     string
	hp     string
	v2Type bool // RFC 9369 long-header packet type bits
}

var (
	paramsV1      = versionParams{salt: saltV1, key: "quic key", iv: "quic iv", hp: "quic hp"}
	paramsV2      = versionParams{salt: saltV2, key: "quicv2 key", iv: "quicv2 iv", hp: "quicv2 hp", v2Type: true}
	paramsDraft29 = versionParams{salt: saltDraft29, key: "quic key", iv: "quic iv", hp: "quic hp"}
	paramsDraft23 = versionParams{salt: saltDraft23, key: "quic key", iv: "quic iv", hp: "quic hp"}
)

// params returns the Initial protection parameters of version, or nil when
// the version is not one this package can decrypt. Besides v1 and v2 it knows
// the IETF drafts 23 to 32, which still show up in older captures.
func params(version uint32) *versionParams {
	switch {
	case version == Version1:
		return &paramsV1
	case version == Version2:
		return &paramsV2
	case version >= 0xff00001d && version <= 0xff000020: // drafts 29-32
		return &paramsDraft29
	case version >= 0xff000017 && version <= 0xff00001c: // drafts 23-28
		return &paramsDraft23
	}
	return nil
}

// KnownVersion reports whether Initial packets of version can be decrypted.
func KnownVersion(version uint32) bool { return params(version) != nil }

// Keys holds the packet protection of one direction of the Initial packet
// number space: AEAD key and IV, header protection key, and the ciphers built
// from them. A Keys value carries scratch space and is not safe for
// concurrent use.
type Keys struct {
	// Key, IV and HP are the derived secrets, exposed for inspection; the
	// ciphers are built from them once, so changing them has no effect.
	Key [16]byte // AEAD_AES_128_GCM key
	IV  [12]byte
	HP  [16]byte // header protection key

	aead  cipher.AEAD
	hp    cipher.Block
	nonce [12]byte
	mask  [16]byte
}

// DeriveInitialKeys derives the client and server Initial keys of a QUIC
// version from the Destination Connection ID of the client's first Initial
// packet (or the Source Connection ID of a Retry), as RFC 9001 section 5.2
// and RFC 9369 section 3.3 define them.
func DeriveInitialKeys(version uint32, dcid []byte) (client, server *Keys, err error) {
	p := params(version)
	if p == nil {
		return nil, nil, fmt.Errorf("%w: 0x%08x", ErrUnknownVersion, version)
	}
	initial, err := hkdf.Extract(sha256.New, dcid, p.salt)
	if err != nil {
		return nil, nil, fmt.Errorf("quic: hkdf extract: %w", err)
	}
	if client, err = deriveKeys(p, initial, "client in"); err != nil {
		return nil, nil, err
	}
	if server, err = deriveKeys(p, initial, "server in"); err != nil {
		return nil, nil, err
	}
	return client, server, nil
}

func deriveKeys(p *versionParams, initial []byte, label string) (*Keys, error) {
	secret, err := expandLabel(initial, label, sha256.Size)
	if err != nil {
		return nil, err
	}
	k := new(Keys)
	for _, f := range []struct {
		dst   []byte
		label string
	}{{k.Key[:], p.key}, {k.IV[:], p.iv}, {k.HP[:], p.hp}} {
		b, err := expandLabel(secret, f.label, len(f.dst))
		if err != nil {
			return nil, err
		}
		copy(f.dst, b)
	}
	block, err := aes.NewCipher(k.Key[:])
	if err != nil {
		return nil, fmt.Errorf("quic: aead key: %w", err)
	}
	if k.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("quic: gcm: %w", err)
	}
	if k.hp, err = aes.NewCipher(k.HP[:]); err != nil {
		return nil, fmt.Errorf("quic: header protection key: %w", err)
	}
	return k, nil
}

// expandLabel is HKDF-Expand-Label of RFC 8446 section 7.1 with an empty
// context.
func expandLabel(secret []byte, label string, n int) ([]byte, error) {
	const prefix = "tls13 "
	info := make([]byte, 0, 4+len(prefix)+len(label))
	info = append(info, byte(n>>8), byte(n), byte(len(prefix)+len(label)))
	info = append(info, prefix...)
	info = append(info, label...)
	info = append(info, 0)
	b, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		return nil, fmt.Errorf("quic: hkdf expand %q: %w", label, err)
	}
	return b, nil
}
