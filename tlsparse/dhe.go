package tlsparse

import (
	"math/big"
	"strconv"
	"sync"

	"golang.org/x/crypto/cryptobyte"
)

// ParseServerKeyExchangeDHE names the finite-field group of a TLS 1.0-1.2
// DHE ServerKeyExchange (RFC 5246 section 7.4.3: dh_p, dh_g, dh_Ys, then
// the signature). msg is one complete handshake message with its header.
// The name is the RFC 7919 group's (ffdhe2048 ... ffdhe8192) when dh_p is
// that group's prime and dh_g is 2, and otherwise "dhe" followed by the
// size of dh_p in bits (dhe1024, dhe2048, ...): a server's own prime has no
// codepoint. ok is false when msg is not a ServerKeyExchange of that
// layout.
func ParseServerKeyExchangeDHE(msg []byte) (g Group, name string, ok bool) {
	body, _, err := handshakeBody(msg, TypeServerKeyExchange, ErrNotServerKeyExchange)
	if err != nil || !looksLikeDHEParams(body) {
		return 0, "", false
	}
	s := cryptobyte.String(body)
	var p, gen cryptobyte.String
	s.ReadUint16LengthPrefixed(&p)
	s.ReadUint16LengthPrefixed(&gen)
	for len(p) > 0 && p[0] == 0 {
		p = p[1:]
	}
	for len(gen) > 0 && gen[0] == 0 {
		gen = gen[1:]
	}
	if len(p) == 0 {
		return 0, "", false
	}
	if len(gen) == 1 && gen[0] == 2 {
		for i, q := range ffdhePrimes() {
			if string(p) == q {
				g := GroupFFDHE2048 + Group(i)
				return g, g.String(), true
			}
		}
	}
	return 0, dheName(len(p)*8 - leadingZeros8(p[0])), true
}

// FiniteField reports whether name is a finite-field DHE group's:
// ffdhe2048 ... ffdhe8192 or a server's own prime, dhe<bits>
// (ParseServerKeyExchangeDHE's names).
func FiniteField(name string) bool {
	if len(name) > 5 && name[:5] == "ffdhe" {
		return true
	}
	if len(name) <= 3 || name[:3] != "dhe" {
		return false
	}
	for _, c := range name[3:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// dheNames are the names of the usual prime sizes, so naming them does not
// allocate.
var dheNames = map[int]string{
	512: "dhe512", 768: "dhe768", 1024: "dhe1024", 1536: "dhe1536", 2048: "dhe2048",
	3072: "dhe3072", 4096: "dhe4096", 6144: "dhe6144", 8192: "dhe8192",
}

func dheName(bits int) string {
	if s, ok := dheNames[bits]; ok {
		return s
	}
	return "dhe" + strconv.Itoa(bits)
}

func leadingZeros8(b byte) int {
	n := 0
	for b&0x80 == 0 {
		b <<= 1
		n++
	}
	return n
}

// ffdheBits and ffdheX are RFC 7919's groups in codepoint order
// (0x0100 ... 0x0104): the size b of each prime and the X in
// p = 2^b - 2^(b-64) + ((floor(2^(b-130) e) + X) * 2^64) - 1 (appendix A).
var (
	ffdheBits = [...]uint{2048, 3072, 4096, 6144, 8192}
	ffdheX    = [...]int64{560316, 2625351, 5736041, 15705020, 10965728}
)

// ffdhePrimes are RFC 7919's primes, big-endian without leading zeros,
// computed once from the appendix's formula.
var ffdhePrimes = sync.OnceValue(func() [len(ffdheBits)]string {
	e := eulerFixed(8192 + 64) // e * 2^(8192+64), truncated
	var out [len(ffdheBits)]string
	for i, b := range ffdheBits {
		// floor(2^(b-130) e) = floor(e * 2^(8256) / 2^(8256-b+130))
		t := new(big.Int).Rsh(e, 8192+64-(b-130))
		t.Add(t, big.NewInt(ffdheX[i]))
		t.Lsh(t, 64)
		p := new(big.Int).Lsh(big.NewInt(1), b)
		p.Sub(p, new(big.Int).Lsh(big.NewInt(1), b-64))
		p.Add(p, t)
		p.Sub(p, big.NewInt(1))
		out[i] = string(p.Bytes())
	}
	return out
})

// eulerFixed returns floor(e * 2^prec) give or take a few units in the
// last place (the series 1/k! summed in fixed point with 64 guard bits).
func eulerFixed(prec uint) *big.Int {
	one := new(big.Int).Lsh(big.NewInt(1), prec+64)
	sum := new(big.Int).Set(one)
	term := new(big.Int).Set(one)
	for k := int64(1); term.Sign() > 0; k++ {
		term.Quo(term, big.NewInt(k))
		sum.Add(sum, term)
	}
	return sum.Rsh(sum, 64)
}
