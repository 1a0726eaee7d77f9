package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// genTemplate is a record line cut where the generator writes its own ts,
// client, node and id: pre + ts + mid + client + rest + node and id.
type genTemplate struct{ mid, rest string }

var (
	genTemplatesOnce sync.Once
	genTemplates     []genTemplate
)

// planTemplates are the record lines of the plan's and analyze's golden
// inputs (the recapture's two nodes, the five-record cost example, the
// joined golden's records with their log lines), each written again by
// record.Handshake's MarshalJSON without ts, client, node and id; every
// third gets a generation, as pqwatch run writes them.
func planTemplates(tb testing.TB) []genTemplate {
	genTemplatesOnce.Do(func() {
		var lines []string
		for _, f := range []string{"plan/recapture/node-a.jsonl", "plan/recapture/node-b.jsonl", "plan/records.jsonl", "golden/joined-jsonl.golden", "golden/jsonl.golden"} {
			b, err := os.ReadFile(filepath.Join("testdata", f))
			if err != nil {
				panic(err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "{") {
					lines = append(lines, l)
				}
			}
		}
		for i, l := range lines {
			var h record.Handshake
			if err := json.Unmarshal([]byte(l), &h); err != nil || h.Outcome == "" {
				continue
			}
			h.TS, h.Client, h.Node, h.ID = time.Time{}, "", "", ""
			if i%3 == 0 {
				h.Generation = &record.Generation{ID: "nginx-0123456789ab-4242", MasterPID: 4242, WorkerPID: 4243 + i%4, Exe: "/usr/sbin/nginx", ExeSHA256: strings.Repeat("0123456789abcdef", 4), OpenSSL: "OpenSSL 3.5.1 1 Jul 2025"}
			}
			b, err := json.Marshal(h)
			if err != nil {
				panic(err)
			}
			s := string(b)
			_, after, ok := strings.Cut(s, `"ts":"0001-01-01T00:00:00.000000000Z"`)
			mid, rest, ok2 := strings.Cut(after, `"client":""`)
			if !ok || !ok2 {
				panic("template: " + s)
			}
			genTemplates = append(genTemplates, genTemplate{mid: mid + `"client":"`, rest: `"` + strings.TrimSuffix(rest, "}")})
		}
	})
	if len(genTemplates) < 20 {
		tb.Fatalf("only %d templates", len(genTemplates))
	}
	return genTemplates
}

// recordGen is an io.Reader of n synthetic record lines: the templates in
// turn, over nodes nodes (node-000...), each node's ids "<its prefix>-<its
// sequence>", ts 100 us apart, a client per record; every dupEvery-th line
// (0: none) is a second delivery of the line dupLag before it.
type recordGen struct {
	tpl              []genTemplate
	n, i             int
	nodes            int
	dupEvery, dupLag int
	base             time.Time
	buf              []byte
	off              int
	lines, dups      int
}

func newRecordGen(tb testing.TB, n, nodes int) *recordGen {
	return &recordGen{tpl: planTemplates(tb), n: n, nodes: nodes, base: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
}

// line appends the line of record j.
func (g *recordGen) line(dst []byte, j int) []byte {
	t := &g.tpl[j%len(g.tpl)]
	node := j % g.nodes
	seq := j/g.nodes + 1
	dst = append(dst, `{"ts":"`...)
	dst = g.base.Add(time.Duration(j)*100*time.Microsecond).AppendFormat(dst, record.TimeFormat)
	dst = append(dst, '"')
	dst = append(dst, t.mid...)
	dst = append(dst, "10."...)
	dst = strconv.AppendInt(dst, int64(j>>16&0xff), 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(j>>8&0xff), 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(j&0xff), 10)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(32768+j%28000), 10)
	dst = append(dst, t.rest...)
	dst = append(dst, `,"node":"node-`...)
	dst = append(dst, byte('0'+node/100%10), byte('0'+node/10%10), byte('0'+node%10))
	dst = append(dst, `","id":"`...)
	const hex = "0123456789abcdef"
	for _, v := range [2]uint64{uint64(node)*0x9e3779b97f4a7c15 | 1, uint64(seq)} {
		for s := 60; s >= 0; s -= 4 {
			dst = append(dst, hex[v>>s&0xf])
		}
		dst = append(dst, '-')
	}
	dst[len(dst)-1] = '"'
	return append(dst, "}\n"...)
}

// appendGenTS appends base + j x 100 us as record.TimeFormat writes it,
// by hand within base's day (AppendFormat past it).
func appendGenTS(dst []byte, base time.Time, j int) []byte {
	us := int64(j) * 100
	if us >= 86400e6 || base.Hour()+base.Minute()+base.Second()+base.Nanosecond() != 0 {
		return base.Add(time.Duration(us)*time.Microsecond).AppendFormat(dst, record.TimeFormat)
	}
	dst = base.AppendFormat(dst, "2006-01-02T")
	sec := us / 1e6
	two := func(v int64) { dst = append(dst, byte('0'+v/10), byte('0'+v%10)) }
	two(sec / 3600)
	dst = append(dst, ':')
	two(sec / 60 % 60)
	dst = append(dst, ':')
	two(sec % 60)
	ns := us % 1e6 * 1000
	dst = append(dst, '.')
	for d := int64(1e8); d > 0; d /= 10 {
		dst = append(dst, byte('0'+ns/d%10))
	}
	return append(dst, 'Z')
}

func (g *recordGen) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if g.off == len(g.buf) {
			if g.i >= g.n {
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
			g.buf, g.off = g.buf[:0], 0
			for len(g.buf) < 32<<10 && g.i < g.n {
				if g.dupEvery > 0 && g.lines > g.dupLag && g.lines%g.dupEvery == 0 {
					g.buf = g.line(g.buf, g.i-g.dupLag)
					g.dups++
				} else {
					g.buf = g.line(g.buf, g.i)
					g.i++
				}
				g.lines++
			}
		}
		c := copy(p[n:], g.buf[g.off:])
		g.off += c
		n += c
	}
	return n, nil
}

// The generator's lines are records the reference decoder reads, its ids
// of the agent's form.
func TestPlanRecordGen(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, j := range []int{0, 1, 12345, 9_999_999, 863_999_999, 864_000_000} {
		if got, want := string(appendGenTS(nil, base, j)), base.Add(time.Duration(j)*100*time.Microsecond).Format(record.TimeFormat); got != want {
			t.Errorf("ts %d: %s, want %s", j, got, want)
		}
	}
	g := newRecordGen(t, 2000, 7)
	g.dupEvery, g.dupLag = 100, 50
	sc := bufio.NewScanner(g)
	sc.Buffer(nil, 1<<20)
	n, size := 0, 0
	for sc.Scan() {
		var h record.Handshake
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Outcome == "" || len(h.ID) != 33 || !strings.HasPrefix(h.Node, "node-") {
			t.Fatalf("line %d: %v: %s", n, err, sc.Bytes())
		}
		n++
		size += len(sc.Bytes()) + 1
	}
	if n != 2000+g.dups || g.dups == 0 {
		t.Errorf("%d lines, %d duplicates", n, g.dups)
	}
	t.Logf("%d lines, %d bytes a line", n, size/n)
}

// PQWATCH_PLAN_GEN=N:FILE writes N generated records (200 nodes) to FILE
// (gzip when it ends in .gz), to compare binaries on one input.
func TestPlanRecordGenWrite(t *testing.T) {
	spec := os.Getenv("PQWATCH_PLAN_GEN")
	if spec == "" {
		t.Skip("PQWATCH_PLAN_GEN=N:FILE writes generated records")
	}
	ns, file, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(file, ".gz") {
		zw = gzip.NewWriter(f)
		w = zw
	}
	if _, err := io.Copy(w, newRecordGen(t, n, 200)); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		zw.Close()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
