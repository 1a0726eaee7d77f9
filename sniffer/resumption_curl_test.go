package sniffer_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// TestResumptionCurl: curl as traffic, over HTTP/2 and HTTP/1.1, against
// nginx with tickets and a session cache: each curl fetches four URLs, and
// nginx (keepalive_timeout 0) closes each connection after its request, so
// curl opens four connections and offers the session it cached. The truth
// is nginx's own word for each connection, $ssl_session_reused ("r") next
// to $remote_port and $server_protocol in its access log: every record's
// resumed equals it, and a resumed TLS 1.2 record has no group and says
// why. Over HTTP/2 nginx 1.22 declines curl 7.88's sessions (curl: "old SSL
// session ID is stale"), over HTTP/1.1 it takes them: both kinds are
// required, so the test shows full and resumed handshakes from curl.
func TestResumptionCurl(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx", "tcpdump", "curl")
	if out, _ := exec.Command("curl", "--version").Output(); !strings.Contains(string(out), "HTTP2") {
		t.Skip("this curl has no HTTP/2")
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := testenv.StartNginx(t, testenv.NginxOptions{Listen: "127.0.0.1:" + strconv.Itoa(port), Resumption: true, HTTP2: true,
		LogFormat: `'$remote_port $ssl_session_reused $ssl_protocol $server_protocol'`})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	capt := testenv.StartCapture(t, "", "lo", fmt.Sprintf("tcp port %d", port))
	url := "https://" + addr + "/"
	for _, httpArg := range []string{"--http2", "--http1.1"} {
		for _, tlsArgs := range [][]string{{"--tlsv1.3"}, {"--tlsv1.2", "--tls-max", "1.2"}} {
			args := append([]string{"-sk", httpArg, "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"}, tlsArgs...)
			args = append(args, url, url, url, url)
			if out, err := exec.Command("curl", args...).CombinedOutput(); err != nil {
				t.Fatalf("curl %v: %v: %s", args, err, out)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	capt.Stop()

	// nginx's word per connection, by client port.
	type truth struct {
		resumed bool
		version string
	}
	truths := map[uint16]truth{}
	logText, err := os.ReadFile(n.AccessLog)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(logText)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("access-log line %q: want port, reused, TLS and HTTP versions", l)
		}
		p, _ := strconv.Atoi(f[0])
		v := strings.Replace(strings.Replace(f[2], "TLSv1.3", "TLS1.3", 1), "TLSv1.2", "TLS1.2", 1)
		truths[uint16(p)] = truth{resumed: f[1] == "r", version: v}
		kinds[fmt.Sprintf("%s %s resumed=%v", f[3], v, f[1] == "r")]++
	}
	if len(truths) != 16 {
		t.Fatalf("nginx logged %d connections, want 8 (curl reused a connection?): %s", len(truths), logText)
	}
	recs, st := analyzeFile(t, capt.File)
	if len(recs) != len(truths) {
		t.Fatalf("%d records for the %d connections nginx logged (stats %+v)", len(recs), len(truths), st)
	}
	for _, r := range recs {
		tr, ok := truths[r.ClientPort]
		if !ok {
			t.Errorf("record from port %d, which nginx did not log", r.ClientPort)
			continue
		}
		if r.Outcome != record.OutcomeOK || r.Version != tr.version || r.Resumed != tr.resumed {
			t.Errorf("port %d: record %s %s resumed=%v; nginx: %s resumed=%v", r.ClientPort, r.Outcome, r.Version, r.Resumed, tr.version, tr.resumed)
		}
		if tr.resumed && tr.version == "TLS1.2" && (r.Group != "" || r.GroupMissing != record.GroupMissingResumed) {
			t.Errorf("port %d: resumed TLS 1.2 with group %q, group_missing %q; want none, resumed", r.ClientPort, r.Group, r.GroupMissing)
		}
	}
	// Over HTTP/2 curl 7.88 offers its session and nginx 1.22 declines it
	// (curl: "old SSL session ID is stale"; nginx: $ssl_session_reused
	// "."); over HTTP/1.1 the same curl resumes. Both are checked.
	for _, k := range []string{"HTTP/2.0 TLS1.3 resumed=false", "HTTP/2.0 TLS1.2 resumed=false", "HTTP/1.1 TLS1.2 resumed=true", "HTTP/1.1 TLS1.2 resumed=false"} {
		if kinds[k] == 0 {
			t.Errorf("no connection of kind %s: %v (curl did not resume, or always did)", k, kinds)
		}
	}
	t.Logf("nginx logged %v", kinds)
}
