package logparse

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// CaddyTLS is the "request.tls" object of a Caddy access-log entry.
type CaddyTLS struct {
	Resumed     bool
	Version     uint16 // TLS version codepoint (0x0304 = TLS 1.3)
	CipherSuite uint16 // IANA codepoint
	Proto       []byte // negotiated ALPN
	ServerName  []byte
}

// CaddyLine is one parsed Caddy JSON access-log entry. Reuse one value per
// goroutine; byte-slice fields point into the line or into the value's
// scratch buffer (for strings that had JSON escapes).
type CaddyLine struct {
	Time       time.Time // "ts"
	Status     int
	RemoteIP   []byte // request.remote_ip
	RemotePort uint16 // request.remote_port (a string in Caddy's log); 0: absent
	ClientIP   []byte // request.client_ip (after trusted proxies)
	Host       []byte
	Method     []byte
	URI        []byte
	Proto      []byte // HTTP protocol ("HTTP/2.0")
	UserAgent  []byte // first request.headers.User-Agent value
	Logger     []byte // "logger", e.g. "http.log.access.log0"
	HasTLS     bool
	TLS        CaddyTLS

	buf []byte
}

// Reset clears c but keeps its scratch buffer.
func (c *CaddyLine) Reset() {
	buf := c.buf[:0]
	*c = CaddyLine{buf: buf}
}

// ParseCaddyLine parses one line of Caddy's JSON access log into c. An entry
// without a "request" object is malformed. It does not allocate on the usual
// path (a float "ts", no \u escapes beyond the scratch buffer's growth).
// Errors wrap ErrMalformed or ErrBadField.
func ParseCaddyLine(line []byte, c *CaddyLine) error {
	c.Reset()
	line = trimEOL(line)
	if cap(c.buf) < len(line) {
		c.buf = make([]byte, 0, len(line)+len(line)/2)
	}
	s := jscan{b: line}
	if !s.objStart() {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	sawRequest := false
	first := true
	for {
		k, more := s.objKey(&first)
		if !more {
			break
		}
		switch string(k) {
		case "ts":
			if err := c.parseTS(&s); err != nil {
				return err
			}
		case "status":
			n, ok := s.uint(999)
			if !ok {
				return fmt.Errorf("%w: status", ErrBadField)
			}
			c.Status = int(n)
		case "logger":
			c.Logger = s.str(&c.buf)
		case "request":
			sawRequest = true
			if err := c.parseRequest(&s); err != nil {
				return err
			}
		default:
			s.skip(0)
		}
		if s.bad {
			break
		}
	}
	if s.bad {
		return fmt.Errorf("%w: invalid JSON near byte %d", ErrMalformed, s.i)
	}
	s.ws()
	if s.i != len(s.b) {
		return fmt.Errorf("%w: trailing data after JSON object", ErrMalformed)
	}
	if !sawRequest {
		return fmt.Errorf("%w: no request object", ErrMalformed)
	}
	return nil
}

func (c *CaddyLine) parseTS(s *jscan) error {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		v := s.str(&c.buf)
		t, ok := parseISO8601Frac(v)
		if !ok {
			return fmt.Errorf("%w: ts %q", ErrBadField, v)
		}
		c.Time = t
		return nil
	}
	num := s.number()
	if num == nil {
		return fmt.Errorf("%w: ts", ErrBadField)
	}
	if sec, nsec, ok := splitFrac(num); ok && sec < 1<<40 {
		c.Time = time.Unix(sec, nsec).UTC()
		return nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f < 0 || f > 1<<40 || math.IsNaN(f) {
		return fmt.Errorf("%w: ts %q", ErrBadField, num)
	}
	sec, frac := math.Modf(f)
	c.Time = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	return nil
}

func (c *CaddyLine) parseRequest(s *jscan) error {
	if !s.objStart() {
		return fmt.Errorf("%w: request is not an object", ErrMalformed)
	}
	first := true
	for {
		k, more := s.objKey(&first)
		if !more || s.bad {
			break
		}
		switch string(k) {
		case "remote_ip":
			c.RemoteIP = s.str(&c.buf)
		case "client_ip":
			c.ClientIP = s.str(&c.buf)
		case "remote_port":
			s.ws()
			var n uint64
			var ok bool
			if s.i < len(s.b) && s.b[s.i] == '"' {
				p := s.str(&c.buf)
				var v int
				v, ok = atoi(p)
				n = uint64(v)
				if len(p) == 0 {
					ok, n = true, 0
				}
			} else {
				n, ok = s.uint(65535)
			}
			if !ok || n > 65535 {
				return fmt.Errorf("%w: remote_port", ErrBadField)
			}
			c.RemotePort = uint16(n)
		case "host":
			c.Host = s.str(&c.buf)
		case "method":
			c.Method = s.str(&c.buf)
		case "uri":
			c.URI = s.str(&c.buf)
		case "proto":
			c.Proto = s.str(&c.buf)
		case "headers":
			c.parseHeaders(s)
		case "tls":
			if err := c.parseTLS(s); err != nil {
				return err
			}
		default:
			s.skip(0)
		}
	}
	return nil
}

func (c *CaddyLine) parseHeaders(s *jscan) {
	if !s.objStart() {
		s.skip(0)
		return
	}
	first := true
	for {
		k, more := s.objKey(&first)
		if !more || s.bad {
			return
		}
		if !bytes.EqualFold(k, []byte("User-Agent")) || c.UserAgent != nil {
			s.skip(0)
			continue
		}
		// Caddy logs header values as arrays of strings.
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == '[' {
			s.i++
			first := true
			for {
				s.ws()
				if s.i < len(s.b) && s.b[s.i] == ']' {
					s.i++
					break
				}
				if !first {
					if s.i >= len(s.b) || s.b[s.i] != ',' {
						s.bad = true
						return
					}
					s.i++
				}
				s.ws()
				if first && s.i < len(s.b) && s.b[s.i] == '"' {
					c.UserAgent = s.str(&c.buf)
				} else {
					s.skip(1)
				}
				first = false
				if s.bad {
					return
				}
			}
		} else if s.i < len(s.b) && s.b[s.i] == '"' {
			c.UserAgent = s.str(&c.buf)
		} else {
			s.skip(0)
		}
	}
}

func (c *CaddyLine) parseTLS(s *jscan) error {
	s.ws()
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return nil
	}
	if !s.objStart() {
		return fmt.Errorf("%w: tls is not an object", ErrMalformed)
	}
	c.HasTLS = true
	first := true
	for {
		k, more := s.objKey(&first)
		if !more || s.bad {
			return nil
		}
		switch string(k) {
		case "resumed":
			c.TLS.Resumed = s.boolean()
		case "version":
			n, ok := s.uint(65535)
			if !ok {
				return fmt.Errorf("%w: tls.version", ErrBadField)
			}
			c.TLS.Version = uint16(n)
		case "cipher_suite":
			n, ok := s.uint(65535)
			if !ok {
				return fmt.Errorf("%w: tls.cipher_suite", ErrBadField)
			}
			c.TLS.CipherSuite = uint16(n)
		case "proto":
			c.TLS.Proto = s.str(&c.buf)
		case "server_name":
			c.TLS.ServerName = s.str(&c.buf)
		default:
			s.skip(0)
		}
	}
}

// parseISO8601Frac parses RFC 3339 with optional fractional seconds.
func parseISO8601Frac(b []byte) (time.Time, bool) {
	if len(b) < 20 {
		return time.Time{}, false
	}
	var nsec int64
	rest := b[19:]
	if rest[0] == '.' {
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 1 || j > 10 {
			return time.Time{}, false
		}
		f, _ := atoi(rest[1:j])
		for k := j - 1; k < 9; k++ {
			f *= 10
		}
		nsec = int64(f)
		rest = rest[j:]
	}
	var tmp [25]byte
	n := copy(tmp[:], b[:19])
	n += copy(tmp[n:], rest)
	t, ok := parseISO8601(tmp[:n])
	if !ok || len(rest) > 6 {
		return time.Time{}, false
	}
	return t.Add(time.Duration(nsec)), true
}

// jscan is a minimal JSON reader that walks an object without building
// values. It validates structure enough that garbage is rejected; it is not a
// full validator (number grammar is loose).
type jscan struct {
	b   []byte
	i   int
	bad bool
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) objStart() bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		s.i++
		return true
	}
	s.bad = true
	return false
}

// objKey reads the next key of the current object and the ':' after it.
// It returns more == false at the closing '}' (consumed) or on error.
func (s *jscan) objKey(first *bool) (key []byte, more bool) {
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return nil, false
	}
	if s.b[s.i] == '}' {
		s.i++
		return nil, false
	}
	if !*first {
		if s.b[s.i] != ',' {
			s.bad = true
			return nil, false
		}
		s.i++
		s.ws()
	}
	*first = false
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.bad = true
		return nil, false
	}
	start := s.i + 1
	end, _ := s.scanString()
	if s.bad {
		return nil, false
	}
	key = s.b[start:end]
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		s.bad = true
		return nil, false
	}
	s.i++
	return key, true
}

// scanString consumes a string starting at '"'; it returns the index of the
// closing quote and whether the content has escapes.
func (s *jscan) scanString() (end int, escaped bool) {
	s.i++ // opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			return end, escaped
		case c == '\\':
			escaped = true
			s.i += 2
		case c < 0x20:
			s.bad = true
			return s.i, escaped
		default:
			s.i++
		}
	}
	s.bad = true
	return len(s.b), escaped
}

// str reads a string value (unescaping into *buf when needed); null and
// "" give nil. Other value types set bad.
func (s *jscan) str(buf *[]byte) []byte {
	s.ws()
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return nil
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.bad = true
		return nil
	}
	start := s.i + 1
	end, esc := s.scanString()
	if s.bad || end == start {
		return nil
	}
	if !esc {
		return s.b[start:end]
	}
	b0 := len(*buf)
	var ok bool
	*buf, ok = appendJSONUnescaped(*buf, s.b[start:end])
	if !ok {
		s.bad = true
		return nil
	}
	return (*buf)[b0:len(*buf):len(*buf)]
}

func (s *jscan) boolean() bool {
	s.ws()
	switch {
	case s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true
	case s.i+5 <= len(s.b) && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
	default:
		s.skip(0)
	}
	return false
}

// number returns the raw text of a number value (JSON grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?).
func (s *jscan) number() []byte {
	s.ws()
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		s.bad = true
		return nil
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			s.bad = true
			return nil
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			s.bad = true
			return nil
		}
	}
	return s.b[start:s.i]
}

func (s *jscan) uint(max uint64) (uint64, bool) {
	num := s.number()
	if num == nil {
		return 0, false
	}
	n, ok := atou64(num)
	return n, ok && n <= max
}

const maxDepth = 64

// skip consumes one value of any type.
func (s *jscan) skip(depth int) {
	if depth > maxDepth {
		s.bad = true
		return
	}
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return
	}
	switch c := s.b[s.i]; {
	case c == '"':
		s.scanString()
	case c == '{':
		s.i++
		first := true
		for !s.bad {
			_, more := s.objKey(&first)
			if !more {
				return
			}
			s.skip(depth + 1)
		}
	case c == '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return
		}
		for !s.bad {
			s.skip(depth + 1)
			s.ws()
			if s.i >= len(s.b) {
				s.bad = true
				return
			}
			if s.b[s.i] == ']' {
				s.i++
				return
			}
			if s.b[s.i] != ',' {
				s.bad = true
				return
			}
			s.i++
		}
	case c == 't' && s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
	case c == 'f' && s.i+5 <= len(s.b) && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
	case c == 'n' && s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null":
		s.i += 4
	default:
		s.number()
	}
}

// appendJSONUnescaped appends the unescaped JSON string content v to dst.
func appendJSONUnescaped(dst, v []byte) ([]byte, bool) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(v) {
			return dst, false
		}
		switch v[i] {
		case '"', '\\', '/':
			dst = append(dst, v[i])
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
			r, ok := hex4(v[i+1:])
			if !ok {
				return dst, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(v) && v[i+1] == '\\' && v[i+2] == 'u' {
					if r2, ok := hex4(v[i+3:]); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r = d
							i += 6
						} else {
							r = utf8.RuneError
						}
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

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
