package logparse

import (
	"errors"
	"testing"
	"time"
)

var errorCases = []struct {
	name  string
	line  string
	level Level
	pid   int
	tid   int
	conn  uint64
	msg   string
	err   error
}{
	{
		name:  "curves list on OpenSSL 3.0",
		line:  `2026/11/30 07:30:15 [emerg] 1234#1234: SSL_CTX_set1_curves_list("X25519MLKEM768:x25519") failed (SSL: error:0A080106:SSL routines:gid_cb:passed invalid argument)`,
		level: LevelEmerg, pid: 1234, tid: 1234,
		msg: `SSL_CTX_set1_curves_list("X25519MLKEM768:x25519") failed (SSL: error:0A080106:SSL routines:gid_cb:passed invalid argument)`,
	},
	{
		name:  "connection error",
		line:  `2026/11/30 07:30:16 [crit] 77#0: *5 SSL_do_handshake() failed (SSL: error:0A000102) while SSL handshaking, client: 127.0.0.1, server: 0.0.0.0:443`,
		level: LevelCrit, pid: 77, conn: 5,
		msg: `SSL_do_handshake() failed (SSL: error:0A000102) while SSL handshaking, client: 127.0.0.1, server: 0.0.0.0:443`,
	},
	{
		name:  "notice",
		line:  `2026/11/30 07:30:17 [notice] 1#1: signal process started`,
		level: LevelNotice, pid: 1, tid: 1, msg: "signal process started",
	},
	{name: "empty", line: ``, err: ErrMalformed},
	{name: "garbage", line: `not an error log line at all`, err: ErrMalformed},
	{name: "bad level", line: `2026/11/30 07:30:17 [loud] 1#1: x`, err: ErrBadField},
	{name: "bad date", line: `2026/13/30 07:30:17 [warn] 1#1: x`, err: ErrBadField},
	{name: "no pid", line: `2026/11/30 07:30:17 [warn] x`, err: ErrMalformed},
	{name: "truncated", line: `2026/11/30 07:30:17 [war`, err: ErrMalformed},
}

func TestParseErrorLine(t *testing.T) {
	var e ErrorLine
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			if !checkErr(t, ParseErrorLine([]byte(tc.line), nil, &e), tc.err) {
				return
			}
			if e.Level != tc.level || e.PID != tc.pid || e.TID != tc.tid || e.Connection != tc.conn || string(e.Message) != tc.msg {
				t.Errorf("got %+v (msg %q)", e, e.Message)
			}
			if e.Time.Year() != 2026 || e.Time.Location() != time.UTC {
				t.Errorf("time %v", e.Time)
			}
		})
	}
	if !LevelEmerg.Severe() || !LevelCrit.Severe() || LevelError.Severe() || LevelEmerg.String() != "emerg" {
		t.Error("Level helpers")
	}
}

func FuzzParseErrorLine(f *testing.F) {
	for _, tc := range errorCases {
		f.Add(tc.line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var e ErrorLine
		err := ParseErrorLine([]byte(line), time.Local, &e)
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadField) {
			t.Fatalf("unexpected error class: %v", err)
		}
		if err == nil && e.Level == LevelUnknown {
			t.Fatal("accepted without a level")
		}
	})
}

func BenchmarkParseErrorLine(b *testing.B) {
	line := []byte(errorCases[0].line)
	var e ErrorLine
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseErrorLine(line, nil, &e); err != nil {
			b.Fatal(err)
		}
	}
}
