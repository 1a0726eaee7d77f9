package testenv

import (
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"fmt"

	"golang.org/x/crypto/cryptobyte"
)

// ClientKeyShare returns a valid client key share for group g: x25519,
// secp256r1, secp384r1, secp521r1 or X25519MLKEM768.
func ClientKeyShare(g uint16) ([]byte, error) {
	x25519 := func() ([]byte, error) {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return k.PublicKey().Bytes(), nil
	}
	switch g {
	case 0x001d:
		return x25519()
	case 0x0017, 0x0018, 0x0019:
		c := map[uint16]ecdh.Curve{0x0017: ecdh.P256(), 0x0018: ecdh.P384(), 0x0019: ecdh.P521()}[g]
		k, err := c.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return k.PublicKey().Bytes(), nil
	case 0x11ec: // ML-KEM-768 encapsulation key, then X25519
		dk, err := mlkem.GenerateKey768()
		if err != nil {
			return nil, err
		}
		x, err := x25519()
		return append(dk.EncapsulationKey().Bytes(), x...), err
	}
	return nil, fmt.Errorf("testenv: no key share for group %#04x", g)
}

// RawClientHello builds a TLS 1.3 ClientHello handshake message (header
// included) that lists offered in supported_groups and sends one key share
// per group of shares, in that order, with server_name sni when not empty:
// a ClientHello no real client library lets a test shape.
func RawClientHello(offered, shares []uint16, sni string) ([]byte, error) {
	keys := make([][]byte, len(shares))
	for i, g := range shares {
		k, err := ClientKeyShare(g)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	random := make([]byte, 32)
	rand.Read(random)
	var b cryptobyte.Builder
	b.AddUint8(1) // client_hello
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(0x0303)
		b.AddBytes(random)
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(random) }) // legacy session id
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			ext := func(typ uint16, body func(b *cryptobyte.Builder)) {
				b.AddUint16(typ)
				b.AddUint16LengthPrefixed(body)
			}
			if sni != "" {
				ext(0, func(b *cryptobyte.Builder) {
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
						b.AddUint8(0) // host_name
						b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(sni)) })
					})
				})
			}
			ext(43, func(b *cryptobyte.Builder) { // supported_versions
				b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x0304) })
			})
			ext(10, func(b *cryptobyte.Builder) { // supported_groups
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
					for _, g := range offered {
						b.AddUint16(g)
					}
				})
			})
			ext(13, func(b *cryptobyte.Builder) { // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x0403); b.AddUint16(0x0804) })
			})
			ext(51, func(b *cryptobyte.Builder) { // key_share
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
					for i, g := range shares {
						b.AddUint16(g)
						b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(keys[i]) })
					}
				})
			})
		})
	})
	return b.Bytes()
}
