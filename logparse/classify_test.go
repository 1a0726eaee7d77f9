package logparse

import (
	"strings"
	"testing"
)

// TestClassifyAccessLog: container logs' samples as a node has them:
// ingress-nginx's default upstreaminfo lines (CRI), pqwatch's recommended
// format, combined, Caddy's JSON access log (json-file), an application's
// own output, and a log with only stderr lines yet.
func TestClassifyAccessLog(t *testing.T) {
	cri := func(stream string, lines ...string) [][]byte {
		var out [][]byte
		for _, l := range lines {
			out = append(out, []byte("2026-12-05T08:58:45.419141256Z "+stream+" F "+l))
		}
		return out
	}
	upstream := `10.198.0.1 - - [05/Dec/2026:08:58:45 +0000] "GET /p HTTP/1.1" 200 615 "-" "Go-http-client/1.1" 78 0.002 [default-web-443] [] 10.199.0.2:8443 615 0.002 200 6f5c0c3a1f1e4a0e9b1d2c3e4f5a6b7c`
	recommended := `10.198.0.1 40000 1764924725.419 TLSv1.3 TLS_AES_128_GCM_SHA256 X25519MLKEM768 "X25519MLKEM768:x25519" 2 1 "GET / HTTP/1.1" 200 "Go-http-client/1.1" "pqwatch.test"`
	combined := `10.198.0.1 - - [05/Dec/2026:08:58:45 +0000] "GET / HTTP/1.1" 200 615 "-" "curl/8.5.0"`
	caddy := `{"log":"{\"level\":\"info\",\"ts\":1767268800.1,\"logger\":\"http.log.access.pod\",\"msg\":\"handled request\",\"request\":{\"remote_ip\":\"10.0.0.3\",\"remote_port\":\"40001\",\"proto\":\"HTTP/1.1\",\"method\":\"GET\",\"host\":\"x\",\"uri\":\"/\"},\"status\":200}\n","stream":"stdout","time":"2026-12-05T08:58:45.419141256Z"}`
	for _, tc := range []struct {
		name   string
		sample [][]byte
		kind   string
		format string
		why    string
	}{
		{"ingress-nginx upstreaminfo", append(cri("stderr", "I1205 08:58:40.1 controller started"), cri("stdout", upstream, upstream)...), KindNginx, "upstreaminfo", ""},
		{"pqwatch's format", cri("stdout", recommended, recommended, recommended), KindNginx, "pqwatch", ""},
		{"combined", cri("stdout", combined), KindNginx, "combined", ""},
		{"Caddy in json-file", [][]byte{[]byte(caddy), []byte(caddy)}, KindCaddy, "", ""},
		{"an application", cri("stdout", "starting worker 1", "listening on :8080", combined), "", "", "1 of 3 lines parse"},
		{"stderr only", cri("stderr", "2026/12/05 08:58:45 [notice] 1#1: start worker processes"), "", "", "no access-log lines yet"},
		{"nothing", nil, "", "", "no access-log lines yet"},
	} {
		c := ClassifyAccessLog(tc.sample, BuiltinFormats())
		name := ""
		if c.Format != nil {
			name = c.Format.Name
		}
		if c.Kind != tc.kind || name != tc.format || !strings.Contains(c.Why, tc.why) {
			t.Errorf("%s: %+v (format %q), want %q %q %q", tc.name, c, name, tc.kind, tc.format, tc.why)
		}
	}
	// upstreaminfo's fields as the join reads them.
	var l NginxLine
	if err := UpstreamInfo.Parse([]byte(upstream), &l); err != nil || string(l.RemoteAddr) != "10.198.0.1" || l.RemotePort != 0 || l.RequestTime.Milliseconds() != 2 || l.Status != 200 || string(l.URI) != "/p" {
		t.Errorf("upstreaminfo line: %v %+v", err, l)
	}
}
