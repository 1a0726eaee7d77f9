package proctrack

import (
	"net/netip"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// listenerCache remembers, per server address, which generation owns the
// listening socket, so short connections whose socket is already gone when
// the capture reports them can still be attributed, and so quiet periods
// need no per-connection lookup at all (AttributeQuiet).
type listenerCache struct {
	mu      sync.Mutex
	entries map[listenerKey]listenerEntry
}

// listenerKey is a server address and whether its sockets are UDP (QUIC).
type listenerKey struct {
	addr netip.AddrPort
	udp  bool
}

type listenerEntry struct {
	at time.Time
	owner
}

// owner is who holds the listening sockets of one server address.
type owner struct {
	// gen is the one generation holding them (WorkerPID unset); nil when
	// none or more than one does.
	gen *record.Generation
	// all: every listening socket on the address is held by gen's
	// processes (none is held only by a process the tracker does not know).
	all bool
	// single is gen's only serving process (WorkerPID set), when it has
	// exactly one: then that process accepted every connection.
	single *record.Generation
}

const listenerTTL = time.Second

// attributeListener attributes a connection by the listening socket that
// accepted it, when exactly one generation holds that socket. During an
// nginx binary swap both masters hold the inherited listener, so the answer
// is "unknown" then, never a guess. WorkerPID is left unset: any worker of
// the generation may have accepted the connection.
func (x *attribIndex) attributeListener(server netip.AddrPort) (*record.Generation, bool) {
	o := x.listenerOwnerCached(server, false, time.Time{})
	return o.gen, o.gen != nil
}

// listenerOwnerCached is listenerOwner, cached for listenerTTL, and never
// older than notBefore.
func (x *attribIndex) listenerOwnerCached(server netip.AddrPort, udp bool, notBefore time.Time) owner {
	c := &x.listeners
	c.mu.Lock()
	defer c.mu.Unlock()
	now := x.now()
	k := listenerKey{server, udp}
	if e, ok := c.entries[k]; ok && now.Sub(e.at) < listenerTTL && !e.at.Before(notBefore) {
		return e.owner
	}
	if c.entries == nil || len(c.entries) > 256 {
		c.entries = make(map[listenerKey]listenerEntry)
	}
	o := x.listenerOwner(server, udp)
	c.entries[k] = listenerEntry{at: now, owner: o}
	return o
}

// listenerOwner finds who holds the listening TCP sockets (udp: the
// unconnected UDP sockets) of server.
func (x *attribIndex) listenerOwner(server netip.AddrPort, udp bool) owner {
	dump := x.diag.listeners
	if udp {
		dump = x.diag.udpBound
	}
	ls, err := dump()
	if err != nil {
		return owner{}
	}
	inodes := map[uint64]bool{} // listener inode -> held by a serving process
	for _, l := range ls {
		if l.Local.Port() != server.Port() || l.Inode == 0 {
			continue
		}
		if a := l.Local.Addr().Unmap(); a.IsUnspecified() || a == server.Addr().Unmap() {
			inodes[l.Inode] = false
		}
	}
	if len(inodes) == 0 {
		return owner{}
	}
	var found, single *record.Generation
	procs, marked := 0, 0 // serving processes of found's generation; inodes seen held
	for _, tg := range x.servingTargets(nil) {
		if tg.rec == nil {
			continue
		}
		if found != nil && found.ID == tg.rec.ID {
			// Another process of the same generation (an nginx worker):
			// it holds the listeners it inherited; its fds need no
			// reading.
			procs++
			continue
		}
		held, shared := false, false
		eachSocket(x.root, tg.pid, func(_ int, ino uint64) bool {
			seen, ok := inodes[ino]
			if !ok {
				return true
			}
			if found != nil {
				shared = true // two generations share the listener: a swap
				return false
			}
			held = true
			if !seen {
				inodes[ino] = true
				marked++
			}
			return marked < len(inodes)
		})
		if shared {
			return owner{}
		}
		if held {
			found, single, procs = tg.rec, tg.rec, 1
		}
	}
	if found == nil {
		return owner{}
	}
	o := owner{all: marked == len(inodes)}
	g := *found
	g.WorkerPID = 0
	o.gen = &g
	if procs == 1 {
		o.single = single
	}
	return o
}
