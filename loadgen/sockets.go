package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Listener is one listening TCP socket from /proc/net/tcp or tcp6.
type Listener struct {
	Addr  netip.AddrPort
	Inode uint64
}

// tcpListen is the st column of a socket in the LISTEN state.
const tcpListen = "0A"

// ParseNetTCP returns the listening sockets of a /proc/net/tcp (or tcp6)
// table. Addresses are printed by the kernel as the hex of each 32-bit word
// in host byte order; the port is big-endian hex. Lines that do not parse
// are skipped, and the header line is one of them.
func ParseNetTCP(b []byte) []Listener { return parseNetTCP(bytes.NewReader(b)) }

// parseNetTCP is ParseNetTCP over a reader: a table with tens of thousands
// of TIME_WAIT sockets is megabytes, read a line at a time.
func parseNetTCP(r io.Reader) []Listener {
	var out []Listener
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != tcpListen {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok || len(port) != 4 {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			continue
		}
		raw, err := hex.DecodeString(host)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		for i := 0; i < len(raw); i += 4 { // each word back to network order
			binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
		}
		addr, _ := netip.AddrFromSlice(raw)
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || inode == 0 {
			continue
		}
		out = append(out, Listener{Addr: netip.AddrPortFrom(addr, uint16(p)), Inode: inode})
	}
	return out
}

// matches reports whether a listener accepts connections to ip:port: the
// same port on the same address, on an unspecified address (0.0.0.0, ::),
// or on the IPv4-mapped form of the address.
func (l Listener) matches(ip netip.Addr, port uint16) bool {
	if l.Addr.Port() != port {
		return false
	}
	a := l.Addr.Addr()
	return a.IsUnspecified() || a.Unmap() == ip.Unmap()
}

// targetListeners returns the listening sockets under root/net that
// accept connections to target (host:port; a name is resolved).
func targetListeners(root, target string) ([]Listener, error) {
	host, portS, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %v", portS, err)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = append(ips, ip)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		ips = addrs
	}
	var out []Listener
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(filepath.Join(root, "net", f))
		if err != nil {
			continue // no IPv6, or a proc root without net
		}
		ls := parseNetTCP(fh)
		fh.Close()
		for _, l := range ls {
			for _, ip := range ips {
				if l.matches(ip, uint16(port)) {
					out = append(out, l)
					break
				}
			}
		}
	}
	return out, nil
}

// socketOwners returns the processes under root that hold a descriptor of
// one of the socket inodes, sorted. Processes whose fd directory cannot be
// read are skipped.
func socketOwners(root string, inodes []uint64) []int {
	want := map[string]bool{}
	for _, in := range inodes {
		want["socket:["+strconv.FormatUint(in, 10)+"]"] = true
	}
	ents, err := os.ReadDir(root)
	if err != nil || len(want) == 0 {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(root, e.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && want[link] {
				out = append(out, pid)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
