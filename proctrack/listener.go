package proctrack

import (
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// listenerCache remembers, per server address, which generation owns the
// listening socket, so short connections whose socket is already gone when
// the capture reports them can still be attributed.
type listenerCache struct {
	mu      sync.Mutex
	entries map[netip.AddrPort]listenerEntry
}

type listenerEntry struct {
	at  time.Time
	gen *record.Generation // nil: no owner or more than one generation
}

const listenerTTL = time.Second

// attributeListener attributes a connection by the listening socket that
// accepted it, when exactly one generation holds that socket. During an
// nginx binary swap both masters hold the inherited listener, so the answer
// is "unknown" then, never a guess. WorkerPID is left unset: any worker of
// the generation may have accepted the connection.
func (t *Tracker) attributeListener(server netip.AddrPort) (*record.Generation, bool) {
	c := &t.listeners
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if e, ok := c.entries[server]; ok && now.Sub(e.at) < listenerTTL {
		return e.gen, e.gen != nil
	}
	if c.entries == nil || len(c.entries) > 256 {
		c.entries = make(map[netip.AddrPort]listenerEntry)
	}
	gen := t.listenerOwner(server)
	c.entries[server] = listenerEntry{at: now, gen: gen}
	return gen, gen != nil
}

func (t *Tracker) listenerOwner(server netip.AddrPort) *record.Generation {
	ls, err := t.diag.listeners()
	if err != nil {
		return nil
	}
	inodes := map[uint64]bool{}
	for _, l := range ls {
		if l.Local.Port() != server.Port() || l.Inode == 0 {
			continue
		}
		if a := l.Local.Addr().Unmap(); a.IsUnspecified() || a == server.Addr().Unmap() {
			inodes[l.Inode] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	t.mu.RLock()
	type target struct {
		pid int
		rec *record.Generation
	}
	targets := make([]target, 0, len(t.serving))
	for _, p := range t.serving {
		targets = append(targets, target{p.key.pid, p.rec})
	}
	t.mu.RUnlock()
	var found *record.Generation
	for _, tg := range targets {
		if tg.rec == nil || (found != nil && found.ID == tg.rec.ID) {
			continue
		}
		fdDir := t.path(tg.pid, "fd")
		fds, err := readDirNames(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(fdDir + "/" + fd)
			if err != nil {
				continue
			}
			if ino, err := parseSocketLink(l); err == nil && inodes[ino] {
				if found != nil && found.ID != tg.rec.ID {
					return nil // two generations share the listener: a swap
				}
				found = tg.rec
				break
			}
		}
	}
	if found == nil {
		return nil
	}
	g := *found
	g.WorkerPID = 0
	return &g
}
