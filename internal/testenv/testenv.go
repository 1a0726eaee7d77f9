// Package testenv gives tests real peers: network namespaces joined by a
// veth pair, nginx from Debian with a throwaway prefix, tcpdump captures and
// tshark's opinion of them. Traffic stays on loopback or on the caller's own
// veths.
//
// The functions here that take a testing.TB are for tests: a missing
// prerequisite (root, a program) skips the test, any other failure fails it,
// and everything they start is stopped and removed by t.Cleanup. Each is a
// thin wrapper over an error-returning core that any program can use (as
// internal/benchlive does); the core returns errors instead, and the caller
// stops what it started:
//
//	NeedRoot(t)                CheckRoot() error
//	NeedBin(t, names...)       LookBin(names...) (string, error)
//	NewPair(t, mtu)            NewPairE(mtu) (*Pair, error); (*Pair).Close
//	Cert(t, dir)               CertE(dir) (certFile, keyFile, cert, error)
//	StartNginx(t, o)           StartNginxE(ctx, dir, o) (*Nginx, error); (*Nginx).Stop
//	StartCaddy(t, conf, port)  StartCaddyE(ctx, dir, conf, port) (*Caddy, error); (*Caddy).Stop
//	StartCapture(t, ...)       StartCaptureE(ns, iface, filter, file) (*Capture, error); (*Capture).Stop
//	Tshark(t, file, ...)       TsharkE(file, ...) ([]TsharkHello, error)
//	GoServer(t, ns, addr, ...) GoServerE(ns, addr, ...) (net.Listener, error)
//	NginxBuilds(t, src, dir)   NginxBuildsE(src, dir) (a, b string, error)
//	NginxOpenSSL35(t)          LookNginxOpenSSL35() (bin, stamp string, error)
//	NewKubeNode(t)             NewKubeNodeE(dir) (*KubeNode, error); (*KubeNode).Close
//	StartPod(t, k, o)          (*KubeNode).StartPodE(ctx, o) (*Pod, error); (*Pod).Close
//	Expose(t, k, svc)          (*KubeNode).ExposeE(svc) error
//
// A KubeNode is a Kubernetes node in miniature (client, node and pod
// network namespaces, a bridge, kube-proxy's iptables NAT rules, servers in
// PID namespaces of their own logging to CRI or json-file container logs);
// its addresses are 10.198.0.0/24 and 10.199.0.0/24, inside its own
// namespaces only.
//
// A missing prerequisite is an error that matches ErrMissing (errors.Is).
// InNS, Listen, Dial, Cmd, FreePort and Output take no testing.TB.
package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// check ends t on err: a missing prerequisite skips it, anything else fails
// it.
func check(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrMissing) {
		t.Skip(err.Error())
	}
	t.Fatal(err)
}

// NeedRoot skips t unless running as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if err := CheckRoot(); err != nil {
		check(t, err)
	}
}

// NeedBin skips t unless every named program is installed, and returns the
// path of the first.
func NeedBin(t testing.TB, names ...string) string {
	t.Helper()
	p, err := LookBin(names...)
	if err != nil {
		check(t, err)
	}
	return p
}

// NewPair creates the namespaces and veth with the given MTU; t.Cleanup
// deletes them.
func NewPair(t testing.TB, mtu int) *Pair {
	t.Helper()
	p, err := NewPairE(mtu)
	if err != nil {
		check(t, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Cert writes a fresh self-signed certificate and key (PEM) into dir.
func Cert(t testing.TB, dir string) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	certFile, keyFile, cert, err := CertE(dir)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// StartNginx writes a config into a temp prefix and starts nginx; cleanup
// stops it.
func StartNginx(t testing.TB, o NginxOptions) *Nginx {
	t.Helper()
	n, err := StartNginxE(context.Background(), t.TempDir(), o)
	if err != nil {
		check(t, err)
	}
	t.Cleanup(func() { n.Stop() })
	return n
}

// StartCaddy runs Caddy with conf (a JSON template such as CaddyConf) on
// 127.0.0.1:port (0: a free port) in a temp dir, and returns once it serves
// TLS there; cleanup stops it (Stop may be called before).
func StartCaddy(t testing.TB, conf string, port int) *Caddy {
	t.Helper()
	if port == 0 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		port = p
	}
	c, err := StartCaddyE(context.Background(), t.TempDir(), conf, port)
	if err != nil {
		check(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCapture runs tcpdump -i iface in ns writing to a temp pcap, and waits
// until it listens; cleanup stops it.
func StartCapture(t testing.TB, ns, iface, filter string) *Capture {
	t.Helper()
	c, err := StartCaptureE(ns, iface, filter, filepath.Join(t.TempDir(), "capture.pcap"))
	if err != nil {
		check(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Tshark dissects a capture's hellos. decodeAs lists TCP ports to decode as
// TLS ("-d tcp.port==N,tls").
func Tshark(t testing.TB, file string, decodeAs ...int) []TsharkHello {
	t.Helper()
	hs, err := TsharkE(file, decodeAs...)
	if err != nil {
		check(t, err)
	}
	return hs
}

// GoServer runs a crypto/tls HTTPS responder on addr inside namespace ns
// ("" = current) with curves as its preference (nil = crypto/tls defaults,
// hybrid first). Each connection gets one "200 ok" response and is closed.
// It returns the listening address; t.Cleanup stops it.
func GoServer(t testing.TB, ns, addr string, curves []tls.CurveID) net.Addr {
	t.Helper()
	ln, err := GoServerE(ns, addr, curves)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr()
}

// NginxBuilds is NginxBuildsE for a test: two builds of the nginx at src.
func NginxBuilds(t testing.TB, src, dir string) (a, b string) {
	t.Helper()
	a, b, err := NginxBuildsE(src, dir)
	if err != nil {
		check(t, err)
	}
	return a, b
}

// NginxOpenSSL35 returns the path of nginx on OpenSSL 3.5, built once per
// machine by scripts/build-nginx-openssl35.sh (make nginx-openssl35) and
// cached outside the repository, and logs the versions it was built from.
// Without it (not built, or the build failed) it skips t with the reason
// and the command that builds it.
func NginxOpenSSL35(t testing.TB) string {
	t.Helper()
	bin, stamp, err := LookNginxOpenSSL35()
	if err != nil {
		check(t, err)
	}
	t.Logf("nginx on OpenSSL 3.5: %s (%s)", bin, stamp)
	return bin
}

// NewKubeNode makes a Kubernetes node in miniature (see KubeNode) with its
// files in a temp dir; t.Cleanup stops its pods and deletes its namespaces.
// It skips t without root or iptables.
func NewKubeNode(t testing.TB) *KubeNode {
	t.Helper()
	k, err := NewKubeNodeE(t.TempDir())
	if err != nil {
		check(t, err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Error(err)
		}
	})
	return k
}

// StartPod starts a pod on k (see PodOptions); t.Cleanup stops it and
// deletes its namespace (Close may be called before). It skips t when the
// server or unshare is missing.
func StartPod(t testing.TB, k *KubeNode, o PodOptions) *Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := k.StartPodE(ctx, o)
	if err != nil {
		check(t, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// Expose programs a Service on k (see KubeService).
func Expose(t testing.TB, k *KubeNode, s KubeService) {
	t.Helper()
	if err := k.ExposeE(s); err != nil {
		t.Fatal(err)
	}
}
