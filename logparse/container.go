package logparse

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Container log files. A server in a container that logs to stdout/stderr
// (nginx's official image links access.log to /dev/stdout and error.log to
// /dev/stderr) has each of its lines wrapped by the container runtime in the
// file the node keeps (/var/log/pods/NS_POD_UID/CONTAINER/0.log):
//
//	CRI (containerd, CRI-O):  <RFC 3339 time> <stdout|stderr> <P|F>[:tags] <content>
//	Docker json-file:         {"log":"<content>\n","stream":"stdout","time":"<RFC 3339 time>"}
//
// A CRI line tagged P is a partial: its content continues in the following
// lines of the same stream up to one tagged F. A json-file "log" that does not
// end in "\n" is a partial the same way. An Unwrapper gives back the content,
// partials joined, so that the parsers see the line the server wrote.

// Wrapping is how the lines of a file are wrapped.
type Wrapping uint8

const (
	WrapUndecided Wrapping = iota // no line has decided yet
	WrapPlain                     // the server's own lines
	WrapCRI                       // CRI (containerd, CRI-O)
	WrapDocker                    // Docker's json-file
)

// String is "cri", "docker-json", "plain", or "" while undecided.
func (w Wrapping) String() string {
	switch w {
	case WrapPlain:
		return "plain"
	case WrapCRI:
		return "cri"
	case WrapDocker:
		return "docker-json"
	}
	return ""
}

// Stream is the container output a wrapped line came from.
type Stream uint8

const (
	StreamNone   Stream = iota // a plain line
	StreamStdout               // stdout
	StreamStderr               // stderr
)

// String is "stdout", "stderr" or "".
func (s Stream) String() string {
	switch s {
	case StreamStdout:
		return "stdout"
	case StreamStderr:
		return "stderr"
	}
	return ""
}

// DefaultMaxLineBytes is the longest line the tailer delivers and the longest
// content an Unwrapper joins from partials, unless told otherwise.
const DefaultMaxLineBytes = 64 << 10

// detectLines is how many non-empty lines that are neither CRI nor json-file
// an Unwrapper reads before it decides a file is plain: one damaged first line
// (a file cut in place) does not make a container log plain.
const detectLines = 16

// Errors of wrapped lines. They wrap ErrMalformed (a line of a container log
// that is not in its wrapping) and ErrTooLong (partials joined past the
// bound), so callers count them as they count lines the parsers reject.
var (
	ErrTooLong   = errors.New("logparse: line too long")
	errCRILine   = fmt.Errorf("%w: not a CRI container log line (time stdout|stderr P|F content)", ErrMalformed)
	errJSONLine  = fmt.Errorf("%w: not a Docker json-file line ({\"log\":...,\"stream\":...,\"time\":...})", ErrMalformed)
	errCutChain  = fmt.Errorf("%w: a container line joined from partials is longer than the bound; dropped", ErrTooLong)
	maxTimeBytes = len("2006-01-02T15:04:05.999999999+07:00")
)

// UnwrapStats counts what an Unwrapper read.
type UnwrapStats struct {
	Fragments uint64 // wrapped lines read that ended a line or continued one
	Joined    uint64 // lines joined from more than one fragment
	Stderr    uint64 // complete lines of the stderr stream
	Malformed uint64 // lines not in the file's wrapping
	TooLong   uint64 // lines joined past MaxBytes, dropped
}

// Unwrapper takes the raw lines of one file in order and returns their
// content. The wrapping is detected from the lines themselves: the first
// non-empty line that is a well-formed CRI or json-file line decides it for
// the rest of the file; after detectLines lines that are neither, the file
// is plain and its lines are returned as they are. The zero value is ready to
// use; one per file (a rotated file continues its predecessor, so one per
// path); not safe for concurrent use. Plain and CRI lines, joined or not, cost
// no allocation once the partial buffers have grown.
type Unwrapper struct {
	// MaxBytes bounds a line joined from partials (default
	// DefaultMaxLineBytes). A longer one is dropped whole, the rest of its
	// partials skipped, and counted TooLong.
	MaxBytes int

	mode      Wrapping
	undecided int
	part      [2]partial // by stream - 1
	buf       []byte     // decoded json-file content
	ts        [40]byte   // runtime time of the last complete line
	tsLen     int
	st        UnwrapStats
}

type partial struct {
	b     []byte
	n     int // fragments held
	cut   bool
	ts    [40]byte // time of the first fragment
	tsLen int
}

// Wrapping is what the lines read so far were found to be.
func (u *Unwrapper) Wrapping() Wrapping { return u.mode }

// Stats returns the counts so far.
func (u *Unwrapper) Stats() UnwrapStats { return u.st }

// Time is the time the runtime stamped on the last complete line (on its
// first fragment when joined): when it received the line, not when the
// request was served. false for plain lines.
func (u *Unwrapper) Time() (time.Time, bool) {
	if u.tsLen == 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(u.ts[:u.tsLen]))
	return t, err == nil
}

// Unwrap reads one raw line (its newline removed) and returns its content,
// its stream and whether the content is a complete line. A partial returns
// complete false and no content: the line is held until the fragment that
// ends it. content points into raw or into the Unwrapper's buffers: valid
// until the next call. A plain line is returned as it is, with StreamNone. A
// line that is not in the file's wrapping returns an error wrapping
// ErrMalformed; the end of a joined line longer than MaxBytes, one wrapping
// ErrTooLong; both with complete true and no content.
func (u *Unwrapper) Unwrap(raw []byte) (content []byte, stream Stream, complete bool, err error) {
	if u.mode == WrapPlain || len(raw) == 0 {
		return raw, StreamNone, true, nil
	}
	var f frag
	var ok bool
	switch u.mode {
	case WrapCRI:
		if f, ok = parseCRI(raw); !ok {
			u.tsLen = 0
			u.st.Malformed++
			return nil, StreamNone, true, errCRILine
		}
	case WrapDocker:
		if f, ok = u.parseDocker(raw); !ok {
			u.tsLen = 0
			u.st.Malformed++
			return nil, StreamNone, true, errJSONLine
		}
	default:
		if f, ok = parseCRI(raw); ok {
			u.mode = WrapCRI
		} else if f, ok = u.parseDocker(raw); ok {
			u.mode = WrapDocker
		} else {
			if u.undecided++; u.undecided >= detectLines {
				u.mode = WrapPlain
			}
			return raw, StreamNone, true, nil
		}
	}
	return u.fragment(f)
}

// frag is one parsed wrapped line.
type frag struct {
	ts, content []byte
	stream      Stream
	last        bool // ends the line (F, or a json-file log ending in \n)
}

func (u *Unwrapper) fragment(f frag) ([]byte, Stream, bool, error) {
	u.st.Fragments++
	limit := u.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxLineBytes
	}
	p := &u.part[f.stream-1]
	if !f.last {
		if p.n == 0 {
			p.tsLen = copy(p.ts[:], f.ts)
		}
		p.n++
		if !p.cut && len(p.b)+len(f.content) <= limit {
			p.b = append(p.b, f.content...)
		} else {
			p.cut = true
			p.b = p.b[:0]
		}
		return nil, f.stream, false, nil
	}
	if f.stream == StreamStderr {
		u.st.Stderr++
	}
	if p.n == 0 {
		u.tsLen = copy(u.ts[:], f.ts)
		return f.content, f.stream, true, nil
	}
	u.tsLen = copy(u.ts[:], p.ts[:p.tsLen])
	cut := p.cut || len(p.b)+len(f.content) > limit
	p.n, p.cut = 0, false
	if cut {
		p.b = p.b[:0]
		u.st.TooLong++
		return nil, f.stream, true, errCutChain
	}
	p.b = append(p.b, f.content...)
	out := p.b
	p.b = p.b[:0] // out stays valid until this stream's next fragment
	u.st.Joined++
	return out, f.stream, true, nil
}

// parseCRI parses "<time> <stream> <tag>[:<tag>...] <content>". The content
// may be empty, its space too.
func parseCRI(b []byte) (f frag, ok bool) {
	i := bytes.IndexByte(b, ' ')
	if i < 0 || !isRFC3339(b[:i]) {
		return f, false
	}
	f.ts = b[:i]
	rest := b[i+1:]
	if len(rest) < 8 || rest[6] != ' ' {
		return f, false
	}
	switch string(rest[:6]) {
	case "stdout":
		f.stream = StreamStdout
	case "stderr":
		f.stream = StreamStderr
	default:
		return f, false
	}
	rest = rest[7:]
	tag := rest
	if j := bytes.IndexByte(rest, ' '); j >= 0 {
		tag, f.content = rest[:j], rest[j+1:]
	}
	if len(tag) == 0 || len(tag) > 1 && tag[1] != ':' {
		return f, false
	}
	switch tag[0] {
	case 'F':
		f.last = true
	case 'P':
	default:
		return f, false
	}
	return f, true
}

// isRFC3339 checks the layout of an RFC 3339 time as runtimes write it:
// 2006-01-02T15:04:05, optional fraction, then Z or ±07:00.
func isRFC3339(b []byte) bool {
	const layout = "dddd-dd-ddTdd:dd:dd"
	if len(b) < len(layout)+1 || len(b) > maxTimeBytes {
		return false
	}
	for i := 0; i < len(layout); i++ {
		c, l := b[i], layout[i]
		if l == 'd' {
			if c < '0' || c > '9' {
				return false
			}
		} else if c != l {
			return false
		}
	}
	b = b[len(layout):]
	if b[0] == '.' {
		n := 1
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		b = b[n:]
	}
	switch {
	case len(b) == 1 && b[0] == 'Z':
		return true
	case len(b) == 6 && (b[0] == '+' || b[0] == '-') && b[3] == ':':
		return isDigits(b[1:3]) && isDigits(b[4:6])
	}
	return false
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseDocker parses a json-file line: an object with the strings "log",
// "stream" (stdout or stderr) and "time" (other members, such as "attrs",
// are skipped). The log is decoded into u.buf; its final "\n" (with a "\r"
// before it) ends the line.
func (u *Unwrapper) parseDocker(b []byte) (f frag, ok bool) {
	if len(b) == 0 || b[0] != '{' {
		return f, false
	}
	s := jscan{b: b}
	s.objStart()
	var logv []byte
	var logPlain, haveLog bool
	first := true
	for {
		k, more := s.objKey(&first)
		if !more {
			break
		}
		switch string(k) {
		case "log":
			logv, logPlain = s.stringValue()
			haveLog = true
		case "stream":
			v, plain := s.stringValue()
			switch {
			case !plain:
				s.bad = true
			case string(v) == "stdout":
				f.stream = StreamStdout
			case string(v) == "stderr":
				f.stream = StreamStderr
			default:
				s.bad = true
			}
		case "time":
			v, plain := s.stringValue()
			if !plain || !isRFC3339(v) {
				s.bad = true
			}
			f.ts = v
		default:
			s.skip(0)
		}
		if s.bad {
			return f, false
		}
	}
	if s.bad || !haveLog || f.stream == StreamNone || f.ts == nil {
		return f, false
	}
	s.ws()
	if s.i != len(s.b) {
		return f, false
	}
	c := logv
	if !logPlain {
		u.buf, _ = appendJSONUnescaped(u.buf[:0], logv) // scanString checked it
		c = u.buf
	}
	if n := len(c); n > 0 && c[n-1] == '\n' {
		c, f.last = c[:n-1], true
		if n := len(c); n > 0 && c[n-1] == '\r' {
			c = c[:n-1]
		}
	}
	f.content = c
	return f, true
}

// stringValue reads a string value; anything else sets bad.
func (s *jscan) stringValue() (content []byte, plain bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.bad = true
		return nil, false
	}
	return s.scanString()
}

// UnwrapSample returns the complete stdout (or plain) lines of sample, a run
// of consecutive raw lines of one file, unwrapped (partials at its start,
// whose beginning is not in the sample, are lost). For sniffing a file's
// format from its lines.
func UnwrapSample(sample [][]byte) [][]byte {
	var u Unwrapper
	out := make([][]byte, 0, len(sample))
	for _, raw := range sample {
		c, s, complete, err := u.Unwrap(raw)
		if err != nil || !complete || s == StreamStderr {
			continue
		}
		out = append(out, bytes.Clone(c))
	}
	return out
}
