package proctrack

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// scanView is what the attribution knows of the tracker's state: what one
// scan (or probe) published. It is never changed once published: the
// scanner builds the next one and swaps it in (attribIndex.view), and the
// per-record questions read it without a lock.
type scanView struct {
	// at is when the scan or probe that published the view started
	// (LastScan); scannedAt when the last scan (not probe) did: the
	// serving set's time.
	at, scannedAt time.Time
	// The serving processes (workers and servers), every tracked
	// process's generation, and the nginx masters.
	serving []servingTarget
	byPID   map[int]*record.Generation
	masters []int
	// sig is the serving set's signature, quietFrom when it last changed
	// (the quiet period's start; zero before the first scan).
	sig       []servingEntry
	quietFrom time.Time
	// swapIDs are the generations of the nginx lineages in a swap (none:
	// no swap): a quiet answer is scoped to the port's owner, so another
	// nginx's swap does not stop it.
	swapIDs map[string]bool
	// nets is the serving processes' other network namespaces (pods) as
	// this scan read them (nil: none).
	nets *nsView
	// gens is the serving generations with their handshake counts, what
	// the kernel's quiet set is chosen from (chooseQuiet).
	gens []servingGen
	// next is closed when a newer view is published.
	next chan struct{}
}

// servingTarget is a serving process as the index sees it.
type servingTarget struct {
	pid  int
	rec  *record.Generation
	role nginxRole
}

// servingEntry is one serving process as a quiet period sees it.
type servingEntry struct {
	key  procKey
	role nginxRole
}

// servingGen is one generation with serving processes, as chooseQuiet
// sees it.
type servingGen struct {
	id         string
	start      time.Time
	listenPID  int    // the process whose listening sockets are the generation's (its master, or the server)
	handshakes uint64 // counted so far, every group
	alive      bool
	swapping   bool  // its nginx lineage is in a swap
	pids       []int // its serving processes, sorted
	// rec is the answer for a connection accepted by one of pids:
	// WorkerPID set when pids holds one process.
	rec *record.Generation
}

// newScanView is the view of the state a scan at now left (the caller
// holds the tracker's lock: st is read, handshake counts included). The
// quiet period's start is publish's.
func newScanView(st *swapState, now time.Time) *scanView {
	v := &scanView{at: now, scannedAt: now, swapIDs: st.swappingIDs()}
	v.sig = make([]servingEntry, 0, len(st.serving))
	v.serving = make([]servingTarget, 0, len(st.serving))
	byGen := map[*generation]int{} // index in v.gens
	for _, p := range st.serving {
		v.sig = append(v.sig, servingEntry{p.key, p.role})
		v.serving = append(v.serving, servingTarget{p.key.pid, p.rec, p.role})
		g := p.gen
		if g == nil || p.rec == nil {
			continue
		}
		i, ok := byGen[g]
		if !ok {
			var n uint64
			for _, c := range g.handshakes {
				n += c
			}
			i = len(v.gens)
			byGen[g] = i
			v.gens = append(v.gens, servingGen{id: g.rec.ID, start: g.start, listenPID: g.key.pid, handshakes: n, alive: g.alive, swapping: v.swapIDs[g.rec.ID]})
		}
		v.gens[i].pids = append(v.gens[i].pids, p.key.pid)
	}
	for i := range v.gens {
		sg := &v.gens[i]
		slices.Sort(sg.pids)
		sg.rec = st.procs[sg.pids[0]].rec
		if len(sg.pids) > 1 {
			g := *sg.rec
			g.WorkerPID = 0
			sg.rec = &g
		}
	}
	slices.SortFunc(v.sig, func(a, b servingEntry) int { return a.key.pid - b.key.pid })
	v.byPID = make(map[int]*record.Generation, len(st.procs))
	for pid, p := range st.procs {
		if p.gen != nil && p.rec != nil {
			v.byPID[pid] = p.rec
		}
		if p.role == roleMaster {
			v.masters = append(v.masters, pid)
		}
	}
	return v
}

// inSwap says whether g's generation is in a swap in progress.
func (v *scanView) inSwap(g *record.Generation) bool { return v.swapIDs[g.ID] }

// publish makes v (a scan's view, nets read) the current view: a change in
// the serving set (a process started, exited or changed role) starts a new
// quiet period, and waiters of LastScan's channel are released. It says
// whether the serving set or the generations in a swap changed (the ports'
// owners are to be read again). Only the scanner publishes.
func (x *attribIndex) publish(v *scanView) (changed bool) {
	x.acc.remember(v.byPID, v.at)
	old := x.view.Load()
	v.quietFrom = old.quietFrom
	if !slices.Equal(v.sig, old.sig) || old.quietFrom.IsZero() {
		// A process that exited was alive at the previous scan and may
		// have served until this one: the new period starts now.
		v.quietFrom = v.at
		changed = true
	}
	if !maps.Equal(v.swapIDs, old.swapIDs) {
		changed = true // the ports' quiet flags change
	}
	x.store(old, v)
	return changed
}

// probed ends a probe that started at now and found nothing changed: it
// counts as a scan for quiet periods.
func (x *attribIndex) probed(now time.Time) {
	old := x.view.Load()
	v := *old
	v.at = now
	x.store(old, &v)
}

func (x *attribIndex) store(old, v *scanView) {
	v.next = make(chan struct{})
	x.view.Store(v)
	close(old.next)
}

// lastScan is when the last completed scan started (zero before the
// first), and a channel closed when the next scan completes.
func (x *attribIndex) lastScan() (time.Time, <-chan struct{}) {
	v := x.view.Load()
	return v.at, v.next
}

// swapping says whether any nginx swap is in progress (as of the last
// scan).
func (x *attribIndex) swapping() bool { return len(x.view.Load().swapIDs) > 0 }

// quietSince is when the current quiet period began, and whether an nginx
// swap is in progress. Lock-free: it is asked per handshake.
func (x *attribIndex) quietSince() (since time.Time, swapping bool) {
	v := x.view.Load()
	return v.quietFrom, len(v.swapIDs) > 0
}

// generationOf is the generation pid belongs to, as of the last scan.
func (x *attribIndex) generationOf(pid int) (*record.Generation, bool) {
	g, ok := x.view.Load().byPID[pid]
	return g, ok
}

// generationOfPID is the generation pid belongs to as of the last scan, or
// as of the last scan that saw it within seenTTL (a worker that exited
// since: drained after WINCH or a reload).
func (x *attribIndex) generationOfPID(pid int) (*record.Generation, bool) {
	if g, ok := x.generationOf(pid); ok {
		return g, true
	}
	return x.acc.rememberedGeneration(pid)
}

// serverNS is the foreign namespace that has addr as a local address (0:
// none known, the agent's own).
func (v *scanView) serverNS(addr netip.Addr) uint64 {
	if v.nets == nil {
		return 0
	}
	return v.nets.byAddr[addr.Unmap()]
}

// foreignConn is the inode of the server-side socket of client -> server
// in a foreign namespace, as of the scan.
func (v *scanView) foreignConn(server, client netip.AddrPort) (uint64, bool) {
	ns := v.serverNS(server.Addr())
	if ns == 0 {
		return 0, false
	}
	k := [2]netip.AddrPort{
		netip.AddrPortFrom(server.Addr().Unmap(), server.Port()),
		netip.AddrPortFrom(client.Addr().Unmap(), client.Port()),
	}
	ino, ok := v.nets.byIno[ns].conns[k]
	return ino, ok && ino != 0
}

// foreignListeners are the listening TCP sockets of the foreign
// namespaces of the scan.
func (v *scanView) foreignListeners() []diagSocket {
	if v.nets == nil {
		return nil
	}
	var out []diagSocket
	for _, n := range v.nets.byIno {
		out = append(out, n.listeners...)
	}
	return out
}
