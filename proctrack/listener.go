package proctrack

import (
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// listenerCache remembers, per server address, which generation owns the
// listening socket, so short connections whose socket is already gone when
// the capture reports them can still be attributed, and so quiet periods
// need no per-connection lookup at all (AttributeQuiet).
// The per-record reads are lock-free: portQuiets, each read port's quiet
// period, is copied on change (rare). The scans' view says who serves.
type listenerCache struct {
	root string
	diag *sockDiag
	now  func() time.Time

	mu         sync.Mutex
	entries    map[listenerKey]listenerEntry
	portQuiets atomic.Pointer[map[listenerKey]portQuiet]
}

// listenerKey is a server address and whether its sockets are UDP (QUIC).
type listenerKey struct {
	addr netip.AddrPort
	udp  bool
}

type listenerEntry struct {
	at time.Time
	owner
	// sig names the owner as of at: its generation, whether it holds
	// every listener, and its serving processes with their roles. since
	// is when the owner was first seen as sig: no later than its last
	// change, so a connection begun after since was accepted by it.
	sig   string
	since time.Time
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
// the generation may have accepted the connection. from, when set, is when
// the connection may first have been accepted.
//
// The holders are the serving processes of the last scan, and the
// listener's holders now are not always who accepted a connection before:
// so there is no answer when the port's owner changed since from (its
// quiet period began later), while the owner's generation is in a swap
// (after WINCH the old workers close their listeners and finish the
// connections they accepted, before a scan sees them shutting down), nor
// while the nginx process tree is not the one the last scan saw (a master
// with a child no scan knows: a USR2's new master, new workers after HUP
// or a crash, which may be serving from the same listener); the scans are
// asked to look.
func (x *attribIndex) attributeListener(server netip.AddrPort, from time.Time) (*record.Generation, bool) {
	v := x.view.Load()
	if v.quietFrom.IsZero() {
		return nil, false
	}
	if !treeCurrent(x.root, v) {
		x.req.rescanSoon()
		return nil, false
	}
	o, since := x.listeners.portOwner(v, server, false, v.scannedAt)
	if o.gen == nil || (!from.IsZero() && since.After(from)) || v.inSwap(o.gen) {
		return nil, false
	}
	return o.gen, true
}

// treeCurrent says whether every child of the nginx masters of v's scan
// is a process that scan knew. Without the children files it cannot tell,
// and says yes (the listener's answer is then as of the last scan).
func treeCurrent(root string, v *scanView) bool {
	var buf [4096]byte
	for _, m := range v.masters {
		fd, err := openRead(root + "/" + strconv.Itoa(m) + "/task/" + strconv.Itoa(m) + "/children")
		if err != nil {
			continue // the master exited: its children are reparented, not new
		}
		n, err := syscall.Read(fd, buf[:])
		syscall.Close(fd)
		if err != nil {
			continue // cannot tell
		}
		if n == len(buf) {
			return false // more children than checked here: no answer
		}
		for _, f := range strings.Fields(string(buf[:n])) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if _, ok := v.byPID[pid]; !ok {
				return false
			}
		}
	}
	return true
}

// refreshOwnerLocked reads the owner of k again. since is kept when the
// owner is the one read before; it is now when the owner changed, and the
// last change of the serving set for an address not read before (what it
// was before that is unknown; since then the scans saw no change). The
// caller holds the cache's lock.
func (c *listenerCache) refreshOwnerLocked(v *scanView, k listenerKey, now time.Time, dump *[]diagSocket) listenerEntry {
	if c.entries == nil || len(c.entries) > 256 {
		c.entries = make(map[listenerKey]listenerEntry)
	}
	qf := v.quietFrom
	prev, had := c.entries[k]
	var o owner
	if dump != nil {
		o = c.ownerIn(v, *dump, k.addr)
	} else {
		o = c.listenerOwner(v, k.addr, k.udp)
	}
	e := listenerEntry{at: now, owner: o, sig: ownerSig(v, o), since: now}
	switch {
	case had && prev.sig == e.sig:
		e.since = prev.since
	case !had && !qf.IsZero() && qf.Before(now):
		e.since = qf
	}
	c.entries[k] = e
	c.publishPortQuiet(k, portQuiet{since: e.since, quiet: o.gen != nil && o.all && !v.inSwap(o.gen)})
	return e
}

// portQuiet is one port's quiet period as Attribution reads it per record.
type portQuiet struct {
	since time.Time
	quiet bool
}

// publishPortQuiet makes q the quiet period of k for portQuietSince,
// copying the map when it changed (at most 256 ports, as the cache). The
// caller holds the cache's lock.
func (c *listenerCache) publishPortQuiet(k listenerKey, q portQuiet) {
	cur := c.portQuiets.Load()
	if cur != nil {
		if old, ok := (*cur)[k]; ok && old.quiet == q.quiet && old.since.Equal(q.since) {
			return
		}
	}
	n := 1
	if cur != nil {
		n += len(*cur)
	}
	m := make(map[listenerKey]portQuiet, n)
	if cur != nil && len(*cur) < 256 {
		maps.Copy(m, *cur)
	}
	m[k] = q
	c.portQuiets.Store(&m)
}

// portQuietSince is Attribution's per-record question, lock-free: when the
// quiet period of server's port began, and whether it is one (a single
// generation holds every listener and is not in a swap); known is false
// for a port the quiet path has not read yet.
func (c *listenerCache) portQuietSince(server netip.AddrPort, udp bool) (since time.Time, quiet, known bool) {
	m := c.portQuiets.Load()
	if m == nil {
		return time.Time{}, false, false
	}
	q, ok := (*m)[listenerKey{server, udp}]
	return q.since, q.quiet, ok
}

// portOwner is the owner of server's listeners, read again when older than
// notBefore (the last change of the serving set) or listenerTTL, and since
// when it has been that owner.
func (c *listenerCache) portOwner(v *scanView, server netip.AddrPort, udp bool, notBefore time.Time) (owner, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	k := listenerKey{server, udp}
	e, ok := c.entries[k]
	if !ok || now.Sub(e.at) >= listenerTTL || e.at.Before(notBefore) {
		e = c.refreshOwnerLocked(v, k, now, nil)
	}
	return e.owner, e.since
}

// refreshOwners reads the owner of every remembered address again, after a
// scan (whose view is v) found the serving set changed: a port whose owner did not change
// keeps its quiet period, and one that did starts a new one now, even if it
// changes back before anyone asks.
func (c *listenerCache) refreshOwners(v *scanView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var dumps [2]*[]diagSocket // one dump of each kind for every address
	for k := range c.entries {
		i := 0
		if k.udp {
			i = 1
		}
		if dumps[i] == nil {
			ls, err := c.dumpListeners(v, k.udp)
			if err != nil {
				ls = nil // no owner read: each entry's owner changes to none
			}
			dumps[i] = &ls
		}
		c.refreshOwnerLocked(v, k, now, dumps[i])
	}
}

// ownerSig names an owner: its generation, whether it holds every
// listener, and the generation's serving processes (pid and role) of the
// scan of v.
func ownerSig(v *scanView, o owner) string {
	if o.gen == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(o.gen.ID)
	if o.all {
		b.WriteString(" all")
	}
	for _, tg := range v.serving {
		if tg.rec != nil && tg.rec.ID == o.gen.ID {
			b.WriteByte(' ')
			b.WriteString(strconv.Itoa(tg.pid))
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(int(tg.role)))
		}
	}
	return b.String()
}

// listenerOwner finds who holds the listening TCP sockets (udp: the
// unconnected UDP sockets) of server.
func (c *listenerCache) listenerOwner(v *scanView, server netip.AddrPort, udp bool) owner {
	ls, err := c.dumpListeners(v, udp)
	if err != nil {
		return owner{}
	}
	return c.ownerIn(v, ls, server)
}

// dumpListeners is the kernel's listening TCP sockets (udp: unconnected
// UDP sockets), and those of v's foreign namespaces.
func (c *listenerCache) dumpListeners(v *scanView, udp bool) ([]diagSocket, error) {
	if udp {
		return c.diag.udpBound()
	}
	ls, err := c.diag.listeners()
	if f := v.foreignListeners(); len(f) > 0 {
		// Other network namespaces' (pods'), as the last scan read them.
		return append(ls, f...), nil
	}
	return ls, err
}

// ownerIn is listenerOwner from the dump ls.
func (c *listenerCache) ownerIn(v *scanView, ls []diagSocket, server netip.AddrPort) owner {
	inodes := map[uint64]bool{}     // listener inode -> held by a serving process
	ns := v.serverNS(server.Addr()) // the network namespace server's address is in
	for _, l := range ls {
		if listenerMatches(l, server, ns) {
			inodes[l.Inode] = false
		}
	}
	if len(inodes) == 0 {
		return owner{}
	}
	var found, single *record.Generation
	procs, marked := 0, 0 // serving processes of found's generation; inodes seen held
	var mastersRead map[int]bool
	for _, tg := range v.serving {
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
		mark := func(_ int, ino uint64) bool {
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
		}
		if !eachSocket(c.root, tg.pid, mark) && tg.rec.MasterPID > 0 && tg.rec.MasterPID != tg.pid && !mastersRead[tg.rec.MasterPID] {
			// A worker whose fd table this agent may not read: one
			// running under its own uid and dumpable (nginx's workers
			// are), without CAP_DAC_READ_SEARCH (a Kubernetes
			// DaemonSet's). Its master holds the listeners it inherited.
			if mastersRead == nil {
				mastersRead = map[int]bool{}
			}
			mastersRead[tg.rec.MasterPID] = true
			eachSocket(c.root, tg.rec.MasterPID, mark)
		}
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
