package logparse

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
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
// scratch buffer (for strings that had JSON escapes or invalid UTF-8).
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
	top:
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
			if k = field(k, topFields); k != nil {
				goto top
			}
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
		t, ok := parseISO8601(v, 9)
		if !ok {
			return fmt.Errorf("%w: ts %s", ErrBadField, shape(v))
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
		return fmt.Errorf("%w: ts %s", ErrBadField, shape(num))
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
	req:
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
			if k = field(k, requestFields); k != nil {
				goto req
			}
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
	tls:
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
			if k = field(k, tlsFields); k != nil {
				goto tls
			}
			s.skip(0)
		}
	}
}

// The keys that the parser reads, for field.
var (
	topFields     = keys("ts", "status", "logger", "request")
	requestFields = keys("remote_ip", "client_ip", "remote_port", "host", "method", "uri", "proto", "headers", "tls")
	tlsFields     = keys("resumed", "version", "cipher_suite", "proto", "server_name")
)

func keys(names ...string) [][]byte {
	b := make([][]byte, len(names))
	for i, n := range names {
		b[i] = []byte(n)
	}
	return b
}

// jscan is a minimal JSON reader that walks an object without building
// values. It rejects what encoding/json rejects (strings are validated in
// skipped values too) except that it nests at most maxDepth deep.
type jscan struct {
	b   []byte
	i   int
	bad bool
	key [64]byte // scratch for keys that have escapes
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
// It returns more == false at the closing '}' (consumed) or on error. A key
// with escapes is returned decoded, valid until the next objKey.
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
	key, plain := s.scanString()
	if s.bad {
		return nil, false
	}
	if !plain {
		key, _ = appendJSONUnescaped(s.key[:0], key)
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		s.bad = true
		return nil, false
	}
	s.i++
	return key, true
}

// scanString consumes the string whose opening quote is at s.i and returns
// its raw content; plain reports that the content is the string's value
// (see scanJSONString). A string that encoding/json rejects sets bad.
func (s *jscan) scanString() (content []byte, plain bool) {
	start := s.i + 1
	n, plain, ok := scanJSONString(s.b[start:])
	end := start + n
	if !ok || end >= len(s.b) {
		s.i = end
		s.bad = true
		return nil, false
	}
	s.i = end + 1
	return s.b[start:end], plain
}

// str reads a string value (decoding it into *buf when needed); null and
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
	v, plain := s.scanString()
	if s.bad || len(v) == 0 {
		return nil
	}
	if plain {
		return v
	}
	b0 := len(*buf)
	*buf, _ = appendJSONUnescaped(*buf, v) // v is valid: scanString checked it
	return (*buf)[b0:len(*buf):len(*buf)]
}

// field returns the one of names (all lowercase ASCII) that key matches
// without being equal to it: encoding/json matches keys to struct fields
// under Unicode case folding ("URI" and "ur\u0049" are "uri", "ho\u017ft" is
// "host"). nil when there is none.
func field(key []byte, names [][]byte) []byte {
	fold := false
	for _, c := range key {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			fold = true
			break
		}
	}
	if !fold {
		return nil // lowercase ASCII: the same bytes or no match
	}
	for _, n := range names {
		if len(key) >= len(n) && bytes.EqualFold(key, n) {
			return n
		}
	}
	return nil
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
