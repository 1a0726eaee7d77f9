package logparse

import (
	"unicode/utf16"
	"unicode/utf8"
)

// JSON string content, shared by the Caddy parser (jscan) and nginx's
// escape=json values. Both follow encoding/json: what it rejects is rejected
// and what it accepts decodes to the same bytes.

// plainJSON marks the bytes that stand for themselves inside a JSON string:
// ASCII from 0x20 up, except '"' and '\'.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanJSONString scans JSON string content from the start of b up to the
// first '"' that is not escaped, or to the end of b. n is that length (the
// index of the closing quote, or len(b)). ok is false, with n at the
// offending byte, where encoding/json rejects the content: a control
// character (below 0x20) that is not escaped, or a malformed escape. plain
// reports that the content is its own value: no escape and valid UTF-8 (into
// which encoding/json substitutes U+FFFD, see appendJSONUnescaped).
func scanJSONString(b []byte) (n int, plain, ok bool) {
	plain = true
	i := 0
	for {
		for i < len(b) && plainJSON[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, plain, true
		}
		switch c := b[i]; {
		case c == '"':
			return i, plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return i, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(b[i+2:]); !ok {
					return i, false, false
				}
				i += 6
			default:
				return i, false, false
			}
		case c < 0x20:
			return i, false, false
		default: // c >= utf8.RuneSelf
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				plain = false
			}
			i += size
		}
	}
}

// appendJSONUnescaped appends the value of the JSON string content v
// (without its quotes) to dst, decoded as encoding/json decodes it: escapes
// resolved, a \u escape of a surrogate that is not half of a valid pair and
// each byte of invalid UTF-8 replaced by U+FFFD. ok is false (and dst holds a
// part of the value) where encoding/json rejects v: a '"' or a control
// character that is not escaped, or a malformed escape.
func appendJSONUnescaped(dst, v []byte) ([]byte, bool) {
	for i := 0; i < len(v); {
		c := v[i]
		switch {
		case plainJSON[c]:
			dst = append(dst, c)
			i++
		case c == '\\':
			if i+1 >= len(v) {
				return dst, false
			}
			switch e := v[i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(v[i+2:])
				if !ok {
					return dst, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// A valid pair is one rune; anything else leaves
					// U+FFFD and decodes what follows on its own.
					r2, ok := rune(-1), false
					if i+1 < len(v) && v[i] == '\\' && v[i+1] == 'u' {
						r2, ok = hex4(v[i+2:])
					}
					if r = utf16.DecodeRune(r, r2); ok && r != utf8.RuneError {
						i += 6
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, false
			}
			i += 2
		case c < utf8.RuneSelf: // '"' or a control character
			return dst, false
		default:
			r, size := utf8.DecodeRune(v[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, v[i:i+size]...)
			}
			i += size
		}
	}
	return dst, true
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		h, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}
