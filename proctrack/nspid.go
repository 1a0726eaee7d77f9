package proctrack

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// nginx's $pid is the worker's pid in nginx's own PID namespace: in a pod
// (or any container without hostPID) another number than the agent's /proc
// gives the same process; the pod's master is often 1 there. A line's $pid
// is read in the PID namespace of the generation the record has, or for a
// record without one and a line of a pod's log, of the generation running
// in that pod (its cgroup's UID): /proc/PID/status's NSpid lists a
// process's pid in each namespace from the proc mount's down to its own,
// so the worker whose last NSpid is $pid is the one. A $pid of a pod's log
// that no known process maps to names nothing: it is never read as a pid
// of the agent's namespace (it would be another process there).

// nsPIDs maps the $pid of each generation's log lines to pids of the
// agent's namespace, per generation, as the processes' NSpid said.
type nsPIDs struct {
	mu   sync.Mutex
	gens map[string]*nsGen // generation ID -> its namespace's pids
}

// nsGen is one generation's PID namespace as its processes showed it.
type nsGen struct {
	nested bool        // the master is in a PID namespace below the agent's
	inner  map[int]int // innermost pid -> pid in the agent's namespace
	read   time.Time   // when inner was read
}

// nsReread bounds how often a $pid no process of a nested generation has
// reads its processes' NSpid again.
const nsReread = 100 * time.Millisecond

// maxNSGens bounds nsPIDs.gens; past it the map starts anew.
const maxNSGens = 256

// readNSpid returns /proc/PID/status's NSpid: the process's pid in each
// PID namespace from the proc mount's down to its own; nil when it cannot
// be read (a kernel before 4.1 has no NSpid: every pid is then taken as
// the agent's namespace's).
func readNSpid(root string, pid int) []int {
	b, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	return parseNSpid(b)
}

// parseNSpid reads the NSpid line of a status file.
func parseNSpid(b []byte) []int {
	i := bytes.Index(b, []byte("\nNSpid:"))
	if i < 0 {
		return nil
	}
	line := b[i+len("\nNSpid:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var out []int
	for _, f := range bytes.Fields(line) {
		n, err := strconv.Atoi(string(f))
		if err != nil || n <= 0 {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// hostPID maps the $pid of r's log line to a pid of the agent's PID
// namespace: ok false when it names no process pqwatch can tell (a pod's
// $pid without a generation to read it in, or one no process of the
// generation has).
func (s *LogPID) hostPID(r *record.Handshake, pid int) (int, bool) {
	g := r.Generation
	if g != nil && g.Pod != nil && r.Pod != nil && r.Pod.UID != "" && g.Pod.UID != r.Pod.UID {
		// The line is of another pod than the generation's: its $pid is
		// of that pod's namespace.
		g = nil
	}
	if g == nil && r.Pod != nil && r.Pod.UID != "" {
		g = s.t.generationOfPod(r.Pod.UID)
	}
	if g == nil {
		// A line of a host's log: its $pid is the agent's namespace's.
		// A pod's: nothing to read it in.
		return pid, r.Pod == nil
	}
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	e := s.ns.gens[g.ID]
	if e == nil {
		ns := readNSpid(s.t.cfg.ProcRoot, g.MasterPID)
		e = &nsGen{nested: len(ns) > 1}
		if len(s.ns.gens) >= maxNSGens || s.ns.gens == nil {
			s.ns.gens = map[string]*nsGen{}
		}
		s.ns.gens[g.ID] = e
	}
	if !e.nested {
		return pid, true
	}
	if h, ok := e.inner[pid]; ok {
		return h, true
	}
	// Read the generation's processes again: a worker started since.
	if time.Since(e.read) < nsReread {
		return 0, false
	}
	e.read = time.Now()
	info, ok := s.t.Generation(g.ID)
	if !ok {
		return 0, false
	}
	e.inner = map[int]int{}
	for _, p := range append(append([]int{info.MasterPID}, info.Workers...), info.Draining...) {
		if ns := readNSpid(s.t.cfg.ProcRoot, p); len(ns) > 1 {
			e.inner[ns[len(ns)-1]] = p
		}
	}
	h, ok := e.inner[pid]
	return h, ok
}

// generationOfPod is the live generation whose main process runs in the
// pod of uid (its cgroup's), nil when none or several do.
func (t *Tracker) generationOfPod(uid string) *record.Generation {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var found *record.Generation
	for _, g := range t.st.order {
		if !g.alive || g.rec.Pod == nil || g.rec.Pod.UID != uid {
			continue
		}
		if found != nil {
			return nil
		}
		c := g.rec
		found = &c
	}
	return found
}
