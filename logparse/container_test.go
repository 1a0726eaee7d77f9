package logparse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	accessLine = `127.0.0.1 - - [05/Dec/2026:08:58:45 +0000] "GET / HTTP/1.1" 200 615 "-" "curl/8.5.0"`
	criTime    = "2026-12-05T08:58:45.419141256Z"
)

// unwrapped is what one Unwrap call returned.
type unwrapped struct {
	content  string
	stream   Stream
	complete bool
	err      error
}

func unwrapAll(u *Unwrapper, lines ...string) []unwrapped {
	var out []unwrapped
	for _, l := range lines {
		c, s, complete, err := u.Unwrap([]byte(l))
		out = append(out, unwrapped{string(c), s, complete, err})
	}
	return out
}

func TestUnwrapCRI(t *testing.T) {
	var u Unwrapper
	got := unwrapAll(&u,
		criTime+" stdout F "+accessLine,
		"2026-12-05T08:58:46.1Z stdout P "+accessLine[:20],
		"2026-12-05T08:58:46.2Z stderr F 2026/12/05 08:58:46 [notice] 1#1: signal 1 (SIGHUP) received",
		"2026-12-05T08:58:46.3Z stdout P "+accessLine[20:50],
		"2026-12-05T08:58:46.4+01:00 stdout F:x "+accessLine[50:],
		"2026-12-05T08:58:47Z stdout F ",
		"2026-12-05T08:58:47Z stdout F",
	)
	if u.Wrapping() != WrapCRI {
		t.Fatalf("wrapping %v, want cri", u.Wrapping())
	}
	want := []unwrapped{
		{accessLine, StreamStdout, true, nil},
		{"", StreamStdout, false, nil},
		{"2026/12/05 08:58:46 [notice] 1#1: signal 1 (SIGHUP) received", StreamStderr, true, nil},
		{"", StreamStdout, false, nil},
		{accessLine, StreamStdout, true, nil},
		{"", StreamStdout, true, nil},
		{"", StreamStdout, true, nil},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	st := u.Stats()
	if st.Joined != 1 || st.Stderr != 1 || st.Malformed != 0 || st.Fragments != 7 {
		t.Errorf("stats %+v", st)
	}
	// The joined line carries the time of its first fragment.
	ts, ok := u.Time()
	if !ok || !ts.Equal(time.Date(2026, 12, 5, 8, 58, 47, 0, time.UTC)) {
		t.Errorf("time %v %v", ts, ok)
	}
	u2 := Unwrapper{}
	unwrapAll(&u2, "2026-12-05T08:58:46.1Z stdout P ab", "2026-12-05T08:58:46.3Z stdout F cd")
	if ts, ok := u2.Time(); !ok || ts.Nanosecond() != 100_000_000 {
		t.Errorf("joined line's time %v %v, want its first fragment's", ts, ok)
	}
}

func TestUnwrapDocker(t *testing.T) {
	var u Unwrapper
	got := unwrapAll(&u,
		`{"log":"127.0.0.1 - - \"GET /\u003cx\u003e HTTP/1.1\" 200\n","stream":"stdout","time":"2026-12-05T08:58:45.419141256Z"}`,
		`{"log":"part one, ","stream":"stdout","time":"2026-12-05T08:58:46Z"}`,
		`{"log":"error: \u00e9\t!\r\n","stream":"stderr","attrs":{"tag":"x","n":[1,2]},"time":"2026-12-05T08:58:46.5Z"}`,
		`{"log":"part two\n","stream":"stdout","time":"2026-12-05T08:58:47Z"}`,
		`{"time":"2026-12-05T08:58:47Z", "stream":"stdout", "log":"\n"} `,
	)
	if u.Wrapping() != WrapDocker {
		t.Fatalf("wrapping %v, want docker-json", u.Wrapping())
	}
	want := []unwrapped{
		{`127.0.0.1 - - "GET /<x> HTTP/1.1" 200`, StreamStdout, true, nil},
		{"", StreamStdout, false, nil},
		{"error: é\t!", StreamStderr, true, nil},
		{"part one, part two", StreamStdout, true, nil},
		{"", StreamStdout, true, nil},
	}
	// The last line has its members in another order and spaces: not how
	// json-file writes it, but the same JSON.
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if st := u.Stats(); st.Joined != 1 || st.Stderr != 1 || st.Malformed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestUnwrapMalformed(t *testing.T) {
	var u Unwrapper
	got := unwrapAll(&u,
		criTime+" stdout F "+accessLine,
		accessLine, // a plain line in a CRI file
		criTime+" stdin F x",
		criTime+" stdout X x",
		criTime+" stdout FF x",
		"2026-12-05 08:58:45Z stdout F x",
		"2026-12-05T08:58:45.Z stdout F x",
		"2026-12-05T08:58:45+0100 stdout F x",
		criTime+" stdout F "+accessLine,
	)
	for i, g := range got[1 : len(got)-1] {
		if !errors.Is(g.err, ErrMalformed) || g.content != "" {
			t.Errorf("line %d: %+v, want malformed", i+1, g)
		}
	}
	if last := got[len(got)-1]; last.err != nil || last.content != accessLine {
		t.Errorf("after malformed lines: %+v", last)
	}
	if st := u.Stats(); st.Malformed != 7 {
		t.Errorf("malformed %d, want 7", st.Malformed)
	}

	var d Unwrapper
	got = unwrapAll(&d,
		`{"log":"a\n","stream":"stdout","time":"2026-12-05T08:58:45Z"}`,
		`{"log":"a\n","stream":"stdout"}`,
		`{"log":"a\n","stream":"stdin","time":"2026-12-05T08:58:45Z"}`,
		`{"log":"a\x\n","stream":"stdout","time":"2026-12-05T08:58:45Z"}`,
		`{"log":"a\n","stream":"stdout","time":"yesterday"}`,
		`{"log":1,"stream":"stdout","time":"2026-12-05T08:58:45Z"}`,
		`{"log":"a\n","stream":"stdout","time":"2026-12-05T08:58:45Z"} x`,
		`{"log":"a\n","stream":"stdout","time":"2026-12-05T08:58:45Z"`,
		`{"level":"info","ts":1767268800.1,"logger":"http.log.access","request":{}}`,
	)
	for i, g := range got[1:] {
		if !errors.Is(g.err, ErrMalformed) {
			t.Errorf("json line %d: %+v, want malformed", i+1, g)
		}
	}
}

func TestUnwrapDetect(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		var u Unwrapper
		caddy := `{"level":"info","ts":1767268800.1,"logger":"http.log.access","msg":"handled request","request":{"remote_ip":"10.0.0.3"},"status":200}`
		for i := range detectLines + 2 {
			line := accessLine
			if i%2 == 1 {
				line = caddy
			}
			c, s, complete, err := u.Unwrap([]byte(line))
			if string(c) != line || s != StreamNone || !complete || err != nil {
				t.Fatalf("plain line %d: %q %v %v %v", i, c, s, complete, err)
			}
		}
		if u.Wrapping() != WrapPlain {
			t.Errorf("wrapping %v, want plain", u.Wrapping())
		}
		// Once plain, a CRI line is a plain line (which the access log
		// parser will reject).
		line := criTime + " stdout F " + accessLine
		if c, _, _, _ := u.Unwrap([]byte(line)); string(c) != line {
			t.Errorf("CRI line in a plain file came back as %q", c)
		}
	})
	t.Run("damaged first line", func(t *testing.T) {
		var u Unwrapper
		got := unwrapAll(&u, "", `45.419141256Z stdout F `+accessLine, criTime+" stdout F "+accessLine)
		if u.Wrapping() != WrapCRI || got[2].content != accessLine {
			t.Errorf("wrapping %v, lines %+v", u.Wrapping(), got)
		}
		if got[1].content != `45.419141256Z stdout F `+accessLine || got[1].err != nil {
			t.Errorf("undecided line: %+v, want it as it is", got[1])
		}
	})
	t.Run("undecided", func(t *testing.T) {
		var u Unwrapper
		if u.Wrapping() != WrapUndecided || u.Wrapping().String() != "" {
			t.Errorf("zero value wrapping %v", u.Wrapping())
		}
		if _, ok := u.Time(); ok {
			t.Error("time before any wrapped line")
		}
	})
}

func TestUnwrapTooLong(t *testing.T) {
	u := Unwrapper{MaxBytes: 100}
	p := criTime + " stdout P " + strings.Repeat("x", 40)
	got := unwrapAll(&u, p, p, p, criTime+" stdout F tail", p, criTime+" stdout F "+strings.Repeat("y", 20))
	if !errors.Is(got[3].err, ErrTooLong) || !got[3].complete || got[3].content != "" {
		t.Errorf("cut chain: %+v", got[3])
	}
	if want := strings.Repeat("x", 40) + strings.Repeat("y", 20); got[5].content != want || got[5].err != nil {
		t.Errorf("chain after a cut one: %+v", got[5])
	}
	// A chain that fits up to its last fragment is cut too.
	got = unwrapAll(&u, p, p, criTime+" stdout F "+strings.Repeat("z", 21))
	if !errors.Is(got[2].err, ErrTooLong) {
		t.Errorf("chain over by its last fragment: %+v", got[2])
	}
	if st := u.Stats(); st.TooLong != 2 || st.Joined != 1 {
		t.Errorf("stats %+v", st)
	}
	if n := len(u.part[0].b); n != 0 || cap(u.part[0].b) > 100 {
		t.Errorf("partial buffer len %d cap %d: grew past the bound", n, cap(u.part[0].b))
	}
}

func TestUnwrapSample(t *testing.T) {
	got := UnwrapSample([][]byte{
		[]byte("2026-12-05T08:58:46.1Z stdout F tail of a partial chain"), // complete as far as we know
		[]byte(criTime + " stderr F an error"),
		[]byte(criTime + " stdout P " + accessLine[:10]),
		[]byte(criTime + " stdout F " + accessLine[10:]),
	})
	if len(got) != 2 || string(got[1]) != accessLine {
		t.Errorf("got %q", got)
	}
}

func TestUnwrapAllocs(t *testing.T) {
	for _, c := range unwrapBenchCases() {
		var u Unwrapper
		for _, l := range c.lines { // grow the buffers, decide the wrapping
			u.Unwrap(l)
		}
		if n := testing.AllocsPerRun(200, func() {
			for _, l := range c.lines {
				u.Unwrap(l)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocs", c.name, n)
		}
	}
}

type unwrapCase struct {
	name  string
	lines [][]byte
}

func unwrapBenchCases() []unwrapCase {
	b := func(ss ...string) [][]byte {
		out := make([][]byte, len(ss))
		for i, s := range ss {
			out[i] = []byte(s)
		}
		return out
	}
	plain := make([]string, detectLines)
	for i := range plain {
		plain[i] = accessLine
	}
	return []unwrapCase{
		{"plain", b(plain...)},
		{"cri", b(criTime + " stdout F " + accessLine)},
		{"cri-partial", b(criTime+" stdout P "+accessLine[:40], criTime+" stdout F "+accessLine[40:])},
		{"docker", b(`{"log":"` + strings.ReplaceAll(accessLine, `"`, `\"`) + `\n","stream":"stdout","time":"` + criTime + `"}`)},
	}
}

// BenchmarkUnwrap measures one line through the Unwrapper (a pair of
// fragments for cri-partial), in steady state.
func BenchmarkUnwrap(b *testing.B) {
	for _, c := range unwrapBenchCases() {
		b.Run(c.name, func(b *testing.B) {
			var u Unwrapper
			for _, l := range c.lines {
				u.Unwrap(l)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.lines[len(c.lines)-1])))
			i := 0
			for b.Loop() {
				u.Unwrap(c.lines[i])
				if i++; i == len(c.lines) {
					i = 0
				}
			}
		})
	}
}

func FuzzUnwrap(f *testing.F) {
	f.Add(criTime+" stdout F "+accessLine, criTime+" stdout P abc")
	f.Add(criTime+" stderr P x", "2026-12-05T08:58:45+01:00 stderr F:y z")
	f.Add(`{"log":"a\u003c\"b\n","stream":"stdout","time":"`+criTime+`"}`, `{"log":"partial","stream":"stderr","time":"`+criTime+`"}`)
	f.Add(accessLine, `{"level":"info"}`)
	f.Add(`{"log":"a\n","stream":"stdout","time":"`+criTime+`"}`, "")
	f.Fuzz(func(t *testing.T, a, b string) {
		u := Unwrapper{MaxBytes: 64}
		for _, raw := range []string{a, b, a, b, a} {
			c, s, complete, err := u.Unwrap([]byte(raw))
			if err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLong) {
					t.Fatalf("error class: %v", err)
				}
				if c != nil || !complete {
					t.Fatalf("error with content %q complete %v", c, complete)
				}
				continue
			}
			if !complete && c != nil {
				t.Fatalf("partial with content %q", c)
			}
			switch u.Wrapping() {
			case WrapPlain, WrapUndecided:
				if string(c) != raw || s != StreamNone {
					t.Fatalf("plain line changed: %q -> %q (%v)", raw, c, s)
				}
			case WrapDocker:
				if raw != "" { // an empty line passes as it is
					checkDockerLine(t, raw, c, s, complete)
				}
			case WrapCRI:
				if s == StreamNone && raw != "" { // an empty line passes as it is
					t.Fatalf("CRI line without a stream: %q", raw)
				}
			}
		}
	})
}

// checkDockerLine checks an unwrapped json-file line against encoding/json:
// its stream, and a complete line's content ends with the decoded "log"
// less its line ending (partials before it come first).
func checkDockerLine(t *testing.T, raw string, c []byte, s Stream, complete bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		t.Fatalf("accepted %q, encoding/json: %v", raw, err)
	}
	var log, stream string
	if json.Unmarshal(obj["log"], &log) != nil || json.Unmarshal(obj["stream"], &stream) != nil {
		t.Fatalf("accepted %q without log or stream strings", raw)
	}
	if stream != s.String() {
		t.Fatalf("%q: stream %v, encoding/json %q", raw, s, stream)
	}
	if complete != strings.HasSuffix(log, "\n") {
		t.Fatalf("%q: complete %v, log %q", raw, complete, log)
	}
	if complete && !strings.HasSuffix(string(c)+"\n", log) && !strings.HasSuffix(string(c)+"\r\n", log) {
		t.Fatalf("%q: content %q, encoding/json %q", raw, c, log)
	}
}
