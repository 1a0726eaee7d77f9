package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// keepDir, when set (PQWATCH_E2E_KEEP=dir), receives a copy of every capture
// and server log, for a look with other tools after the test.
var keepDir = os.Getenv("PQWATCH_E2E_KEEP")

// wantGroup is the group Chromium and Caddy agree on: both put the hybrid
// X25519MLKEM768 first (Chromium since 131, Go's crypto/tls since 1.24,
// which Caddy's quic-go uses).
const wantGroup = "X25519MLKEM768"

// TestHTTP3ChromiumCaddy is issue 3's must-show: a real HTTP/3 handshake
// between headless Chromium and Caddy on a loopback UDP port, captured by
// tcpdump, is reported by pqwatch with the negotiated hybrid group, and
// tshark's dissection of the same capture agrees on the hello sizes and
// key_share groups.
func TestHTTP3ChromiumCaddy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Caddy and Chromium")
	}
	testenv.NeedRoot(t)
	caddy := testenv.NeedBin(t, "caddy")
	chromium := testenv.NeedBin(t, "chromium")
	testenv.NeedBin(t, "tcpdump", "tshark")

	dir := t.TempDir()
	certFile, keyFile, cert := testenv.Cert(t, dir) // SANs: pqwatch.test, localhost, 127.0.0.1, ::1
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)

	port := freePort(t)
	srv := startCaddy(t, caddy, dir, port, certFile, keyFile)
	live := startLiveAgent(t, port)

	capture := testenv.StartCapture(t, "", "lo", fmt.Sprintf("udp port %d or tcp port %d", port, port))
	url := fmt.Sprintf("https://localhost:%d/", port)
	dom, err := runChromium(t, chromium, url, port, base64.StdEncoding.EncodeToString(spki[:]))
	settle()
	capture.Stop()
	keep(t, capture.File, "http3.pcap")
	keep(t, srv.accessLog, "caddy-access.log")
	keep(t, srv.errLog, "caddy.log")
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if !strings.Contains(dom, bodyMarker) {
		t.Fatalf("chromium did not get the page; --dump-dom printed:\n%s", dom)
	}

	// Caddy says the request was HTTP/3, and from which client port.
	reqs := caddyRequests(t, srv.accessLog)
	h3Ports := map[uint16]bool{}
	for _, r := range reqs {
		t.Logf("caddy access log: %s %s %s from %s:%s tls proto %q server_name %q",
			r.Request.Proto, r.Request.Method, r.Request.URI, r.Request.RemoteIP, r.Request.RemotePort,
			r.Request.TLS.Proto, r.Request.TLS.ServerName)
		if r.Request.Proto == "HTTP/3.0" {
			p, _ := strconv.Atoi(r.Request.RemotePort)
			h3Ports[uint16(p)] = true
		}
	}
	if len(h3Ports) == 0 {
		t.Fatalf("no HTTP/3.0 request in Caddy's access log (%d requests)", len(reqs))
	}

	// pqwatch's view of the capture.
	recs, fs, st := readCapture(t, capture.File)
	t.Logf("capture: %d packets (%d UDP, %d TCP), %d records; errors %v; quic %v",
		fs.Packets, st.UDPPackets, st.TCPPackets, st.Records, st.Errors, nonZero(st.QUIC))

	var quicRecs []*record.Handshake
	for _, r := range recs {
		js, _ := json.Marshal(r)
		t.Logf("record: %s", js)
		if r.Transport == record.TransportQUIC {
			quicRecs = append(quicRecs, r)
		}
	}
	if len(quicRecs) == 0 {
		t.Fatalf("no QUIC record in %d records", len(recs))
	}
	joined := false
	for _, r := range quicRecs {
		if h3Ports[r.ClientPort] {
			joined = true
		}
		checkChromiumQUIC(t, r, port)
	}
	if !joined {
		t.Errorf("no QUIC record from a client port Caddy logged an HTTP/3 request from (%v)", h3Ports)
	}

	// The live agent saw the same handshake and attributed it to Caddy:
	// one process holds the UDP socket, nothing changed meanwhile.
	lr := live.waitQUIC(t, quicRecs[0].ClientText())
	g := lr.Generation
	if g == nil {
		t.Fatalf("live agent: QUIC record %s not attributed to a server generation", lr.ClientText())
	}
	if filepath.Base(g.Exe) != "caddy" || g.WorkerPID != g.MasterPID || !strings.HasPrefix(g.OpenSSL, "Go crypto/tls") {
		t.Errorf("live agent: QUIC record attributed to %+v, want the caddy process", *g)
	}
	if lr.Group != quicRecs[0].Group || lr.ClientHelloBytes != quicRecs[0].ClientHelloBytes {
		t.Errorf("live agent: group %s ch %d, from the capture file %s %d", lr.Group, lr.ClientHelloBytes, quicRecs[0].Group, quicRecs[0].ClientHelloBytes)
	}
	t.Logf("live agent: QUIC %s attributed to %s (pid %d, %s, %s)", lr.ClientText(), g.ID, g.WorkerPID, g.Exe, g.OpenSSL)

	// tshark's dissection of the same capture.
	compareTshark(t, capture.File, quicRecs)
}

// checkChromiumQUIC asserts what a Chromium-to-Caddy HTTP/3 handshake must
// look like in a record.
func checkChromiumQUIC(t *testing.T, r *record.Handshake, port int) {
	t.Helper()
	if want := fmt.Sprintf("127.0.0.1:%d", port); r.Server != want {
		t.Errorf("server %q, want %q", r.Server, want)
	}
	if r.Outcome != record.OutcomeOK {
		t.Errorf("outcome %q, want ok", r.Outcome)
	}
	if r.Version != "TLS1.3" {
		t.Errorf("version %q, want TLS1.3", r.Version)
	}
	if r.Group != wantGroup || !r.PQ {
		t.Errorf("group %q pq %v, want %s pq true", r.Group, r.PQ, wantGroup)
	}
	if !r.PQOffered {
		t.Error("pq_offered false")
	}
	if r.SNI != "localhost" {
		t.Errorf("sni %q, want localhost", r.SNI)
	}
	if len(r.ALPN) == 0 || r.ALPN[0] != "h3" {
		t.Errorf("alpn %v, want h3 first", r.ALPN)
	}
	if len(r.KeyShares) == 0 || r.KeyShares[0].Group != wantGroup || r.KeyShares[0].Bytes != 1216 {
		t.Errorf("key_shares %v, want %s with 1216 bytes first", r.KeyShares, wantGroup)
	}
	if r.ClientHelloSegments < 2 {
		t.Errorf("client_hello_segments %d, want >= 2 (a hybrid ClientHello does not fit one Initial)", r.ClientHelloSegments)
	}
	if !strings.HasPrefix(r.JA4, "q13") {
		t.Errorf("ja4 %q, want q13 prefix", r.JA4)
	}
	if r.ClientHelloBytes < 1216 || r.ServerHelloBytes < 1088 {
		t.Errorf("client_hello_bytes %d server_hello_bytes %d: too small for ML-KEM-768 shares", r.ClientHelloBytes, r.ServerHelloBytes)
	}
	if r.HandshakeRTTMicros <= 0 {
		t.Errorf("handshake_rtt_us %d", r.HandshakeRTTMicros)
	}

}

// liveAgent is pqwatch's agent capturing one loopback port with process
// tracking, as `pqwatch run` does.
type liveAgent struct {
	mu   sync.Mutex
	recs []*record.Handshake
}

// startLiveAgent runs the agent on lo for port until the test ends, and
// waits until it has found the server listening there.
func startLiveAgent(t *testing.T, port int) *liveAgent {
	t.Helper()
	la := &liveAgent{}
	a, err := agent.New(agent.Config{
		Ifaces: []string{"lo"}, Ports: []uint16{uint16(port)}, Workers: 1, TrackProcesses: true,
		// Tests of other packages start and stop nginx meanwhile; their
		// churn would end every quiet period, and QUIC is attributed in
		// quiet periods only. Track Caddy alone.
		NginxComms: []string{"pqwatch-test-none"},
		OnRecord: func(r *record.Handshake) {
			la.mu.Lock()
			la.recs = append(la.recs, r)
			la.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, g := range a.Processes().Generations() {
			if g.Alive && filepath.Base(g.Exe) == "caddy" {
				return la
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the agent did not find caddy on port %d: %+v", port, a.Processes().Generations())
		}
	}
}

// waitQUIC waits (bounded) for the agent's attributed record of a QUIC
// connection from client, or its unattributed one at the end.
func (la *liveAgent) waitQUIC(t *testing.T, client string) *record.Handshake {
	t.Helper()
	var last *record.Handshake
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		la.mu.Lock()
		for _, r := range la.recs {
			if r.Transport == record.TransportQUIC && r.ClientText() == client {
				last = r
			}
		}
		la.mu.Unlock()
		if last != nil {
			return last
		}
	}
	t.Fatalf("live agent: no QUIC record from %s", client)
	return nil
}

// cryptoInitials are the frame times of a QUIC connection's first client
// and first server Initial packets that carry CRYPTO frames.
type cryptoInitials struct{ client, server float64 }

// tsharkCryptoInitials returns, per client ip:port, the times tshark gives
// the first Initial with CRYPTO data in each direction.
func tsharkCryptoInitials(t *testing.T, file string) map[string]cryptoInitials {
	t.Helper()
	out, err := exec.Command("tshark", "-r", file, "-n",
		"-Y", "quic.long.packet_type == 0 && quic.frame_type == 6",
		"-T", "fields", "-E", "separator=|",
		"-e", "frame.time_epoch", "-e", "ip.src", "-e", "udp.srcport", "-e", "ip.dst", "-e", "udp.dstport").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	res := map[string]cryptoInitials{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 5 {
			continue
		}
		ts, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		src, dst := net.JoinHostPort(f[1], f[2]), net.JoinHostPort(f[3], f[4])
		if in, ok := res[dst]; ok { // dst is a known client: a server packet
			if in.server == 0 {
				in.server = ts
				res[dst] = in
			}
			continue
		}
		if _, ok := res[src]; !ok {
			res[src] = cryptoInitials{client: ts}
		}
	}
	return res
}

// tsharkHello is tshark's view of one ClientHello or ServerHello carried in
// QUIC.
type tsharkHello struct {
	frame  int
	client string // ip:port of the client side of the connection
	typ    int
	length int // handshake body, without the 4-byte header
	groups []string
	ja4    string  // computed from tshark's fields (ClientHello only; tshark 4.0 has no ja4 field)
	time   float64 // frame.time_epoch of the frame tshark shows the message in
}

// tsharkQUICHellos runs tshark on file and returns every handshake message of
// type typ it dissected from QUIC CRYPTO frames.
func tsharkQUICHellos(t *testing.T, file string, typ int) []tsharkHello {
	t.Helper()
	out, err := exec.Command("tshark", "-r", file, "-n",
		"-Y", fmt.Sprintf("quic && tls.handshake.type==%d", typ),
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "frame.number", "-e", "ip.src", "-e", "udp.srcport", "-e", "ip.dst", "-e", "udp.dstport",
		"-e", "tls.handshake.type", "-e", "tls.handshake.length",
		"-e", "tls.handshake.extensions_key_share_group",
		"-e", "tls.handshake.ciphersuite", "-e", "tls.handshake.extension.type", "-e", "tls.handshake.sig_hash_alg",
		"-e", "tls.handshake.extensions.supported_version", "-e", "tls.handshake.extensions_alpn_str",
		"-e", "frame.time_epoch").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	var hs []tsharkHello
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "|")
		if len(f) != 14 {
			continue
		}
		types, lengths := strings.Split(f[5], ","), strings.Split(f[6], ",")
		for i, ty := range types {
			if ty != strconv.Itoa(typ) || i >= len(lengths) {
				continue
			}
			h := tsharkHello{typ: typ}
			h.frame, _ = strconv.Atoi(f[0])
			h.length, _ = strconv.Atoi(lengths[i])
			h.time, _ = strconv.ParseFloat(f[13], 64)
			if typ == 1 {
				h.client = net.JoinHostPort(f[1], f[2])
			} else {
				h.client = net.JoinHostPort(f[3], f[4])
			}
			for g := range strings.SplitSeq(f[7], ",") {
				if n, err := strconv.Atoi(g); err == nil {
					if n&0x0f0f != 0x0a0a { // GREASE left out, as in the record
						h.groups = append(h.groups, tlsparse.Group(n).String())
					}
				}
			}
			if typ == 1 && len(types) == 1 {
				h.ja4 = ja4FromFields(f[8], f[9], f[10], f[11], f[12])
			}
			hs = append(hs, h)
		}
	}
	return hs
}

// ja4FromFields computes FoxIO's JA4 for a QUIC ClientHello from tshark's
// comma-separated fields, following the JA4 specification (GREASE dropped,
// ciphers and extensions sorted, SNI and ALPN left out of the extension
// hash, signature algorithms in order). It returns "" when the hello holds
// something this short version does not handle.
func ja4FromFields(ciphers, exts, sigalgs, versions, alpn string) string {
	hex4 := func(list string) []string {
		var out []string
		for v := range strings.SplitSeq(list, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 16)
			if err != nil || n&0x0f0f == 0x0a0a {
				continue
			}
			out = append(out, fmt.Sprintf("%04x", n))
		}
		return out
	}
	cs, es, sa, vs := hex4(ciphers), hex4(exts), hex4(sigalgs), hex4(versions)
	if slices.Contains(es, "0022") || slices.Contains(es, "0032") {
		return "" // other extensions carrying signature algorithms
	}
	ver := "00"
	if len(vs) > 0 {
		slices.Sort(vs)
		ver = map[string]string{"0304": "13", "0303": "12", "0302": "11", "0301": "10"}[vs[len(vs)-1]]
	}
	sni := "i"
	if slices.Contains(es, "0000") {
		sni = "d"
	}
	al := "00"
	if first, _, _ := strings.Cut(alpn, ","); first != "" {
		al = first[:1] + first[len(first)-1:]
	}
	hash := func(s string) string {
		if s == "" {
			return "000000000000"
		}
		h := sha256.Sum256([]byte(s))
		return fmt.Sprintf("%x", h[:6])
	}
	var rest []string
	for _, e := range es {
		if e != "0000" && e != "0010" {
			rest = append(rest, e)
		}
	}
	slices.Sort(cs)
	slices.Sort(rest)
	c := strings.Join(rest, ",")
	if len(sa) > 0 {
		c += "_" + strings.Join(sa, ",")
	}
	return fmt.Sprintf("q%s%s%02d%02d%s_%s_%s", ver, sni, min(len(cs), 99), min(len(es), 99), al,
		hash(strings.Join(cs, ",")), hash(c))
}

// compareTshark checks every QUIC record against tshark's dissection of the
// same capture: lengths (ours include the 4-byte header) and key_share
// groups. tshark 4.0 does not reassemble every multi-packet ClientHello; a
// hello it could not dissect is logged, not failed, and at least one record
// must have been compared.
func compareTshark(t *testing.T, file string, recs []*record.Handshake) {
	t.Helper()
	chs, shs := tsharkQUICHellos(t, file, 1), tsharkQUICHellos(t, file, 2)
	initials := tsharkCryptoInitials(t, file)
	t.Logf("tshark: %d QUIC ClientHellos %+v, %d ServerHellos %+v", len(chs), chs, len(shs), shs)
	compared := 0
	for _, r := range recs {
		var ch, sh *tsharkHello
		for i := range chs {
			if chs[i].client == r.ClientText() && ch == nil {
				ch = &chs[i]
			}
		}
		for i := range shs {
			if shs[i].client == r.ClientText() && sh == nil {
				sh = &shs[i]
			}
		}
		if ch == nil {
			t.Logf("%s: tshark dissected no ClientHello for this connection (tshark 4.0 and a ClientHello over %d Initials)", r.ClientText(), r.ClientHelloSegments)
		} else {
			compared++
			var ours []string
			for _, ks := range r.KeyShares {
				ours = append(ours, ks.Group)
			}
			if ch.length+4 != r.ClientHelloBytes {
				t.Errorf("%s: client_hello_bytes %d, tshark %d+4", r.ClientText(), r.ClientHelloBytes, ch.length)
			}
			if strings.Join(ch.groups, ",") != strings.Join(ours, ",") {
				t.Errorf("%s: key_share groups %v, tshark %v", r.ClientText(), ours, ch.groups)
			}
			switch {
			case ch.ja4 == "":
				t.Logf("%s: no JA4 from tshark's fields", r.ClientText())
			case ch.ja4 != r.JA4:
				t.Errorf("%s: ja4 %s, from tshark's fields %s", r.ClientText(), r.JA4, ch.ja4)
			default:
				t.Logf("%s: ja4 %s = JA4 of tshark's fields", r.ClientText(), r.JA4)
			}
			t.Logf("%s: ClientHello tshark %d+4 groups %v = ours %d %v", r.ClientText(), ch.length, ch.groups, r.ClientHelloBytes, ours)
		}
		if sh == nil {
			t.Logf("%s: tshark dissected no ServerHello for this connection", r.ClientText())
		} else {
			compared++
			if sh.length+4 != r.ServerHelloBytes {
				t.Errorf("%s: server_hello_bytes %d, tshark %d+4", r.ClientText(), r.ServerHelloBytes, sh.length)
			}
			if len(sh.groups) != 1 || sh.groups[0] != r.Group {
				t.Errorf("%s: group %q, tshark %v", r.ClientText(), r.Group, sh.groups)
			}
			t.Logf("%s: ServerHello tshark %d+4 group %v = ours %d %s", r.ClientText(), sh.length, sh.groups, r.ServerHelloBytes, r.Group)
			// Handshake RTT: pqwatch measures from the first Initial
			// carrying ClientHello bytes to the first server Initial
			// with CRYPTO data; tshark's frame times of those packets.
			// (tshark shows a hello in the frame that completes it, and
			// a loaded machine can put milliseconds between the two
			// Initials of Chromium's ClientHello.)
			if in, ok := initials[r.ClientText()]; ok && in.server > 0 {
				want := (in.server - in.client) * 1e6
				if d := float64(r.HandshakeRTTMicros) - want; d > 50 || d < -50 {
					t.Errorf("%s: handshake_rtt_us %d, tshark's frames say %.0f", r.ClientText(), r.HandshakeRTTMicros, want)
				} else {
					t.Logf("%s: handshake_rtt_us %d, tshark's frames %.0f", r.ClientText(), r.HandshakeRTTMicros, want)
				}
			}
		}
	}
	if compared == 0 {
		t.Errorf("tshark dissected none of the %d QUIC handshakes pqwatch reported", len(recs))
	}
}

// bodyMarker is the text Caddy serves; finding it in Chromium's DOM proves
// the page arrived.
const bodyMarker = "pqwatch-http3-ok"

type caddyServer struct {
	accessLog, errLog string
}

// startCaddy runs Caddy with a JSON config: one server on 127.0.0.1:port
// speaking h1, h2 and h3 with the given certificate, a JSON access log, no
// admin endpoint and no automatic HTTPS. Cleanup stops it.
func startCaddy(t *testing.T, bin, dir string, port int, certFile, keyFile string) *caddyServer {
	t.Helper()
	srv := &caddyServer{accessLog: filepath.Join(dir, "access.log"), errLog: filepath.Join(dir, "caddy.log")}
	cfg := map[string]any{
		"admin": map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{
			"default": map[string]any{"exclude": []string{"http.log.access.e2e"}},
			"e2e": map[string]any{
				"writer":  map[string]any{"output": "file", "filename": srv.accessLog},
				"encoder": map[string]any{"format": "json"},
				"include": []string{"http.log.access.e2e"},
			},
		}},
		"apps": map[string]any{
			"http": map[string]any{"servers": map[string]any{"e2e": map[string]any{
				"listen":                  []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"protocols":               []string{"h1", "h2", "h3"},
				"automatic_https":         map[string]any{"disable": true},
				"tls_connection_policies": []any{map[string]any{}},
				"logs":                    map[string]any{"default_logger_name": "e2e"},
				"routes": []any{map[string]any{"handle": []any{map[string]any{
					"handler": "static_response",
					"headers": map[string][]string{"Content-Type": {"text/html; charset=utf-8"}},
					"body":    "<!doctype html><html><body><p id=m>" + bodyMarker + "</p></body></html>",
				}}}},
			}}},
			"tls": map[string]any{"certificates": map[string]any{"load_files": []any{
				map[string]any{"certificate": certFile, "key": keyFile},
			}}},
		},
	}
	js, _ := json.MarshalIndent(cfg, "", "  ")
	confFile := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(confFile, js, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(srv.errLog)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", confFile)
	cmd.Dir = dir
	// Caddy keeps its storage (and would keep certificates) under HOME and
	// XDG dirs: give it the test's own.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	// Ready when the HTTP/3 listener is announced and TCP accepts.
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("caddy exited: %v\n%s", err, readFile(srv.errLog))
		default:
		}
		log := readFile(srv.errLog)
		if strings.Contains(log, "HTTP/3") {
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				c.Close()
				return srv
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not start serving HTTP/3 on port %d:\n%s", port, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caddyRequest is the part of Caddy's JSON access log line this test reads.
type caddyRequest struct {
	Logger  string `json:"logger"`
	Status  int    `json:"status"`
	Request struct {
		RemoteIP   string `json:"remote_ip"`
		RemotePort string `json:"remote_port"`
		Proto      string `json:"proto"`
		Method     string `json:"method"`
		Host       string `json:"host"`
		URI        string `json:"uri"`
		TLS        struct {
			Proto      string `json:"proto"`
			ServerName string `json:"server_name"`
		} `json:"tls"`
	} `json:"request"`
}

func caddyRequests(t *testing.T, file string) []caddyRequest {
	t.Helper()
	var reqs []caddyRequest
	sc := bufio.NewScanner(bytes.NewReader([]byte(readFile(file))))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r caddyRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Errorf("caddy access log line %q: %v", sc.Text(), err)
			continue
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// runChromium fetches url with headless Chromium forced onto QUIC for the
// origin, trusting only the test certificate's key, and returns the DOM it
// printed. The whole run is bounded; the process group is killed on
// time-out.
func runChromium(t *testing.T, bin, url string, port int, spkiHash string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile := t.TempDir()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile,
		"--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
		"--enable-quic",
		// Chromium tries ::1 first for localhost; Caddy listens on 127.0.0.1.
		"--host-resolver-rules=MAP localhost 127.0.0.1",
		fmt.Sprintf("--origin-to-force-quic-on=localhost:%d", port),
		"--ignore-certificate-errors-spki-list="+spkiHash,
		"--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// Chromium's helpers share its process group; make sure none outlives
	// the run.
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil || ctx.Err() != nil || !strings.Contains(stdout.String(), bodyMarker) {
		return stdout.String(), fmt.Errorf("exit %v (context %v); stdout:\n%s\nstderr:\n%s", err, ctx.Err(), tail(stdout.String(), 2000), tail(stderr.String(), 4000))
	}
	return stdout.String(), nil
}

// readCapture reads a capture with a default sniffer and returns its
// records (flushed at the end), the file's stats and the sniffer's.
func readCapture(t *testing.T, file string) ([]*record.Handshake, sniffer.FileStats, sniffer.Stats) {
	t.Helper()
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{OnRecord: func(h *record.Handshake) { recs = append(recs, h) }})
	fs, err := sniffer.ReadFile(file, s, nil)
	if err != nil || fs.Err != nil {
		t.Fatalf("ReadFile: %v %v", err, fs.Err)
	}
	s.Flush()
	return recs, fs, s.Stats()
}

// settle waits until tcpdump has written what it captured. tcpdump reads
// the kernel's TPACKET_V3 ring block by block, and a block that is not full
// is handed over only after the 1 s buffer timeout; testenv's Capture.Stop
// waits 500 ms, so without this the last packets of a short burst are lost
// (seen: the last 29 of 1350 datagrams, "0 packets dropped by kernel").
func settle() { time.Sleep(1500 * time.Millisecond) }

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

// keep copies file into keepDir under name when PQWATCH_E2E_KEEP is set.
func keep(t *testing.T, file, name string) {
	if keepDir == "" {
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Logf("keep %s: %v", file, err)
		return
	}
	os.MkdirAll(keepDir, 0o755)
	if err := os.WriteFile(filepath.Join(keepDir, name), b, 0o644); err != nil {
		t.Logf("keep %s: %v", name, err)
	}
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
