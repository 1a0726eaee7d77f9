// pqwatch's /metrics, and starting pqwatch run.

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// scraper reads pqwatch's /metrics, dialing inside ns when set.
type scraper struct {
	url string
	hc  *http.Client
}

func newScraper(ns, addr string) *scraper {
	tr := &http.Transport{DisableKeepAlives: true}
	if ns != "" {
		tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
			var c net.Conn
			err := testenv.InNS(ns, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, a)
				return
			})
			return c, err
		}
	}
	return &scraper{url: "http://" + addr, hc: &http.Client{Transport: tr, Timeout: 3 * time.Second}}
}

// sample is one scrape: metric name → label string → value.
type sample map[string]map[string]float64

func (s sample) sum(name string) float64 {
	t := 0.0
	for _, v := range s[name] {
		t += v
	}
	return t
}

// sumWhere sums the series of name whose labels contain sub.
func (s sample) sumWhere(name, sub string) float64 {
	t := 0.0
	for l, v := range s[name] {
		if strings.Contains(l, sub) {
			t += v
		}
	}
	return t
}

func (sc *scraper) scrape(ctx context.Context) (sample, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", sc.url+"/metrics", nil)
	resp, err := sc.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := sample{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		key := line[:sp]
		name, labels := key, ""
		if i := strings.IndexByte(key, '{'); i >= 0 {
			name, labels = key[:i], key[i:]
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][labels] += v
	}
	return out, s.Err()
}

// startPqwatch runs `pqwatch run` capturing iface (in ns when set) and
// waits until /metrics answers and shows iface's ring counters.
func startPqwatch(ctx context.Context, o options, ns, iface, metricsAddr string, extra ...string) (*proc, *scraper, error) {
	args := []string{"run", "-iface", iface, "-metrics-addr", metricsAddr, "-log-level", "warn"}
	var env []string
	bin := o.bin
	for _, w := range extra {
		if path, ok := strings.CutPrefix(w, "@"); ok && path != "" {
			bin = path // another build of pqwatch, to compare two in one run
			continue
		}
		if k, _, ok := strings.Cut(w, "="); ok && k != "" && !strings.HasPrefix(k, "-") {
			env = append(env, w)
			continue
		}
		args = append(args, w)
	}
	p, err := startProc(o, ns, env, bin, args...)
	if err != nil {
		return nil, nil, err
	}
	sc := newScraper(ns, metricsAddr)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.exited() {
			return nil, nil, fmt.Errorf("pqwatch run exited: %s", p.out.tail(600))
		}
		if s, err := sc.scrape(ctx); err == nil {
			if _, ok := s["pqwatch_capture_packets_total"][`{iface="`+iface+`"}`]; ok {
				return p, sc, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop()
	return nil, nil, fmt.Errorf("pqwatch run did not serve %s's capture counters within 10s: %s", iface, p.out.tail(600))
}
