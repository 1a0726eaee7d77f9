package proctrack

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// Servers in other network namespaces. The agent's sock_diag socket sees
// the sockets of its own network namespace only: on a Kubernetes node the
// DaemonSet's agent runs in the node's (hostNetwork) while a pod's server
// listens and accepts in the pod's, and without CAP_SYS_ADMIN (no setns)
// and without eBPF nothing else tells it who holds them. /proc/PID/net/tcp
// and tcp6 show the sockets of PID's network namespace (CAP_SYS_PTRACE
// reads them, as it reads /proc/PID/fd for their owners). So for the
// serving processes the tracker already tracks whose /proc/PID/ns/net is
// not the agent's, each scan reads those files once per namespace (not per
// process, never per record) into a table cached by the namespace's inode:
// its listening sockets (listener lookups and quiet periods), its other
// TCP sockets (the exact lookup of a connection still open at the scan),
// and its local addresses (which namespace a record's server address is
// in: a pod's 0.0.0.0:8443 answers for the pod's 10.199.0.2:8443, not for
// another pod's).

// nsNet is one foreign network namespace as its /proc/PID/net files showed
// it at the last scan.
type nsNet struct {
	ino       uint64                       // the namespace's inode (net:[INO])
	pid       int                          // the process its files were read through
	listeners []diagSocket                 // TCP LISTEN, NS set
	conns     map[[2]netip.AddrPort]uint64 // local, remote -> socket inode (not LISTEN)
	addrs     map[netip.Addr]bool          // local addresses (loopback left out)
	read      time.Time
}

// nsView is every foreign namespace of the last scan.
type nsView struct {
	byIno  map[uint64]*nsNet
	byAddr map[netip.Addr]uint64 // local address -> namespace
}

// netnsLink parses a /proc/PID/ns/net link, "net:[4026531840]".
func netnsLink(l string) (uint64, bool) {
	s, ok := strings.CutPrefix(l, "net:[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// netnsOf is the network namespace of pid under root (0: unreadable).
func netnsOf(root string, pid int) uint64 {
	l, err := os.Readlink(root + "/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return 0
	}
	n, _ := netnsLink(l)
	return n
}

// selfNetns is the agent's own network namespace: root/self's (a host's
// /proc mounted at /host/proc with hostPID has the agent in it), else
// /proc/self's.
func selfNetns(root string) uint64 {
	if l, err := os.Readlink(root + "/self/ns/net"); err == nil {
		if n, ok := netnsLink(l); ok {
			return n
		}
	}
	if l, err := os.Readlink("/proc/self/ns/net"); err == nil {
		if n, ok := netnsLink(l); ok {
			return n
		}
	}
	return 0
}

// parseProcNetTCP calls fn with each socket of a /proc/PID/net/tcp or
// tcp6 file: local and remote address, the kernel's TCP state and the
// socket's inode.
func parseProcNetTCP(b []byte, fn func(s diagSocket)) {
	first := true
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if first { // the header
			first = false
			continue
		}
		f := bytes.Fields(line)
		if len(f) < 10 {
			continue
		}
		local, ok1 := parseProcNetAddr(f[1])
		remote, ok2 := parseProcNetAddr(f[2])
		st, err := strconv.ParseUint(string(f[3]), 16, 8)
		ino, err2 := strconv.ParseUint(string(f[9]), 10, 64)
		if !ok1 || !ok2 || err != nil || err2 != nil {
			continue
		}
		s := diagSocket{State: uint8(st), Local: local, Remote: remote, Inode: ino}
		if local.Addr().Is4() {
			s.Family = 2 // AF_INET
		} else {
			s.Family = 10 // AF_INET6
		}
		fn(s)
	}
}

// parseProcNetAddr parses "0100007F:1F90" (IPv4) or 32 hex digits and a
// port (IPv6): the address as the kernel's 32-bit words, each printed in
// the host's byte order, and the port in hex. A v4-mapped IPv6 address is
// unmapped.
func parseProcNetAddr(s []byte) (netip.AddrPort, bool) {
	a, p, ok := bytes.Cut(s, []byte{':'})
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var raw [16]byte
	n, err := hex.Decode(raw[:], a)
	if err != nil || (n != 4 && n != 16) {
		return netip.AddrPort{}, false
	}
	var out [16]byte
	for i := 0; i < n; i += 4 {
		binary.NativeEndian.PutUint32(out[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	var addr netip.Addr
	if n == 4 {
		addr = netip.AddrFrom4([4]byte(out[:4]))
	} else {
		addr = netip.AddrFrom16(out).Unmap()
	}
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// parseFibTrieLocal calls fn with each local IPv4 address of a
// /proc/PID/net/fib_trie file (a "/32 host LOCAL" leaf).
func parseFibTrieLocal(b []byte, fn func(netip.Addr)) {
	var last netip.Addr
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		t := bytes.TrimSpace(line)
		if rest, ok := bytes.CutPrefix(t, []byte("|-- ")); ok {
			last, _ = netip.ParseAddr(string(rest))
			continue
		}
		if last.IsValid() && bytes.HasPrefix(t, []byte("/32 host LOCAL")) {
			fn(last)
		}
	}
}

// parseIfInet6 calls fn with each address of a /proc/PID/net/if_inet6
// file (32 hex digits, network order, first on each line).
func parseIfInet6(b []byte, fn func(netip.Addr)) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := bytes.Fields(line)
		if len(f) == 0 || len(f[0]) != 32 {
			continue
		}
		var a [16]byte
		if _, err := hex.Decode(a[:], f[0]); err == nil {
			fn(netip.AddrFrom16(a))
		}
	}
}

// readNetns reads the namespace of pid through its /proc/PID/net files.
// ok is false when neither TCP table could be read.
func readNetns(root string, pid int, ino uint64, now time.Time) (*nsNet, bool) {
	n := &nsNet{ino: ino, pid: pid, conns: map[[2]netip.AddrPort]uint64{}, addrs: map[netip.Addr]bool{}, read: now}
	dir := root + "/" + strconv.Itoa(pid) + "/net/"
	addAddr := func(a netip.Addr) {
		if a = a.Unmap(); a.IsValid() && !a.IsLoopback() && !a.IsUnspecified() {
			n.addrs[a] = true
		}
	}
	ok := false
	for _, f := range [...]string{"tcp", "tcp6"} {
		b, err := os.ReadFile(dir + f)
		if err != nil {
			continue
		}
		ok = true
		parseProcNetTCP(b, func(s diagSocket) {
			s.NS = ino
			if s.State == tcpListen {
				n.listeners = append(n.listeners, s)
				return
			}
			if s.Inode != 0 {
				n.conns[[2]netip.AddrPort{s.Local, s.Remote}] = s.Inode
			}
			addAddr(s.Local.Addr())
		})
	}
	if !ok {
		return nil, false
	}
	if b, err := os.ReadFile(dir + "fib_trie"); err == nil {
		parseFibTrieLocal(b, addAddr)
	}
	if b, err := os.ReadFile(dir + "if_inet6"); err == nil {
		parseIfInet6(b, func(a netip.Addr) {
			if !a.IsLinkLocalUnicast() {
				addAddr(a)
			}
		})
	}
	for _, l := range n.listeners {
		addAddr(l.Local.Addr())
	}
	return n, true
}

// nsReader reads, at each scan, the foreign network namespaces of the
// serving processes. The scanner owns it.
type nsReader struct {
	root   string
	self   uint64 // the agent's own namespace (0: unknown, none read)
	log    *slog.Logger
	logged map[uint64]bool // namespaces logged
}

// read reads the foreign network namespaces of the serving processes:
// each once, through its first serving process. A namespace whose files
// cannot be read keeps no table. It returns nil when there is none.
func (r *nsReader) read(serving []servingTarget, now time.Time) *nsView {
	if r.self == 0 {
		return nil // the agent's own is unknown: every process would look foreign
	}
	var seen map[uint64]bool
	v := &nsView{byIno: map[uint64]*nsNet{}, byAddr: map[netip.Addr]uint64{}}
	for _, tg := range serving {
		ino := netnsOf(r.root, tg.pid)
		if ino == 0 || ino == r.self || v.byIno[ino] != nil || seen[ino] {
			continue
		}
		if seen == nil {
			seen = map[uint64]bool{}
		}
		seen[ino] = true
		n, ok := readNetns(r.root, tg.pid, ino, now)
		if !ok {
			continue
		}
		v.byIno[ino] = n
		for a := range n.addrs {
			if o, ok := v.byAddr[a]; ok && o != ino {
				v.byAddr[a] = sharedNS
				continue
			}
			v.byAddr[a] = ino
		}
		if !r.logged[ino] && r.log != nil {
			if r.logged == nil {
				r.logged = map[uint64]bool{}
			}
			r.logged[ino] = true
			r.log.Info("server in another network namespace: its sockets are read from /proc/PID/net/tcp{,6} at each scan (sock_diag sees only the agent's own)",
				"pid", tg.pid, "netns", ino, "agent_netns", r.self, "listeners", len(n.listeners), "addrs", len(n.addrs))
		}
	}
	resolveShared(r.root, v)
	if len(v.byIno) == 0 {
		return nil
	}
	return v
}

// listenerMatches says whether listening socket l answers for server
// (whose foreign namespace, 0 for the agent's own, is ns): a socket of
// the server's namespace bound to its address or to any; failing a known
// namespace, a foreign socket bound to exactly the address.
func listenerMatches(l diagSocket, server netip.AddrPort, ns uint64) bool {
	if l.Local.Port() != server.Port() || l.Inode == 0 {
		return false
	}
	a := l.Local.Addr().Unmap()
	if l.NS == ns {
		return a.IsUnspecified() || a == server.Addr().Unmap()
	}
	return ns == 0 && a == server.Addr().Unmap()
}

// sharedNS marks an address that more than one foreign namespace has and
// no link of the agent's namespace told apart: no listener answers for it.
const sharedNS = ^uint64(0)

// resolveShared gives an address several foreign namespaces have (two
// nodes' pods on one machine, as tests run them) to the one the agent's
// own namespace has a link into (a pod's veth on this node's bridge:
// the link's peer namespace id), when exactly one has; else it stays
// sharedNS, and attribution answers nothing for it rather than guess.
func resolveShared(root string, v *nsView) {
	var linked map[int]bool
	for a, ns := range v.byAddr {
		if ns != sharedNS {
			continue
		}
		if linked == nil {
			linked = map[int]bool{}
			links, err := netlink.LinkList()
			if err != nil {
				return
			}
			for _, l := range links {
				if id := l.Attrs().NetNsID; id >= 0 {
					linked[id] = true
				}
			}
		}
		pick := uint64(0)
		for ino, n := range v.byIno {
			if !n.addrs[a] || !linked[nsidOf(root, n.pid)] {
				continue
			}
			if pick != 0 {
				pick = 0
				break
			}
			pick = ino
		}
		if pick != 0 {
			v.byAddr[a] = pick
		}
	}
}

// nsidOf is the id the agent's namespace gives pid's network namespace
// (-1: none, or unreadable).
func nsidOf(root string, pid int) int {
	f, err := os.Open(root + "/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return -1
	}
	defer f.Close()
	id, err := netlink.GetNetNsIdByFd(int(f.Fd()))
	if err != nil {
		return -1
	}
	return id
}
