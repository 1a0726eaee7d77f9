package proctrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inetDiagReq is struct inet_diag_req_v2 (linux/inet_diag.h).
type inetDiagReq struct {
	Family, Protocol, Ext uint8
	States                uint32
	SPort, DPort          uint16 // host order here, big endian on the wire
	Src, Dst              [16]byte
	Cookie                [2]uint32
}

const sizeofInetDiagReq = 56

// tcpListen is TCP_LISTEN from the kernel's TCP state enumeration.
const tcpListen = 10

// Len implements nl.NetlinkRequestData.
func (r *inetDiagReq) Len() int { return sizeofInetDiagReq }

// Serialize implements nl.NetlinkRequestData.
func (r *inetDiagReq) Serialize() []byte {
	b := make([]byte, sizeofInetDiagReq)
	ne := nl.NativeEndian()
	b[0], b[1], b[2] = r.Family, r.Protocol, r.Ext
	ne.PutUint32(b[4:], r.States)
	binary.BigEndian.PutUint16(b[8:], r.SPort)
	binary.BigEndian.PutUint16(b[10:], r.DPort)
	copy(b[12:28], r.Src[:])
	copy(b[28:44], r.Dst[:])
	// b[44:48] interface index 0
	ne.PutUint32(b[48:], r.Cookie[0])
	ne.PutUint32(b[52:], r.Cookie[1])
	return b
}

// diagSocket is the part of struct inet_diag_msg the tracker reads.
type diagSocket struct {
	Family uint8
	State  uint8
	Local  netip.AddrPort
	Remote netip.AddrPort
	Inode  uint64
	// NS is the foreign network namespace the socket was read from
	// (/proc/PID/net/tcp, netns.go); 0 for the agent's own (sock_diag).
	NS uint64
}

const sizeofInetDiagMsg = 72

func parseDiagMsg(b []byte) (diagSocket, error) {
	if len(b) < sizeofInetDiagMsg {
		return diagSocket{}, fmt.Errorf("%w: short inet_diag_msg (%d bytes)", ErrNetlink, len(b))
	}
	var s diagSocket
	s.Family, s.State = b[0], b[1]
	sport := binary.BigEndian.Uint16(b[4:])
	dport := binary.BigEndian.Uint16(b[6:])
	var src, dst netip.Addr
	if s.Family == unix.AF_INET {
		src = netip.AddrFrom4([4]byte(b[8:12]))
		dst = netip.AddrFrom4([4]byte(b[24:28]))
	} else {
		src = netip.AddrFrom16([16]byte(b[8:24]))
		dst = netip.AddrFrom16([16]byte(b[24:40]))
	}
	s.Local = netip.AddrPortFrom(src, sport)
	s.Remote = netip.AddrPortFrom(dst, dport)
	s.Inode = uint64(nl.NativeEndian().Uint32(b[68:]))
	return s, nil
}

// sockDiag issues NETLINK_SOCK_DIAG queries over one reusable socket.
type sockDiag struct {
	mu   sync.Mutex
	sock *nl.SocketHandle
}

func (d *sockDiag) handle() (map[int]*nl.SocketHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sock == nil {
		s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_INET_DIAG)
		if err != nil {
			return nil, fmt.Errorf("%w: open: %w", ErrNetlink, err)
		}
		tv := unix.Timeval{Sec: 2}
		if err := s.SetReceiveTimeout(&tv); err != nil {
			s.Close()
			return nil, fmt.Errorf("%w: timeout: %w", ErrNetlink, err)
		}
		d.sock = &nl.SocketHandle{Socket: s}
	}
	return map[int]*nl.SocketHandle{unix.NETLINK_INET_DIAG: d.sock}, nil
}

// reset drops the socket after an error so the next query opens a new one.
func (d *sockDiag) reset() {
	d.mu.Lock()
	if d.sock != nil {
		d.sock.Socket.Close()
		d.sock = nil
	}
	d.mu.Unlock()
}

func (d *sockDiag) close() { d.reset() }

func addrBytes(a netip.Addr, v4 bool) [16]byte {
	var out [16]byte
	if v4 {
		b := a.Unmap().As4()
		copy(out[:], b[:])
		return out
	}
	return a.As16()
}

// lookupTCP returns the server-side TCP socket whose local address is server
// and remote address is client, by an exact (non-dump) sock_diag request.
func (d *sockDiag) lookupTCP(server, client netip.AddrPort) (diagSocket, error) {
	socks, err := d.handle()
	if err != nil {
		return diagSocket{}, err
	}
	v4 := server.Addr().Unmap().Is4() && client.Addr().Unmap().Is4()
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   unix.SizeofNlMsghdr,
			Type:  nl.SOCK_DIAG_BY_FAMILY,
			Flags: unix.NLM_F_REQUEST,
		},
		Sockets: socks,
	}
	r := &inetDiagReq{
		Family:   unix.AF_INET6,
		Protocol: unix.IPPROTO_TCP,
		States:   0xffffffff,
		SPort:    server.Port(),
		DPort:    client.Port(),
		Src:      addrBytes(server.Addr(), v4),
		Dst:      addrBytes(client.Addr(), v4),
		Cookie:   [2]uint32{nl.TCPDIAG_NOCOOKIE, nl.TCPDIAG_NOCOOKIE},
	}
	if v4 {
		r.Family = unix.AF_INET
	}
	req.AddData(r)
	var out diagSocket
	var perr error
	found := false
	err = req.ExecuteIter(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY, func(msg []byte) bool {
		out, perr = parseDiagMsg(msg)
		found = perr == nil
		return false
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// The common case for short connections: gone by the time
			// the capture reported them. No formatting on this path.
			return diagSocket{}, ErrNoConnection
		}
		d.reset()
		return diagSocket{}, fmt.Errorf("%w: lookup %v->%v: %w", ErrNetlink, client, server, err)
	}
	if perr != nil {
		return diagSocket{}, perr
	}
	if !found {
		return diagSocket{}, fmt.Errorf("%w: lookup %v->%v: no answer", ErrNetlink, client, server)
	}
	// The kernel's exact lookup falls back to the listening socket when no
	// connection matches: that is not the connection's socket.
	if out.State == tcpListen || out.Remote.Port() != client.Port() {
		return diagSocket{}, ErrNoConnection
	}
	return out, nil
}

// listeners dumps the listening TCP sockets of both families.
func (d *sockDiag) listeners() ([]diagSocket, error) {
	return d.dump(unix.IPPROTO_TCP, 1<<tcpListen)
}

// udpBound dumps the unconnected UDP sockets of both families: the sockets
// a QUIC server receives new connections on.
func (d *sockDiag) udpBound() ([]diagSocket, error) {
	socks, err := d.dump(unix.IPPROTO_UDP, 1<<tcpClose)
	out := socks[:0]
	for _, s := range socks {
		if s.Local.Port() != 0 && s.Remote.Port() == 0 {
			out = append(out, s)
		}
	}
	return out, err
}

// tcpClose is TCP_CLOSE, the state of an unconnected UDP socket.
const tcpClose = 7

// dump lists the sockets of one protocol in the given states.
func (d *sockDiag) dump(proto uint8, states uint32) ([]diagSocket, error) {
	var out []diagSocket
	for _, fam := range [...]uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := d.handle()
		if err != nil {
			return nil, err
		}
		req := &nl.NetlinkRequest{
			NlMsghdr: unix.NlMsghdr{
				Len:   unix.SizeofNlMsghdr,
				Type:  nl.SOCK_DIAG_BY_FAMILY,
				Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP,
			},
			Sockets: socks,
		}
		req.AddData(&inetDiagReq{
			Family:   fam,
			Protocol: proto,
			States:   states,
			Cookie:   [2]uint32{nl.TCPDIAG_NOCOOKIE, nl.TCPDIAG_NOCOOKIE},
		})
		err = req.ExecuteIter(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY, func(msg []byte) bool {
			if s, err := parseDiagMsg(msg); err == nil {
				out = append(out, s)
			}
			return true
		})
		if err != nil && !errors.Is(err, nl.ErrDumpInterrupted) {
			d.reset()
			return out, fmt.Errorf("%w: socket dump: %w", ErrNetlink, err)
		}
	}
	return out, nil
}
