package tlsparse

import (
	"encoding/pem"
	"os/exec"
	"testing"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// TestFFDHEPrimesOpenSSL: the primes computed from RFC 7919's formula are
// the ones OpenSSL ships for its ffdhe groups (openssl genpkey -genparam
// -pkeyopt group:ffdheN), byte for byte, with generator 2.
func TestFFDHEPrimesOpenSSL(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed: ", err)
	}
	primes := ffdhePrimes()
	for i, b := range ffdheBits {
		name := (GroupFFDHE2048 + Group(i)).String()
		out, err := exec.Command(bin, "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", "group:"+name).Output()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		blk, _ := pem.Decode(out)
		if blk == nil {
			t.Fatalf("%s: no PEM in %q", name, out)
		}
		s := cryptobyte.String(blk.Bytes)
		var seq, p, g cryptobyte.String
		if !s.ReadASN1(&seq, asn1.SEQUENCE) || !seq.ReadASN1(&p, asn1.INTEGER) || !seq.ReadASN1(&g, asn1.INTEGER) {
			t.Fatalf("%s: cannot read %s", name, blk.Type)
		}
		for len(p) > 0 && p[0] == 0 {
			p = p[1:]
		}
		if string(p) != primes[i] || len(p)*8 != int(b) || string(g) != "\x02" {
			t.Errorf("%s: OpenSSL's p (%d bytes) g %x differ from RFC 7919's formula (%d bytes)", name, len(p), []byte(g), len(primes[i]))
		}
	}
}

func TestParseServerKeyExchangeDHE(t *testing.T) {
	primes := ffdhePrimes()
	ske := func(p, g []byte) []byte {
		var b cryptobyte.Builder
		for _, v := range [][]byte{p, g, make([]byte, len(p))} {
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(v) })
		}
		b.AddUint16(0x0401)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 256)) })
		return handshakeMsg(TypeServerKeyExchange, b.BytesOrPanic())
	}
	custom := []byte(primes[0])
	custom = append([]byte(nil), custom...)
	custom[100] ^= 1
	for _, tc := range []struct {
		name  string
		msg   []byte
		group Group
		want  string
		ok    bool
	}{
		{"ffdhe2048", ske([]byte(primes[0]), []byte{2}), GroupFFDHE2048, "ffdhe2048", true},
		{"ffdhe3072 with a leading zero", ske(append([]byte{0}, primes[1]...), []byte{0, 2}), 0x0101, "ffdhe3072", true},
		{"ffdhe8192", ske([]byte(primes[4]), []byte{2}), 0x0104, "ffdhe8192", true},
		{"own 2048-bit prime", ske(custom, []byte{2}), 0, "dhe2048", true},
		{"ffdhe2048's prime, generator 5", ske([]byte(primes[0]), []byte{5}), 0, "dhe2048", true},
		{"1023-bit", ske(append([]byte{0x7f}, make([]byte, 127)...), []byte{2}), 0, "dhe1023", true},
		{"ECDHE", ecdheSKE(GroupX25519, 32), 0, "", false},
		{"truncated", ske([]byte(primes[0]), []byte{2})[:300], 0, "", false},
		{"not a ServerKeyExchange", tls13ServerHello(GroupX25519, 32), 0, "", false},
	} {
		g, name, ok := ParseServerKeyExchangeDHE(tc.msg)
		if g != tc.group || name != tc.want || ok != tc.ok {
			t.Errorf("%s: got %v %q %v, want %v %q %v", tc.name, g, name, ok, tc.group, tc.want, tc.ok)
		}
	}
}

func TestFiniteField(t *testing.T) {
	for name, want := range map[string]bool{
		"ffdhe2048": true, "ffdhe8192": true, "dhe2048": true, "dhe1024": true, "dhe777": true,
		"x25519": false, "dhe": false, "dhex": false, "ffdhe": false, "X25519MLKEM768": false, "": false, "dhe20a8": false,
	} {
		if got := FiniteField(name); got != want {
			t.Errorf("FiniteField(%q) = %v, want %v", name, got, want)
		}
	}
}
