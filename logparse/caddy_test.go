package logparse

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const caddySample = `{"level":"info","ts":1764487815.1234567,"logger":"http.log.access.log0","msg":"handled request","request":{"remote_ip":"127.0.0.1","remote_port":"41234","client_ip":"127.0.0.1","proto":"HTTP/2.0","method":"GET","host":"localhost:8443","uri":"/checkout?x=1","headers":{"Accept-Encoding":["gzip"],"User-Agent":["Go-http-client/2.0"]},"tls":{"resumed":false,"version":772,"cipher_suite":4865,"proto":"h2","server_name":"localhost"}},"bytes_read":0,"user_id":"","duration":0.000123,"size":2,"status":200,"resp_headers":{"Server":["Caddy"],"Content-Type":["text/plain; charset=utf-8"]}}`

var caddyCases = []struct {
	name string
	line string
	want CaddyLine
	ua   string
	err  error
}{
	{
		name: "caddy 2.8 https",
		line: caddySample,
		want: CaddyLine{Time: time.Unix(1764487815, 123456700).UTC(), Status: 200, RemotePort: 41234, HasTLS: true,
			TLS: CaddyTLS{Version: 0x0304, CipherSuite: 0x1301}},
		ua: "Go-http-client/2.0",
	},
	{
		name: "plain http, escapes, numeric port, string ts",
		line: `{"ts":"2026-11-30T07:30:15.5Z","request":{"remote_ip":"::1","remote_port":5555,"method":"POST","host":"a\u00e9","uri":"/\"q\"","headers":{"user-agent":["curl/8.5.0","x"]}},"status":404}`,
		want: CaddyLine{Time: time.Date(2026, 11, 30, 7, 30, 15, 5e8, time.UTC), Status: 404, RemotePort: 5555},
		ua:   "curl/8.5.0",
	},
	{
		name: "tls null exponent ts",
		line: `{"ts":1.7644878155e9,"request":{"remote_ip":"10.1.1.1","remote_port":"","tls":null},"status":0}`,
		want: CaddyLine{Time: time.Unix(1764487815, 5e8).UTC()},
	},
	{name: "not json", line: `hello`, err: ErrMalformed},
	{name: "truncated", line: caddySample[:200], err: ErrMalformed},
	{name: "no request", line: `{"ts":1,"status":200}`, err: ErrMalformed},
	{name: "trailing comma", line: `{"request":{},}`, err: ErrMalformed},
	{name: "trailing data", line: `{"request":{}} x`, err: ErrMalformed},
	{name: "bad status", line: `{"request":{},"status":"200"}`, err: ErrBadField},
	{name: "bad port", line: `{"request":{"remote_port":"70000"}}`, err: ErrBadField},
	{name: "deep nesting", line: `{"request":{},"x":` + nest(200) + `}`, err: ErrMalformed},
}

func nest(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

func TestParseCaddyLine(t *testing.T) {
	var c CaddyLine
	for _, tc := range caddyCases {
		t.Run(tc.name, func(t *testing.T) {
			if !checkErr(t, ParseCaddyLine([]byte(tc.line), &c), tc.err) {
				return
			}
			if !c.Time.Equal(tc.want.Time) || c.Status != tc.want.Status || c.RemotePort != tc.want.RemotePort ||
				c.HasTLS != tc.want.HasTLS || c.TLS.Version != tc.want.TLS.Version || c.TLS.CipherSuite != tc.want.TLS.CipherSuite {
				t.Errorf("got %+v", c)
			}
			if string(c.UserAgent) != tc.ua {
				t.Errorf("UserAgent = %q, want %q", c.UserAgent, tc.ua)
			}
			// Differential check against encoding/json for the string fields.
			var ref struct {
				Request struct {
					RemoteIP string `json:"remote_ip"`
					Host     string `json:"host"`
					Method   string `json:"method"`
					URI      string `json:"uri"`
				} `json:"request"`
			}
			if err := json.Unmarshal([]byte(tc.line), &ref); err != nil {
				t.Fatalf("reference: %v", err)
			}
			if string(c.RemoteIP) != ref.Request.RemoteIP || string(c.Host) != ref.Request.Host ||
				string(c.Method) != ref.Request.Method || string(c.URI) != ref.Request.URI {
				t.Errorf("strings differ from encoding/json: %q %q %q %q vs %+v", c.RemoteIP, c.Host, c.Method, c.URI, ref.Request)
			}
		})
	}
}

func TestCaddyZeroAlloc(t *testing.T) {
	var c CaddyLine
	line := []byte(caddySample)
	if n := testing.AllocsPerRun(200, func() { _ = ParseCaddyLine(line, &c) }); n != 0 {
		t.Errorf("%v allocs per parse", n)
	}
}

func FuzzParseCaddyLine(f *testing.F) {
	for _, tc := range caddyCases {
		f.Add(tc.line)
	}
	f.Fuzz(checkCaddyLikeJSON)
}

// checkCaddyLikeJSON parses line and checks the result against encoding/json.
func checkCaddyLikeJSON(t *testing.T, line string) {
	var c CaddyLine
	err := ParseCaddyLine([]byte(line), &c)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadField) {
			t.Fatalf("unexpected error class: %v", err)
		}
		return
	}
	// Whatever we accept, encoding/json accepts too, with the same strings.
	var ref struct {
		Request *struct {
			RemoteIP *string `json:"remote_ip"`
			Method   *string `json:"method"`
			URI      *string `json:"uri"`
		} `json:"request"`
	}
	if err := json.Unmarshal([]byte(line), &ref); err != nil {
		if errors.As(err, new(*json.UnmarshalTypeError)) {
			return // a field of another type than Caddy writes
		}
		t.Fatalf("accepted what encoding/json rejects: %v", err)
	}
	if ref.Request == nil {
		t.Fatal("accepted without request")
	}
	for _, p := range []struct {
		got []byte
		ref *string
	}{{c.RemoteIP, ref.Request.RemoteIP}, {c.Method, ref.Request.Method}, {c.URI, ref.Request.URI}} {
		if p.ref != nil && string(p.got) != *p.ref && !(p.got == nil && *p.ref == "") {
			t.Fatalf("got %q, encoding/json %q", p.got, *p.ref)
		}
	}
}

// TestCaddyLikeEncodingJSON: strings in skipped values are validated as
// encoding/json validates them, keys match fields as encoding/json matches
// them, and decoded strings are encoding/json's.
func TestCaddyLikeEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		line string
		uri  string // "": rejected
	}{
		{"{\"request\":{\"\":\"0\\0\"}}", ""},                // the fuzzer's first find
		{"{\"request\":{\"\":\"\\\x00\"}}", ""},              // a control character after a backslash
		{"{\"request\":{\"\":\"\x1f\"}}", ""},                // a control character
		{`{"request":{"x":["\q"]}}`, ""},                     // an invalid escape, in an array
		{`{"request":{"x":{"\u12":1}}}`, ""},                 // a short \u, in a key
		{`{"request":{"x":"\`, ""},                           // a backslash at the end of the line
		{"{\"request\":{\"uri\":\"/a\xffb\"}}", "/a\ufffdb"}, // invalid UTF-8: U+FFFD
		{"{\"request\":{\"uri\":\"\\u00e9\xff\"}}", "\u00e9\ufffd"},
		{`{"request":{"uri":"\ud83d\ude00 \ud800\u0041 \udc00"}}`, "\U0001F600 \ufffdA \ufffd"},
		{`{"request":{"URI":"/up"}}`, "/up"},
		{`{"request":{"ur\u0069":"/esc"}}`, "/esc"},
		{`{"request":{"uri":"/a","Uri":"/b"}}`, "/b"},
		{`{"request":{},"Request":{"uri":"/later"}}`, "/later"},
		{`{"re\u0071uest":{"uri":"/k"}}`, "/k"},
		{`{"reque\u017ft":{"uri":"/long-s"}}`, "/long-s"}, // U+017F folds to 's'
		{"{\"reque\u017ft\":{\"uri\":\"/long-s\"}}", "/long-s"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			checkCaddyLikeJSON(t, tc.line)
			var c CaddyLine
			err := ParseCaddyLine([]byte(tc.line), &c)
			if tc.uri == "" {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || string(c.URI) != tc.uri {
				t.Fatalf("URI = %q, %v; want %q", c.URI, err, tc.uri)
			}
		})
	}
}

// TestCaddyKeysFold: every field the parser reads is found under the
// spellings encoding/json accepts for it.
func TestCaddyKeysFold(t *testing.T) {
	var want, got CaddyLine
	if err := ParseCaddyLine([]byte(caddySample), &want); err != nil {
		t.Fatal(err)
	}
	for _, spell := range []func(string) string{
		strings.ToUpper,
		func(k string) string { return fmt.Sprintf(`\u%04x%s`, k[0], k[1:]) },
	} {
		line := caddySample
		for _, names := range [][][]byte{topFields, requestFields, tlsFields} {
			for _, n := range names {
				line = strings.ReplaceAll(line, `"`+string(n)+`":`, `"`+spell(string(n))+`":`)
			}
		}
		if err := ParseCaddyLine([]byte(line), &got); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		got.buf, want.buf = nil, nil
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %+v\nwant %+v", line, got, want)
		}
	}
}

func BenchmarkParseCaddyLine(b *testing.B) {
	line := []byte(caddySample)
	b.Run("jscan", func(b *testing.B) {
		var c CaddyLine
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		for b.Loop() {
			if err := ParseCaddyLine(line, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		// The alternative that was measured: decoding the same fields with
		// encoding/json into a reused struct.
		var v struct {
			TS      float64 `json:"ts"`
			Status  int     `json:"status"`
			Request struct {
				RemoteIP   string `json:"remote_ip"`
				RemotePort string `json:"remote_port"`
				Host       string `json:"host"`
				Method     string `json:"method"`
				URI        string `json:"uri"`
				Headers    struct {
					UserAgent []string `json:"User-Agent"`
				} `json:"headers"`
				TLS *struct {
					Resumed     bool   `json:"resumed"`
					Version     uint16 `json:"version"`
					CipherSuite uint16 `json:"cipher_suite"`
					Proto       string `json:"proto"`
					ServerName  string `json:"server_name"`
				} `json:"tls"`
			} `json:"request"`
		}
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		for b.Loop() {
			if err := json.Unmarshal(line, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
