package logparse

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var pqFormat = mustCompile("pq", EscapeDefault, RecommendedText)

// want is the expected view of a parsed line; empty strings mean absent.
type want struct {
	addr, method, uri, proto, host, ua, proto2, cipher, curve, curves string
	port                                                              uint16
	status, pid                                                       int
	conn                                                              uint64
	time                                                              time.Time
}

// checkErr fails t unless err wraps want, or is nil when want is. It
// reports whether a parse that succeeded as wanted is left to check.
func checkErr(t *testing.T, err, want error) bool {
	t.Helper()
	if want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("err = %v, want %v", err, want)
		}
		return false
	}
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return true
}

func checkLine(t *testing.T, l *NginxLine, w want) {
	t.Helper()
	eq := func(name string, got []byte, want string) {
		t.Helper()
		if string(got) != want || (want == "" && got != nil) {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	eq("RemoteAddr", l.RemoteAddr, w.addr)
	eq("Method", l.Method, w.method)
	eq("URI", l.URI, w.uri)
	eq("Protocol", l.Protocol, w.proto)
	eq("Host", l.Host, w.host)
	eq("UserAgent", l.UserAgent, w.ua)
	eq("SSLProtocol", l.SSLProtocol, w.proto2)
	eq("SSLCipher", l.SSLCipher, w.cipher)
	eq("SSLCurve", l.SSLCurve, w.curve)
	eq("SSLCurves", l.SSLCurves, w.curves)
	if l.RemotePort != w.port || l.Status != w.status || l.PID != w.pid || l.Connection != w.conn {
		t.Errorf("port/status/pid/conn = %d/%d/%d/%d, want %d/%d/%d/%d",
			l.RemotePort, l.Status, l.PID, l.Connection, w.port, w.status, w.pid, w.conn)
	}
	if !l.Time.Equal(w.time) {
		t.Errorf("Time = %v, want %v", l.Time, w.time)
	}
}

var nginxCases = []struct {
	name   string
	format *Format
	line   string
	want   want
	err    error
}{
	{
		name:   "combined",
		format: Combined,
		line:   `127.0.0.1 - - [30/Nov/2026:07:30:15 +0100] "GET /checkout?a=1 HTTP/1.1" 200 612 "-" "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0"`,
		want: want{addr: "127.0.0.1", method: "GET", uri: "/checkout?a=1", proto: "HTTP/1.1", status: 200,
			ua: "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0", time: time.Date(2026, 11, 30, 6, 30, 15, 0, time.UTC)},
	},
	{
		name:   "combined escaped quote in request and UA",
		format: Combined,
		line:   `::1 - bob [01/Jan/2026:00:00:00 -0230] "GET /a\x22b HTTP/1.0" 404 0 "http://x/" "curl/8.5 \x22q\x22"`,
		want: want{addr: "::1", method: "GET", uri: `/a"b`, proto: "HTTP/1.0", status: 404, ua: `curl/8.5 "q"`,
			time: time.Date(2026, 1, 1, 2, 30, 0, 0, time.UTC)},
	},
	{
		name:   "combined TLS garbage request 400",
		format: Combined,
		line:   `10.0.0.1 - - [30/Nov/2026:07:30:15 +0000] "\x16\x03\x01\x00\xF4\x01" 400 157 "-" "-"`,
		want:   want{addr: "10.0.0.1", status: 400, time: time.Date(2026, 11, 30, 7, 30, 15, 0, time.UTC)},
	},
	{
		name:   "recommended",
		format: pqFormat,
		line:   `127.0.0.1 41234 1764487815.123 TLSv1.3 TLS_AES_128_GCM_SHA256 X25519MLKEM768 X25519MLKEM768:X25519:prime256v1 4711 17 "GET / HTTP/1.1" 200 "Go-http-client/1.1" "localhost"`,
		want: want{addr: "127.0.0.1", port: 41234, proto2: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256",
			curve: "X25519MLKEM768", curves: "X25519MLKEM768:X25519:prime256v1", pid: 4711, conn: 17,
			method: "GET", uri: "/", proto: "HTTP/1.1", status: 200, ua: "Go-http-client/1.1", host: "localhost",
			time: time.Unix(1764487815, 123e6).UTC()},
	},
	{
		name:   "recommended plain http absent ssl",
		format: pqFormat,
		line:   `192.168.1.9 50000 1764487815.000 - - - - 4711 18 "GET /x HTTP/1.1" 301 "-" "example.org"`,
		want: want{addr: "192.168.1.9", port: 50000, pid: 4711, conn: 18, method: "GET", uri: "/x", proto: "HTTP/1.1",
			status: 301, host: "example.org", time: time.Unix(1764487815, 0).UTC()},
	},
	{
		name:   "json escape",
		format: mustCompile("j", EscapeJSON, `{"addr":"$remote_addr","port":"$remote_port","t":"$time_iso8601","r":"$request","s":$status,"ua":"$http_user_agent","curve":"$ssl_curve"}`),
		line:   `{"addr":"[::1]","port":"443","t":"2026-11-30T07:30:15+00:00","r":"GET /q\"\",x HTTP/2.0","s":200,"ua":"a\\b\u0001","curve":""}`,
		want: want{addr: "[::1]", port: 443, method: "GET", uri: `/q"",x`, proto: "HTTP/2.0", status: 200, ua: "a\\b\x01",
			time: time.Date(2026, 11, 30, 7, 30, 15, 0, time.UTC)},
	},
	{
		name:   "escape none and ${var} and request_method/uri",
		format: mustCompile("n", EscapeNone, `${remote_addr}|$request_method|$request_uri|$status|$pid|$connection_requests|$request_time|$server_name`),
		line:   `1.2.3.4|POST|/p?"x"|201|99|3|0.005|srv`,
		want:   want{addr: "1.2.3.4", method: "POST", uri: `/p?"x"`, status: 201, pid: 99, host: "srv"},
	},
	{name: "empty line", format: Combined, line: ``, err: ErrMalformed},
	{name: "garbage", format: Combined, line: `hello world`, err: ErrMalformed},
	{name: "truncated", format: Combined, line: `127.0.0.1 - - [30/Nov/2026:07:30:15 +0000] "GET / HTT`, err: ErrMalformed},
	{name: "bad status", format: Combined, line: `127.0.0.1 - - [30/Nov/2026:07:30:15 +0000] "GET / HTTP/1.1" 2x0 1 "-" "-"`, err: ErrBadField},
	{name: "bad time", format: Combined, line: `127.0.0.1 - - [30/Foo/2026:07:30:15 +0000] "GET / HTTP/1.1" 200 1 "-" "-"`, err: ErrBadField},
	{name: "bad port", format: pqFormat, line: `127.0.0.1 99999 1764487815.123 - - - - 1 1 "GET / HTTP/1.1" 200 "-" "h"`, err: ErrBadField},
	{name: "trailing junk", format: mustCompile("t", EscapeDefault, `$remote_addr [$status]`), line: `1.1.1.1 [200]x`, err: ErrMalformed},
}

func TestParseNginx(t *testing.T) {
	var l NginxLine
	for _, tc := range nginxCases {
		t.Run(tc.name, func(t *testing.T) {
			if !checkErr(t, tc.format.Parse([]byte(tc.line+"\n"), &l), tc.err) {
				return
			}
			checkLine(t, &l, tc.want)
		})
	}
}

func TestCompileFormat(t *testing.T) {
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{CombinedText, true},
		{RecommendedText, true},
		{`$a$b`, false},
		{`${a}${b}`, false},
		{`$`, false},
		{`${abc`, false},
		{`${a-b}`, false},
		{`plain text`, true},
		{``, true},
		{`[$time_local] $remote_addr`, true},
	} {
		_, err := CompileFormat("x", EscapeDefault, tc.text)
		if (err == nil) != tc.ok {
			t.Errorf("CompileFormat(%q) err = %v, want ok=%v", tc.text, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Errorf("CompileFormat(%q) err = %v, not ErrFormat", tc.text, err)
		}
	}
	if !pqFormat.HasPort() || Combined.HasPort() {
		t.Error("HasPort wrong")
	}
}

const testConf = `
# comment with log_format inside: log_format nope '$x';
user www-data;
http {
    log_format pq '$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher '
                  '$ssl_curve $ssl_curves $pid $connection "$request" $status '
                  '"$http_user_agent" "$host"';
    log_format  js  escape=json '{"a":"$remote_addr",'
        '"p":"$remote_port", "r":"$request", "s":$status}';
    log_format quoted "$remote_addr \"$request\" it\'s";
    log_format bad '$a$b';
    server {
        listen 443 ssl;
        access_log /var/log/nginx/pq.log pq buffer=32k flush=1s;
        access_log /var/log/nginx/json.log js;
        access_log logs/access.log;
        access_log syslog:server=unix:/dev/log;
        access_log off;
        location ~ "^/a{2}$" { return 200; }
    }
}
`

func TestParseNginxConf(t *testing.T) {
	c, err := ParseNginxConfig([]byte(testConf))
	if c == nil {
		t.Fatalf("ParseNginxConfig: %v", err)
	}
	if !errors.Is(err, ErrFormat) {
		t.Errorf("want the bad format reported, got %v", err)
	}
	if got := c.Formats["pq"]; got == nil || got.Text != RecommendedText {
		t.Fatalf("pq = %+v", got)
	}
	if js := c.Formats["js"]; js == nil || js.Escape != EscapeJSON || !js.HasPort() {
		t.Fatalf("js = %+v", js)
	}
	if q := c.Formats["quoted"]; q == nil || q.Text != `$remote_addr "$request" it's` {
		t.Fatalf("quoted = %+v", q)
	}
	if c.Formats["nope"] != nil || c.Formats["bad"] != nil {
		t.Error("comment or bad format compiled")
	}
	wantLogs := map[string]string{"/var/log/nginx/pq.log": "pq", "/var/log/nginx/json.log": "js", "logs/access.log": "combined", "syslog:server=unix:/dev/log": "combined"}
	if len(c.AccessLogs) != len(wantLogs) {
		t.Fatalf("AccessLogs = %+v", c.AccessLogs)
	}
	for _, a := range c.AccessLogs {
		if a.Format == nil || a.Format.Name != wantLogs[a.Path] {
			t.Errorf("access_log %s uses %+v, want %s", a.Path, a.Format, wantLogs[a.Path])
		}
	}
	m, _ := ParseNginxConf([]byte(testConf))
	if m["/var/log/nginx/pq.log"] != c.Formats["pq"] && m["/var/log/nginx/pq.log"].Text != RecommendedText {
		t.Error("ParseNginxConf path lookup")
	}
	if m["combined"] != Combined {
		t.Error("combined missing")
	}
	for _, bad := range []string{`log_format x '$a`, `http {`, `}`, `log_format x '$a'`} {
		if _, err := ParseNginxConfig([]byte(bad)); !errors.Is(err, ErrConf) {
			t.Errorf("ParseNginxConfig(%q) err = %v, want ErrConf", bad, err)
		}
	}
}

func TestParseLogFormat(t *testing.T) {
	f, err := ParseLogFormat(`log_format main escape=json '{"ip":"$remote_addr"}' ;`)
	if err != nil || f.Name != "main" || f.Escape != EscapeJSON || f.Text != `{"ip":"$remote_addr"}` {
		t.Fatalf("directive: %+v %v", f, err)
	}
	f, err = ParseLogFormat(RecommendedText)
	if err != nil || !f.HasPort() {
		t.Fatalf("bare: %+v %v", f, err)
	}
	// String round-trips.
	g, err := ParseLogFormat(f.String())
	if err != nil || g.Text != f.Text {
		t.Fatalf("round trip %q: %+v %v", f.String(), g, err)
	}
}

func TestNginxZeroAlloc(t *testing.T) {
	var l NginxLine
	for _, tc := range nginxCases {
		if tc.err != nil {
			continue
		}
		line := []byte(tc.line)
		n := testing.AllocsPerRun(200, func() {
			if err := tc.format.Parse(line, &l); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocs per parse", tc.name, n)
		}
	}
}

func FuzzParseNginxLine(f *testing.F) {
	for _, tc := range nginxCases {
		f.Add(tc.line)
	}
	formats := []*Format{Combined, pqFormat, nginxCases[5].format, nginxCases[6].format}
	f.Fuzz(func(t *testing.T, line string) {
		var l NginxLine
		for _, fm := range formats {
			err := fm.Parse([]byte(line), &l)
			if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadField) {
				t.Fatalf("unexpected error class: %v", err)
			}
		}
	})
}

func FuzzParseLogFormat(f *testing.F) {
	f.Add(CombinedText)
	f.Add(RecommendedText)
	f.Add(testConf)
	f.Add(`log_format main escape=json '{"ip":"$remote_addr"}';`)
	f.Add(`${a}x${b}`)
	f.Fuzz(func(t *testing.T, def string) {
		fm, err := ParseLogFormat(def)
		if err == nil {
			var l NginxLine
			_ = fm.Parse([]byte(def), &l)
			// The canonical form compiles to the same text.
			g, err := ParseLogFormat(fm.String())
			if err != nil || g.Text != fm.Text || g.Escape != fm.Escape {
				if !strings.ContainsAny(fm.Name, " \t\n;{}'\"#\\$") && fm.Name != "" {
					t.Fatalf("round trip of %q: %v", fm.String(), err)
				}
			}
		}
		_, _ = ParseNginxConf([]byte(def))
	})
}

func BenchmarkParseNginxLine(b *testing.B) {
	for _, bc := range []struct {
		name string
		f    *Format
		line string
	}{
		{"recommended", pqFormat, nginxCases[3].line},
		{"combined", Combined, nginxCases[0].line},
	} {
		b.Run(bc.name, func(b *testing.B) {
			line := []byte(bc.line)
			var l NginxLine
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f.Parse(line, &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFormatStringQuotesName: a name that is not a plain word is quoted, so
// that String reads back as the same format (the fuzzer's "0\r0").
func TestFormatStringQuotesName(t *testing.T) {
	for _, name := range []string{"main", "0\r0", "a b", "x;y", `it's\`, "${v}", "#c", ""} {
		f := mustCompile(name, EscapeJSON, `{"a":"$remote_addr"}`)
		g, err := ParseLogFormat(f.String())
		if err != nil || g.Name != name || g.Text != f.Text || g.Escape != f.Escape {
			t.Errorf("%q: %s read back as %+v, %v", name, f.String(), g, err)
		}
	}
}
