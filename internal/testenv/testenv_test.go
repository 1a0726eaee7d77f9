package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestLookBinMissing(t *testing.T) {
	_, err := LookBin("sh", "pqwatch-no-such-program")
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("err = %v, want one matching ErrMissing", err)
	}
	if want := "needs pqwatch-no-such-program (installed by .ci/run)"; err.Error() != want {
		t.Fatalf("err = %q, want %q", err, want)
	}
	p, err := LookBin("sh")
	if err != nil || !strings.HasSuffix(p, "/sh") {
		t.Fatalf("LookBin(sh) = %q, %v", p, err)
	}
}

func TestCheckRoot(t *testing.T) {
	err := CheckRoot()
	if (os.Geteuid() == 0) != (err == nil) || err != nil && !errors.Is(err, ErrMissing) {
		t.Fatalf("euid %d: CheckRoot() = %v", os.Geteuid(), err)
	}
}

func namespaces(t *testing.T) string {
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	return string(out)
}

// NewPairE's pair carries traffic between its namespaces, and Close leaves
// neither namespace behind.
func TestPairClose(t *testing.T) {
	NeedRoot(t)
	NeedBin(t, "ip")
	p, err := NewPairE(1400)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	for _, ns := range []string{p.S, p.C} {
		if !strings.Contains(namespaces(t), ns) {
			t.Fatalf("namespace %s not there after NewPairE", ns)
		}
	}
	ln, err := GoServerE(p.S, p.SAddr+":8443", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dial(p.C, p.SAddr+":8443", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "pqwatch.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake across the pair: %v", err)
	}
	tc.Close()

	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{p.S, p.C} {
		if strings.Contains(namespaces(t), ns) {
			t.Errorf("namespace %s still there after Close", ns)
		}
	}
	if err := p.Close(); err == nil {
		t.Error("a second Close reported no error")
	}
}

// StartNginxE's nginx answers over TLS and Stop ends it.
func TestNginxStop(t *testing.T) {
	NeedBin(t, "nginx")
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n, err := StartNginxE(context.Background(), t.TempDir(), NginxOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			n.Stop()
		}
	}()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "pqwatch.test", InsecureSkipVerify: true}}}
	resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "ok ") {
		t.Fatalf("GET: %s %q", resp.Status, body)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.PidFile); err == nil {
		t.Fatal("pid file still there after Stop")
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("Stop of a stopped nginx: %v", err)
	}
}

// A NewPairE that fails half-way (an MTU the veth refuses) leaves no
// namespace and no veth behind.
func TestPairFailureCleansUp(t *testing.T) {
	NeedRoot(t)
	NeedBin(t, "ip")
	mine := fmt.Sprintf("pqw%d-", os.Getpid())
	p, err := NewPairE(1 << 20)
	if err == nil {
		p.Close()
		t.Fatal("NewPairE(1<<20): no error")
	}
	if errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "mtu") {
		t.Fatalf("err = %v, want the failing ip mtu command", err)
	}
	if strings.Contains(namespaces(t), mine) {
		t.Fatalf("namespaces left behind:\n%s", namespaces(t))
	}
	if out, _ := exec.Command("ip", "-o", "link").CombinedOutput(); strings.Contains(string(out), fmt.Sprintf("pqv%d", int(seq.Load())+os.Getpid()%200)) {
		t.Fatalf("veth left behind:\n%s", out)
	}
}
