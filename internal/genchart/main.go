// Command genchart draws a swap's timeline per server generation
// (docs/migration-study.md): handshakes per second per generation from
// pqwatch run's JSONL records, the scenario steps of pqwatch loadgen's
// results.json files, and the swap events of pqwatch run's log. It writes
// an SVG drawn as loadgen draws its charts and prints the table behind it.
//
//	go run ./internal/genchart -records records.jsonl -loadgen DIR/results.json \
//	    [-loadgen DIR2/results.json] [-agent-log pqwatch.log] [-bin 0.5] -o generations.svg
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/loadgen"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var results multi
	records := flag.String("records", "", "pqwatch run's JSONL records (-format jsonl; .gz: gzip)")
	flag.Var(&results, "loadgen", "a pqwatch loadgen results.json whose scenario steps are marked (repeatable)")
	agentLog := flag.String("agent-log", "", "pqwatch run's log (stderr): its swap events are marked")
	bin := flag.Float64("bin", 0.5, "seconds per bin")
	out := flag.String("o", "generations.svg", "output SVG")
	flag.Parse()
	if *records == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: genchart -records FILE [-loadgen results.json]... [-agent-log FILE] [-bin s] [-o FILE]")
		os.Exit(2)
	}
	if err := run(*records, results, *agentLog, *bin, *out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "genchart:", err)
		os.Exit(1)
	}
}

type rec struct {
	TS         time.Time `json:"ts"`
	Group      string    `json:"group"`
	PQ         bool      `json:"pq"`
	Generation *struct {
		ID      string `json:"id"`
		OpenSSL string `json:"openssl"`
	} `json:"generation"`
}

type lgResults struct {
	Started time.Time `json:"started"`
	Events  []struct {
		Time time.Time `json:"time"`
		Step string    `json:"step"`
		PID  int       `json:"pid"`
		OK   bool      `json:"ok"`
	} `json:"events"`
}

type event struct {
	t                time.Time
	kind, gen, other string
}

// slog's text handler: key=value, values with spaces quoted.
var (
	swapLine = regexp.MustCompile(`msg="swap event"`)
	kv       = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)
)

func agentEvents(path string) ([]event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !swapLine.MatchString(l) {
			continue
		}
		var e event
		for _, m := range kv.FindAllStringSubmatch(l, -1) {
			v := strings.Trim(m[2], `"`)
			switch m[1] {
			case "kind":
				e.kind = v
			case "generation":
				e.gen = v
			case "other":
				e.other = v
			case "ts":
				e.t, _ = time.Parse(time.RFC3339Nano, v)
			}
		}
		if e.t.IsZero() {
			return nil, fmt.Errorf("%s: a swap event without a readable ts: %s", path, l)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

func run(records string, results []string, agentLog string, bin float64, out string, w io.Writer) error {
	f, err := os.Open(records)
	if err != nil {
		return err
	}
	defer f.Close()
	var in io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(records, ".gz") {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return fmt.Errorf("%s: %w", records, err)
		}
		in = zr
	}
	dec := json.NewDecoder(in)
	type gen struct {
		lib   string
		times []time.Time
		pq    int
	}
	gens := map[string]*gen{}
	var order []string
	var origin time.Time
	noGen, n := 0, 0
	for {
		var r rec
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s: record %d: %w", records, n+1, err)
		}
		n++
		if r.Generation == nil || r.Generation.ID == "" {
			noGen++
			continue
		}
		g := gens[r.Generation.ID]
		if g == nil {
			g = &gen{lib: r.Generation.OpenSSL}
			gens[r.Generation.ID] = g
			order = append(order, r.Generation.ID)
		}
		g.times = append(g.times, r.TS)
		if r.PQ {
			g.pq++
		}
		if origin.IsZero() || r.TS.Before(origin) {
			origin = r.TS
		}
	}
	if len(order) == 0 {
		return fmt.Errorf("%s: none of %d records names a generation (pqwatch run without process tracking?)", records, n)
	}
	var lgs []lgResults
	for _, p := range results {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r lgResults
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		lgs = append(lgs, r)
		if !r.Started.IsZero() && r.Started.Before(origin) {
			origin = r.Started
		}
	}
	var markers []loadgen.ChartMarker
	for _, r := range lgs {
		for _, e := range r.Events {
			m := loadgen.ChartMarker{Offset: e.Time.Sub(origin).Seconds(), Label: fmt.Sprintf("%s %d", e.Step, e.PID), Kind: "step"}
			if !e.OK {
				m.Label += " FAILED"
				m.Kind = "failed"
			}
			markers = append(markers, m)
		}
	}
	var evs []event
	others := 0
	if agentLog != "" {
		all, err := agentEvents(agentLog)
		if err != nil {
			return err
		}
		// Only the events of the generations on the chart: pqwatch run
		// tracks every nginx on the host, other people's swaps too.
		for _, e := range all {
			if gens[e.gen] == nil && gens[e.other] == nil {
				others++
				continue
			}
			evs = append(evs, e)
		}
		for _, e := range evs {
			markers = append(markers, loadgen.ChartMarker{Offset: e.t.Sub(origin).Seconds(), Label: "pqwatch: " + e.kind + " " + masterOf(e.gen), Kind: "event"})
		}
	}
	var series []loadgen.GenerationSeries
	fmt.Fprintf(w, "%d records, %d without a generation; origin %s\n", n, noGen, origin.Format(time.RFC3339Nano))
	fmt.Fprintln(w, "| generation | TLS library | handshakes | PQ | PQ share | first s | last s |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|")
	for _, id := range order {
		g := gens[id]
		s := loadgen.GenerationSeries{Name: id, Library: g.lib, PQ: g.pq}
		first, last := g.times[0], g.times[0]
		for _, t := range g.times {
			s.Times = append(s.Times, t.Sub(origin).Seconds())
			first, last = minT(first, t), maxT(last, t)
		}
		series = append(series, s)
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.1f%% | %.2f | %.2f |\n", id, g.lib, len(g.times), g.pq,
			100*float64(g.pq)/float64(len(g.times)), first.Sub(origin).Seconds(), last.Sub(origin).Seconds())
	}
	for _, e := range evs {
		fmt.Fprintf(w, "pqwatch swap event at %.2f s: %s %s\n", e.t.Sub(origin).Seconds(), e.kind, e.gen)
	}
	if others > 0 {
		fmt.Fprintf(w, "%d swap events of generations that served none of the records left out\n", others)
	}
	svg := loadgen.GenerationChart("Handshakes per server generation (pqwatch run's records) across the swap", series, markers, bin)
	return os.WriteFile(out, svg, 0o644)
}

func minT(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// masterOf shortens a generation id (<name>-<hash>-<master pid>) to its
// master's pid, as a marker's label; the legend has the whole id.
func masterOf(gen string) string {
	if i := strings.LastIndexByte(gen, '-'); i >= 0 {
		return "master " + gen[i+1:]
	}
	return gen
}
