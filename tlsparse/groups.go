package tlsparse

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
	GroupFFDHE2048                Group = 0x0100
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

// groupName is the registry lookup; "" when unregistered.
func groupName(g Group) string {
	switch g {
	case 0x0001:
		return "sect163k1"
	case 0x0002:
		return "sect163r1"
	case 0x0003:
		return "sect163r2"
	case 0x0004:
		return "sect193r1"
	case 0x0005:
		return "sect193r2"
	case 0x0006:
		return "sect233k1"
	case 0x0007:
		return "sect233r1"
	case 0x0008:
		return "sect239k1"
	case 0x0009:
		return "sect283k1"
	case 0x000a:
		return "sect283r1"
	case 0x000b:
		return "sect409k1"
	case 0x000c:
		return "sect409r1"
	case 0x000d:
		return "sect571k1"
	case 0x000e:
		return "sect571r1"
	case 0x000f:
		return "secp160k1"
	case 0x0010:
		return "secp160r1"
	case 0x0011:
		return "secp160r2"
	case 0x0012:
		return "secp192k1"
	case 0x0013:
		return "secp192r1"
	case 0x0014:
		return "secp224k1"
	case 0x0015:
		return "secp224r1"
	case 0x0016:
		return "secp256k1"
	case GroupSecp256r1:
		return "secp256r1"
	case GroupSecp384r1:
		return "secp384r1"
	case GroupSecp521r1:
		return "secp521r1"
	case 0x001a:
		return "brainpoolP256r1"
	case 0x001b:
		return "brainpoolP384r1"
	case 0x001c:
		return "brainpoolP512r1"
	case GroupX25519:
		return "x25519"
	case GroupX448:
		return "x448"
	case 0x001f:
		return "brainpoolP256r1tls13"
	case 0x0020:
		return "brainpoolP384r1tls13"
	case 0x0021:
		return "brainpoolP512r1tls13"
	case 0x0022:
		return "GC256A"
	case 0x0023:
		return "GC256B"
	case 0x0024:
		return "GC256C"
	case 0x0025:
		return "GC256D"
	case 0x0026:
		return "GC512A"
	case 0x0027:
		return "GC512B"
	case 0x0028:
		return "GC512C"
	case GroupCurveSM2:
		return "curveSM2"
	case GroupFFDHE2048:
		return "ffdhe2048"
	case 0x0101:
		return "ffdhe3072"
	case 0x0102:
		return "ffdhe4096"
	case 0x0103:
		return "ffdhe6144"
	case 0x0104:
		return "ffdhe8192"
	case GroupMLKEM512:
		return "MLKEM512"
	case GroupMLKEM768:
		return "MLKEM768"
	case GroupMLKEM1024:
		return "MLKEM1024"
	case GroupSecP256r1MLKEM768:
		return "SecP256r1MLKEM768"
	case GroupX25519MLKEM768:
		return "X25519MLKEM768"
	case GroupSecP384r1MLKEM1024:
		return "SecP384r1MLKEM1024"
	case GroupCurveSM2MLKEM768:
		return "curveSM2MLKEM768"
	case GroupX25519Kyber768Draft00:
		return "X25519Kyber768Draft00"
	case GroupSecP256r1Kyber768Draft00:
		return "SecP256r1Kyber768Draft00"
	case 0xff01:
		return "arbitrary_explicit_prime_curves"
	case 0xff02:
		return "arbitrary_explicit_char2_curves"
	}
	return ""
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
