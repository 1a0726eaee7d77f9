package logparse

import (
	"bytes"
	"fmt"
	"time"
)

// Level is an nginx error-log severity.
type Level uint8

// Levels in nginx's order, most severe first.
const (
	LevelUnknown Level = iota
	LevelEmerg
	LevelAlert
	LevelCrit
	LevelError
	LevelWarn
	LevelNotice
	LevelInfo
	LevelDebug
)

var levelNames = [...]string{"unknown", "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"}

// String returns nginx's spelling of the level.
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "unknown"
}

// Severe reports whether the level is emerg, alert or crit: the levels at
// which a configuration change (such as a PQ group OpenSSL does not know) has
// failed.
func (l Level) Severe() bool { return l >= LevelEmerg && l <= LevelCrit }

// ErrorLine is one parsed nginx error-log line:
//
//	2026/11/30 07:30:15 [emerg] 1234#1234: *5 SSL_CTX_set1_curves_list("X25519MLKEM768:x25519") failed (SSL: ...)
type ErrorLine struct {
	Time       time.Time // nginx writes local wall-clock time; see ParseErrorLine
	Level      Level
	PID        int
	TID        int
	Connection uint64 // the "*N" connection number when present; 0 otherwise
	Message    []byte // points into the line
}

// ParseErrorLine parses one nginx error-log line into e. The timestamp has no
// zone in the log; it is interpreted in loc (UTC when nil). Errors wrap
// ErrMalformed or ErrBadField.
func ParseErrorLine(line []byte, loc *time.Location, e *ErrorLine) error {
	*e = ErrorLine{}
	line = trimEOL(line)
	// "2026/11/30 07:30:15 " = 20 bytes
	if len(line) < 20 || line[4] != '/' || line[7] != '/' || line[10] != ' ' ||
		line[13] != ':' || line[16] != ':' || line[19] != ' ' {
		return fmt.Errorf("%w: no error-log timestamp", ErrMalformed)
	}
	if loc == nil {
		loc = time.UTC
	}
	t, ok := parseDateTime(line, '/', ' ', loc)
	if !ok {
		return fmt.Errorf("%w: error-log timestamp %s", ErrBadField, shape(line[:19]))
	}
	e.Time = t
	rest := line[20:]
	if len(rest) < 3 || rest[0] != '[' {
		return fmt.Errorf("%w: no [level]", ErrMalformed)
	}
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return fmt.Errorf("%w: no [level]", ErrMalformed)
	}
	lv := rest[1:end]
	for i, n := range levelNames {
		if i > 0 && string(lv) == n {
			e.Level = Level(i)
		}
	}
	if e.Level == LevelUnknown {
		return fmt.Errorf("%w: level %s", ErrBadField, shape(lv))
	}
	rest = rest[end+1:]
	if len(rest) == 0 || rest[0] != ' ' {
		return fmt.Errorf("%w: no pid after level", ErrMalformed)
	}
	rest = rest[1:]
	hash := bytes.IndexByte(rest, '#')
	colon := bytes.IndexByte(rest, ':')
	if hash <= 0 || colon <= hash {
		return fmt.Errorf("%w: no pid#tid: field", ErrMalformed)
	}
	if e.PID, ok = atoi(rest[:hash]); !ok {
		return fmt.Errorf("%w: pid %s", ErrBadField, shape(rest[:hash]))
	}
	if e.TID, ok = atoi(rest[hash+1 : colon]); !ok {
		return fmt.Errorf("%w: tid %s", ErrBadField, shape(rest[hash+1:colon]))
	}
	msg := rest[colon+1:]
	if len(msg) > 0 && msg[0] == ' ' {
		msg = msg[1:]
	}
	if len(msg) > 1 && msg[0] == '*' {
		sp := bytes.IndexByte(msg, ' ')
		num := msg[1:]
		if sp > 0 {
			num = msg[1:sp]
		}
		if n, ok := atou64(num); ok {
			e.Connection = n
			if sp > 0 {
				msg = msg[sp+1:]
			} else {
				msg = msg[len(msg):]
			}
		}
	}
	e.Message = msg
	return nil
}
