package logparse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var jsonStringCases = []string{
	``, `plain`, `caf` + "\u00e9", `\"\\\/\b\f\n\r\t`, `\u0041\u00e9\u20ac`, `\u0000\u001f`,
	`\ud83d\ude00`, `\ud800`, `\ud800x`, `\ud800\u0041`, `\udc00\ud800`, `\ud800\ud800\udc00`, `\ud800\uzzzz`,
	"\xff", "a\xc3", "\xed\xa0\x80", "\xef\xbf\xbd", "\u2028",
	`\`, `\x41`, `\'`, `\0`, `\u12`, `\u12g4`, `\U0041`, "\\\x00", "\x00", "\x1f", "\t", "\x7f", `a"b`,
}

// checkJSONString checks scanJSONString and appendJSONUnescaped on the
// content v against encoding/json decoding "v".
func checkJSONString(t *testing.T, v string) {
	var ref string
	refErr := json.Unmarshal([]byte(`"`+v+`"`), &ref)
	n, plain, ok := scanJSONString([]byte(v))
	scanned := ok && n == len(v)
	got, ok := appendJSONUnescaped([]byte("pre"), []byte(v))
	switch {
	case (refErr == nil) != scanned || (refErr == nil) != ok:
		t.Fatalf("%q: scan %v (n %d of %d), unescape %v; encoding/json: %v", v, scanned, n, len(v), ok, refErr)
	case refErr != nil:
	case string(got) != "pre"+ref:
		t.Fatalf("%q: unescaped %q, encoding/json %q", v, got[3:], ref)
	case plain && ref != v:
		t.Fatalf("%q: plain, but encoding/json decodes it to %q", v, ref)
	}
}

func TestJSONString(t *testing.T) {
	for _, v := range jsonStringCases {
		checkJSONString(t, v)
	}
	// The quote ends the content in b; the rest is not looked at.
	if n, plain, ok := scanJSONString([]byte(`a\"b"\q`)); n != 4 || !ok || plain {
		t.Errorf("scan to the quote: %d %v %v", n, plain, ok)
	}
}

func FuzzJSONString(f *testing.F) {
	for _, v := range jsonStringCases {
		f.Add(v)
	}
	f.Fuzz(checkJSONString)
}

func TestJSONUnescapeZeroAlloc(t *testing.T) {
	v := []byte(`GET /\u00e9 \"x\" \ud83d\ude00` + "\xff")
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(200, func() { dst, _ = appendJSONUnescaped(dst[:0], v) }); n != 0 {
		t.Errorf("%v allocs per unescape", n)
	}
}

func TestParseISO8601(t *testing.T) {
	utc := func(ns int) time.Time { return time.Date(2026, 11, 30, 7, 30, 15, ns, time.UTC) }
	for _, tc := range []struct {
		in      string
		maxFrac int
		want    time.Time // zero: rejected
	}{
		{"2026-11-30T07:30:15Z", 0, utc(0)},
		{"2026-11-30T07:30:15Z", 9, utc(0)},
		{"2026-11-30T08:30:15+01:00", 0, utc(0)},
		{"2026-11-30T05:00:15-02:30", 9, utc(0)},
		{"2026-11-30T07:30:15.5Z", 9, utc(5e8)},
		{"2026-11-30T07:30:15.123456789Z", 9, utc(123456789)},
		{"2026-11-30T08:30:15.000001+01:00", 9, utc(1000)},
		{"2026-11-30T07:30:15.5Z", 0, time.Time{}}, // nginx writes no fraction
		{"2026-11-30T07:30:15.123Z", 2, time.Time{}},
		{"2026-11-30T07:30:15.1234567890Z", 9, time.Time{}},
		{"2026-11-30T07:30:15.Z", 9, time.Time{}},
		{"2026-11-30T07:30:15.5", 9, time.Time{}},
		{"2026-11-30T07:30:15", 9, time.Time{}},
		{"2026-11-30T08:30:15+0100", 9, utc(0)},     // Caddy's iso8601 outside UTC
		{"2026-11-30T08:30:15.000+0100", 9, utc(0)}, // its exact layout, Z0700
		{"2026-11-30T07:30:15+01", 9, time.Time{}},
		{"2026-11-30T07:30:15+01:00x", 9, time.Time{}},
		{"2026-11-30T07:30:15z", 9, time.Time{}},
		{"2026-11-30 07:30:15Z", 9, time.Time{}},
		{"2026-13-30T07:30:15Z", 9, time.Time{}},
		{"2026-11-30T24:30:15Z", 9, time.Time{}},
		{"2026-11-30T07:30:15+24:00", 9, time.Time{}},
		{"+026-11-30T07:30:15Z", 9, time.Time{}},
	} {
		got, ok := parseISO8601([]byte(tc.in), tc.maxFrac)
		if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
			t.Errorf("parseISO8601(%q, %d) = %v, %v; want %v", tc.in, tc.maxFrac, got, ok, tc.want)
		}
	}
}

// TestNginxJSONEscape: escape=json values decode as encoding/json decodes
// them, and what it rejects is malformed.
func TestNginxJSONEscape(t *testing.T) {
	f := nginxCases[5].format
	line := func(ua string) string {
		return strings.Replace(nginxCases[5].line, `"ua":"a\\b\u0001"`, `"ua":"`+ua+`"`, 1)
	}
	var l NginxLine
	for _, tc := range []struct{ ua, want string }{
		{`\u00e9\/`, "\u00e9/"},
		{`\ud83d\ude00`, "\U0001F600"},
		{"a\xffb", "a\ufffdb"},
		{"\u00e9", "\u00e9"},
	} {
		if err := f.Parse([]byte(line(tc.ua)), &l); err != nil || string(l.UserAgent) != tc.want {
			t.Errorf("ua %q: %q, %v; want %q", tc.ua, l.UserAgent, err, tc.want)
		}
	}
	for _, ua := range []string{`\q`, `\u00`, `\x41`, "a\x01", `a\`} {
		if err := f.Parse([]byte(line(ua)), &l); !errors.Is(err, ErrMalformed) {
			t.Errorf("ua %q: err = %v, want ErrMalformed", ua, err)
		}
	}
}
