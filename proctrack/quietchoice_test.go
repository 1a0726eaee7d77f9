package proctrack

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// TestChooseQuiet: the kernel's quiet set chosen from a scan's serving
// generations, against the rules of chooseQuiet: the most handshakes
// since the last choice, the earliest started on a tie, the current one
// kept while it served at least half the best, never a generation in a
// swap, exited or without a serving process.
func TestChooseQuiet(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	gen := func(id string, start int, handshakes uint64, pids ...int) servingGen {
		return servingGen{id: id, start: t0.Add(time.Duration(start) * time.Second), listenPID: pids[0],
			handshakes: handshakes, alive: true, pids: pids, rec: &record.Generation{ID: id}}
	}
	swapping := func(g servingGen) servingGen { g.swapping = true; return g }
	exited := func(g servingGen) servingGen { g.alive = false; return g }
	noRec := func(g servingGen) servingGen { g.rec = nil; return g }
	for _, c := range []struct {
		name     string
		gens     []servingGen
		cur      string
		seen     map[string]uint64
		want     string // "" none
		wantSeen map[string]uint64
	}{
		{name: "no generation", want: "", wantSeen: map[string]uint64{}},
		{name: "one generation, no handshakes yet",
			gens: []servingGen{gen("a", 0, 0, 11, 12)}, want: "a", wantSeen: map[string]uint64{"a": 0}},
		{name: "the busiest since the last choice",
			gens: []servingGen{gen("a", 0, 1000, 11), gen("b", 1, 300, 21)},
			seen: map[string]uint64{"a": 990, "b": 100}, want: "b", wantSeen: map[string]uint64{"a": 1000, "b": 300}},
		{name: "a tie goes to the earliest started",
			gens: []servingGen{gen("late", 5, 10, 21), gen("early", 1, 10, 11)}, want: "early",
			wantSeen: map[string]uint64{"late": 10, "early": 10}},
		{name: "the current one kept at half the best",
			gens: []servingGen{gen("a", 0, 50, 11), gen("b", 1, 100, 21)}, cur: "a", want: "a",
			wantSeen: map[string]uint64{"a": 50, "b": 100}},
		{name: "the current one let go below half the best",
			gens: []servingGen{gen("a", 0, 49, 11), gen("b", 1, 100, 21)}, cur: "a", want: "b",
			wantSeen: map[string]uint64{"a": 49, "b": 100}},
		{name: "a count taken back ($pid) is no negative delta",
			gens: []servingGen{gen("a", 0, 5, 11), gen("b", 1, 1, 21)}, seen: map[string]uint64{"a": 9, "b": 0}, want: "b",
			wantSeen: map[string]uint64{"a": 5, "b": 1}},
		{name: "never a generation in a swap",
			gens: []servingGen{swapping(gen("a", 0, 1000, 11)), gen("b", 1, 1, 21)}, cur: "a", want: "b",
			wantSeen: map[string]uint64{"b": 1}},
		{name: "every generation in a swap: none",
			gens: []servingGen{swapping(gen("a", 0, 1000, 11)), swapping(gen("a2", 1, 0, 21))}, cur: "a", want: "",
			wantSeen: map[string]uint64{}},
		{name: "exited, or without an answer, never",
			gens: []servingGen{exited(gen("a", 0, 1000, 11)), noRec(gen("b", 1, 500, 21)), gen("c", 2, 0, 31)}, want: "c",
			wantSeen: map[string]uint64{"c": 0}},
		{name: "a generation gone is forgotten",
			gens: []servingGen{gen("b", 1, 7, 21)}, cur: "a", seen: map[string]uint64{"a": 100, "b": 3}, want: "b",
			wantSeen: map[string]uint64{"b": 7}},
	} {
		seenBefore := maps.Clone(c.seen)
		pick, seen := chooseQuiet(c.gens, c.cur, c.seen)
		got := ""
		if pick != nil {
			got = pick.id
		}
		if got != c.want {
			t.Errorf("%s: picked %q, want %q", c.name, got, c.want)
		}
		if !maps.Equal(seen, c.wantSeen) {
			t.Errorf("%s: remembers %v, want %v", c.name, seen, c.wantSeen)
		}
		if !maps.Equal(c.seen, seenBefore) {
			t.Errorf("%s: the previous counts were changed: %v, were %v", c.name, c.seen, seenBefore)
		}
	}
}

// TestScanViewGens: a scan's view groups the serving processes by
// generation with their handshake counts, and gives the answer for an
// accept by one of them (WorkerPID only when the generation has one).
func TestScanViewGens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := newSwapState(swapConfig{failedSwapTimeout: time.Second, maxGenerations: 8})
	mk := func(id string, master int) *generation {
		g := &generation{key: procKey{pid: master}, id: id, alive: true, start: now,
			rec: record.Generation{ID: id, MasterPID: master}, handshakes: map[string]uint64{"x25519": 3, "X25519MLKEM768": 4}}
		return g
	}
	nginx, caddy := mk("nginx-a-10", 10), mk("caddy-b-30", 30)
	proc1 := func(g *generation, pid int, role nginxRole) *proc {
		r := g.rec
		r.WorkerPID = pid
		return &proc{procSnap: procSnap{key: procKey{pid: pid}, role: role}, gen: g, rec: &r}
	}
	st.procs = map[int]*proc{
		10: {procSnap: procSnap{key: procKey{pid: 10}, role: roleMaster}, gen: nginx, rec: &nginx.rec},
		12: proc1(nginx, 12, roleWorker), 11: proc1(nginx, 11, roleWorker), 30: proc1(caddy, 30, roleNone),
	}
	st.serving = []*proc{st.procs[12], st.procs[11], st.procs[30]}
	v := newScanView(st, now)
	if len(v.gens) != 2 {
		t.Fatalf("%d generations, want 2: %+v", len(v.gens), v.gens)
	}
	for _, g := range v.gens {
		switch g.id {
		case nginx.id:
			if !slices.Equal(g.pids, []int{11, 12}) || g.rec.WorkerPID != 0 || g.rec.ID != nginx.id || g.handshakes != 7 || g.listenPID != 10 {
				t.Errorf("nginx: %+v (rec %+v)", g, g.rec)
			}
		case caddy.id:
			if !slices.Equal(g.pids, []int{30}) || g.rec.WorkerPID != 30 || g.handshakes != 7 {
				t.Errorf("caddy: %+v (rec %+v)", g, g.rec)
			}
		}
	}
	if !slices.Equal(v.masters, []int{10}) || len(v.byPID) != 4 || v.byPID[11].WorkerPID != 11 {
		t.Errorf("masters %v, byPID %v", v.masters, v.byPID)
	}
	if st.procs[11].rec.WorkerPID != 11 {
		t.Error("the view changed a process's answer")
	}
}

// TestPublishQuietPeriod: each scan's view is published whole; the quiet
// period starts again only when the serving set changes (a process
// started, exited or changed role), a probe keeps it, and publish says
// when the ports' owners are to be read again (the set or the swaps
// changed). LastScan's channel is closed by the next view.
func TestPublishQuietPeriod(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	x := newAttribIndex(Config{Now: func() time.Time { return t0 }}, nil)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	view := func(s int, swap bool, serving ...servingEntry) *scanView {
		v := &scanView{at: at(s), scannedAt: at(s), sig: serving}
		if swap {
			v.swapIDs = map[string]bool{"nginx-a-10": true}
		}
		return v
	}
	w1, w2 := servingEntry{procKey{11, 1}, roleWorker}, servingEntry{procKey{12, 1}, roleWorker}
	if since, swapping := x.quietSince(); !since.IsZero() || swapping {
		t.Fatalf("before any scan: %v %v", since, swapping)
	}
	_, first := x.lastScan()
	for _, c := range []struct {
		name        string
		v           *scanView
		probeAt     int // a probe after the scan (0: none)
		wantChanged bool
		wantSince   time.Time
	}{
		{"first scan", view(1, false, w1, w2), 0, true, at(1)},
		{"same set", view(2, false, w1, w2), 3, false, at(1)},
		{"a worker left", view(4, false, w1), 0, true, at(4)},
		{"a swap began, same set", view(5, true, w1), 0, true, at(4)},
		{"still in the swap", view(6, true, w1), 0, false, at(4)},
		{"the worker drains", view(7, true, servingEntry{procKey{11, 1}, roleDrain}), 0, true, at(7)},
		{"the swap ended", view(8, false, servingEntry{procKey{11, 1}, roleDrain}), 0, true, at(7)},
	} {
		_, next := x.lastScan()
		if got := x.publish(c.v); got != c.wantChanged {
			t.Errorf("%s: changed %v, want %v", c.name, got, c.wantChanged)
		}
		select {
		case <-next:
		default:
			t.Errorf("%s: the previous view's channel is open", c.name)
		}
		if c.probeAt > 0 {
			x.probed(at(c.probeAt))
		}
		since, swapping := x.quietSince()
		if !since.Equal(c.wantSince) || swapping != (len(c.v.swapIDs) > 0) {
			t.Errorf("%s: quiet since %v (swapping %v), want %v", c.name, since, swapping, c.wantSince)
		}
		want := c.v.at
		if c.probeAt > 0 {
			want = at(c.probeAt)
		}
		if got, _ := x.lastScan(); !got.Equal(want) {
			t.Errorf("%s: last scan %v, want %v", c.name, got, want)
		}
		if x.view.Load().scannedAt != c.v.scannedAt {
			t.Errorf("%s: a probe moved the scan's time", c.name)
		}
	}
	select {
	case <-first:
	default:
		t.Error("the channel of the view before the first scan is open")
	}
}
