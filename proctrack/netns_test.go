package proctrack

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Lines as a 6.x kernel writes them (this machine's, little endian).
const (
	procNetTCPSample = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:20FB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 00000000732dd48c 100 0 0 10 0
   1: 0200C70A:20FB 0100C70A:D431 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000065a775e8 20 4 30 10 -1
   2: 0200C70A:20FB 0100C70A:D432 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000065a775e8
`
	procNetTCP6Sample = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:20FB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000200C70A:20FB 0000000000000000FFFF00000300C70A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4545 1 0000000000000000 20 4 30 10 -1
   2: 000080FE00000000FF00FC00010000FE:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4646 1 0000000000000000 100 0 0 10 0
`
	fibTrieSample = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 10.199.0.0/24 2 0 2
           |-- 10.199.0.0
              /24 link UNICAST
           |-- 10.199.0.2
              /32 host LOCAL
        |-- 10.199.0.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
           |-- 10.199.0.2
              /32 host LOCAL
`
	ifInet6Sample = `00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
fd000000000000000000000000000002 04 40 00 82     eth0
`
)

func TestParseProcNetTCP(t *testing.T) {
	var got []diagSocket
	parseProcNetTCP([]byte(procNetTCPSample), func(s diagSocket) { got = append(got, s) })
	parseProcNetTCP([]byte(procNetTCP6Sample), func(s diagSocket) { got = append(got, s) })
	want := []struct {
		local, remote string
		state         uint8
		ino           uint64
	}{
		{"0.0.0.0:8443", "0.0.0.0:0", tcpListen, 4242},
		{"10.199.0.2:8443", "10.199.0.1:54321", 1, 4343},
		{"10.199.0.2:8443", "10.199.0.1:54322", 6, 0},
		{"[::]:8443", "[::]:0", tcpListen, 4444},
		{"10.199.0.2:8443", "10.199.0.3:40000", 1, 4545}, // v4-mapped, unmapped
		{"[fe80::fc:ff:fe00:1]:8080", "[::]:0", tcpListen, 4646},
	}
	if len(got) != len(want) {
		t.Fatalf("%d sockets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Local.String() != w.local || g.Remote.String() != w.remote || g.State != w.state || g.Inode != w.ino {
			t.Errorf("socket %d: %v -> %v state %d inode %d; want %s -> %s state %d inode %d", i, g.Local, g.Remote, g.State, g.Inode, w.local, w.remote, w.state, w.ino)
		}
	}
}

func TestParseNetnsAddrs(t *testing.T) {
	var v4, v6 []string
	parseFibTrieLocal([]byte(fibTrieSample), func(a netip.Addr) { v4 = append(v4, a.String()) })
	parseIfInet6([]byte(ifInet6Sample), func(a netip.Addr) { v6 = append(v6, a.String()) })
	if want := "[127.0.0.1 10.199.0.2 10.199.0.2]"; fmtSlice(v4) != want {
		t.Errorf("fib_trie: %v, want %s", v4, want)
	}
	if want := "[::1 fe80::fc:ff:fe00:1 fd00::2]"; fmtSlice(v6) != want {
		t.Errorf("if_inet6: %v, want %s", v6, want)
	}
	for l, want := range map[string]uint64{"net:[4026531840]": 4026531840, "net:[]": 0, "mnt:[4026531840]": 0, "net:[12": 0} {
		if got, _ := netnsLink(l); got != want {
			t.Errorf("netnsLink(%q) = %d, want %d", l, got, want)
		}
	}
}

func fmtSlice(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// writeNetnsFixture writes a /proc tree under root: self in namespace 1,
// pid in namespace ns with the sample sockets and addresses, its fd 3 the
// listener (socket 4242) and fd 4 the connection (4343).
func writeNetnsFixture(t *testing.T, root string, pid int, ns uint64) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	self := filepath.Join(root, "self", "ns")
	must(os.MkdirAll(self, 0o755))
	must(os.Symlink("net:[1]", filepath.Join(self, "net")))
	p := filepath.Join(root, strconv.Itoa(pid))
	for _, d := range []string{"ns", "net", "fd"} {
		must(os.MkdirAll(filepath.Join(p, d), 0o755))
	}
	must(os.Symlink("net:["+strconv.FormatUint(ns, 10)+"]", filepath.Join(p, "ns", "net")))
	for name, body := range map[string]string{"tcp": procNetTCPSample, "tcp6": procNetTCP6Sample, "fib_trie": fibTrieSample, "if_inet6": ifInet6Sample} {
		must(os.WriteFile(filepath.Join(p, "net", name), []byte(body), 0o644))
	}
	must(os.Symlink("socket:[4242]", filepath.Join(p, "fd", "3")))
	must(os.Symlink("socket:[4343]", filepath.Join(p, "fd", "4")))
}

func TestReadNetnsFixture(t *testing.T) {
	root := t.TempDir()
	writeNetnsFixture(t, root, 4100, 77)
	if got := selfNetns(root); got != 1 {
		t.Fatalf("selfNetns = %d, want 1", got)
	}
	if got := netnsOf(root, 4100); got != 77 {
		t.Fatalf("netnsOf = %d, want 77", got)
	}
	n, ok := readNetns(root, 4100, 77, time.Now())
	if !ok {
		t.Fatal("readNetns: not read")
	}
	if len(n.listeners) != 3 || n.listeners[0].NS != 77 {
		t.Errorf("listeners %+v", n.listeners)
	}
	for _, a := range []string{"10.199.0.2", "fd00::2"} {
		if !n.addrs[netip.MustParseAddr(a)] {
			t.Errorf("address %s not local: %v", a, n.addrs)
		}
	}
	for _, a := range []string{"127.0.0.1", "::1", "10.199.0.1"} {
		if n.addrs[netip.MustParseAddr(a)] {
			t.Errorf("address %s local: %v", a, n.addrs)
		}
	}
	if ino := n.conns[[2]netip.AddrPort{netip.MustParseAddrPort("10.199.0.2:8443"), netip.MustParseAddrPort("10.199.0.1:54321")}]; ino != 4343 {
		t.Errorf("connection's inode %d, want 4343", ino)
	}
}

// TestListenerMatchesNamespace: a pod's 0.0.0.0:8443 answers for the
// pod's address only; the node's 0.0.0.0:8443 not for a pod's.
func TestListenerMatchesNamespace(t *testing.T) {
	pod := netip.MustParseAddrPort("10.199.0.2:8443")
	node := netip.MustParseAddrPort("10.198.0.2:8443")
	any := netip.MustParseAddrPort("0.0.0.0:8443")
	podL := diagSocket{Local: any, Inode: 1, NS: 77}
	nodeL := diagSocket{Local: any, Inode: 2}
	exact := diagSocket{Local: pod, Inode: 3, NS: 78}
	for _, c := range []struct {
		l      diagSocket
		server netip.AddrPort
		ns     uint64
		want   bool
	}{
		{podL, pod, 77, true},
		{nodeL, pod, 77, false},
		{podL, node, 0, false},
		{nodeL, node, 0, true},
		{podL, pod, 78, false},
		{exact, pod, 0, true}, // the namespace's addresses unknown: an exact bind still answers
		{diagSocket{Local: any, NS: 77}, pod, 77, false},
	} {
		if got := listenerMatches(c.l, c.server, c.ns); got != c.want {
			t.Errorf("listener %v (netns %d) for %v in netns %d: %v, want %v", c.l.Local, c.l.NS, c.server, c.ns, got, c.want)
		}
	}
}

func FuzzParseProcNet(f *testing.F) {
	f.Add([]byte(procNetTCPSample))
	f.Add([]byte(procNetTCP6Sample))
	f.Add([]byte(fibTrieSample))
	f.Add([]byte(ifInet6Sample))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseProcNetTCP(b, func(s diagSocket) {
			if !s.Local.IsValid() || !s.Remote.IsValid() {
				t.Fatalf("invalid address %+v", s)
			}
		})
		parseFibTrieLocal(b, func(netip.Addr) {})
		parseIfInet6(b, func(netip.Addr) {})
	})
}
