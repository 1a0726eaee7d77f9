package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// policyServer serves crypto/tls on a loopback port; with legacySNI, a
// client naming that SNI gets classical-only CurvePreferences from
// GetConfigForClient: a server declared hybrid-first that silently picks
// X25519 for some clients.
func policyServer(t *testing.T, legacySNI string) (string, uint16) {
	t.Helper()
	_, _, cert := testenv.Cert(t, t.TempDir())
	base := &tls.Config{Certificates: []tls.Certificate{cert}}
	if legacySNI != "" {
		legacy := base.Clone()
		legacy.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
		base.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			if h.ServerName == legacySNI {
				return legacy, nil
			}
			return nil, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := tls.Server(c, base)
				s.SetDeadline(time.Now().Add(5 * time.Second))
				if s.Handshake() == nil {
					io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
				}
			}()
		}
	}()
	a := ln.Addr().(*net.TCPAddr)
	return a.String(), uint16(a.Port)
}

// policyOutcome is what one client saw: the group of the server's final
// ServerHello, else of its HRR, and whether there was an HRR.
type policyOutcome struct {
	client, server, kind, sni string
	group                     string
	hrr                       bool
}

// goPolicyClient handshakes with crypto/tls and reports what it negotiated
// (ConnectionState: CurveID, HelloRetryRequest).
func goPolicyClient(t *testing.T, addr, sni string, curves []tls.CurveID, maxVer uint16) (client, group string, hrr bool) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, ServerName: sni, CurvePreferences: curves, MaxVersion: maxVer})
	if err != nil {
		t.Fatalf("%s sni %s: %v", addr, sni, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c)
	return c.LocalAddr().String(), tlsparse.Group(st.CurveID).String(), st.HelloRetryRequest
}

// rawPolicyClient sends a shaped ClientHello and reads the server's first
// message: a ServerHello (its group) or an HRR (the group it asks for);
// then it closes.
func rawPolicyClient(t *testing.T, addr, sni string, offered, shares []uint16) (client, group string, hrr bool) {
	t.Helper()
	ch, err := testenv.RawClientHello(offered, shares, sni)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append([]byte{22, 3, 1, byte(len(ch) >> 8), byte(len(ch))}, ch...)); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 22 {
		t.Fatalf("%s: no handshake record back (%v, %x)", addr, err, hdr)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	var sh tlsparse.ServerHello
	if err := sh.Parse(body); err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	// Let the capture see the answer before the FIN.
	time.Sleep(20 * time.Millisecond)
	return c.LocalAddr().String(), sh.Group.String(), sh.HRR
}

// TestPolicyCheckLive: four real servers on loopback, each with its
// declared policy: a correct Go server (go), a real Caddy (caddy), Debian's
// nginx with OpenSSL 3.0 and ssl_ecdh_curve X25519:prime256v1
// (openssl30=X25519:prime256v1), and a Go server declared go whose
// GetConfigForClient swaps in classical-only CurvePreferences for SNI
// legacy.test. The same client mix (crypto/tls
// clients and shaped ClientHellos: a P-256 share with hybrid listed, an
// x25519 share with hybrid listed) runs against each, three rounds,
// captured on lo by tcpdump while `pqwatch run -expect-policy` watches
// too. Ground truth, from the clients' side: a handshake breaks the
// declared rule when the swapping server answered it otherwise than the
// correct Go server answered the same client. analyze -expect-policy over
// the capture must flag exactly those handshakes (by client address), none
// of the correct Go server, Caddy and nginx, check every handshake, and
// run's metric and summary must say the same.
func TestPolicyCheckLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "tcpdump", "caddy", "nginx")
	good, goodPort := policyServer(t, "")
	bad, badPort := policyServer(t, "legacy.test")
	cd := testenv.StartCaddy(t, testenv.CaddyConf, 0) // default curves, "tls internal"
	caddy, caddyPort := cd.Addr, uint16(cd.Port)
	nginxPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	nginx := fmt.Sprintf("127.0.0.1:%d", nginxPort)
	testenv.StartNginx(t, testenv.NginxOptions{Listen: nginx, ECDHCurve: "X25519:prime256v1"})
	ports := fmt.Sprintf("%d,%d,%d,%d", goodPort, badPort, caddyPort, nginxPort)
	expect := []string{"-expect-policy", good + "=go", "-expect-policy", bad + "=go", "-expect-policy", fmt.Sprintf(":%d=caddy", caddyPort),
		"-expect-policy", nginx + "=openssl30=X25519:prime256v1"}

	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	runOut := filepath.Join(t.TempDir(), "run.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, append([]string{"run", "-iface", "lo", "-ports", ports, "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort),
			"-format", "json", "-o", runOut, "-no-process-tracking", "-log-level", "warn"}, expect...), io.Discard, &runErr)
	}()
	capt := testenv.StartCapture(t, "", "lo", fmt.Sprintf("tcp port %d or tcp port %d or tcp port %d or tcp port %d", goodPort, badPort, caddyPort, nginxPort))
	time.Sleep(300 * time.Millisecond) // run's rings up, as tcpdump's

	const (
		mlkem  = 0x11ec
		x25519 = 0x001d
		p256   = 0x0017
	)
	type clientKind struct {
		name string
		do   func(addr, sni string) (string, string, bool)
	}
	goKind := func(name string, curves []tls.CurveID, maxVer uint16) clientKind {
		return clientKind{name, func(addr, sni string) (string, string, bool) { return goPolicyClient(t, addr, sni, curves, maxVer) }}
	}
	rawKind := func(name string, offered, shares []uint16) clientKind {
		return clientKind{name, func(addr, sni string) (string, string, bool) { return rawPolicyClient(t, addr, sni, offered, shares) }}
	}
	mix := []clientKind{
		goKind("go-default", nil, 0),
		goKind("go-x25519", []tls.CurveID{tls.X25519}, 0),
		goKind("go-p256", []tls.CurveID{tls.CurveP256}, 0),
		goKind("go-tls12", nil, tls.VersionTLS12),
		rawKind("p256-share-hybrid-listed", []uint16{mlkem, p256}, []uint16{p256}),
		rawKind("x25519-share-hybrid-listed", []uint16{x25519, mlkem}, []uint16{x25519}),
	}
	targets := []struct{ addr, sni string }{{good, "pqwatch.test"}, {bad, "pqwatch.test"}, {bad, "legacy.test"}, {caddy, "localhost"}, {nginx, "pqwatch.test"}}
	var seen []policyOutcome
	const rounds = 3
	for range rounds {
		for _, k := range mix {
			for _, tg := range targets {
				cl, g, hrr := k.do(tg.addr, tg.sni)
				seen = append(seen, policyOutcome{client: cl, server: tg.addr, kind: k.name, sni: tg.sni, group: g, hrr: hrr})
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	capt.Stop()
	if dir := os.Getenv("PQWATCH_KEEP_CAPTURE"); dir != "" {
		b, _ := os.ReadFile(capt.File)
		_ = os.WriteFile(filepath.Join(dir, "policy.pcap"), b, 0o644)
		t.Logf("kept %s; -expect-policy %s", filepath.Join(dir, "policy.pcap"), strings.Join(expect, " "))
	}

	// Ground truth: the correct Go server's answer per client kind (the
	// same in every round, or the test is void), and each handshake of the
	// other servers that differs from it.
	ref := map[string]policyOutcome{}
	for _, o := range seen {
		if o.server != good {
			continue
		}
		if r, ok := ref[o.kind]; ok && (r.group != o.group || r.hrr != o.hrr) {
			t.Fatalf("the correct server answered %s differently across rounds: %+v vs %+v", o.kind, r, o)
		}
		ref[o.kind] = o
	}
	truth := map[string]bool{} // client address -> breaks the declared rule
	var caddyDiffers int
	for _, o := range seen {
		r := ref[o.kind]
		differs := o.group != r.group || o.hrr != r.hrr
		switch o.server {
		case bad:
			if differs {
				truth[o.client] = true
			}
		case caddy:
			if differs {
				caddyDiffers++ // Caddy's list is Go's default minus groups no client here offers
			}
		}
	}
	if caddyDiffers != 0 {
		t.Errorf("Caddy answered %d handshakes differently from the Go default server", caddyDiffers)
	}
	for _, k := range mix {
		t.Logf("%-28s correct server: %s hrr=%v", k.name, ref[k.name].group, ref[k.name].hrr)
	}
	// The swap shows for three kinds under SNI legacy.test: go-default
	// (X25519MLKEM768 -> x25519) and both shaped hellos (an HRR for
	// X25519MLKEM768 -> the classical share taken), every round.
	if len(truth) != 3*rounds {
		t.Fatalf("%d handshakes break the rule by the clients' account, want %d (the swap or the mix changed)", len(truth), 3*rounds)
	}

	code, out, stderr := run(t, append(append([]string{"analyze", "-format", "json"}, expect...), capt.File)...)
	if code != 0 {
		t.Fatalf("analyze exited %d: %s", code, stderr)
	}
	var sum struct {
		Handshakes int                 `json:"handshakes"`
		Policy     *report.PolicyCheck `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Policy == nil {
		t.Fatalf("analyze JSON: %v\n%s", err, out)
	}
	pc := sum.Policy
	n := len(seen)
	if sum.Handshakes != n || pc.Covered != n || pc.Checked != n {
		t.Errorf("%d connections; analyze: %d handshakes, %d covered, %d checked (unchecked %v)", n, sum.Handshakes, pc.Covered, pc.Checked, pc.Unchecked)
	}
	if pc.Violations != len(truth) || pc.Matched != n-len(truth) || pc.ByKind[report.ViolationClassical] != len(truth) {
		t.Errorf("violations %d (%v), matched %d; truth: %d of %d", pc.Violations, pc.ByKind, pc.Matched, len(truth), n)
	}
	for srv, want := range map[string]int{good: 0, bad: len(truth), caddy: 0, nginx: 0} {
		row := pc.ByServer[srv]
		if row == nil || row.Violations != want || row.Checked != n/len(targets)*map[bool]int{true: 2, false: 1}[srv == bad] {
			t.Errorf("server %s: %+v, want %d violations", srv, row, want)
		}
	}
	flagged := map[string]bool{}
	for _, v := range pc.First {
		flagged[v.Client] = true
		if v.Server != bad || v.SNI != "legacy.test" {
			t.Errorf("flagged %+v: not the swapped clients", v)
		}
	}
	if !mapsEqual(flagged, truth) {
		t.Errorf("flagged clients %v, truth %v", keys(flagged), keys(truth))
	}
	for r, c := range pc.ByServer[bad].Reasons {
		t.Logf("%d  %s", c, r)
	}

	// run: the metric, then the summary at shutdown.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatalf("metrics: %v (run: %s)", err, runErr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metric := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^pqwatch_policy_violations_total\{(.*)\} (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		metric[m[1]] = v
	}
	if len(metric) != 5*len(report.ViolationKinds) {
		t.Errorf("%d series of pqwatch_policy_violations_total, want %d (4 ports and other)", len(metric), 5*len(report.ViolationKinds))
	}
	for labels, v := range metric {
		want := 0.0
		if labels == fmt.Sprintf(`reason="%s",server_port="%d"`, report.ViolationClassical, badPort) {
			want = float64(len(truth))
		}
		if v != want {
			t.Errorf("pqwatch_policy_violations_total{%s} = %v, want %v", labels, v, want)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d: %s", code, runErr.String())
	}
	b, err := os.ReadFile(runOut)
	if err != nil {
		t.Fatal(err)
	}
	var runSum struct {
		Policy *report.PolicyCheck `json:"policy"`
	}
	if err := json.Unmarshal(b, &runSum); err != nil || runSum.Policy == nil {
		t.Fatalf("run summary: %v", err)
	}
	if rp := runSum.Policy; rp.Checked != n || rp.Violations != len(truth) {
		t.Errorf("run's summary: %d checked, %d violations; want %d, %d", rp.Checked, rp.Violations, n, len(truth))
	}
	t.Logf("%d handshakes: %d checked, %d matched, %d violations (%v); metric %v", n, pc.Checked, pc.Matched, pc.Violations, pc.ByKind, float64(len(truth)))
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return k
}
