package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// GenerationSeries is one server generation on a swap timeline: the
// handshakes a watcher (pqwatch run) attributed to it.
type GenerationSeries struct {
	Name    string    // the generation's id
	Library string    // its TLS library, e.g. "OpenSSL 3.5.7"
	Times   []float64 // each handshake, seconds since the chart's origin
	PQ      int       // how many of them negotiated a PQ or hybrid group
}

// ChartMarker is a moment on a timeline: a scenario step (OK or failed)
// or an event a watcher reported.
type ChartMarker struct {
	Offset float64 // seconds since the chart's origin
	Label  string
	Kind   string // "step", "failed" (a failed step or a failed swap) or "event"
}

// GenerationChart draws handshakes per second per server generation over
// time (bins of bin seconds), one line per generation, with markers, and a
// legend naming each generation with its TLS library, handshakes and PQ
// share.
func GenerationChart(title string, gens []GenerationSeries, markers []ChartMarker, bin float64) []byte {
	var s svg
	s.open(title)
	if !(bin > 0) {
		bin = 1
	}
	var tMax float64
	for _, g := range gens {
		for _, t := range g.Times {
			tMax = max(tMax, t)
		}
	}
	for _, m := range markers {
		tMax = max(tMax, m.Offset)
	}
	nb := int(tMax/bin) + 1
	counts := make([][]int, len(gens))
	var yMax float64
	for i, g := range gens {
		counts[i] = make([]int, nb)
		for _, t := range g.Times {
			if b := int(t / bin); b >= 0 && b < nb {
				counts[i][b]++
			}
		}
		for _, c := range counts[i] {
			yMax = max(yMax, float64(c)/bin)
		}
	}
	xStep, tTop := niceTicks(max(float64(nb)*bin, bin), 10)
	ym, _ := s.axes("seconds", fmt.Sprintf("handshakes per second (%g s bins)", bin), yMax*1.05)
	x0, x1 := padL, float64(chartW)-padR
	y0 := float64(chartH) - padB
	xm := func(v float64) float64 { return x0 + v/tTop*(x1-x0) }
	for i := 0; float64(i)*xStep <= tTop*(1+1e-9); i++ {
		v := float64(i) * xStep
		s.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="black"/>`+"\n", xm(v), y0, xm(v), y0+4)
		s.f(`<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", xm(v), y0+16, fmtTick(v, xStep))
	}
	for i, g := range gens {
		// A line from the generation's first bin with handshakes to its
		// last, zeros between included.
		first, last := -1, -1
		for b, c := range counts[i] {
			if c > 0 {
				if first < 0 {
					first = b
				}
				last = b
			}
		}
		if first < 0 {
			continue
		}
		var pts []string
		for b := first; b <= last; b++ {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xm((float64(b)+0.5)*bin), ym(float64(counts[i][b])/bin)))
		}
		s.f(`<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"><title>%s</title></polyline>`+"\n",
			palette[i%len(palette)], strings.Join(pts, " "), esc(g.Name))
	}
	colOf := map[string]string{"step": "#2a2", "failed": "#d00", "event": "#7b3fa0"}
	dashOf := map[string]string{"step": "6,3", "failed": "6,3", "event": "1,3"}
	seen := map[string]bool{}
	for _, m := range markers {
		col, dash := colOf[m.Kind], dashOf[m.Kind]
		if col == "" {
			col, dash = "#555", "2,2"
		}
		seen[m.Kind] = true
		x := xm(m.Offset)
		yText := padT + 5
		if m.Kind == "event" {
			yText = padT + (y0-padT)*0.45 // watcher's events below the steps' labels
		}
		s.f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"><title>%s at %.2f s</title></line>`+"\n",
			x, padT, x, y0, col, dash, esc(m.Label), m.Offset)
		s.f(`<text x="%.1f" y="%g" fill="%s" font-size="10" transform="rotate(90 %.1f %g)">%s</text>`+"\n", x+3, yText, col, x+3, yText, esc(m.Label))
	}
	// Legend: two lines per generation.
	lx := float64(chartW) - padR + 6
	y := padT + 10
	for i, g := range gens {
		share := "-"
		if n := len(g.Times); n > 0 {
			share = strconv.FormatFloat(math.Round(1000*float64(g.PQ)/float64(n))/10, 'f', -1, 64) + "%"
		}
		s.f(`<rect x="%g" y="%g" width="10" height="10" fill="%s"/>`+"\n", lx, y-9, palette[i%len(palette)])
		s.f(`<text x="%g" y="%g" font-size="8">%s</text>`+"\n", lx+13, y, esc(g.Name))
		s.f(`<text x="%g" y="%g" font-size="9">%s</text>`+"\n", lx+13, y+11, esc(g.Library))
		s.f(`<text x="%g" y="%g" font-size="9">%s</text>`+"\n", lx+13, y+22, esc(fmt.Sprintf("%d handshakes, PQ %s", len(g.Times), share)))
		y += 38
	}
	for _, k := range []struct{ kind, name string }{{"step", "signal sent"}, {"failed", "FAILED step / swap"}, {"event", "pqwatch's swap event"}} {
		if !seen[k.kind] {
			continue
		}
		s.f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", lx, y-4, lx+14, y-4, colOf[k.kind], dashOf[k.kind])
		s.f(`<text x="%g" y="%g" font-size="10">%s</text>`+"\n", lx+18, y, k.name)
		y += 18
	}
	return s.close()
}
