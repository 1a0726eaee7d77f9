package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// rollupTemplates are the rows report.Rollup (the agent's writer) makes of
// one window of the generator's templates on one node: a row per server,
// with its offer classes; node, start and end written per row.
func rollupTemplates(tb testing.TB) [][]byte {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	r := report.NewRollup(base, 1024)
	g := newRecordGen(tb, len(planTemplates(tb)), 1)
	sc := bufio.NewScanner(g)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var h record.Handshake
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			tb.Fatal(err)
		}
		h.Node = "NODE"
		r.Write(&h)
	}
	var out [][]byte
	for _, row := range r.Flush(base.Add(time.Minute)) {
		b, err := json.Marshal(row)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// rollupGen is an io.Reader of the rollup rows of nodes nodes over minutes
// minutes, one window a minute.
type rollupGen struct {
	tpl            [][]byte
	nodes, minutes int
	i              int
	buf            []byte
	off            int
	rows           int
}

func (g *rollupGen) Read(p []byte) (int, error) {
	n := 0
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for n < len(p) {
		if g.off == len(g.buf) {
			if g.i >= g.nodes*g.minutes {
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
			g.buf, g.off = g.buf[:0], 0
			node, minute := g.i%g.nodes, g.i/g.nodes
			start := base.Add(time.Duration(minute) * time.Minute)
			s, e := []byte(`"start":"`+start.Format(time.RFC3339Nano)+`"`), []byte(`"end":"`+start.Add(time.Minute).Format(time.RFC3339Nano)+`"`)
			name := []byte(fmt.Sprintf(`"node":"node-%04d"`, node))
			for _, t := range g.tpl {
				line := bytes.Replace(t, []byte(`"start":"2026-03-01T00:00:00Z"`), s, 1)
				line = bytes.Replace(line, []byte(`"end":"2026-03-01T00:01:00Z"`), e, 1)
				line = bytes.Replace(line, []byte(`"node":"NODE"`), name, 1)
				g.buf = append(append(g.buf, line...), '\n')
				g.rows++
			}
			g.i++
		}
		c := copy(p[n:], g.buf[g.off:])
		g.off += c
		n += c
	}
	return n, nil
}

// BenchmarkPlanRollupDay plans 1,000 nodes' per-minute rollups over
// PQWATCH_ROLLUP_MINUTES minutes (default 60; 1440 is a day), generated
// as they are read: CPU seconds, rows and handshakes per CPU second, and
// the heap in use at the end.
func BenchmarkPlanRollupDay(b *testing.B) {
	minutes := 60
	if v, err := strconv.Atoi(os.Getenv("PQWATCH_ROLLUP_MINUTES")); err == nil {
		minutes = v
	}
	tpl := rollupTemplates(b)
	p, _ := forecast.ParsePolicy("X25519MLKEM768,x25519,secp256r1")
	for b.Loop() {
		cpu0 := cpuTime(b)
		g := &rollupGen{tpl: tpl, nodes: 1000, minutes: minutes}
		pl := report.NewPlan(p, nil)
		var kinds planKinds
		if err := readPlanInput(g, pl, &kinds); err != nil {
			b.Fatal(err)
		}
		pl.Finish()
		cpu := (cpuTime(b) - cpu0).Seconds()
		if pl.Rollups == nil || pl.Rollups.Rows != g.rows || pl.Rollups.Duplicates != 0 {
			b.Fatalf("%+v, %d rows generated", pl.Rollups, g.rows)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(cpu, "cpu-s")
		b.ReportMetric(float64(g.rows), "rows")
		b.ReportMetric(float64(pl.Handshakes), "handshakes")
		b.ReportMetric(float64(g.rows)/cpu, "rows/cpu-s")
		b.ReportMetric(float64(pl.Handshakes)/cpu, "handshakes/cpu-s")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
	}
}
