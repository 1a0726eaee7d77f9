package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// TestServerKeyExchangeCut is the capture with a ServerKeyExchange cut out.
// Two namespaces joined by a veth at MTU 1500; a crypto/tls server sends
// TLS 1.2 with a certificate chain of about 11.5 KB, so its first flight
// spans about nine segments, the ServerKeyExchange in the last of them. Three
// clients (x25519, secp256r1, secp384r1: the group each negotiated is the
// truth) are captured on the client's veth. Then, with editcap:
//   - the x25519 flow loses the frame tshark dissects the ServerKeyExchange
//     in: its record must say group_missing unknown (not no_key_exchange),
//     counted as capture_gap and server_key_exchange_missing;
//   - the secp256r1 flow loses a frame inside the Certificate: the hole,
//     acknowledged by the client, is stepped over and the group stays;
//   - the secp384r1 flow is untouched.
//
// The uncut capture gives every client's group.
func TestServerKeyExchangeCut(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	tshark := testenv.NeedBin(t, "tshark")
	editcap := testenv.NeedBin(t, "editcap")
	testenv.NeedBin(t, "tcpdump")
	p := testenv.NewPair(t, 1500)

	cert := bigChain(t)
	ln, err := testenv.Listen(p.S, p.SAddr+":8443")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go pcapgen.Respond(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MaxVersion: tls.VersionTLS12, SessionTicketsDisabled: true})

	capt := testenv.StartCapture(t, p.C, p.CIf, "tcp port 8443")
	curves := []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384}
	truth := map[string]string{} // client ip:port -> group the client negotiated
	var order []string
	for _, c := range curves {
		conn, err := testenv.Dial(p.C, p.SAddr+":8443", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{c}, MaxVersion: tls.VersionTLS12})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		st := tc.ConnectionState()
		if st.Version != tls.VersionTLS12 || len(st.PeerCertificates) != len(cert.Certificate) {
			t.Fatalf("%v: version %x, %d certificates", c, st.Version, len(st.PeerCertificates))
		}
		client := conn.LocalAddr().String()
		truth[client] = tlsparse.Group(st.CurveID).String()
		order = append(order, client)
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		io.Copy(io.Discard, tc)
		tc.Close()
	}
	capt.Stop()

	// The uncut capture: every group as the clients negotiated it.
	recs := analyzeRecords(t, capt.File)
	for client, g := range truth {
		r := recs[client]
		if r == nil || r.Group != g || r.GroupMissing != "" {
			t.Errorf("uncut %s: record %+v, the client negotiated %s", client, r, g)
		}
	}

	// Server-to-client frames with payload, per client port, and the frame
	// tshark dissects each ServerKeyExchange in.
	type seg struct {
		frame int
		port  string
	}
	var server []seg
	out, err := exec.Command(tshark, "-r", capt.File, "-n", "-Y", "tcp.srcport == 8443 && tcp.len > 0",
		"-T", "fields", "-e", "frame.number", "-e", "tcp.dstport", "-e", "tls.handshake.type").Output()
	if err != nil {
		t.Fatal(err)
	}
	ske := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[0])
		server = append(server, seg{n, f[1]})
		if len(f) > 2 && hasType(f[2], "12") {
			ske[f[1]] = n
		}
	}
	port := func(client string) string { return client[strings.LastIndexByte(client, ':')+1:] }
	cutSKE := ske[port(order[0])]
	if cutSKE == 0 {
		t.Fatalf("tshark found no ServerKeyExchange for %s: %q", order[0], out)
	}
	// A frame inside the second flow's Certificate: its second server
	// segment with payload (the first holds the ServerHello), well before
	// its ServerKeyExchange.
	var cutCert int
	var k int
	for _, s := range server {
		if s.port == port(order[1]) {
			if k++; k == 2 {
				cutCert = s.frame
			}
		}
	}
	if skeAt := ske[port(order[1])]; cutCert == 0 || skeAt-cutCert < 3 {
		t.Fatalf("the second flow's first flight is too short to cut inside its Certificate: frame %d, ServerKeyExchange in %d", cutCert, skeAt)
	}
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	if b, err := exec.Command(editcap, capt.File, cut, strconv.Itoa(cutSKE), strconv.Itoa(cutCert)).CombinedOutput(); err != nil {
		t.Fatalf("editcap: %v: %s", err, b)
	}
	// tshark on the cut capture no longer finds the first flow's
	// ServerKeyExchange.
	out, err = exec.Command(tshark, "-r", cut, "-n", "-Y", "tls.handshake.type == 12", "-T", "fields", "-e", "tcp.dstport").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), port(order[0])) {
		t.Fatalf("tshark still dissects the cut ServerKeyExchange: %q", out)
	}

	recs = analyzeRecords(t, cut)
	if r := recs[order[0]]; r == nil || r.Outcome != record.OutcomeOK || r.Group != "" || r.GroupMissing != record.GroupMissingUnknown {
		t.Errorf("ServerKeyExchange cut out: record %+v, want outcome ok, no group, group_missing unknown", r)
	}
	for _, c := range order[1:] {
		if r := recs[c]; r == nil || r.Group != truth[c] {
			t.Errorf("%s: record %+v, the client negotiated %s", c, r, truth[c])
		}
	}
	var sum summaryJSON
	code, stdout, stderr := run(t, "analyze", "-format", "json", cut)
	if err := json.Unmarshal([]byte(stdout), &sum); code != 0 || err != nil {
		t.Fatalf("analyze -format json: exit %d, %v: %s", code, err, stderr)
	}
	if sum.GroupMissing["unknown"] != 1 || sum.GroupMissing["no_key_exchange"] != 0 ||
		sum.Errors["server_key_exchange_missing"] != 1 || sum.Errors["capture_gap"] < 1 {
		t.Errorf("summary: group_missing %v, errors %v; want unknown 1, server_key_exchange_missing 1, capture_gap counted", sum.GroupMissing, sum.Errors)
	}
	code, text, _ := run(t, "analyze", cut)
	if code != 0 || !strings.Contains(text, "unknown") {
		t.Errorf("text report (exit %d) does not say unknown:\n%s", code, text)
	}
	chain := 0
	for _, c := range cert.Certificate {
		chain += len(c)
	}
	t.Logf("chain %d bytes in %d certificates; server frames (frame, client port) %v; cut %d and %d\ntcpdump: %q\n%s", chain, len(cert.Certificate), server, cutSKE, cutCert, capt.Stderr, text)
}

// hasType reports whether tshark's comma-separated tls.handshake.type list
// holds v.
func hasType(list, v string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == v {
			return true
		}
	}
	return false
}

// analyzeRecords runs `pqwatch analyze -format jsonl` and returns the
// records by client address.
func analyzeRecords(t *testing.T, file string) map[string]*record.Handshake {
	t.Helper()
	code, out, stderr := run(t, "analyze", "-format", "jsonl", file)
	if code != 0 {
		t.Fatalf("analyze %s: exit %d: %s", file, code, stderr)
	}
	recs := map[string]*record.Handshake{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r record.Handshake
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		recs[r.ClientText()] = &r
	}
	return recs
}

// bigChain is a self-signed ECDSA leaf followed by six filler certificates
// with 60 DNS names each (about 11.5 KB in all). The client does not verify
// the chain; crypto/tls parses every certificate, so they are real ones.
func bigChain(t *testing.T) tls.Certificate {
	t.Helper()
	leaf, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		var names []string
		for j := range 60 {
			names = append(names, fmt.Sprintf("filler-%d-%02d.pqwatch.test", i, j))
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: fmt.Sprintf("filler %d", i)},
			DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		leaf.Certificate = append(leaf.Certificate, der)
	}
	return leaf
}
