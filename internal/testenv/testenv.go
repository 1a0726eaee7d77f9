// Package testenv gives tests real peers: network namespaces joined by a
// veth pair, nginx from Debian with a throwaway prefix, tcpdump captures and
// tshark's opinion of them. Everything it starts it also stops and removes.
// Traffic stays on loopback or on the test's own veths.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/vishvananda/netns"
)

// NeedRoot skips t unless running as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, packet capture); CI runs as root")
	}
}

// NeedBin skips t unless every named program is installed, and returns the
// path of the first.
func NeedBin(t testing.TB, names ...string) string {
	t.Helper()
	first := ""
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			if n == "caddy" {
				if home, _ := os.UserHomeDir(); home != "" {
					if _, err := os.Stat(filepath.Join(home, "go/bin/caddy")); err == nil {
						p = filepath.Join(home, "go/bin/caddy")
					}
				}
			}
			if p == "" {
				t.Skipf("needs %s (installed by .ci/run)", n)
			}
		}
		if first == "" {
			first = p
		}
	}
	return first
}

var seq atomic.Int32

// Pair is two network namespaces joined by a veth pair: S (server side,
// 10.77.N.1) and C (client side, 10.77.N.2).
type Pair struct {
	S, C         string // namespace names
	SIf, CIf     string // veth names inside them
	SAddr, CAddr string
}

// NewPair creates the namespaces and veth with the given MTU; t.Cleanup
// deletes them.
func NewPair(t testing.TB, mtu int) *Pair {
	t.Helper()
	NeedRoot(t)
	NeedBin(t, "ip")
	n := int(seq.Add(1)) + os.Getpid()%200
	p := &Pair{
		S: fmt.Sprintf("pqw%d-s-%d", os.Getpid(), n), C: fmt.Sprintf("pqw%d-c-%d", os.Getpid(), n),
		SIf: "veth-s", CIf: "veth-c",
		SAddr: fmt.Sprintf("10.77.%d.1", n%250), CAddr: fmt.Sprintf("10.77.%d.2", n%250),
	}
	tmp := fmt.Sprintf("pqv%d", n)
	cmds := [][]string{
		{"netns", "add", p.S},
		{"netns", "add", p.C},
		{"link", "add", tmp + "a", "type", "veth", "peer", "name", tmp + "b"},
		{"link", "set", tmp + "a", "netns", p.S},
		{"link", "set", tmp + "b", "netns", p.C},
		{"-n", p.S, "link", "set", tmp + "a", "name", p.SIf},
		{"-n", p.C, "link", "set", tmp + "b", "name", p.CIf},
		{"-n", p.S, "link", "set", p.SIf, "mtu", fmt.Sprint(mtu), "up"},
		{"-n", p.C, "link", "set", p.CIf, "mtu", fmt.Sprint(mtu), "up"},
		{"-n", p.S, "link", "set", "lo", "up"},
		{"-n", p.C, "link", "set", "lo", "up"},
		{"-n", p.S, "addr", "add", p.SAddr + "/24", "dev", p.SIf},
		{"-n", p.C, "addr", "add", p.CAddr + "/24", "dev", p.CIf},
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", p.S).Run()
		exec.Command("ip", "netns", "del", p.C).Run()
	})
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	// Disable offloads so the capture shows wire-sized segments.
	if _, err := exec.LookPath("ethtool"); err == nil {
		exec.Command("ip", "netns", "exec", p.S, "ethtool", "-K", p.SIf, "tso", "off", "gso", "off", "gro", "off").Run()
		exec.Command("ip", "netns", "exec", p.C, "ethtool", "-K", p.CIf, "tso", "off", "gso", "off", "gro", "off").Run()
	}
	return p
}

// InNS runs fn on an OS thread switched into namespace ns; sockets created
// by fn belong to ns and keep working from any goroutine afterwards.
func InNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left locked and dies with the goroutine, so its
		// namespace never leaks to other goroutines.
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a TCP listener inside namespace ns ("" = current).
func Listen(ns, addr string) (net.Listener, error) {
	if ns == "" {
		return net.Listen("tcp", addr)
	}
	var ln net.Listener
	err := InNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return })
	return ln, err
}

// Dial opens a TCP connection from namespace ns ("" = current).
func Dial(ns, addr string, timeout time.Duration) (net.Conn, error) {
	if ns == "" {
		return net.DialTimeout("tcp", addr, timeout)
	}
	var c net.Conn
	err := InNS(ns, func() (err error) { c, err = net.DialTimeout("tcp", addr, timeout); return })
	return c, err
}

// Cmd returns a command run inside namespace ns ("" = current).
func Cmd(ctx context.Context, ns string, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Cert writes a fresh self-signed certificate and key (PEM) into dir.
func Cert(t testing.TB, dir string) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	c, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile, c
}

// Nginx is a running nginx from Debian with its own prefix.
type Nginx struct {
	Dir       string
	AccessLog string
	ErrorLog  string
	PidFile   string
}

// NginxOptions shape the generated nginx.conf.
type NginxOptions struct {
	NS        string // namespace to run in ("" = current)
	Listen    string // e.g. "127.0.0.1:8443" or "443"
	ECDHCurve string // ssl_ecdh_curve value, "" = OpenSSL's default
	LogFormat string // log_format pq definition, "" = the recommended one
	Workers   int
	Extra     string // extra server-block lines
}

// RecommendedLogFormat is the access-log format README recommends.
const RecommendedLogFormat = `'$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher $ssl_curve "$ssl_curves" $pid $connection "$request" $status "$http_user_agent" "$host"'`

// StartNginx writes a config into a temp prefix and starts nginx; cleanup
// stops it.
func StartNginx(t testing.TB, o NginxOptions) *Nginx {
	t.Helper()
	bin := NeedBin(t, "nginx")
	dir := t.TempDir()
	certFile, keyFile, _ := Cert(t, dir)
	n := &Nginx{Dir: dir, AccessLog: filepath.Join(dir, "access.log"), ErrorLog: filepath.Join(dir, "error.log"), PidFile: filepath.Join(dir, "nginx.pid")}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.LogFormat == "" {
		o.LogFormat = RecommendedLogFormat
	}
	curve := ""
	if o.ECDHCurve != "" {
		curve = "ssl_ecdh_curve " + o.ECDHCurve + ";"
	}
	conf := fmt.Sprintf(`worker_processes %d;
pid %s;
error_log %s info;
events { worker_connections 512; }
http {
  access_log off;
  log_format pq %s;
  server {
    listen %s ssl;
    server_name pqwatch.test;
    ssl_certificate %s;
    ssl_certificate_key %s;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets off;
    ssl_session_cache off;
    %s
    access_log %s pq;
    keepalive_timeout 0;
    add_header X-Pid $pid always;
    location / { return 200 "ok $pid\n"; }
    %s
  }
}
`, o.Workers, n.PidFile, n.ErrorLog, o.LogFormat, o.Listen, certFile, keyFile, curve, n.AccessLog, o.Extra)
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := Cmd(context.Background(), o.NS, bin, "-p", dir, "-c", confFile, "-e", n.ErrorLog, "-g", "daemon on;")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nginx: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if pid, err := os.ReadFile(n.PidFile); err == nil {
			exec.Command("kill", "-QUIT", strings.TrimSpace(string(pid))).Run()
			for range 50 {
				if _, err := os.Stat(n.PidFile); err != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	// Wait for the pid file.
	for range 100 {
		if _, err := os.Stat(n.PidFile); err == nil {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nginx did not start; error log: %s", readFile(n.ErrorLog))
	return nil
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

// Capture is a running tcpdump.
type Capture struct {
	File string
	// Stderr holds tcpdump's last words (its packet counts) after Stop.
	Stderr []string
	cmd    *exec.Cmd
	done   chan error
}

// StartCapture runs tcpdump -i iface in ns writing to a temp pcap, and waits
// until it listens.
func StartCapture(t testing.TB, ns, iface, filter string) *Capture {
	t.Helper()
	NeedBin(t, "tcpdump")
	c := &Capture{File: filepath.Join(t.TempDir(), "capture.pcap"), done: make(chan error, 1)}
	// In immediate mode libpcap sizes every ring frame to the snaplen: with
	// the default 2 MB buffer and snaplen 262144 that is 8 frames, and a
	// loaded machine drops packets. 64 KiB frames in a 64 MB buffer hold 1000.
	args := []string{"-i", iface, "-U", "--immediate-mode", "-n", "-s", "65535", "-B", "65536", "-w", c.File}
	if filter != "" {
		args = append(args, filter)
	}
	c.cmd = Cmd(context.Background(), ns, "tcpdump", args...)
	stderr, _ := c.cmd.StderrPipe()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			c.Stderr = append(c.Stderr, sc.Text())
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(ready)
			}
		}
		if !once {
			close(ready)
		}
		c.done <- c.cmd.Wait()
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump did not start")
	}
	// tcpdump says "listening on" a moment before the kernel delivers to it:
	// packets of a connection made at once were seen missing under load.
	time.Sleep(300 * time.Millisecond)
	t.Cleanup(func() { c.Stop() })
	return c
}

// Stop ends the capture and waits for the file to be complete.
func (c *Capture) Stop() {
	if c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	// Let the last packets land: tcpdump may hold them for a while under
	// load. Wait until the file has stopped growing for a second (at most
	// 8 s), then stop it.
	last, stable := int64(-1), 0
	for i := 0; i < 80 && stable < 10; i++ {
		time.Sleep(100 * time.Millisecond)
		var size int64
		if st, err := os.Stat(c.File); err == nil {
			size = st.Size()
		}
		if size == last {
			stable++
		} else {
			last, stable = size, 0
		}
	}
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// TsharkHello is tshark's view of one ClientHello or ServerHello.
type TsharkHello struct {
	Frame    int
	Src, Dst string // ip:port
	Type     int    // 1 ClientHello, 2 ServerHello
	Length   int    // handshake body length (without the 4-byte header)
	Groups   []string
	HRR      bool
	Version  string
	Time     float64 // frame.time_epoch of the frame tshark shows the message in
}

const hrrRandom = "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c"

// Tshark dissects a capture's hellos. decodeAs lists TCP ports to decode as
// TLS ("-d tcp.port==N,tls").
func Tshark(t testing.TB, file string, decodeAs ...int) []TsharkHello {
	t.Helper()
	NeedBin(t, "tshark")
	args := []string{"-r", file, "-n", "-Y", "tls.handshake.type==1 || tls.handshake.type==2",
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport", "-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport",
		"-e", "tls.handshake.type", "-e", "tls.handshake.length", "-e", "tls.handshake.extensions_key_share_group", "-e", "tls.handshake.random",
		"-e", "tls.handshake.extensions.supported_version", "-e", "frame.time_epoch"}
	for _, p := range decodeAs {
		args = append(args, "-d", fmt.Sprintf("tcp.port==%d,tls", p))
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var hs []TsharkHello
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 12 {
			continue
		}
		src, dst := f[1]+f[2], f[4]+f[5]
		types := strings.Split(f[7], ",")
		lens := strings.Split(f[8], ",")
		// One frame can hold several hellos only in odd cases; take them in order.
		for i, ty := range types {
			h := TsharkHello{Src: net.JoinHostPort(src, f[3]), Dst: net.JoinHostPort(dst, f[6])}
			fmt.Sscan(f[0], &h.Frame)
			fmt.Sscan(ty, &h.Type)
			if i < len(lens) {
				fmt.Sscan(lens[i], &h.Length)
			}
			if f[9] != "" {
				h.Groups = strings.Split(f[9], ",")
			}
			h.HRR = h.Type == 2 && strings.Contains(f[10], hrrRandom) || strings.Contains(strings.ReplaceAll(f[10], ":", ""), hrrRandom)
			h.Version = f[11]
			if len(f) > 12 {
				fmt.Sscan(f[12], &h.Time)
			}
			if h.Type == 1 || h.Type == 2 {
				hs = append(hs, h)
			}
		}
	}
	return hs
}

// Output runs a command and returns combined output, for diagnostics.
func Output(cmd *exec.Cmd) string {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	_ = cmd.Run()
	return b.String()
}

// GoServer runs a crypto/tls HTTPS responder on addr inside namespace ns
// ("" = current) with curves as its preference (nil = crypto/tls defaults,
// hybrid first). Each connection gets one "200 ok" response and is closed.
// It returns the listening address; t.Cleanup stops it.
func GoServer(t testing.TB, ns, addr string, curves []tls.CurveID) net.Addr {
	t.Helper()
	_, _, cert := Cert(t, t.TempDir())
	ln, err := Listen(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go pcapgen.Respond(ln, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: curves, SessionTicketsDisabled: true})
	return ln.Addr()
}
