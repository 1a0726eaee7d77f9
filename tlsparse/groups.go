package tlsparse

import (
	"strconv"
	"strings"
	"sync"
)

// Group is a TLS Supported Groups codepoint (formerly "named curve"), as
// carried in the supported_groups and key_share extensions and in a TLS 1.2
// ECDHE ServerKeyExchange.
type Group uint16

// Supported Groups codepoints used by pqwatch. The full registry is known to
// [Group.String]; these constants name the ones code refers to.
const (
	GroupSecp256r1                Group = 0x0017
	GroupSecp384r1                Group = 0x0018
	GroupSecp521r1                Group = 0x0019
	GroupX25519                   Group = 0x001d
	GroupX448                     Group = 0x001e
	GroupCurveSM2                 Group = 0x0029
	GroupBrainpoolP256r1TLS13     Group = 0x001f
	GroupBrainpoolP384r1TLS13     Group = 0x0020
	GroupBrainpoolP512r1TLS13     Group = 0x0021
	GroupFFDHE2048                Group = 0x0100
	GroupFFDHE3072                Group = 0x0101
	GroupFFDHE4096                Group = 0x0102
	GroupFFDHE6144                Group = 0x0103
	GroupFFDHE8192                Group = 0x0104
	GroupMLKEM512                 Group = 0x0200
	GroupMLKEM768                 Group = 0x0201
	GroupMLKEM1024                Group = 0x0202
	GroupSecP256r1MLKEM768        Group = 0x11eb
	GroupX25519MLKEM768           Group = 0x11ec
	GroupSecP384r1MLKEM1024       Group = 0x11ed
	GroupCurveSM2MLKEM768         Group = 0x11ee
	GroupX25519Kyber768Draft00    Group = 0x6399
	GroupSecP256r1Kyber768Draft00 Group = 0x639a
)

// IsGREASE reports whether v is one of the sixteen GREASE values of RFC 8701
// (0x0a0a, 0x1a1a, ..., 0xfafa), which may appear as a cipher suite,
// extension type, group, version or signature algorithm.
func IsGREASE(v uint16) bool {
	return v&0x0f0f == 0x0a0a && byte(v>>8) == byte(v)
}

// IsPQ reports whether g is a post-quantum or hybrid key exchange: every
// ML-KEM group and both pre-standard Kyber drafts of the IANA registry.
func (g Group) IsPQ() bool {
	switch g {
	case GroupMLKEM512, GroupMLKEM768, GroupMLKEM1024,
		GroupSecP256r1MLKEM768, GroupX25519MLKEM768, GroupSecP384r1MLKEM1024, GroupCurveSM2MLKEM768,
		GroupX25519Kyber768Draft00, GroupSecP256r1Kyber768Draft00:
		return true
	}
	return false
}

// Share sizes of the KEMs and curves the hybrids are made of: ML-KEM's
// encapsulation keys (client) and ciphertexts (server), FIPS 203; ECDH
// public keys as TLS 1.3 carries them (RFC 8446 4.2.8.2: X25519/X448 raw,
// NIST and brainpool curves uncompressed).
const (
	mlkem512EK, mlkem512CT   = 800, 768
	mlkem768EK, mlkem768CT   = 1184, 1088
	mlkem1024EK, mlkem1024CT = 1568, 1568
	x25519Share, x448Share   = 32, 56
	p256Share, p384Share     = 65, 97
	p521Share, bp512Share    = 133, 129
)

// ServerShareSize is the key_exchange length of a TLS 1.3 ServerHello's key
// share for g: an ECDH point, a finite-field public value (the modulus
// length), an ML-KEM ciphertext, or a hybrid's two parts concatenated
// (draft-ietf-tls-ecdhe-mlkem, draft-tls-westerbaan-xyber768d00); 0 when
// unknown.
func (g Group) ServerShareSize() int {
	switch g {
	case GroupX25519:
		return x25519Share
	case GroupX448:
		return x448Share
	case GroupSecp256r1, GroupBrainpoolP256r1TLS13:
		return p256Share
	case GroupSecp384r1, GroupBrainpoolP384r1TLS13:
		return p384Share
	case GroupSecp521r1:
		return p521Share
	case GroupBrainpoolP512r1TLS13:
		return bp512Share
	case GroupFFDHE2048:
		return 256
	case GroupFFDHE3072:
		return 384
	case GroupFFDHE4096:
		return 512
	case GroupFFDHE6144:
		return 768
	case GroupFFDHE8192:
		return 1024
	case GroupMLKEM512:
		return mlkem512CT
	case GroupMLKEM768:
		return mlkem768CT
	case GroupMLKEM1024:
		return mlkem1024CT
	case GroupX25519MLKEM768, GroupX25519Kyber768Draft00:
		return mlkem768CT + x25519Share
	case GroupSecP256r1MLKEM768, GroupCurveSM2MLKEM768, GroupSecP256r1Kyber768Draft00:
		return p256Share + mlkem768CT
	case GroupSecP384r1MLKEM1024:
		return p384Share + mlkem1024CT
	}
	return 0
}

// ClientShareSize is the key_exchange length of a ClientHello key share for
// g: as ServerShareSize, with an ML-KEM encapsulation key for the KEM part;
// 0 when unknown.
func (g Group) ClientShareSize() int {
	switch g {
	case GroupMLKEM512:
		return mlkem512EK
	case GroupMLKEM768:
		return mlkem768EK
	case GroupMLKEM1024:
		return mlkem1024EK
	case GroupX25519MLKEM768, GroupX25519Kyber768Draft00:
		return mlkem768EK + x25519Share
	case GroupSecP256r1MLKEM768, GroupCurveSM2MLKEM768, GroupSecP256r1Kyber768Draft00:
		return p256Share + mlkem768EK
	case GroupSecP384r1MLKEM1024:
		return p384Share + mlkem1024EK
	}
	return g.ServerShareSize()
}

// OpenSSLName is g as OpenSSL's -groups and ssl_ecdh_curve spell it where
// that differs from the IANA name (X25519, P-256, ...); the IANA name
// otherwise, which OpenSSL 3.5 accepts for the rest (X25519MLKEM768,
// ffdhe2048, ...).
func (g Group) OpenSSLName() string {
	switch g {
	case GroupX25519:
		return "X25519"
	case GroupX448:
		return "X448"
	case GroupSecp256r1:
		return "P-256"
	case GroupSecp384r1:
		return "P-384"
	case GroupSecp521r1:
		return "P-521"
	}
	return g.String()
}

// String returns the IANA TLS Supported Groups registry name of g, or "0x"
// and four lower-case hex digits when g is not registered (GREASE included).
// Registered names and GREASE values are constants and cost no allocation.
func (g Group) String() string {
	if s := groupName(g); s != "" {
		return s
	}
	if IsGREASE(uint16(g)) {
		return greaseNames[g>>12]
	}
	return hex4(uint16(g))
}

// greaseNames are the GREASE values spelled as hex4 would, as constants so
// that naming a GREASE group does not allocate either.
var greaseNames = [16]string{
	"0x0a0a", "0x1a1a", "0x2a2a", "0x3a3a", "0x4a4a", "0x5a5a", "0x6a6a", "0x7a7a",
	"0x8a8a", "0x9a9a", "0xaaaa", "0xbaba", "0xcaca", "0xdada", "0xeaea", "0xfafa",
}

// registry is the IANA TLS Supported Groups registry, sorted by codepoint:
// the one table of group names in pqwatch (String, ParseGroup and the
// metrics' label set all read it).
var registry = [...]groupEntry{
	{0x0001, "sect163k1"},
	{0x0002, "sect163r1"},
	{0x0003, "sect163r2"},
	{0x0004, "sect193r1"},
	{0x0005, "sect193r2"},
	{0x0006, "sect233k1"},
	{0x0007, "sect233r1"},
	{0x0008, "sect239k1"},
	{0x0009, "sect283k1"},
	{0x000a, "sect283r1"},
	{0x000b, "sect409k1"},
	{0x000c, "sect409r1"},
	{0x000d, "sect571k1"},
	{0x000e, "sect571r1"},
	{0x000f, "secp160k1"},
	{0x0010, "secp160r1"},
	{0x0011, "secp160r2"},
	{0x0012, "secp192k1"},
	{0x0013, "secp192r1"},
	{0x0014, "secp224k1"},
	{0x0015, "secp224r1"},
	{0x0016, "secp256k1"},
	{GroupSecp256r1, "secp256r1"},
	{GroupSecp384r1, "secp384r1"},
	{GroupSecp521r1, "secp521r1"},
	{0x001a, "brainpoolP256r1"},
	{0x001b, "brainpoolP384r1"},
	{0x001c, "brainpoolP512r1"},
	{GroupX25519, "x25519"},
	{GroupX448, "x448"},
	{0x001f, "brainpoolP256r1tls13"},
	{0x0020, "brainpoolP384r1tls13"},
	{0x0021, "brainpoolP512r1tls13"},
	{0x0022, "GC256A"},
	{0x0023, "GC256B"},
	{0x0024, "GC256C"},
	{0x0025, "GC256D"},
	{0x0026, "GC512A"},
	{0x0027, "GC512B"},
	{0x0028, "GC512C"},
	{GroupCurveSM2, "curveSM2"},
	{GroupFFDHE2048, "ffdhe2048"},
	{0x0101, "ffdhe3072"},
	{0x0102, "ffdhe4096"},
	{0x0103, "ffdhe6144"},
	{0x0104, "ffdhe8192"},
	{GroupMLKEM512, "MLKEM512"},
	{GroupMLKEM768, "MLKEM768"},
	{GroupMLKEM1024, "MLKEM1024"},
	{GroupSecP256r1MLKEM768, "SecP256r1MLKEM768"},
	{GroupX25519MLKEM768, "X25519MLKEM768"},
	{GroupSecP384r1MLKEM1024, "SecP384r1MLKEM1024"},
	{GroupCurveSM2MLKEM768, "curveSM2MLKEM768"},
	{GroupX25519Kyber768Draft00, "X25519Kyber768Draft00"},
	{GroupSecP256r1Kyber768Draft00, "SecP256r1Kyber768Draft00"},
	{0xff01, "arbitrary_explicit_prime_curves"},
	{0xff02, "arbitrary_explicit_char2_curves"},
}

type groupEntry struct {
	g    Group
	name string
}

// lowNames indexes the registry's names below 0x0300 (nearly all of it)
// by codepoint: the lookup on the per-record path is one array read.
var lowNames = func() (a [0x300]string) {
	for _, e := range registry {
		if e.g < 0x300 {
			a[e.g] = e.name
		}
	}
	return a
}()

// groupName is the registry lookup; "" when unregistered.
func groupName(g Group) string {
	if g < 0x300 {
		return lowNames[g]
	}
	for _, e := range registry[len(registry)-highGroups:] {
		if e.g == g {
			return e.name
		}
	}
	return ""
}

// highGroups is how many registry entries lie at 0x0300 and above (the
// registry is sorted).
var highGroups = func() int {
	n := 0
	for _, e := range registry {
		if e.g >= 0x300 {
			n++
		}
	}
	return n
}()

// groupAliases are the other spellings of registered groups that people and
// programs use, lower-case: OpenSSL's short names (nginx's $ssl_curve,
// openssl -groups), NIST's, Go's crypto/tls constant names, and the Kyber
// drafts' informal names.
var groupAliases = map[string]Group{
	"prime256v1": GroupSecp256r1, "p-256": GroupSecp256r1, "p256": GroupSecp256r1, "curvep256": GroupSecp256r1,
	"p-384": GroupSecp384r1, "p384": GroupSecp384r1, "curvep384": GroupSecp384r1,
	"p-521": GroupSecp521r1, "p521": GroupSecp521r1, "curvep521": GroupSecp521r1,
	"sm2":            GroupCurveSM2,
	"x25519kyber768": GroupX25519Kyber768Draft00, "p256kyber768draft00": GroupSecP256r1Kyber768Draft00,
}

// groupsByName maps every registered name (exact, and lower-cased) and every
// alias to its codepoint.
var groupsByName = sync.OnceValue(func() map[string]Group {
	m := make(map[string]Group, 2*len(registry)+len(groupAliases))
	for _, e := range registry {
		m[e.name] = e.g
		m[strings.ToLower(e.name)] = e.g
	}
	for k, g := range groupAliases {
		m[k] = g
	}
	return m
})

// ParseGroup resolves a group as it is spelled in a log, a flag or another
// tool's output: an IANA registry name or one of its aliases (OpenSSL's
// "X25519" and "prime256v1", NIST's "P-256", Go's "CurveP256"), in any
// case, or a codepoint as "0x" and hex digits (what OpenSSL prints for a
// group it cannot name). ok is false for anything else.
func ParseGroup(s string) (g Group, ok bool) {
	s = strings.TrimSpace(s)
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") {
		v, err := strconv.ParseUint(s[2:], 16, 16)
		return Group(v), err == nil
	}
	m := groupsByName()
	if g, ok = m[s]; !ok {
		g, ok = m[strings.ToLower(s)]
	}
	return g, ok
}

// CommonGroups are the groups deployed TLS stacks offer (the group names of
// pqwatch's record contract): each is a label value of its own in the
// metrics, where any other group counts as "other".
var CommonGroups = []Group{
	GroupX25519, GroupSecp256r1, GroupSecp384r1, GroupSecp521r1, GroupX448,
	GroupFFDHE2048, GroupFFDHE3072, GroupFFDHE4096, GroupFFDHE6144, GroupFFDHE8192,
	GroupX25519MLKEM768, GroupSecP256r1MLKEM768, GroupSecP384r1MLKEM1024, GroupCurveSM2MLKEM768,
	GroupMLKEM512, GroupMLKEM768, GroupMLKEM1024,
	GroupX25519Kyber768Draft00, GroupSecP256r1Kyber768Draft00,
}

const hexDigits = "0123456789abcdef"

// hex4 formats v as "0x" and four lower-case hex digits.
func hex4(v uint16) string {
	b := [6]byte{'0', 'x', hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf]}
	return string(b[:])
}

// hex2 formats v as "0x" and two lower-case hex digits.
func hex2(v uint8) string {
	b := [4]byte{'0', 'x', hexDigits[v>>4], hexDigits[v&0xf]}
	return string(b[:])
}

// appendHex4 appends v as four lower-case hex digits without prefix.
func appendHex4(dst []byte, v uint16) []byte {
	return append(dst, hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
}
