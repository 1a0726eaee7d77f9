package tlsparse

import (
	"crypto/sha256"
	"slices"
)

// JA4 transports: the first character of a JA4 fingerprint.
const (
	TransportTCP  byte = 't'
	TransportQUIC byte = 'q'
	TransportDTLS byte = 'd'
)

// JA4Len is the length of a JA4 fingerprint ("t13d1516h2_8daaf6152771_e5627efa2ab1").
const JA4Len = 36

// scratchLen sizes the on-stack arrays JA4 sorts and formats in. Real
// ClientHellos carry a few dozen suites and extensions; larger ones still
// work, at the cost of a heap allocation.
const scratchLen = 128

// AppendJA4 appends the JA4 fingerprint of ch to dst and returns the
// extended slice. transport is 't' (TLS over TCP), 'q' (QUIC) or 'd' (DTLS).
// The definition is FoxIO's (technical_details/JA4.md of
// github.com/FoxIO-LLC/ja4):
//
//   - version: the highest non-GREASE supported_versions entry, else the
//     ClientHello legacy_version: "13", "12", "11", "10", "s3", "s2", "d1",
//     "d2", "d3", or "00" when unknown;
//   - 'd' when the server_name extension is present, else 'i';
//   - the number of cipher suites and of extensions, GREASE excluded (SNI
//     and ALPN included), two digits, capped at 99;
//   - the first and last characters of the first ALPN value, or the first
//     and last hex digits of that value when either end byte is not ASCII
//     alphanumeric, or "00" when there is none or it is empty;
//   - the first 12 hex digits of SHA-256 over the sorted 4-hex-digit cipher
//     suites joined by ',' ("000000000000" when there are none);
//   - the same over the sorted extensions without GREASE, SNI (0000) and
//     ALPN (0010), then '_' and the signature algorithms in wire order
//     (no '_' when there are none; "000000000000" when no extension is
//     left).
//
// GREASE values are ignored everywhere, including signature_algorithms.
// Duplicate values are kept (the Rust reference does; the Python one
// de-duplicates extensions). With cap(dst)-len(dst) >= JA4Len and a
// ClientHello of at most 128 suites and extensions, AppendJA4 does not
// allocate.
func AppendJA4(dst []byte, ch *ClientHello, transport byte) []byte {
	var ciphers, exts [scratchLen]uint16
	cs, es := ja4Lists(ch, ciphers[:0], exts[:0])
	dst = appendJA4A(dst, ch, transport)
	dst = append(dst, '_')

	var buf [scratchLen * 5 * 2]byte
	if len(cs) == 0 {
		dst = append(dst, "000000000000"...)
	} else {
		dst = appendHash12(dst, appendList(buf[:0], cs))
	}
	dst = append(dst, '_')
	if len(es) == 0 {
		dst = append(dst, "000000000000"...)
	} else {
		dst = appendHash12(dst, appendExtsSigs(buf[:0], es, ch.SignatureAlgorithms))
	}
	return dst
}

// AppendJA4R appends JA4_r, the raw (unhashed, sorted) form of JA4, to dst:
// the same first part, then the sorted cipher list, then the sorted
// extension list and the signature algorithms, as the FoxIO tools print it
// with -r. Empty lists stay empty.
func AppendJA4R(dst []byte, ch *ClientHello, transport byte) []byte {
	var ciphers, exts [scratchLen]uint16
	cs, es := ja4Lists(ch, ciphers[:0], exts[:0])
	dst = appendJA4A(dst, ch, transport)
	dst = append(dst, '_')
	dst = appendList(dst, cs)
	dst = append(dst, '_')
	return appendExtsSigs(dst, es, ch.SignatureAlgorithms)
}

// ja4Lists fills cs with the sorted non-GREASE cipher suites and es with the
// sorted non-GREASE extensions other than SNI and ALPN.
func ja4Lists(ch *ClientHello, cs, es []uint16) ([]uint16, []uint16) {
	for _, c := range ch.CipherSuites {
		if !IsGREASE(c) {
			cs = append(cs, c)
		}
	}
	for _, e := range ch.Extensions {
		if !IsGREASE(e) && e != ExtServerName && e != ExtALPN {
			es = append(es, e)
		}
	}
	slices.Sort(cs)
	slices.Sort(es)
	return cs, es
}

// appendJA4A appends JA4_a, the readable first part (10 bytes).
func appendJA4A(dst []byte, ch *ClientHello, transport byte) []byte {
	dst = append(dst, transport)
	dst = append(dst, ja4Version(ch)...)
	sni := byte('i')
	nc, ne := 0, 0
	for _, c := range ch.CipherSuites {
		if !IsGREASE(c) {
			nc++
		}
	}
	for _, e := range ch.Extensions {
		if e == ExtServerName {
			sni = 'd'
		}
		if !IsGREASE(e) {
			ne++
		}
	}
	dst = append(dst, sni)
	dst = appendCount(dst, nc)
	dst = appendCount(dst, ne)
	return appendALPNChars(dst, ch.ALPN)
}

// ja4Version returns the two-character JA4 version.
func ja4Version(ch *ClientHello) string {
	v, found := uint16(0), false
	for _, sv := range ch.SupportedVersions {
		if !IsGREASE(sv) && (!found || sv > v) {
			v, found = sv, true
		}
	}
	if !found {
		v = ch.LegacyVersion
	}
	switch v {
	case VersionTLS13:
		return "13"
	case VersionTLS12:
		return "12"
	case VersionTLS11:
		return "11"
	case VersionTLS10:
		return "10"
	case VersionSSL30:
		return "s3"
	case 0x0002:
		return "s2"
	case 0xfeff:
		return "d1"
	case 0xfefd:
		return "d2"
	case 0xfefc:
		return "d3"
	}
	return "00"
}

// appendCount appends n as two decimal digits, capped at 99.
func appendCount(dst []byte, n int) []byte {
	n = min(n, 99)
	return append(dst, byte('0'+n/10), byte('0'+n%10))
}

// appendALPNChars appends the two JA4 ALPN characters.
func appendALPNChars(dst []byte, alpn [][]byte) []byte {
	if len(alpn) == 0 || len(alpn[0]) == 0 {
		return append(dst, '0', '0')
	}
	first, last := alpn[0][0], alpn[0][len(alpn[0])-1]
	if isAlnum(first) && isAlnum(last) {
		return append(dst, first, last)
	}
	return append(dst, hexDigits[first>>4], hexDigits[last&0xf])
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// appendList appends vs as 4-hex-digit values joined by ','.
func appendList(dst []byte, vs []uint16) []byte {
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendHex4(dst, v)
	}
	return dst
}

// appendExtsSigs appends the JA4_c input: extensions, then '_' and the
// non-GREASE signature algorithms in wire order when there are any.
func appendExtsSigs(dst []byte, exts, sigs []uint16) []byte {
	dst = appendList(dst, exts)
	sep := byte('_')
	for _, s := range sigs {
		if IsGREASE(s) {
			continue
		}
		dst = append(dst, sep)
		dst = appendHex4(dst, s)
		sep = ','
	}
	return dst
}

// appendHash12 appends the first 12 lower-case hex digits of SHA-256(b).
func appendHash12(dst, b []byte) []byte {
	sum := sha256.Sum256(b)
	for _, c := range sum[:6] {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return dst
}
