package logjoin

import (
	"errors"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"

	"github.com/pqwatch/pqwatch/logparse"
)

const (
	plainNginx = `10.0.0.2 - - [05/Dec/2026:08:58:45 +0000] "GET /p0 HTTP/1.1" 200 615 "-" "curl/8.5.0"`
	criPrefix  = "2026-12-05T08:58:45.419141256Z "
)

// TestReadWhyContainer reads a CRI nginx container log: access lines on
// stdout (one in partials), nginx's error log on stderr, a damaged line.
func TestReadWhyContainer(t *testing.T) {
	lr := NewNginxReader(nil)
	cases := []struct {
		raw  string
		want LineResult
		path string
	}{
		{criPrefix + "stderr F 2026/12/05 08:58:45 [notice] 1#1: start worker processes", LineSkipped, ""},
		{criPrefix + "stdout F " + plainNginx, LineOK, "/p0"},
		{criPrefix + "stdout P " + plainNginx[:30], LineSkipped, ""},
		{criPrefix + "stderr F 2026/12/05 08:58:46 [error] 7#7: *1 open() failed", LineSkipped, ""},
		{criPrefix + "stdout F " + plainNginx[30:], LineOK, "/p0"},
		{criPrefix + "stdout F ", LineSkipped, ""},
		{criPrefix + "stdout F not an access line", LineMalformed, ""},
		{"garbage in a CRI file", LineMalformed, ""},
	}
	for i, c := range cases {
		l, res, why := lr.ReadWhy([]byte(c.raw))
		if res != c.want || l.Log.Path != c.path {
			t.Errorf("line %d: %v %q (%v), want %v %q", i, res, l.Log.Path, why, c.want, c.path)
		}
		if res == LineMalformed && !errors.Is(why, logparse.ErrMalformed) {
			t.Errorf("line %d: reason %v", i, why)
		}
	}
	if lr.Wrapping() != logparse.WrapCRI {
		t.Errorf("wrapping %v", lr.Wrapping())
	}
	if st := lr.UnwrapStats(); st.Stderr != 2 || st.Joined != 1 || st.Malformed != 1 {
		t.Errorf("unwrap stats %+v", st)
	}
	lr.ReadWhy([]byte(criPrefix + "stdout F " + plainNginx))
	if ts, ok := lr.RuntimeTime(); !ok || ts.Nanosecond() != 419141256 {
		t.Errorf("runtime time %v %v", ts, ok)
	}

	// A plain log reads as before.
	plain := NewNginxReader(nil)
	if l, res, _ := plain.ReadWhy([]byte(plainNginx)); res != LineOK || l.Log.Path != "/p0" {
		t.Errorf("plain line: %v %+v", res, l)
	}
	if _, ok := plain.RuntimeTime(); ok {
		t.Error("a plain line has a runtime time")
	}

	// Caddy's JSON in Docker's json-file.
	cr := NewCaddyReader()
	caddy := `{"log":"{\"level\":\"info\",\"ts\":1767268800.1,\"logger\":\"http.log.access\",\"request\":{\"remote_ip\":\"10.0.0.3\",\"remote_port\":\"40001\",\"method\":\"GET\",\"uri\":\"/c\u003c1\"},\"status\":200}\n","stream":"stdout","time":"2026-12-05T08:58:45.419141256Z"}`
	if l, res, why := cr.ReadWhy([]byte(caddy)); res != LineOK || l.Log.Path != "/c<1" || l.Port != 40001 {
		t.Errorf("caddy in json-file: %v %+v %v", res, l, why)
	}
}

// TestPodFromLogPath: a pod's container log names the pod in its lines
// and in the records they join; another log names none.
func TestPodFromLogPath(t *testing.T) {
	const uid = "3f8a2c1e-5b7d-4e9a-8c6f-0123456789ab"
	lr := NewNginxReader(nil)
	p := lr.SetPath("/var/log/pods/web_web-0_" + uid + "/nginx/0.log")
	want := record.Pod{Namespace: "web", Name: "web-0", UID: uid, Container: "nginx"}
	if p == nil || *p != want {
		t.Fatalf("SetPath: %+v, want %+v", p, want)
	}
	l, res, _ := lr.ReadWhy([]byte(criPrefix + "stdout F " + plainNginx))
	if res != LineOK || l.Pod != p {
		t.Fatalf("line: %v, pod %+v", res, l.Pod)
	}
	var got []*record.Handshake
	j := New(Options{Emit: func(h *record.Handshake) { got = append(got, h) }})
	h := &record.Handshake{TS: l.Time.Add(-time.Millisecond), Transport: record.TransportTCP, Client: "10.0.0.2:40000", Server: "10.199.0.2:8443", Outcome: record.OutcomeOK}
	h.ClientAddr = l.Addr
	j.AddHandshake(h, time.Now())
	j.AddLine(l, time.Now())
	j.Flush()
	if len(got) != 1 || got[0].Log == nil || got[0].Pod != p {
		t.Fatalf("joined %d records: %+v", len(got), got)
	}
	if plain := NewNginxReader(nil); plain.SetPath("/var/log/nginx/access.log") != nil {
		t.Error("a host log names a pod")
	}
}
