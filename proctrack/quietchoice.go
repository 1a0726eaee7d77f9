package proctrack

import (
	"slices"
	"time"
)

// The kernel's quiet set (AllAcceptEvents off, accept events on): the
// serving processes of one generation whose accepts the kernel only
// counts; a connection answered by a server with no accept event is theirs
// (quietEpochs). chooseQuiet picks the generation from a scan's view, a
// pure function; the scanner reads its ports and writes the set
// (Tracker.applyQuiet).

// quietChoice is the scanner's memory of its choices: the generation
// chosen (its id; "" none), the handshakes each serving generation had
// at the last choice, and the TCP ports the chosen one listens on, with
// when they were read.
type quietChoice struct {
	gen    string
	seen   map[string]uint64
	ports  []uint16
	portAt time.Time
}

// quietPortsEvery: the quiet generation's listening ports are read again
// at least this often (and whenever the choice changes).
const quietPortsEvery = 30 * time.Second

// chooseQuiet picks the quiet generation among gens (a scan's serving
// generations): the one that served the most handshakes since the last
// choice (seen: each generation's count then), the earliest started on a
// tie, and the current one (cur) kept while it served at least half as
// many as the best. A generation in a swap (two generations of its nginx
// lineage alive) is never chosen, so every accept of a swap window is
// reported and each of its records names its worker; another server's
// swap on the host does not stop the choice. It returns the pick (nil:
// none) and the counts to remember for the next choice; seen is not
// changed.
func chooseQuiet(gens []servingGen, cur string, seen map[string]uint64) (*servingGen, map[string]uint64) {
	next := make(map[string]uint64, len(gens))
	var pick *servingGen
	var best, curD uint64
	curServing := false
	for i := range gens {
		g := &gens[i]
		if !g.alive || g.swapping || g.rec == nil || len(g.pids) == 0 {
			continue
		}
		var d uint64
		if g.handshakes > seen[g.id] { // the $pid stage may take a count back
			d = g.handshakes - seen[g.id]
		}
		next[g.id] = g.handshakes
		if g.id == cur {
			curD, curServing = d, true
		}
		if pick == nil || d > best || (d == best && g.start.Before(pick.start)) {
			pick, best = g, d
		}
	}
	if curServing && 2*curD >= best {
		for i := range gens {
			if gens[i].id == cur {
				pick = &gens[i]
			}
		}
	}
	return pick, next
}

// applyQuiet chooses the kernel's quiet set after a scan whose view is v,
// reads the chosen generation's listening ports when the choice changed
// or they are quietPortsEvery old, and writes the set. The scanner calls
// it (t.quiet is its own).
func (t *Tracker) applyQuiet(v *scanView) {
	if t.cfg.AllAcceptEvents || !t.ix.acc.on() {
		return
	}
	pick, seen := chooseQuiet(v.gens, t.quiet.gen, t.quiet.seen)
	t.quiet.seen = seen
	if pick == nil {
		t.quiet.gen, t.quiet.ports = "", nil
		t.ix.setQuiet(nil, nil, nil, t.log)
		return
	}
	if pick.id != t.quiet.gen || v.at.Sub(t.quiet.portAt) >= quietPortsEvery {
		t.quiet.ports, t.quiet.portAt = t.listenPorts(pick.listenPID), v.at
	}
	t.quiet.gen = pick.id
	if len(t.quiet.ports) == 0 {
		t.ix.setQuiet(nil, nil, nil, t.log) // no listener found: nothing to answer for
		return
	}
	t.ix.setQuiet(pick.pids, pick.rec, t.quiet.ports, t.log)
}

// listenPorts returns the ports of the listening TCP sockets pid holds
// (an nginx master holds every listener its workers serve), sorted.
func (t *Tracker) listenPorts(pid int) []uint16 {
	ls, err := t.diag.listeners()
	if err != nil {
		return nil
	}
	byInode := make(map[uint64]uint16, len(ls))
	for _, l := range ls {
		if l.Inode != 0 {
			byInode[l.Inode] = l.Local.Port()
		}
	}
	var ports []uint16
	eachSocket(t.cfg.ProcRoot, pid, func(_ int, ino uint64) bool {
		if p, ok := byInode[ino]; ok && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
		return true
	})
	slices.Sort(ports)
	return ports
}
