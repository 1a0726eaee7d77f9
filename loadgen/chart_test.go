package loadgen

import (
	"encoding/xml"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		v         float64
		n         int
		step, top float64
	}{
		{v: 37.4, n: 10, step: 5, top: 40},
		{v: 12.3, n: 10, step: 2, top: 14},
		{v: 0.87, n: 6, step: 0.2, top: 1},
		{v: 1234, n: 6, step: 500, top: 1500},
		{v: 100, n: 5, step: 20, top: 100},
		{v: 0, n: 5, step: 0.2, top: 1},
	} {
		step, top := niceTicks(c.v, c.n)
		if math.Abs(step-c.step) > 1e-9 || math.Abs(top-c.top) > 1e-9 {
			t.Errorf("niceTicks(%g, %d) = %g, %g; want %g, %g", c.v, c.n, step, top, c.step, c.top)
		}
	}
	for _, c := range []struct {
		v, step float64
		want    string
	}{{0.6000000000000001, 0.2, "0.6"}, {15, 5, "15"}, {2.5, 0.5, "2.5"}, {0.05, 0.05, "0.05"}} {
		if got := fmtTick(c.v, c.step); got != c.want {
			t.Errorf("fmtTick(%g, %g) = %q, want %q", c.v, c.step, got, c.want)
		}
	}
}

// chartText is the text of every <text> of an SVG with its position.
type chartText struct {
	X, Y      float64
	Transform string
	Text      string
}

func svgTexts(t *testing.T, b []byte) []chartText {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	var out []chartText
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the chart is not well-formed XML: %v", err)
			}
			return out
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "text" {
			continue
		}
		var ct chartText
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "x":
				ct.X, _ = strconv.ParseFloat(a.Value, 64)
			case "y":
				ct.Y, _ = strconv.ParseFloat(a.Value, 64)
			case "transform":
				ct.Transform = a.Value
			}
		}
		var s string
		if err := dec.DecodeElement(&s, &se); err != nil {
			t.Fatal(err)
		}
		ct.Text = s
		out = append(out, ct)
	}
}

// roundTicks checks that the tick labels are consecutive multiples of one
// round step (1, 2 or 5 times a power of ten) from 0.
func roundTicks(t *testing.T, axis string, labels []string) {
	t.Helper()
	if len(labels) < 3 {
		t.Fatalf("%s axis: %d tick labels: %q", axis, len(labels), labels)
	}
	var v []float64
	for _, l := range labels {
		f, err := strconv.ParseFloat(l, 64)
		if err != nil {
			t.Fatalf("%s axis: tick %q is not a number", axis, l)
		}
		v = append(v, f)
	}
	step := v[1] - v[0]
	m := step / math.Pow(10, math.Floor(math.Log10(step)))
	if v[0] != 0 || !(math.Abs(m-1) < 1e-6 || math.Abs(m-2) < 1e-6 || math.Abs(m-5) < 1e-6) {
		t.Errorf("%s axis ticks %q: not from 0 by a round step", axis, labels)
	}
	for i := range v {
		if math.Abs(v[i]-float64(i)*step) > step*1e-6 {
			t.Errorf("%s axis ticks %q: tick %d is not %g", axis, labels, i, float64(i)*step)
		}
	}
}

func TestLatencyChartLabels(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res := &Results{Started: start, Arms: []ArmInfo{{Name: "classical"}, {Name: "hybrid"}}}
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	// Four trials of 2.5 s (0.5 s warm-up) back to back, shuffled arms.
	for i, arm := range []string{"hybrid", "classical", "classical", "hybrid"} {
		tr := &TrialResult{ID: i, Arm: arm, Rate: 200, Trial: 1 + i/2, Valid: i != 2,
			Start: at(float64(i) * 2.7), WindowStart: at(float64(i)*2.7 + 0.5), WindowEnd: at(float64(i)*2.7 + 2.5)}
		if !tr.Valid {
			tr.InvalidReasons = []string{"send_lag: p99 send lag 46.9 ms over 10 ms"}
		}
		for b := 0; b < 25; b++ {
			off := float64(i)*2.7 + float64(b)*0.1
			tr.Timeline = append(tr.Timeline, Bin{Offset: off, Requests: 20, MaxMS: 3.3 + float64(b%7), Warmup: b < 5})
		}
		res.Trials = append(res.Trials, tr)
	}
	res.Events = []Event{
		{Offset: 3.5, Step: "USR2 old master", PID: 10, OK: true},
		{Offset: 4.5, Step: "WINCH old master", PID: 10, OK: false, Detail: "no new master"},
	}
	texts := svgTexts(t, latencyChart(res))
	has := map[string]bool{}
	for _, x := range texts {
		has[x.Text] = true
	}
	for _, want := range []string{
		"t0 hybrid @200/s #1", "t1 classical @200/s #1", "t2 classical @200/s #2 INVALID", "t3 hybrid @200/s #2",
		"classical", "hybrid", "valid trial", "invalid trial", "window start", "warm-up",
		"scenario step", "scenario step FAILED", "USR2 old master", "WINCH old master FAILED",
		"seconds since the run started", "latency ms",
	} {
		if !has[want] {
			t.Errorf("latency chart lacks the text %q", want)
		}
	}
	// Round ticks: the x axis' labels sit below the axis, the y axis'
	// left of it.
	var xs, ys []string
	for _, x := range texts {
		switch {
		case x.Y == float64(chartH)-padB+16:
			xs = append(xs, x.Text)
		case x.X == padL-5:
			ys = append(ys, x.Text)
		}
	}
	roundTicks(t, "x", xs)
	roundTicks(t, "y", ys)
	if last, _ := strconv.ParseFloat(xs[len(xs)-1], 64); last < 4*2.7-0.2 {
		t.Errorf("x axis ends at %s, before the last trial (10.6 s)", xs[len(xs)-1])
	}
	if last, _ := strconv.ParseFloat(ys[len(ys)-1], 64); last < 9.3 {
		t.Errorf("y axis ends at %s, below the highest latency 9.3 ms", ys[len(ys)-1])
	}
}

func TestCategoryChartRoundTicks(t *testing.T) {
	res := &Results{Arms: []ArmInfo{{Name: "classical"}, {Name: "hybrid"}}}
	for i, v := range []float64{537.0, 523.9, 667.1, 690.2} {
		cpu := v
		res.Trials = append(res.Trials, &TrialResult{ID: i, Arm: res.Arms[i/2].Name, Rate: 200, Trial: 1 + i%2, Valid: true,
			ServerCPUUsPerHandshake: &cpu})
	}
	var ys []string
	has := map[string]bool{}
	for _, x := range svgTexts(t, cpuChart(res)) {
		has[x.Text] = true
		if x.X == padL-5 {
			ys = append(ys, x.Text)
		}
	}
	roundTicks(t, "y", ys)
	if !has["classical@200"] || !has["hybrid@200"] {
		t.Error("cpu chart lacks its arm@rate labels")
	}
}

func TestGenerationChart(t *testing.T) {
	// A at 100/s for 8 s, B from 4 s to 20 s, both at 50/s while both serve.
	var a, b GenerationSeries
	a = GenerationSeries{Name: "nginx-3bac05767a0a-100", Library: "OpenSSL 3.0.19"}
	b = GenerationSeries{Name: "nginx-3df098091284-200", Library: "OpenSSL 3.5.7"}
	for i := range 2000 {
		ts := float64(i) * 0.01
		switch {
		case ts < 4:
			a.Times = append(a.Times, ts)
		case ts < 8 && i%2 == 0:
			a.Times = append(a.Times, ts)
		default:
			b.Times = append(b.Times, ts)
			b.PQ++
		}
	}
	markers := []ChartMarker{
		{Offset: 4, Label: "USR2 old master 100", Kind: "step"},
		{Offset: 4.3, Label: "pqwatch: usr2 master 200", Kind: "event"},
		{Offset: 15, Label: "USR2 old master 200 FAILED", Kind: "failed"},
	}
	texts := svgTexts(t, GenerationChart("swap", []GenerationSeries{a, b}, markers, 0.5))
	has := map[string]bool{}
	var xs, ys []string
	for _, x := range texts {
		has[x.Text] = true
		switch {
		case x.Y == float64(chartH)-padB+16:
			xs = append(xs, x.Text)
		case x.X == padL-5:
			ys = append(ys, x.Text)
		}
	}
	for _, want := range []string{
		"nginx-3bac05767a0a-100", "OpenSSL 3.0.19", "600 handshakes, PQ 0%",
		"nginx-3df098091284-200", "OpenSSL 3.5.7", "1400 handshakes, PQ 100%",
		"USR2 old master 100", "pqwatch: usr2 master 200", "USR2 old master 200 FAILED",
		"signal sent", "FAILED step / swap", "pqwatch's swap event",
	} {
		if !has[want] {
			t.Errorf("generation chart lacks the text %q", want)
		}
	}
	roundTicks(t, "x", xs)
	roundTicks(t, "y", ys)
	if top, _ := strconv.ParseFloat(ys[len(ys)-1], 64); top < 100 {
		t.Errorf("y axis ends at %g, below the 100 handshakes/s drawn", top)
	}
}
