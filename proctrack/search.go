package proctrack

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// serverSearch finds the servers that are not nginx (nginx is found by
// its titles): the owners of listening sockets on wanted ports. The
// scanner owns it (no lock), and runs it without the tracker's lock: it
// reads sock_diag, /proc's directory and fd tables.
type serverSearch struct {
	root  string
	every time.Duration // ListenerRescan
	diag  *sockDiag
	log   *slog.Logger

	wantPorts   map[uint16]bool
	last        time.Time      // the last search (zero: search at the next scan)
	listenOwner map[uint64]int // listener inode -> pid
	serverPIDs  map[int]uint64 // pid -> start time of the servers found
	// due mirrors "a search is due at the next scan" (last zero, a port
	// wanted) for ScanDue, which any goroutine may call.
	due atomic.Bool
}

func newServerSearch(cfg Config, diag *sockDiag, log *slog.Logger) *serverSearch {
	s := &serverSearch{root: cfg.ProcRoot, every: cfg.ListenerRescan, diag: diag, log: log,
		wantPorts: map[uint16]bool{}, listenOwner: map[uint64]int{}, serverPIDs: map[int]uint64{}}
	for _, p := range cfg.ServerPorts {
		s.wantPorts[p] = true
	}
	s.soon()
	return s
}

// want adds ports to the wanted ones and searches at the next scan.
func (s *serverSearch) want(ports []uint16) {
	for _, p := range ports {
		s.wantPorts[p] = true
	}
	s.soon()
}

// soon makes the next scan search.
func (s *serverSearch) soon() {
	s.last = time.Time{}
	s.due.Store(len(s.wantPorts) > 0)
}

// exited forgets servers of prev that are not in procs any more; the next
// scan searches for their listeners' owners (a restart's new process holds
// them soon).
func (s *serverSearch) exited(prev, procs map[int]*proc) {
	for pid, p := range prev {
		if procs[pid] != p && p.gen != nil && p.gen.key == p.key && s.serverPIDs[pid] == p.key.start {
			delete(s.serverPIDs, pid)
			s.soon()
		}
	}
}

// search finds the owners of listening sockets on wanted ports that are
// not known yet, at most every ListenerRescan; procs are the tracked
// processes (the scanner's state), rd reads a candidate's stat, selfNS is
// the agent's network namespace (0: unknown). It says whether it found a
// server not known before (its generation comes with the next scan).
func (s *serverSearch) search(now time.Time, procs map[int]*proc, rd *procReader, selfNS uint64) (found bool) {
	if len(s.wantPorts) == 0 || now.Sub(s.last) < s.every {
		return false
	}
	s.last = now
	s.due.Store(false)
	ls, err := s.diag.listeners()
	if err != nil {
		s.log.Debug("listener dump failed", "err", err)
	}
	// QUIC servers: their unconnected UDP sockets on the ports.
	if us, err := s.diag.udpBound(); err == nil {
		ls = append(ls, us...)
	}
	unknown := s.unknownListeners(ls, procs)
	// Servers in other network namespaces (pods) sock_diag cannot see:
	// each namespace's listeners are read once per search, through the
	// first process found in it (netns.go).
	foreign := selfNS != 0
	if len(unknown) == 0 && !foreign {
		return false
	}
	names, err := readDirNames(s.root)
	if err != nil {
		return false
	}
	nsUnknown := map[uint64]map[uint64]bool{} // foreign namespace -> its unknown listeners (nil: none)
	claim := func(pid int, unknown map[uint64]bool) {
		eachSocket(s.root, pid, func(_ int, ino uint64) bool {
			if !unknown[ino] {
				return true
			}
			s.listenOwner[ino] = pid
			if p := procs[pid]; p != nil && p.role != roleNone {
				return true // nginx is tracked by its titles
			}
			if st, err := rd.statOf(pid); err == nil && !rd.isNginxComm(st.Comm) {
				if _, known := s.serverPIDs[pid]; !known {
					found = true
				}
				s.serverPIDs[pid] = st.StartTime
			}
			return true
		})
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if foreign {
			if ns := netnsOf(s.root, pid); ns != 0 && ns != selfNS {
				u, read := nsUnknown[ns]
				if !read {
					if n, ok := readNetns(s.root, pid, ns, now); ok {
						u = s.unknownListeners(n.listeners, procs)
						for ino := range u {
							unknown[ino] = true // kept in listenOwner below
						}
					}
					nsUnknown[ns] = u
				}
				if len(u) > 0 {
					claim(pid, u)
				}
				continue
			}
		}
		if len(unknown) > 0 {
			claim(pid, unknown)
		}
	}
	for ino, pid := range s.listenOwner {
		if _, ok := procs[pid]; !ok && !unknown[ino] {
			delete(s.listenOwner, ino)
		}
	}
	return found
}

// unknownListeners are the inodes of the listeners of ls on wanted ports
// whose owner is not a tracked process.
func (s *serverSearch) unknownListeners(ls []diagSocket, procs map[int]*proc) map[uint64]bool {
	unknown := make(map[uint64]bool)
	for _, l := range ls {
		if !s.wantPorts[l.Local.Port()] || l.Inode == 0 {
			continue
		}
		if pid, ok := s.listenOwner[l.Inode]; ok {
			if _, alive := procs[pid]; alive {
				continue
			}
		}
		unknown[l.Inode] = true
	}
	return unknown
}
