package proctrack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/record"
)

// TestLogPID: a record the attribution left without a generation takes,
// from the joined nginx line's $pid, the generation and worker of the real
// nginx worker that wrote it; a $pid no tracked process has (and no
// process at all: nothing to wait for) is counted and goes on at once; a
// record attributed to the right generation gains its worker, one
// attributed to another generation is corrected.
func TestLogPID(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	master := l.start()
	tr, _ := startTracker(t)
	gen := genByMaster(t, tr, master, 2)
	if g := (&record.Generation{ID: gen.ID}); !g.Nginx() { // the log join takes nginx lines for it by this
		t.Errorf("generation %s of a real nginx does not count as nginx's", gen.ID)
	}
	var out []*record.Handshake
	s := NewLogPID(tr).Then(func(r *record.Handshake) { out = append(out, r) })
	// Each record as the attribution leaves it: none of these names a
	// worker, so its count waits for the $pid of its line.
	process := func(r *record.Handshake) {
		tr.observeAttributed(r.Generation, r, true, false)
		s.Process(r)
	}
	for _, w := range gen.Workers {
		process(&record.Handshake{Transport: record.TransportTCP, Group: "x25519", Log: &record.Log{Source: "nginx", PID: w}})
	}
	process(&record.Handshake{Transport: record.TransportTCP, Log: &record.Log{Source: "nginx", PID: 1 << 30}})
	attributed := &record.Generation{ID: gen.ID, MasterPID: master}
	withGen := &record.Handshake{Transport: record.TransportTCP, Generation: attributed, Log: &record.Log{Source: "nginx", PID: gen.Workers[0]}}
	process(withGen)
	wrong := &record.Handshake{Transport: record.TransportTCP, Generation: &record.Generation{ID: "nginx-other-1", MasterPID: 1}, Log: &record.Log{Source: "nginx", PID: gen.Workers[1]}}
	process(wrong)
	s.Flush()
	if g := wrong.Generation; g.ID != gen.ID || g.MasterPID != master || g.WorkerPID != gen.Workers[1] {
		t.Errorf("misattributed record not corrected: %+v", g)
	}
	for i, w := range gen.Workers {
		g := out[i].Generation
		if g == nil || g.ID != gen.ID || g.MasterPID != master || g.WorkerPID != w {
			t.Errorf("worker %d: generation %+v, want %s master %d", w, g, gen.ID, master)
		}
	}
	if out[len(gen.Workers)].Generation != nil {
		t.Errorf("unknown pid attributed: %+v", out[len(gen.Workers)].Generation)
	}
	if g := withGen.Generation; g.ID != gen.ID || g.WorkerPID != gen.Workers[0] {
		t.Errorf("attributed record's generation %+v, want %s worker %d", g, gen.ID, gen.Workers[0])
	}
	if attributed.WorkerPID != 0 {
		t.Errorf("the generation the record came with was changed in place (worker %d): records share them", attributed.WorkerPID)
	}
	want := fmt.Sprintf(`
# HELP pqwatch_attributions_from_log_total %s
# TYPE pqwatch_attributions_from_log_total counter
pqwatch_attributions_from_log_total{result="corrected"} 1
pqwatch_attributions_from_log_total{result="found"} %d
pqwatch_attributions_from_log_total{result="held_overflow"} 0
pqwatch_attributions_from_log_total{result="unknown_pid"} 1
`, "TCP handshakes whose joined nginx access-log line's $pid named their server process: result found (the attribution had left them without a generation), corrected (it had named another generation, or another worker), unknown_pid ($pid names no tracked process, even after a scan), or held_overflow (not held for a scan: 8192 records were waiting).", len(gen.Workers))
	if err := testutil.CollectAndCompare(s, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// Each record counted once, in the generation it ends with; the one
	// attributed to "nginx-other-1" and corrected was never counted there
	// (a count taken back would read as a counter reset).
	counts := map[string]float64{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collector())
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "pqwatch_generation_handshakes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "generation" {
					counts[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if counts[gen.ID] != float64(len(gen.Workers)+2) || counts["nginx-other-1"] != 0 {
		t.Errorf("pqwatch_generation_handshakes_total by generation %v, want %s %d and nothing else", counts, gen.ID, len(gen.Workers)+2)
	}
}

// TestLogPIDCountsWithoutLine: pqwatch_generation_handshakes_total does not
// wait for the log join. A record whose attribution named the worker is
// counted at once; one that named none waits for its line's $pid at most
// logCountWait, then is counted with the attribution's answer (a
// connection without a request has no line); the line coming later does
// not count it again.
func TestLogPIDCountsWithoutLine(t *testing.T) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	master := l.start()
	tr, _ := startTracker(t)
	gi := genByMaster(t, tr, master, 2)
	s := NewLogPID(tr).Then(func(*record.Handshake) {})
	g := &record.Generation{ID: gi.ID, MasterPID: master}
	count := func() uint64 {
		info, _ := tr.Generation(g.ID)
		return info.Connections
	}
	withWorker := &record.Generation{ID: g.ID, MasterPID: master, WorkerPID: gi.Workers[0]}
	r1 := &record.Handshake{Transport: record.TransportTCP, Generation: withWorker}
	tr.observeAttributed(withWorker, r1, true, false)
	if n := count(); n != 1 {
		t.Fatalf("a record whose worker is known counted %d, want 1 at once", n)
	}
	r2 := &record.Handshake{Transport: record.TransportTCP, Generation: g}
	start := time.Now()
	tr.observeAttributed(g, r2, true, false)
	if n := count(); n != 1 {
		t.Fatalf("a record without its worker counted at once (%d)", n)
	}
	for count() < 2 && time.Since(start) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n, waited := count(), time.Since(start); n != 2 || waited > 2*time.Second {
		t.Errorf("count %d after %v, want 2 within 2 s", n, waited)
	}
	s.Process(r2) // its line, late: no second count
	if n := count(); n != 2 {
		t.Errorf("the late line counted the record again: %d", n)
	}
	// A record the attribution could not place waits for its line however
	// long the join takes (seconds): its $pid names the generation then.
	r3 := &record.Handshake{Transport: record.TransportTCP, Log: &record.Log{Source: "nginx", PID: gi.Workers[0]}}
	tr.observeAttributed(nil, r3, true, false)
	time.Sleep(logCountWait + 300*time.Millisecond)
	s.Process(r3)
	if n := count(); n != 3 {
		t.Errorf("an unattributed record found by its $pid after %v counted %d, want 3", logCountWait, n)
	}
}
