package tlsparse

import (
	"testing"

	"golang.org/x/crypto/cryptobyte"
)

func BenchmarkParseClientHello(b *testing.B) {
	msg := chromeLikeClientHello()
	var ch ClientHello
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := ch.Parse(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseServerHello(b *testing.B) {
	msg := loadGolden(b, "go_mlkem_sh")
	var sh ServerHello
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := sh.Parse(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseServerKeyExchangeGroup(b *testing.B) {
	msg := loadGolden(b, "go_tls12_ske")
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, _, err := ParseServerKeyExchangeGroup(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseServerKeyExchangeDHE names a 2048-bit DHE prime that is
// RFC 7919's and one that is not (the ffdhe primes are computed once,
// before the loop).
func BenchmarkParseServerKeyExchangeDHE(b *testing.B) {
	primes := ffdhePrimes()
	own := []byte(primes[0])
	own = append([]byte(nil), own...)
	own[100] ^= 1
	for name, p := range map[string][]byte{"ffdhe2048": []byte(primes[0]), "dhe2048": own} {
		var c cryptobyte.Builder
		for _, v := range [][]byte{p, {2}, make([]byte, len(p))} {
			c.AddUint16LengthPrefixed(func(c *cryptobyte.Builder) { c.AddBytes(v) })
		}
		c.AddUint16(0x0401)
		c.AddUint16LengthPrefixed(func(c *cryptobyte.Builder) { c.AddBytes(make([]byte, 256)) })
		msg := handshakeMsg(TypeServerKeyExchange, c.BytesOrPanic())
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if _, got, ok := ParseServerKeyExchangeDHE(msg); !ok || got != name {
					b.Fatal(got, ok)
				}
			}
		})
	}
}

func BenchmarkJA4(b *testing.B) {
	var ch ClientHello
	if err := ch.Parse(chromeLikeClientHello()); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, JA4Len)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendJA4(dst[:0], &ch, TransportTCP)
	}
}

func BenchmarkLooksLikeTLS(b *testing.B) {
	ch := chromeLikeClientHello()
	rec := append([]byte{ContentHandshake, 3, 1, byte(len(ch) >> 8), byte(len(ch))}, ch...)
	b.ReportAllocs()
	for b.Loop() {
		if !LooksLikeTLS(rec) {
			b.Fatal("not TLS")
		}
	}
}

func BenchmarkGroupString(b *testing.B) {
	gs := []Group{GroupX25519MLKEM768, GroupX25519, GroupSecp256r1, 0x2a2a, GroupFFDHE2048}
	b.ReportAllocs()
	for b.Loop() {
		for _, g := range gs {
			_ = g.String()
		}
	}
}

// BenchmarkGroupFacts: what the sniffer, the forecast and the metrics ask
// the registry per group (PQ class, share sizes), for common low and high
// codepoints and an unregistered one.
func BenchmarkGroupFacts(b *testing.B) {
	gs := []Group{GroupX25519MLKEM768, GroupX25519, GroupSecp256r1, 0x2a2a, GroupFFDHE2048, GroupSecP256r1MLKEM768}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, g := range gs {
			if g.IsPQ() {
				n++
			}
			n += g.ServerShareSize() + g.ClientShareSize()
		}
	}
	_ = n
}
