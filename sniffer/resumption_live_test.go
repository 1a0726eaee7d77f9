package sniffer_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// resumeTruth is what a client reported about one connection.
type resumeTruth struct {
	name    string
	server  string // ip:port
	port    int    // client port, 0 when the client does not say
	version string // "TLS1.3", "TLS1.2"
	resumed bool
}

// goResume makes n connections with one client session cache: the first is
// a full handshake, the others resume when the server takes the ticket
// (ConnectionState().DidResume says). Each sends one request and reads the
// answer to its end, which also takes a TLS 1.3 ticket.
func goResume(t *testing.T, addr, sni, name string, maxVer uint16, n int) []resumeTruth {
	cfg := &tls.Config{InsecureSkipVerify: true, ServerName: sni, MaxVersion: maxVer, MinVersion: maxVer,
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	var out []resumeTruth
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tc := tls.Client(c, cfg)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s #%d: %v", name, i, err)
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
		_, _ = io.Copy(io.Discard, tc)
		st := tc.ConnectionState()
		tc.Close()
		out = append(out, resumeTruth{name: fmt.Sprintf("%s #%d", name, i), server: addr, port: c.LocalAddr().(*net.TCPAddr).Port,
			version: tlsparse.VersionName(st.Version), resumed: st.DidResume})
		time.Sleep(20 * time.Millisecond)
	}
	return out
}

// opensslReconnect runs openssl s_client -reconnect (one connection, then
// five more with its session) and reads "New," / "Reused," per connection.
func opensslReconnect(t *testing.T, addr, sni, name string, args ...string) []resumeTruth {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := append([]string{"s_client", "-connect", addr, "-servername", sni, "-reconnect"}, args...)
	cmd := exec.CommandContext(ctx, "openssl", a...)
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	var res []resumeTruth
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, ", ", 3)
		if len(f) < 3 || (f[0] != "New" && f[0] != "Reused") {
			continue
		}
		res = append(res, resumeTruth{name: fmt.Sprintf("%s #%d", name, len(res)), server: addr,
			version: strings.Replace(f[1], "TLSv", "TLS", 1), resumed: f[0] == "Reused"})
	}
	if len(res) != 6 {
		t.Fatalf("%s: %d connections reported, want 6:\n%s", name, len(res), out)
	}
	return res
}

// opensslSession runs openssl s_client twice: the first connection sends a
// request and reads the answer to its end (so it takes the TLS 1.3 ticket)
// and saves its session (-sess_out), the second offers it (-sess_in).
func opensslSession(t *testing.T, addr, sni, name string, args ...string) []resumeTruth {
	sess := filepath.Join(t.TempDir(), "session.pem")
	var res []resumeTruth
	for i, sessArgs := range [][]string{{"-sess_out", sess}, {"-sess_in", sess}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a := append(append([]string{"s_client", "-connect", addr, "-servername", sni, "-ign_eof"}, sessArgs...), args...)
		cmd := exec.CommandContext(ctx, "openssl", a...)
		cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: " + sni + "\r\nConnection: close\r\n\r\n")
		out, _ := cmd.CombinedOutput()
		cancel()
		n := len(res)
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.SplitN(line, ", ", 3); len(f) == 3 && (f[0] == "New" || f[0] == "Reused") {
				res = append(res, resumeTruth{name: fmt.Sprintf("%s #%d", name, i), server: addr,
					version: strings.Replace(f[1], "TLSv", "TLS", 1), resumed: f[0] == "Reused"})
				break
			}
		}
		if len(res) == n {
			t.Fatalf("%s #%d: no New/Reused line:\n%s", name, i, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return res
}

// TestResumptionLive: real clients resume real servers' sessions over
// loopback — Go crypto/tls (TLS 1.3 and 1.2, a ClientSessionCache) against
// Caddy and against nginx with tickets and a session cache on, and openssl
// s_client -reconnect (TLS 1.3, TLS 1.2 by ticket, TLS 1.2 by session ID;
// OpenSSL 3.0 reconnects before a TLS 1.3 ticket arrives, so those are full
// handshakes) and -sess_out/-sess_in (a TLS 1.3 resumption).
// Every record's resumed equals what its client reports; a resumed TLS 1.2
// record has no group and group_missing resumed, every other record has its
// group.
func TestResumptionLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx", "tcpdump", "openssl", "caddy")
	nport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartNginx(t, testenv.NginxOptions{Listen: "127.0.0.1:" + strconv.Itoa(nport), Resumption: true})
	testenv.StartCaddy(t, testenv.CaddyConf, cport)
	nginx, caddy := net.JoinHostPort("127.0.0.1", strconv.Itoa(nport)), net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))
	capt := testenv.StartCapture(t, "", "lo", fmt.Sprintf("tcp port %d or tcp port %d", nport, cport))

	var truths []resumeTruth
	for _, srv := range []struct{ addr, sni string }{{nginx, "pqwatch.test"}, {caddy, "localhost"}} {
		truths = append(truths, goResume(t, srv.addr, srv.sni, srv.addr+" go-tls13", tls.VersionTLS13, 3)...)
		truths = append(truths, goResume(t, srv.addr, srv.sni, srv.addr+" go-tls12", tls.VersionTLS12, 3)...)
		truths = append(truths, opensslReconnect(t, srv.addr, srv.sni, srv.addr+" openssl-tls12-ticket", "-tls1_2")...)
		truths = append(truths, opensslReconnect(t, srv.addr, srv.sni, srv.addr+" openssl-tls13", "-tls1_3")...)
		truths = append(truths, opensslSession(t, srv.addr, srv.sni, srv.addr+" openssl-tls13-sess", "-tls1_3")...)
	}
	// nginx's shared cache: TLS 1.2 by session ID, no ticket.
	truths = append(truths, opensslReconnect(t, nginx, "pqwatch.test", nginx+" openssl-tls12-session-id", "-tls1_2", "-no_ticket")...)
	time.Sleep(100 * time.Millisecond)
	capt.Stop()
	if dir := os.Getenv("PQWATCH_KEEP_CAPTURE"); dir != "" {
		b, _ := os.ReadFile(capt.File)
		_ = os.WriteFile(filepath.Join(dir, "resumption.pcap"), b, 0o644)
	}

	recs, st := analyzeFile(t, capt.File)
	sort.Slice(recs, func(i, j int) bool { return recs[i].TS.Before(recs[j].TS) })
	if len(recs) != len(truths) {
		for _, r := range recs {
			t.Logf("record %s %s %s resumed=%v %s", r.ClientText(), r.Server, r.Version, r.Resumed, r.Outcome)
		}
		t.Fatalf("%d records for %d client connections (stats %+v)", len(recs), len(truths), st)
	}
	kinds := map[string]int{}
	for i, tr := range truths {
		r := recs[i]
		if r.Server != tr.server || (tr.port != 0 && int(r.ClientPort) != tr.port) {
			t.Errorf("%s: record %d is %s -> %s (client port %d)", tr.name, i, r.ClientText(), r.Server, tr.port)
			continue
		}
		if r.Outcome != record.OutcomeOK || r.Version != tr.version {
			t.Errorf("%s: outcome %s version %s, client says ok %s", tr.name, r.Outcome, r.Version, tr.version)
		}
		if r.Resumed != tr.resumed {
			t.Errorf("%s: resumed %v, client says %v", tr.name, r.Resumed, tr.resumed)
		}
		switch {
		case tr.resumed && tr.version == "TLS1.2":
			if r.Group != "" || r.GroupMissing != record.GroupMissingResumed {
				t.Errorf("%s: resumed TLS 1.2 with group %q, group_missing %q; want none, resumed", tr.name, r.Group, r.GroupMissing)
			}
		default: // a full handshake, or TLS 1.3 resumption with psk_dhe_ke
			if r.Group == "" || r.GroupMissing != "" {
				t.Errorf("%s: group %q, group_missing %q; want a group", tr.name, r.Group, r.GroupMissing)
			}
		}
		kinds[fmt.Sprintf("%s resumed=%v", tr.version, tr.resumed)]++
	}
	// The clients must really have resumed, or the test proves little.
	for _, k := range []string{"TLS1.3 resumed=true", "TLS1.2 resumed=true", "TLS1.3 resumed=false", "TLS1.2 resumed=false"} {
		if kinds[k] == 0 {
			t.Errorf("no connection of kind %s: %v", k, kinds)
		}
	}
	t.Logf("connections: %v; sniffer errors: %v", kinds, st.Errors)
}
