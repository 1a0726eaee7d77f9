package logparse

import (
	"bytes"
	"fmt"
	"time"
)

// NginxLine is one parsed nginx access-log line. Reuse one value per
// goroutine: Parse resets it and fills it again. Byte-slice fields point into
// the parsed line (or into the line's own scratch buffer for values that had
// to be unescaped) and are nil when the format lacks the variable or nginx
// logged it as empty ("-").
type NginxLine struct {
	RemoteAddr []byte
	RemotePort uint16    // 0: absent
	Time       time.Time // from $msec, $time_iso8601 or $time_local (first present); zero: absent
	// TimeRes is Time's resolution as logged: the line was written in
	// [Time, Time+TimeRes) (1 ms for $msec, 1 s for $time_local and
	// $time_iso8601).
	TimeRes time.Duration

	Request  []byte // "$request" as logged
	Method   []byte // $request_method, else the method of $request
	URI      []byte // $request_uri, else the target of $request
	Protocol []byte // the protocol of $request ("HTTP/1.1")

	Status    int    // 0: absent
	Host      []byte // $host, else $http_host, else $server_name
	UserAgent []byte

	SSLProtocol []byte
	SSLCipher   []byte
	SSLCurve    []byte // as nginx prints it: OpenSSL names ("X25519", "prime256v1", "X25519MLKEM768")
	SSLCurves   []byte

	PID                int    // worker pid; 0: absent
	Connection         uint64 // $connection serial; 0: absent
	ConnectionRequests int    // 0: absent
	RequestTime        time.Duration

	hostRank int
	timeRank int
	buf      []byte
}

// Reset clears l but keeps its scratch buffer.
func (l *NginxLine) Reset() {
	buf := l.buf[:0]
	*l = NginxLine{buf: buf}
}

// Parse matches line (without its trailing newline; a trailing "\n" or
// "\r\n" is ignored) against the format and fills l. It does not allocate
// once l's scratch buffer has grown to the longest escaped line seen.
// Errors wrap ErrMalformed or ErrBadField.
func (f *Format) Parse(line []byte, l *NginxLine) error {
	l.Reset()
	line = trimEOL(line)
	if !bytes.HasPrefix(line, f.lead) {
		return fmt.Errorf("%w: does not start with %q", ErrMalformed, f.lead)
	}
	if f.Escape != EscapeNone && cap(l.buf) < len(line) {
		l.buf = make([]byte, 0, len(line)+len(line)/2)
	}
	pos := len(f.lead)
	for i := range f.segs {
		s := &f.segs[i]
		var end int
		if len(s.lit) == 0 {
			end = len(line) // last variable runs to the end of the line
		} else {
			j := f.indexLit(line[pos:], s.lit)
			if j < 0 {
				return fmt.Errorf("%w: separator %q after $%s not found", ErrMalformed, s.lit, s.name)
			}
			end = pos + j
		}
		if s.v != VarOther {
			if err := l.set(f.Escape, s.v, line[pos:end]); err != nil {
				return fmt.Errorf("$%s: %w", s.name, err)
			}
		}
		pos = end + len(s.lit)
	}
	if pos != len(line) {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(line)-pos)
	}
	return nil
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}

// indexLit finds lit in b. With escape=json a '"' that is itself escaped
// (preceded by an odd number of backslashes) is part of a value, not the
// separator.
func (f *Format) indexLit(b, lit []byte) int {
	var j int
	if len(lit) == 1 {
		j = bytes.IndexByte(b, lit[0])
	} else {
		j = bytes.Index(b, lit)
	}
	if f.Escape != EscapeJSON || j < 0 || lit[0] != '"' {
		return j
	}
	off := 0
	for j >= 0 {
		k := off + j
		bs := 0
		for k-bs-1 >= 0 && b[k-bs-1] == '\\' {
			bs++
		}
		if bs%2 == 0 {
			return k
		}
		off = k + 1
		j = bytes.Index(b[off:], lit)
	}
	return -1
}

// value unescapes v if needed and maps nginx's "absent" spellings to nil.
// With escape=json, v is JSON string content and is decoded as encoding/json
// does; content that encoding/json rejects is an error.
func (l *NginxLine) value(esc Escape, v []byte) ([]byte, error) {
	if len(v) == 0 || (len(v) == 1 && v[0] == '-' && esc != EscapeJSON) {
		return nil, nil
	}
	switch esc {
	case EscapeJSON:
		n, plain, ok := scanJSONString(v)
		if !ok || n != len(v) {
			return nil, fmt.Errorf("%w: invalid JSON string content at byte %d", ErrMalformed, n)
		}
		if plain {
			return v, nil
		}
		start := len(l.buf)
		l.buf, _ = appendJSONUnescaped(l.buf, v) // valid: scanJSONString checked it
		return l.buf[start:len(l.buf):len(l.buf)], nil
	case EscapeDefault:
		if bytes.IndexByte(v, '\\') >= 0 {
			start := len(l.buf)
			l.buf = unescapeDefault(l.buf, v)
			return l.buf[start:len(l.buf):len(l.buf)], nil
		}
	}
	return v, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescapeDefault reverses nginx's default escaping (\xHH).
func unescapeDefault(dst, v []byte) []byte {
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+3 < len(v) && v[i+1] == 'x' {
			hi, ok1 := unhex(v[i+2])
			lo, ok2 := unhex(v[i+3])
			if ok1 && ok2 {
				dst = append(dst, hi<<4|lo)
				i += 3
				continue
			}
		}
		dst = append(dst, v[i])
	}
	return dst
}

func (l *NginxLine) set(esc Escape, v Var, raw []byte) error {
	b, err := l.value(esc, raw)
	if b == nil {
		return err
	}
	switch v {
	case VarRemoteAddr:
		l.RemoteAddr = b
	case VarRemotePort:
		n, ok := atoi(b)
		if !ok || n > 65535 {
			return fmt.Errorf("%w: port %s", ErrBadField, shape(b))
		}
		l.RemotePort = uint16(n)
	case VarMsec:
		t, ok := parseMsec(b)
		if !ok {
			return fmt.Errorf("%w: msec %s", ErrBadField, shape(b))
		}
		l.setTime(t, 3, msecRes(b))
	case VarTimeISO8601:
		t, ok := parseISO8601(b, 0)
		if !ok {
			return fmt.Errorf("%w: time_iso8601 %s", ErrBadField, shape(b))
		}
		l.setTime(t, 2, time.Second)
	case VarTimeLocal:
		t, ok := parseTimeLocal(b)
		if !ok {
			return fmt.Errorf("%w: time_local %s", ErrBadField, shape(b))
		}
		l.setTime(t, 1, time.Second)
	case VarRequest:
		l.Request = b
		m, u, p := splitRequest(b)
		if l.Method == nil {
			l.Method = m
		}
		if l.URI == nil {
			l.URI = u
		}
		l.Protocol = p
	case VarRequestMethod:
		l.Method = b
	case VarRequestURI:
		l.URI = b
	case VarStatus:
		n, ok := atoi(b)
		if !ok || n > 999 {
			return fmt.Errorf("%w: status %s", ErrBadField, shape(b))
		}
		l.Status = n
	case VarHost:
		l.setHost(b, 3)
	case VarHTTPHost:
		l.setHost(b, 2)
	case VarServerName:
		l.setHost(b, 1)
	case VarHTTPUserAgent:
		l.UserAgent = b
	case VarSSLProtocol:
		l.SSLProtocol = b
	case VarSSLCipher:
		l.SSLCipher = b
	case VarSSLCurve:
		l.SSLCurve = b
	case VarSSLCurves:
		l.SSLCurves = b
	case VarPID:
		n, ok := atoi(b)
		if !ok || n > 1<<31-1 {
			return fmt.Errorf("%w: pid %s", ErrBadField, shape(b))
		}
		l.PID = n
	case VarConnection:
		n, ok := atou64(b)
		if !ok {
			return fmt.Errorf("%w: connection %s", ErrBadField, shape(b))
		}
		l.Connection = n
	case VarConnectionRequests:
		n, ok := atoi(b)
		if !ok {
			return fmt.Errorf("%w: connection_requests %s", ErrBadField, shape(b))
		}
		l.ConnectionRequests = n
	case VarRequestTime:
		d, ok := parseSecondsFrac(b)
		if !ok {
			return fmt.Errorf("%w: request_time %s", ErrBadField, shape(b))
		}
		l.RequestTime = d
	}
	return nil
}

func (l *NginxLine) setTime(t time.Time, rank int, res time.Duration) {
	if rank > l.timeRank {
		l.Time, l.timeRank, l.TimeRes = t, rank, res
	}
}

// msecRes is the resolution of a $msec value: 10^-(its fraction digits) s.
func msecRes(b []byte) time.Duration {
	res := time.Second
	if dot := bytes.IndexByte(b, '.'); dot >= 0 {
		for range len(b) - dot - 1 {
			res /= 10
		}
	}
	return max(res, time.Nanosecond)
}

func (l *NginxLine) setHost(b []byte, rank int) {
	if rank > l.hostRank {
		l.Host, l.hostRank = b, rank
	}
}

// splitRequest splits "GET /path HTTP/1.1" into its three parts. A request
// line without a protocol (HTTP/0.9 or garbage) yields method and target.
func splitRequest(r []byte) (method, uri, proto []byte) {
	sp := bytes.IndexByte(r, ' ')
	if sp <= 0 {
		return nil, nil, nil
	}
	method = r[:sp]
	rest := r[sp+1:]
	if last := bytes.LastIndexByte(rest, ' '); last >= 0 && bytes.HasPrefix(rest[last+1:], []byte("HTTP/")) {
		proto = rest[last+1:]
		rest = rest[:last]
	}
	if len(rest) > 0 {
		uri = rest
	}
	return method, uri, proto
}

// atoi parses a non-negative decimal of at most 18 digits.
func atoi(b []byte) (int, bool) {
	if len(b) > 18 {
		return 0, false
	}
	n, ok := atou64(b)
	return int(n), ok
}

// atou64 parses a non-negative decimal of at most 19 digits.
func atou64(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// parseSecondsFrac parses "123.456" (seconds with up to 9 fraction digits).
func parseSecondsFrac(b []byte) (time.Duration, bool) {
	sec, nsec, ok := splitFrac(b)
	if !ok || sec > 1<<33 {
		return 0, false
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec), true
}

func splitFrac(b []byte) (sec, nsec int64, ok bool) {
	ip, fp := b, []byte(nil)
	if dot := bytes.IndexByte(b, '.'); dot >= 0 {
		ip, fp = b[:dot], b[dot+1:]
		if len(fp) == 0 || len(fp) > 9 {
			return 0, 0, false
		}
	}
	s, ok := atoi(ip)
	if !ok {
		return 0, 0, false
	}
	f, ok := 0, true
	if fp != nil {
		if f, ok = atoi(fp); !ok {
			return 0, 0, false
		}
		for i := len(fp); i < 9; i++ {
			f *= 10
		}
	}
	return int64(s), int64(f), true
}

// parseMsec parses $msec: "1764487815.123".
func parseMsec(b []byte) (time.Time, bool) {
	sec, nsec, ok := splitFrac(b)
	if !ok || sec > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(sec, nsec).UTC(), true
}

// digits parses the n (at most 19) decimal digits at the start of b.
func digits(b []byte, n int) (int, bool) {
	if len(b) < n {
		return 0, false
	}
	v, ok := atou64(b[:n])
	return int(v), ok
}

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseTimeLocal parses $time_local: "30/Nov/2026:07:30:15 +0000".
func parseTimeLocal(b []byte) (time.Time, bool) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' {
		return time.Time{}, false
	}
	day, ok1 := digits(b[0:], 2)
	year, ok2 := digits(b[7:], 4)
	hh, ok3 := digits(b[12:], 2)
	mm, ok4 := digits(b[15:], 2)
	ss, ok5 := digits(b[18:], 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return time.Time{}, false
	}
	mon := -1
	for i, m := range months {
		if string(b[3:6]) == m {
			mon = i
			break
		}
	}
	if mon < 0 {
		return time.Time{}, false
	}
	off, ok := parseZone(b[21:], false)
	if !ok {
		return time.Time{}, false
	}
	t, ok := civilTime(year, mon+1, day, hh, mm, ss, time.UTC)
	if !ok {
		return time.Time{}, false
	}
	return t.Add(-time.Duration(off) * time.Second), true
}

// parseISO8601 parses an RFC 3339 date-time with a "Z" or "+01:00" zone and
// at most maxFrac digits of fractional seconds (1 to 9; 0: none): nginx's
// $time_iso8601 is "2026-11-30T07:30:15+00:00", a Caddy "ts" string
// "2026-11-30T07:30:15.123456789Z".
func parseISO8601(b []byte, maxFrac int) (time.Time, bool) {
	t, ok := parseDateTime(b, '-', 'T', time.UTC)
	if !ok || len(b) < 20 {
		return time.Time{}, false
	}
	z := b[19:]
	var nsec int
	if z[0] == '.' && maxFrac > 0 {
		j := 1
		for j < len(z) && z[j] >= '0' && z[j] <= '9' {
			j++
		}
		if j == 1 || j-1 > min(maxFrac, 9) {
			return time.Time{}, false
		}
		nsec, _ = atoi(z[1:j])
		for k := j - 1; k < 9; k++ {
			nsec *= 10
		}
		z = z[j:]
	}
	var off int
	if len(z) != 1 || z[0] != 'Z' {
		// "+01:00" (RFC 3339), or "+0100" as Caddy's iso8601 time_format
		// writes it outside UTC.
		if off, ok = parseZone(z, len(z) == 6); !ok {
			return time.Time{}, false
		}
	}
	return t.Add(time.Duration(nsec) - time.Duration(off)*time.Second), true
}

// parseDateTime parses the "2026-11-30T07:30:15" at the start of b (19
// bytes), with dateSep between the parts of the date and sep before the time,
// as wall-clock time in loc.
func parseDateTime(b []byte, dateSep, sep byte, loc *time.Location) (time.Time, bool) {
	if len(b) < 19 || b[4] != dateSep || b[7] != dateSep || b[10] != sep || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digits(b[0:], 4)
	mon, ok2 := digits(b[5:], 2)
	day, ok3 := digits(b[8:], 2)
	hh, ok4 := digits(b[11:], 2)
	mm, ok5 := digits(b[14:], 2)
	ss, ok6 := digits(b[17:], 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, false
	}
	return civilTime(year, mon, day, hh, mm, ss, loc)
}

// parseZone parses "+0100" (or "+01:00" when colon) into seconds east of UTC.
func parseZone(z []byte, colon bool) (int, bool) {
	want := 5
	if colon {
		want = 6
	}
	if len(z) != want || (z[0] != '+' && z[0] != '-') {
		return 0, false
	}
	h, ok1 := digits(z[1:], 2)
	mi := z[3:]
	if colon {
		if z[3] != ':' {
			return 0, false
		}
		mi = z[4:]
	}
	m, ok2 := digits(mi, 2)
	if !ok1 || !ok2 || h > 23 || m > 59 {
		return 0, false
	}
	off := h*3600 + m*60
	if z[0] == '-' {
		off = -off
	}
	return off, true
}

// civilTime is time.Date for fields that are in range (a leap second 60 is).
func civilTime(year, mon, day, hh, mm, ss int, loc *time.Location) (time.Time, bool) {
	if mon < 1 || mon > 12 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(mon), day, hh, mm, ss, 0, loc), true
}
