package loadgen

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Hand-written SVG: no dependency, deterministic output, readable diffs.

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

const (
	chartW, chartH                 = 900, 420
	padL, padR, padT, padB float64 = 70, 150, 40, 50
)

type svg struct{ b bytes.Buffer }

func (s *svg) f(format string, a ...any) { fmt.Fprintf(&s.b, format, a...) }

func esc(v string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(v))
	return b.String()
}

func (s *svg) open(title string) {
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	s.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.f(`<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", chartW/2, esc(title))
}

func (s *svg) close() []byte { s.f("</svg>\n"); return s.b.Bytes() }

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// niceTicks returns a round step (1, 2 or 5 times a power of ten) that
// cuts [0, v] into at most n intervals, and v rounded up to a multiple of
// it: the axis' end, so that every tick is a round number.
func niceTicks(v float64, n int) (step, top float64) {
	if !(v > 0) {
		v = 1
	}
	step = niceMax(v / float64(max(n, 1)))
	top = math.Ceil(v/step-1e-9) * step
	return step, top
}

// axes draws the frame, y ticks at round values and labels; yMax is
// rounded up to the last tick. It returns the y mapping and that end.
func (s *svg) axes(xLabel, yLabel string, yMax float64) (func(float64) float64, float64) {
	x0, x1, y0, y1 := padL, float64(chartW)-padR, float64(chartH)-padB, padT
	s.f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", x0, y0, x1, y0)
	s.f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", x0, y0, x0, y1)
	step, top := niceTicks(yMax, 6)
	ym := func(v float64) float64 { return y0 - (v/top)*(y0-y1) }
	for i := 0; float64(i)*step <= top*(1+1e-9); i++ {
		v := float64(i) * step
		y := ym(v)
		s.f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		s.f(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-5, y+4, fmtTick(v, step))
	}
	s.f(`<text x="%g" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, chartH-10, esc(xLabel))
	s.f(`<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`+"\n", (y0+y1)/2, (y0+y1)/2, esc(yLabel))
	return ym, top
}

// fmtTick prints a tick value with as many decimals as its step needs.
func fmtTick(v, step float64) string {
	d := 0
	for d < 6 && math.Abs(step*math.Pow(10, float64(d))-math.Round(step*math.Pow(10, float64(d)))) > 1e-6 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

func (s *svg) legend(names []string) {
	for i, n := range names {
		y := padT + 10 + float64(i)*18
		x := float64(chartW) - padR + 15
		s.f(`<rect x="%g" y="%g" width="12" height="12" fill="%s"/>`+"\n", x, y-10, palette[i%len(palette)])
		s.f(`<text x="%g" y="%g">%s</text>`+"\n", x+18, y, esc(n))
	}
}

func armIndex(res *Results) map[string]int {
	m := map[string]int{}
	for i, a := range res.Arms {
		m[a.Name] = i
	}
	return m
}

func armNames(res *Results) []string {
	var n []string
	for _, a := range res.Arms {
		n = append(n, a.Name)
	}
	return n
}

// legendLine adds a named line marker below the legend's entries at
// slot i: a short line in col with dash (SVG stroke-dasharray, "" solid).
func (s *svg) legendLine(i int, col, dash, name string) {
	y := padT + 10 + float64(i)*18
	x := float64(chartW) - padR + 15
	d := ""
	if dash != "" {
		d = ` stroke-dasharray="` + dash + `"`
	}
	s.f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="1.5"%s/>`+"\n", x, y-4, x+14, y-4, col, d)
	s.f(`<text x="%g" y="%g" font-size="10">%s</text>`+"\n", x+18, y, esc(name))
}

// trialLabel names a trial on the charts: its position in the run, arm,
// rate and number within its arm and rate.
func trialLabel(t *TrialResult) string {
	return fmt.Sprintf("t%d %s @%g/s #%d", t.ID, t.Arm, t.Rate, t.Trial)
}

// latencyChart plots the worst latency per 100 ms bin over the run, one
// line per trial coloured by arm, each trial labelled (id, arm, rate,
// number) along the bottom with its warm-up shaded, scenario events as
// vertical markers, and a legend naming every marker.
func latencyChart(res *Results) []byte {
	var s svg
	s.open("Latency over time (max per 100 ms, from intended send time)")
	var tMax, yMax float64
	for _, t := range res.Trials {
		for _, b := range t.Timeline {
			tMax = max(tMax, b.Offset+binWidth.Seconds())
			yMax = max(yMax, b.MaxMS)
		}
		tMax = max(tMax, t.WindowEnd.Sub(res.Started).Seconds())
	}
	for _, e := range res.Events {
		tMax = max(tMax, e.Offset)
	}
	xStep, tTop := niceTicks(max(tMax, 0.1), 10)
	ym, _ := s.axes("seconds since the run started", "latency ms", yMax)
	x0, x1 := padL, float64(chartW)-padR
	y0 := float64(chartH) - padB
	xm := func(v float64) float64 { return x0 + v/tTop*(x1-x0) }
	for i := 0; float64(i)*xStep <= tTop*(1+1e-9); i++ {
		v := float64(i) * xStep
		s.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="black"/>`+"\n", xm(v), y0, xm(v), y0+4)
		s.f(`<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", xm(v), y0+16, fmtTick(v, xStep))
	}
	ai := armIndex(res)
	for _, t := range res.Trials {
		col := palette[ai[t.Arm]%len(palette)]
		ts, ws, we := t.Start.Sub(res.Started).Seconds(), t.WindowStart.Sub(res.Started).Seconds(), t.WindowEnd.Sub(res.Started).Seconds()
		if !t.Start.IsZero() && ws > ts {
			s.f(`<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#eee"><title>%s: warm-up, not measured</title></rect>`+"\n",
				xm(ts), padT, xm(ws)-xm(ts), y0-padT, esc(trialLabel(t)))
		}
		// Window start marker (warm-up excluded before it).
		s.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#999" stroke-dasharray="2,3"/>`+"\n", xm(ws), padT, xm(ws), y0)
		label := trialLabel(t)
		if !t.Valid {
			label += " INVALID"
		}
		// Along the bottom: horizontal where the trial is wide enough,
		// else upright from the axis at the window's middle.
		if mid := (xm(ws) + xm(max(we, ws))) / 2; float64(len(label))*5.5 <= xm(max(we, ws))-xm(ts) {
			s.f(`<text x="%.1f" y="%g" text-anchor="middle" font-size="10" fill="%s">%s</text>`+"\n", (xm(ts)+xm(max(we, ws)))/2, y0-5, col, esc(label))
		} else {
			s.f(`<text x="%.1f" y="%g" font-size="9" fill="%s" transform="rotate(-90 %.1f %g)">%s</text>`+"\n", mid+3, y0-5, col, mid+3, y0-5, esc(label))
		}
	}
	for _, t := range res.Trials {
		var pts []string
		for _, b := range t.Timeline {
			if b.Requests == 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xm(b.Offset+binWidth.Seconds()/2), ym(b.MaxMS)))
		}
		if len(pts) > 0 {
			dash := ""
			if !t.Valid {
				dash = ` stroke-dasharray="3,3" stroke-opacity="0.6"`
			}
			s.f(`<polyline fill="none" stroke="%s" stroke-width="1.2"%s points="%s"><title>%s%s</title></polyline>`+"\n",
				palette[ai[t.Arm]%len(palette)], dash, strings.Join(pts, " "), esc(trialLabel(t)), esc(invalidSuffix(t)))
		}
	}
	okSteps, failedSteps := false, false
	for _, e := range res.Events {
		col := "#2a2"
		if !e.OK {
			col = "#d00"
		}
		okSteps, failedSteps = okSteps || e.OK, failedSteps || !e.OK
		x := xm(e.Offset)
		s.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="%s" stroke-width="1.5" stroke-dasharray="6,3"><title>%s</title></line>`+"\n",
			x, padT, x, y0, col, esc(fmt.Sprintf("%s (pid %d) at %.2f s: %s", e.Step, e.PID, e.Offset, e.Detail)))
		label := e.Step
		if !e.OK {
			label += " FAILED"
		}
		s.f(`<text x="%.1f" y="%g" fill="%s" font-size="10" transform="rotate(90 %.1f %g)">%s</text>`+"\n",
			x+3, padT+5, col, x+3, padT+5, esc(label))
	}
	names := armNames(res)
	s.legend(names)
	i := len(names)
	s.legendLine(i, "#555", "", "valid trial")
	s.legendLine(i+1, "#555", "3,3", "invalid trial")
	s.legendLine(i+2, "#999", "2,3", "window start")
	y := padT + 10 + float64(i+3)*18
	s.f(`<rect x="%g" y="%g" width="14" height="10" fill="#eee" stroke="#ccc"/>`+"\n", float64(chartW)-padR+15, y-9)
	s.f(`<text x="%g" y="%g" font-size="10">warm-up</text>`+"\n", float64(chartW)-padR+33, y)
	i += 4
	if okSteps {
		s.legendLine(i, "#2a2", "6,3", "scenario step")
		i++
	}
	if failedSteps {
		s.legendLine(i, "#d00", "6,3", "scenario step FAILED")
	}
	return s.close()
}

// categoryChart draws one column per arm@rate: a dot per valid trial, a
// bar at their mean and a whisker from min to max, and a hollow grey ring
// per invalid trial (not in the mean, its reasons in the tooltip); ref
// draws a reference tick, and second, when set, a small cross per trial
// for a second quantity (secondLabel in the legend).
func categoryChart(res *Results, title, yLabel string, val func(*TrialResult) (float64, bool), ref func(rate float64) float64,
	second func(*TrialResult) float64, secondLabel string) []byte {
	var s svg
	s.open(title)
	type point struct {
		v   float64
		why string
	}
	type cat struct {
		arm     string
		rate    float64
		vals    []float64
		invalid []point
		seconds []float64
	}
	var cats []*cat
	find := func(arm string, rate float64) *cat {
		for _, c := range cats {
			if c.arm == arm && c.rate == rate {
				return c
			}
		}
		c := &cat{arm: arm, rate: rate}
		cats = append(cats, c)
		return c
	}
	var yMax float64
	for _, t := range res.Trials {
		c := find(t.Arm, t.Rate)
		if v, ok := val(t); ok {
			if t.Valid {
				c.vals = append(c.vals, v)
			} else {
				c.invalid = append(c.invalid, point{v: v, why: strings.Join(t.InvalidReasons, "; ")})
			}
			yMax = max(yMax, v)
		}
		if second != nil {
			v := second(t)
			c.seconds = append(c.seconds, v)
			yMax = max(yMax, v)
		}
		if ref != nil {
			yMax = max(yMax, ref(t.Rate))
		}
	}
	ai := armIndex(res)
	slices.SortStableFunc(cats, func(a, b *cat) int {
		if a.rate != b.rate {
			return int(math.Copysign(1, a.rate-b.rate))
		}
		return ai[a.arm] - ai[b.arm]
	})
	ym, _ := s.axes("arm @ rate/s", yLabel, yMax*1.05)
	x0, x1 := padL, float64(chartW)-padR
	w := (x1 - x0) / float64(max(len(cats), 1))
	for i, c := range cats {
		cx := x0 + w*(float64(i)+0.5)
		col := palette[ai[c.arm]%len(palette)]
		s.f(`<text x="%.1f" y="%g" text-anchor="middle" font-size="11">%s@%g</text>`+"\n", cx, float64(chartH)-padB+15, esc(c.arm), c.rate)
		if ref != nil {
			y := ym(ref(c.rate))
			s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4,2"/>`+"\n", cx-w*0.4, y, cx+w*0.4, y)
		}
		for k, p := range c.invalid {
			dx := (float64(k) - float64(len(c.invalid)-1)/2) * 7
			s.f(`<circle cx="%.1f" cy="%.1f" r="4" fill="none" stroke="#888" stroke-width="1.5"><title>invalid trial, not in the mean: %.2f: %s</title></circle>`+"\n",
				cx+w*0.25+dx, ym(p.v), p.v, esc(p.why))
		}
		for k, v := range c.seconds {
			dx := (float64(k) - float64(len(c.seconds)-1)/2) * 6
			x, y := cx-w*0.25+dx, ym(v)
			s.f(`<path d="M%.1f %.1fl5 5m0 -5l-5 5" stroke="#555" stroke-width="1.2"><title>%s: %.2f</title></path>`+"\n", x-2.5, y-2.5, esc(secondLabel), v)
		}
		if len(c.vals) == 0 {
			continue
		}
		sp := spreadOf(c.vals)
		bw := min(w*0.5, 60)
		s.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35"/>`+"\n",
			cx-bw/2, ym(sp.Mean), bw, ym(0)-ym(sp.Mean), col)
		s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", cx, ym(sp.Min), cx, ym(sp.Max), col)
		for k, v := range c.vals {
			dx := (float64(k) - float64(len(c.vals)-1)/2) * 6
			s.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%.2f</title></circle>`+"\n", cx+dx, ym(v), col, v)
		}
		s.f(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%.1f</text>`+"\n", cx, ym(sp.Max)-6, sp.Mean)
	}
	names := armNames(res)
	s.legend(names)
	y := padT + 10 + float64(len(names))*18 + 10
	x := float64(chartW) - padR + 15
	s.f(`<circle cx="%g" cy="%g" r="4" fill="none" stroke="#888" stroke-width="1.5"/>`+"\n", x+6, y-4)
	s.f(`<text x="%g" y="%g" font-size="10">invalid trial</text>`+"\n", x+18, y)
	if second != nil {
		y += 18
		s.f(`<path d="M%g %gl5 5m0 -5l-5 5" stroke="#555" stroke-width="1.2"/>`+"\n", x+3.5, y-6.5)
		s.f(`<text x="%g" y="%g" font-size="10">%s</text>`+"\n", x+18, y, esc(secondLabel))
	}
	return s.close()
}

// cpuChart shows CPU per handshake per arm with the trial spread: the
// server's when a server process was measured, otherwise the client's.
func cpuChart(res *Results) []byte {
	server := false
	for _, t := range res.Trials {
		server = server || t.ServerCPUUsPerHandshake != nil
	}
	if server {
		return categoryChart(res, "Server CPU per completed handshake (schedstat; dots: valid trials; bar: their mean; line: min-max)",
			"server µs CPU per completed handshake",
			func(t *TrialResult) (float64, bool) {
				if t.ServerCPUUsPerHandshake == nil {
					return 0, false
				}
				return *t.ServerCPUUsPerHandshake, true
			}, nil, nil, "")
	}
	return categoryChart(res, "Client CPU per completed handshake (no server process measured)", "client µs CPU per completed handshake",
		func(t *TrialResult) (float64, bool) { return t.ClientCPUUsPerHandshake, true }, nil, nil, "")
}

// rateChart shows per trial the completed rate (the server's handshake
// throughput) against the target (dashed), with the sent rate as crosses.
func rateChart(res *Results) []byte {
	return categoryChart(res, "Completed handshakes per second (OK responses that ended in the window; dashed: target)",
		"completed handshakes/s",
		func(t *TrialResult) (float64, bool) { return t.RateCompleted, true },
		func(rate float64) float64 { return rate },
		func(t *TrialResult) float64 { return t.RateAchieved }, "sent OK/s")
}

func invalidSuffix(t *TrialResult) string {
	if t.Valid {
		return ""
	}
	return " INVALID: " + strings.Join(t.InvalidReasons, "; ")
}
