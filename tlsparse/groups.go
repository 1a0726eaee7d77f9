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
	e := entry(g)
	return e != nil && e.pq
}

// ServerShareSize is the key_exchange length of a TLS 1.3 ServerHello's key
// share for g: an ECDH point, a finite-field public value (the modulus
// length), an ML-KEM ciphertext, or a hybrid's two parts concatenated
// (draft-ietf-tls-ecdhe-mlkem, draft-tls-westerbaan-xyber768d00); 0 when
// unknown.
func (g Group) ServerShareSize() int {
	if e := entry(g); e != nil {
		return int(e.server)
	}
	return 0
}

// ClientShareSize is the key_exchange length of a ClientHello key share for
// g: as ServerShareSize, with an ML-KEM encapsulation key for the KEM part;
// 0 when unknown.
func (g Group) ClientShareSize() int {
	if e := entry(g); e != nil {
		return int(e.client)
	}
	return 0
}

// OpenSSLName is g as OpenSSL's -groups and ssl_ecdh_curve spell it where
// that differs from the IANA name (X25519, P-256, ...); the IANA name
// otherwise, which OpenSSL 3.5 accepts for the rest (X25519MLKEM768,
// ffdhe2048, ...).
func (g Group) OpenSSLName() string {
	if e := entry(g); e != nil && e.openssl != "" {
		return e.openssl
	}
	return g.String()
}

// String returns the IANA TLS Supported Groups registry name of g, or "0x"
// and four lower-case hex digits when g is not registered (GREASE included).
// Registered names and GREASE values are constants and cost no allocation.
func (g Group) String() string {
	if e := entry(g); e != nil {
		return e.name
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

// Share sizes of the KEMs and curves the hybrids are made of: ML-KEM's
// encapsulation keys (client) and ciphertexts (server), FIPS 203; ECDH
// public keys as TLS 1.3 carries them (RFC 8446 4.2.8.2: X25519/X448 raw,
// NIST, brainpool and SM2 curves uncompressed); finite-field public values
// as long as the modulus (RFC 7919).
const (
	mlkem512EK, mlkem512CT   = 800, 768
	mlkem768EK, mlkem768CT   = 1184, 1088
	mlkem1024EK, mlkem1024CT = 1568, 1568
	x25519Share, x448Share   = 32, 56
	p256Share, p384Share     = 65, 97
	p521Share, bp512Share    = 133, 129
)

// registry is the IANA TLS Supported Groups registry, sorted by codepoint:
// the one table of what pqwatch knows of a group. String, ParseGroup,
// IsPQ, the share sizes, OpenSSLName and the metrics' label set all read
// it; a group is added by adding its row.
var registry = [...]groupEntry{
	{g: 0x0001, name: "sect163k1"},
	{g: 0x0002, name: "sect163r1"},
	{g: 0x0003, name: "sect163r2"},
	{g: 0x0004, name: "sect193r1"},
	{g: 0x0005, name: "sect193r2"},
	{g: 0x0006, name: "sect233k1"},
	{g: 0x0007, name: "sect233r1"},
	{g: 0x0008, name: "sect239k1"},
	{g: 0x0009, name: "sect283k1"},
	{g: 0x000a, name: "sect283r1"},
	{g: 0x000b, name: "sect409k1"},
	{g: 0x000c, name: "sect409r1"},
	{g: 0x000d, name: "sect571k1"},
	{g: 0x000e, name: "sect571r1"},
	{g: 0x000f, name: "secp160k1"},
	{g: 0x0010, name: "secp160r1"},
	{g: 0x0011, name: "secp160r2"},
	{g: 0x0012, name: "secp192k1"},
	{g: 0x0013, name: "secp192r1"},
	{g: 0x0014, name: "secp224k1"},
	{g: 0x0015, name: "secp224r1"},
	{g: 0x0016, name: "secp256k1"},
	{g: GroupSecp256r1, name: "secp256r1", openssl: "P-256", client: p256Share, server: p256Share},
	{g: GroupSecp384r1, name: "secp384r1", openssl: "P-384", client: p384Share, server: p384Share},
	{g: GroupSecp521r1, name: "secp521r1", openssl: "P-521", client: p521Share, server: p521Share},
	{g: 0x001a, name: "brainpoolP256r1"},
	{g: 0x001b, name: "brainpoolP384r1"},
	{g: 0x001c, name: "brainpoolP512r1"},
	{g: GroupX25519, name: "x25519", openssl: "X25519", client: x25519Share, server: x25519Share},
	{g: GroupX448, name: "x448", openssl: "X448", client: x448Share, server: x448Share},
	{g: GroupBrainpoolP256r1TLS13, name: "brainpoolP256r1tls13", client: p256Share, server: p256Share},
	{g: GroupBrainpoolP384r1TLS13, name: "brainpoolP384r1tls13", client: p384Share, server: p384Share},
	{g: GroupBrainpoolP512r1TLS13, name: "brainpoolP512r1tls13", client: bp512Share, server: bp512Share},
	{g: 0x0022, name: "GC256A"},
	{g: 0x0023, name: "GC256B"},
	{g: 0x0024, name: "GC256C"},
	{g: 0x0025, name: "GC256D"},
	{g: 0x0026, name: "GC512A"},
	{g: 0x0027, name: "GC512B"},
	{g: 0x0028, name: "GC512C"},
	{g: GroupCurveSM2, name: "curveSM2"},
	{g: GroupFFDHE2048, name: "ffdhe2048", client: 256, server: 256},
	{g: GroupFFDHE3072, name: "ffdhe3072", client: 384, server: 384},
	{g: GroupFFDHE4096, name: "ffdhe4096", client: 512, server: 512},
	{g: GroupFFDHE6144, name: "ffdhe6144", client: 768, server: 768},
	{g: GroupFFDHE8192, name: "ffdhe8192", client: 1024, server: 1024},
	{g: GroupMLKEM512, name: "MLKEM512", pq: true, client: mlkem512EK, server: mlkem512CT},
	{g: GroupMLKEM768, name: "MLKEM768", pq: true, client: mlkem768EK, server: mlkem768CT},
	{g: GroupMLKEM1024, name: "MLKEM1024", pq: true, client: mlkem1024EK, server: mlkem1024CT},
	{g: GroupSecP256r1MLKEM768, name: "SecP256r1MLKEM768", pq: true, client: p256Share + mlkem768EK, server: p256Share + mlkem768CT},
	{g: GroupX25519MLKEM768, name: "X25519MLKEM768", pq: true, client: mlkem768EK + x25519Share, server: mlkem768CT + x25519Share},
	{g: GroupSecP384r1MLKEM1024, name: "SecP384r1MLKEM1024", pq: true, client: p384Share + mlkem1024EK, server: p384Share + mlkem1024CT},
	{g: GroupCurveSM2MLKEM768, name: "curveSM2MLKEM768", pq: true, client: p256Share + mlkem768EK, server: p256Share + mlkem768CT},
	{g: GroupX25519Kyber768Draft00, name: "X25519Kyber768Draft00", pq: true, client: mlkem768EK + x25519Share, server: mlkem768CT + x25519Share},
	{g: GroupSecP256r1Kyber768Draft00, name: "SecP256r1Kyber768Draft00", pq: true, client: p256Share + mlkem768EK, server: p256Share + mlkem768CT},
	{g: 0xff01, name: "arbitrary_explicit_prime_curves"},
	{g: 0xff02, name: "arbitrary_explicit_char2_curves"},
}

// groupEntry is one registered group.
type groupEntry struct {
	g    Group
	name string // IANA's
	// openssl is OpenSSL's spelling (-groups, ssl_ecdh_curve, nginx's
	// $ssl_curve) where it differs from name.
	openssl string
	pq      bool // a post-quantum or hybrid key exchange
	// client and server are the key_exchange lengths of a TLS 1.3 key
	// share (ClientShareSize, ServerShareSize); 0 when unknown.
	client, server uint16
}

// index maps every codepoint to its registry entry, as index + 1 (0:
// unregistered): the lookup on the per-record path is one array read. Its
// 64 KiB are touched only where the registry has entries.
var index = func() (a [1 << 16]uint8) {
	for i, e := range registry {
		a[e.g] = uint8(i + 1)
	}
	return a
}()

// The registry's entries are numbered by a uint8 in index.
const _ = uint8(len(registry) + 1)

// entry is g's registry entry, nil when g is unregistered.
func entry(g Group) *groupEntry {
	if i := index[g]; i != 0 {
		return &registry[i-1]
	}
	return nil
}

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

// GoGroups are the groups Go's crypto/tls (1.26) implements, in its fixed
// preference order (defaultCurvePreferences, hybrids first): a Go client
// offers and a Go server picks among these only, whatever order its
// Config.CurvePreferences gives.
var GoGroups = []Group{
	GroupX25519MLKEM768, GroupSecP256r1MLKEM768, GroupSecP384r1MLKEM1024,
	GroupX25519, GroupSecp256r1, GroupSecp384r1, GroupSecp521r1,
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
