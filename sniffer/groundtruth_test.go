package sniffer_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// truth is what a client itself reported about one connection.
type truth struct {
	name     string
	ok       bool
	group    string // "" when the client cannot tell
	hrr      bool
	hrrKnown bool
	chBytes  int // 0 when the client cannot tell
	shBytes  int
	version  string
	port     int // client port when known
}

// tapConn records the bytes a crypto/tls client writes and reads.
type tapConn struct {
	net.Conn
	mu      sync.Mutex
	out, in []byte
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.in = append(c.in, b[:n]...)
	c.mu.Unlock()
	return n, err
}

// handshakeMsgs splits the plaintext handshake messages out of a byte
// stream of TLS records, stopping at the first non-handshake record other
// than ChangeCipherSpec.
func handshakeMsgs(b []byte) [][]byte {
	var hs []byte
	for len(b) >= 5 {
		n := int(b[3])<<8 | int(b[4])
		if len(b) < 5+n {
			break
		}
		if b[0] == 22 {
			hs = append(hs, b[5:5+n]...)
		} else if b[0] != 20 {
			break
		}
		b = b[5+n:]
	}
	var msgs [][]byte
	for len(hs) >= 4 {
		n := 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
		if len(hs) < n {
			break
		}
		msgs = append(msgs, hs[:n])
		hs = hs[n:]
	}
	return msgs
}

func goClient(ns, addr, name string, curves []tls.CurveID, maxVer uint16) truth {
	tr := truth{name: name, hrrKnown: true}
	c, err := testenv.Dial(ns, addr, 5*time.Second)
	if err != nil {
		tr.name += " dial: " + err.Error()
		return tr
	}
	tr.port = c.LocalAddr().(*net.TCPAddr).Port
	tc := &tapConn{Conn: c}
	cl := tls.Client(tc, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test", CurvePreferences: curves, MaxVersion: maxVer, ClientSessionCache: nil})
	cl.SetDeadline(time.Now().Add(5 * time.Second))
	err = cl.Handshake()
	if msgs := handshakeMsgs(tc.out); len(msgs) > 0 {
		tr.chBytes = len(msgs[0])
	}
	if err == nil {
		st := cl.ConnectionState()
		tr.ok = true
		tr.group = tlsparse.Group(st.CurveID).String()
		tr.hrr = st.HelloRetryRequest
		tr.version = tlsparse.VersionName(st.Version)
		for _, m := range handshakeMsgs(tc.in) {
			if m[0] == 2 {
				tr.shBytes = len(m) // the last ServerHello is the final one
			}
		}
		fmt.Fprintf(cl, "GET / HTTP/1.1\r\nHost: pqwatch.test\r\nConnection: close\r\n\r\n")
		buf := make([]byte, 4096)
		for {
			if _, err := cl.Read(buf); err != nil {
				break
			}
		}
	}
	cl.Close()
	return tr
}

var (
	reMsg     = regexp.MustCompile(`^(>>>|<<<) (TLS [0-9.]+|\?\?\?), Handshake \[length ([0-9a-f]+)\], (ClientHello|ServerHello)\s*$`)
	reTempKey = regexp.MustCompile(`Server Temp Key: (?:ECDH, )?([A-Za-z0-9-]+)`)
	reProto   = regexp.MustCompile(`Protocol\s*: (TLSv[0-9.]+)`)
)

var opensslGroups = map[string]string{"X25519": "x25519", "X448": "x448", "prime256v1": "secp256r1", "secp384r1": "secp384r1", "secp521r1": "secp521r1", "P-256": "secp256r1", "P-384": "secp384r1"}

func opensslClient(ns, addr, name string, args ...string) truth {
	tr := truth{name: name, hrrKnown: true}
	a := append([]string{"s_client", "-connect", addr, "-servername", "pqwatch.test", "-msg", "-no_ticket"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := testenv.Cmd(ctx, ns, "openssl", a...)
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	shs := 0
	for _, line := range strings.Split(string(out), "\n") {
		if m := reMsg.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[3], 16, 32)
			if m[1] == ">>>" && m[4] == "ClientHello" && tr.chBytes == 0 {
				tr.chBytes = int(n) // -msg prints the length with the 4-byte header
			}
			if m[1] == "<<<" && m[4] == "ServerHello" {
				tr.shBytes = int(n)
				shs++
			}
		}
		if m := reTempKey.FindStringSubmatch(line); m != nil {
			tr.group = opensslGroups[m[1]]
			if tr.group == "" {
				tr.group = m[1]
			}
		}
		if m := reProto.FindStringSubmatch(line); m != nil {
			tr.version = strings.Replace(m[1], "TLSv", "TLS", 1)
		}
	}
	tr.ok = shs > 0 && tr.group != ""
	tr.hrr = shs > 1
	return tr
}

func curlClient(ns, addr, name string, args ...string) truth {
	tr := truth{name: name}
	a := append([]string{"-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "--no-sessionid", "https://" + addr + "/"}, args...)
	out, _ := testenv.Cmd(context.Background(), ns, "curl", a...).Output()
	tr.ok = strings.TrimSpace(string(out)) == "200"
	return tr
}

// TestGroundTruthRealServers captures real servers and real clients — nginx
// from Debian (OpenSSL 3.0) and a Go crypto/tls server, Go clients of several
// curve preferences, openssl s_client (TLS 1.3, -tls1_2, an HRR) and curl —
// on loopback and across a veth pair with MTU 1500, and checks every record
// against what the client reported and what tshark dissects.
func TestGroundTruthRealServers(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx", "tcpdump", "tshark", "openssl", "curl")
	for _, mode := range []string{"veth", "loopback"} {
		t.Run(mode, func(t *testing.T) { groundTruth(t, mode) })
	}
}

func groundTruth(t *testing.T, mode string) {
	pair := testenv.NewPair(t, 1500)
	testenv.StartNginx(t, testenv.NginxOptions{NS: pair.S, Listen: "443", ECDHCurve: "X25519:prime256v1"})
	// A Go server with crypto/tls defaults (hybrid first).
	testenv.GoServer(t, pair.S, ":8443", nil)
	clientNS, iface, host := pair.C, pair.SIf, pair.SAddr
	if mode == "loopback" {
		clientNS, iface, host = pair.S, "lo", "127.0.0.1"
	}
	capt := testenv.StartCapture(t, pair.S, iface, "tcp port 443 or tcp port 8443")
	nginx, gosrv := net.JoinHostPort(host, "443"), net.JoinHostPort(host, "8443")
	type step struct {
		server string
		run    func() truth
	}
	var steps []step
	for _, srv := range []string{nginx, gosrv} {
		srv := srv
		steps = append(steps,
			step{srv, func() truth { return goClient(clientNS, srv, "go-default", nil, 0) }},
			step{srv, func() truth { return goClient(clientNS, srv, "go-x25519", []tls.CurveID{tls.X25519}, 0) }},
			step{srv, func() truth { return goClient(clientNS, srv, "go-p256", []tls.CurveID{tls.CurveP256}, 0) }},
			step{srv, func() truth {
				return goClient(clientNS, srv, "go-pq-only", []tls.CurveID{tls.X25519MLKEM768}, 0)
			}},
			step{srv, func() truth {
				return goClient(clientNS, srv, "go-tls12", []tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12)
			}},
			step{srv, func() truth { return opensslClient(clientNS, srv, "openssl-tls13") }},
			step{srv, func() truth { return opensslClient(clientNS, srv, "openssl-tls12", "-tls1_2") }},
			step{srv, func() truth { return opensslClient(clientNS, srv, "openssl-hrr", "-groups", "P-384:X25519") }},
			step{srv, func() truth { return curlClient(clientNS, srv, "curl") }},
		)
	}
	var truths []truth
	for _, s := range steps {
		tr := s.run()
		tr.name = s.server + " " + tr.name
		truths = append(truths, tr)
		time.Sleep(30 * time.Millisecond) // keep the connections apart in time
	}
	capt.Stop()
	if dir := os.Getenv("PQWATCH_KEEP_CAPTURE"); dir != "" {
		b, _ := os.ReadFile(capt.File)
		os.WriteFile(filepath.Join(dir, "groundtruth-"+mode+".pcap"), b, 0o644)
	}

	recs, st := analyzeFile(t, capt.File)
	sort.Slice(recs, func(i, j int) bool { return recs[i].TS.Before(recs[j].TS) })
	if len(recs) != len(truths) {
		for _, r := range recs {
			t.Logf("record %s %s %s %s", r.ClientText(), r.Server, r.Group, r.Outcome)
		}
		t.Fatalf("%d records for %d client connections (stats %+v)", len(recs), len(truths), st)
	}
	ts := testenv.Tshark(t, capt.File, 8443)
	byConn := map[string][]testenv.TsharkHello{}
	for _, h := range ts {
		if h.Type == 1 {
			byConn[h.Src+">"+h.Dst] = append(byConn[h.Src+">"+h.Dst], h)
		} else {
			byConn[h.Dst+">"+h.Src] = append(byConn[h.Dst+">"+h.Src], h)
		}
	}
	var pqSeen, twoSeg int
	for i, tr := range truths {
		r := recs[i]
		if tr.port != 0 && r.ClientPort != uint16(tr.port) {
			t.Errorf("%s: record %d is for client port %d, client used %d", tr.name, i, r.ClientPort, tr.port)
			continue
		}
		if tr.ok != (r.Outcome == record.OutcomeOK) {
			t.Errorf("%s: outcome %s alert %q, client ok=%v", tr.name, r.Outcome, r.Alert, tr.ok)
		}
		if !tr.ok && r.Outcome != record.OutcomeAlert {
			t.Errorf("%s: failed handshake has outcome %s, want alert", tr.name, r.Outcome)
		}
		if tr.ok && tr.group != "" && r.Group != tr.group {
			t.Errorf("%s: group %q, client says %q", tr.name, r.Group, tr.group)
		}
		if tr.hrrKnown && r.HRR != tr.hrr {
			t.Errorf("%s: hrr %v, client says %v", tr.name, r.HRR, tr.hrr)
		}
		if tr.chBytes != 0 && r.ClientHelloBytes != tr.chBytes {
			t.Errorf("%s: client_hello_bytes %d, client says %d", tr.name, r.ClientHelloBytes, tr.chBytes)
		}
		if tr.ok && tr.shBytes != 0 && r.ServerHelloBytes != tr.shBytes {
			t.Errorf("%s: server_hello_bytes %d, client says %d", tr.name, r.ServerHelloBytes, tr.shBytes)
		}
		if tr.version != "" && tr.ok && r.Version != tr.version {
			t.Errorf("%s: version %s, client says %s", tr.name, r.Version, tr.version)
		}
		if r.ClientHelloSegments != r.ClientHelloWireSegments {
			t.Errorf("%s: CH segments %d captured, %d wire estimate (no offloads here)", tr.name, r.ClientHelloSegments, r.ClientHelloWireSegments)
		}
		if r.ClientHelloSegments > 1 {
			twoSeg++
		}
		if r.PQ {
			pqSeen++
		}
		// tshark's opinion of the same connection.
		hs := byConn[r.ClientText()+">"+r.Server]
		var chs, shs []testenv.TsharkHello
		for _, h := range hs {
			if h.Type == 1 {
				chs = append(chs, h)
			} else {
				shs = append(shs, h)
			}
		}
		if len(chs) == 0 {
			t.Errorf("%s: tshark saw no ClientHello on %s", tr.name, r.ClientText())
			continue
		}
		if chs[0].Length+4 != r.ClientHelloBytes {
			t.Errorf("%s: client_hello_bytes %d, tshark %d", tr.name, r.ClientHelloBytes, chs[0].Length+4)
		}
		// Handshake RTT: tshark shows a message in the frame that completes
		// it, pqwatch starts at the first byte, so the two differ by the time
		// between the hello's segments at most (back to back here).
		if len(shs) > 0 && r.HandshakeRTTMicros > 0 {
			want := (shs[0].Time - chs[0].Time) * 1e6
			if d := float64(r.HandshakeRTTMicros) - want; d > 2000 || d < -2000 {
				t.Errorf("%s: handshake_rtt_us %d, tshark's frames say %.0f", tr.name, r.HandshakeRTTMicros, want)
			}
		}
		hrr := false
		var final *testenv.TsharkHello
		for i := range shs {
			if shs[i].HRR {
				hrr = true
			} else {
				final = &shs[i]
			}
		}
		if hrr != r.HRR {
			t.Errorf("%s: hrr %v, tshark %v", tr.name, r.HRR, hrr)
		}
		if (final != nil) != (r.Outcome == record.OutcomeOK) {
			t.Errorf("%s: outcome %s, tshark final ServerHello %v", tr.name, r.Outcome, final != nil)
		}
		if final != nil {
			if final.Length+4 != r.ServerHelloBytes {
				t.Errorf("%s: server_hello_bytes %d, tshark %d", tr.name, r.ServerHelloBytes, final.Length+4)
			}
			if r.Version == "TLS1.3" && len(final.Groups) > 0 {
				g, _ := strconv.Atoi(final.Groups[0])
				if name := tlsparse.Group(g).String(); name != r.Group {
					t.Errorf("%s: group %s, tshark %s", tr.name, r.Group, name)
				}
			}
		}
		t.Logf("%-34s group=%-15s hrr=%-5v outcome=%-5s ch=%d sh=%d seg=%d/%d", tr.name, r.Group, r.HRR, r.Outcome, r.ClientHelloBytes, r.ServerHelloBytes, r.ClientHelloSegments, r.ClientHelloWireSegments)
	}
	if pqSeen == 0 {
		t.Error("no hybrid handshake seen; the Go server should negotiate X25519MLKEM768 with the default Go client")
	}
	if mode == "veth" && twoSeg == 0 {
		t.Error("no ClientHello spanned two segments across the MTU-1500 veth")
	}
	_ = exec.Command
}
