// Package logparse reads the logs of TLS terminators: nginx access logs in any
// log_format (the format definition itself is compiled into a matcher, with
// the built-in "combined" format and nginx's default, json and none escaping),
// nginx.conf log_format/access_log directives, Caddy's JSON access log and
// nginx's error log. It also follows log files across rotation (tail.go)
// and unwraps the lines of container logs, CRI and Docker json-file
// (container.go).
//
// The parsers do no I/O and keep no state: each takes one line and fills a
// caller-owned struct (reset, then fill). Byte-slice fields of the filled
// structs point into the line or into a scratch buffer owned by the struct, so
// they are valid only until the next parse or until the line buffer is
// reused; copy what must outlive it. The nginx hot path allocates nothing.
//
// logparse imports nothing else of pqwatch.
package logparse

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
)

// Sentinel errors. Parse functions wrap them with %w and the context.
var (
	// ErrMalformed: the line does not match the expected layout.
	ErrMalformed = errors.New("logparse: malformed line")
	// ErrBadField: a field that must be numeric or a time is not.
	ErrBadField = errors.New("logparse: bad field value")
	// ErrFormat: a log_format definition cannot be compiled.
	ErrFormat = errors.New("logparse: bad log_format")
	// ErrConf: an nginx.conf text cannot be tokenized.
	ErrConf = errors.New("logparse: bad nginx config")
)

// shape describes a field that failed to parse without repeating it: a log
// path may lead to a file that is not a log (pqwatch's own log is read by
// whoever may read the pod's logs), so no byte of it goes into an error.
func shape(b []byte) string {
	return "(" + strconv.Itoa(len(b)) + " bytes)"
}

// DescribeLine names a line without its content: its length and the first
// 12 hex digits of its SHA-256, so that an operator can find it
// (sha256sum over the file's lines) while pqwatch's log shows none of it.
func DescribeLine(line []byte) string {
	sum := sha256.Sum256(line)
	return strconv.Itoa(len(line)) + " bytes, sha256 " + hex.EncodeToString(sum[:6])
}
