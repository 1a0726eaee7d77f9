package logjoin_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// The capture and the access logs analyze's golden test joins.
var (
	capture   = filepath.Join("..", "testdata", "handshakes.pcap")
	nginxLog  = filepath.Join("..", "cmd", "pqwatch", "testdata", "golden", "access.log")
	caddyLog  = filepath.Join("..", "cmd", "pqwatch", "testdata", "golden", "caddy.log")
	edgeFmt   = `$remote_addr $remote_port $msec "$request" $status "$http_user_agent" $ssl_curve $pid`
	wrapTimes = "2026-01-01T12:00:00.%09dZ"
)

// TestContainerLogJoinOffline joins the testdata capture with its nginx
// and Caddy access logs as they are, then rewritten as a container runtime
// writes them (CRI, Docker json-file; lines split into partials, the error
// log's lines on stderr in between): every record gets the same line and
// the counts are the same.
func TestContainerLogJoinOffline(t *testing.T) {
	var recs []*record.Handshake
	sn := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	if _, err := sniffer.ReadFile(capture, sn, nil); err != nil {
		t.Fatal(err)
	}
	sn.Flush()
	if len(recs) == 0 {
		t.Fatal("no records in the capture")
	}
	edge, err := logparse.CompileFormat("edge", logparse.EscapeDefault, edgeFmt)
	if err != nil {
		t.Fatal(err)
	}
	join := func(nginx, caddy string) ([]*record.Handshake, logjoin.FileResult) {
		own := make([]*record.Handshake, len(recs))
		for i, r := range recs {
			c := *r
			c.Log = nil
			own[i] = &c
		}
		files := logjoin.Files{Nginx: []logjoin.NginxLog{{Path: nginx, Format: edge, How: "test"}}, Caddy: []string{caddy}}
		return own, files.Join(own)
	}
	wantRecs, want := join(nginxLog, caddyLog)
	if want.Stats.Joined == 0 || len(want.ReadErrors) > 0 {
		t.Fatalf("plain logs: joined %d, errors %v", want.Stats.Joined, want.ReadErrors)
	}
	dir := t.TempDir()
	for _, wrap := range []string{"cri", "docker-json"} {
		t.Run(wrap, func(t *testing.T) {
			nginx := filepath.Join(dir, wrap+"-nginx.log")
			caddy := filepath.Join(dir, wrap+"-caddy.log")
			wrapFile(t, nginxLog, nginx, wrap)
			wrapFile(t, caddyLog, caddy, wrap)
			gotRecs, got := join(nginx, caddy)
			for i := range wantRecs {
				if !reflect.DeepEqual(gotRecs[i].Log, wantRecs[i].Log) {
					t.Errorf("record %d (%s): log %+v, plain log %+v", i, wantRecs[i].Client, gotRecs[i].Log, wantRecs[i].Log)
				}
			}
			if !reflect.DeepEqual(got.Stats, want.Stats) || !reflect.DeepEqual(got.Lines, want.Lines) ||
				!reflect.DeepEqual(got.Malformed, want.Malformed) || !reflect.DeepEqual(got.Unmatched, want.Unmatched) {
				t.Errorf("counts differ:\n%+v\nplain:\n%+v", got, want)
			}
			for i, lf := range got.Logs {
				w := want.Logs[i]
				if lf.Lines != w.Lines || lf.Good != w.Good || lf.Wrapping != wrap || lf.Stderr == 0 || w.Wrapping != "" {
					t.Errorf("log %s: %+v, plain %+v", lf.Path, lf, w)
				}
			}
		})
	}
}

// wrapFile writes the lines of src to dst as the container runtime wrap
// writes a container's output: each line longer than 40 bytes in two
// fragments, and a stderr line (nginx's error log) after every third.
func wrapFile(t *testing.T, src, dst, wrap string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	n := 0
	out := func(stream, content string, last bool) {
		n++
		ts := fmt.Sprintf(wrapTimes, n)
		if wrap == "cri" {
			tag := "P"
			if last {
				tag = "F"
			}
			fmt.Fprintf(&b, "%s %s %s %s\n", ts, stream, tag, content)
			return
		}
		if last {
			content += "\n"
		}
		j, err := json.Marshal(struct {
			Log    string `json:"log"`
			Stream string `json:"stream"`
			Time   string `json:"time"`
		}{content, stream, ts})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for i := 0; sc.Scan(); i++ {
		line := sc.Text()
		if len(line) > 40 {
			out("stdout", line[:40], false)
			line = line[40:]
		}
		out("stdout", line, true)
		if i%3 == 0 {
			out("stderr", `2026/01/01 12:00:00 [warn] 7#7: *1 an upstream response is buffered "<x>"`, true)
		}
	}
	if !strings.Contains(b.String(), "stderr") {
		t.Fatal("no stderr line written")
	}
	if err := os.WriteFile(dst, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
