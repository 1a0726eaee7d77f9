package exporter

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterSource reports counts that another part keeps (a sniffer's errors
// by reason, a joiner's ambiguous handshakes, a tailer's over-long lines):
// it calls add once per label value set with the count so far. The
// exporter reads sources at scrape time, so nothing is copied on a timer.
type CounterSource func(add func(n uint64, labels ...string))

// sourcedCounter is a counter family with a fixed set of label values, fed
// by direct increments and by CounterSources, emitted as const metrics at
// scrape time. A value outside the set goes to its "other" series (or is
// ignored when the family has none).
type sourcedCounter struct {
	desc    *prometheus.Desc
	series  [][]string     // label values per series
	index   map[string]int // joined label values -> series
	other   func(labels []string) int
	direct  []atomic.Uint64
	mu      sync.Mutex
	sources []CounterSource
}

func newSourcedCounter(name, help string, labelNames []string, series [][]string, other func(labels []string) int) *sourcedCounter {
	c := &sourcedCounter{
		desc:   prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labelNames, nil),
		series: series, index: make(map[string]int, len(series)), other: other,
		direct: make([]atomic.Uint64, len(series)),
	}
	for i, s := range series {
		c.index[strings.Join(s, "\x00")] = i
	}
	return c
}

// find returns the series of a label value set, -1 to ignore it.
func (c *sourcedCounter) find(labels []string) int {
	var i int
	var ok bool
	if len(labels) == 1 {
		i, ok = c.index[labels[0]]
	} else {
		i, ok = c.index[strings.Join(labels, "\x00")]
	}
	if ok {
		return i
	}
	if c.other == nil {
		return -1
	}
	return c.other(labels)
}

// add counts n directly.
func (c *sourcedCounter) add(n uint64, labels ...string) {
	if n == 0 {
		return
	}
	if i := c.find(labels); i >= 0 {
		c.direct[i].Add(n)
	}
}

// addSource adds a source read at every scrape.
func (c *sourcedCounter) addSource(src CounterSource) {
	c.mu.Lock()
	c.sources = append(c.sources, src)
	c.mu.Unlock()
}

// value is one series' total now.
func (c *sourcedCounter) totals() []uint64 {
	t := make([]uint64, len(c.series))
	for i := range c.direct {
		t[i] = c.direct[i].Load()
	}
	c.mu.Lock()
	srcs := c.sources
	c.mu.Unlock()
	for _, src := range srcs {
		src(func(n uint64, labels ...string) {
			if i := c.find(labels); i >= 0 {
				t[i] += n
			}
		})
	}
	return t
}

func (c *sourcedCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sourcedCounter) Collect(ch chan<- prometheus.Metric) {
	for i, v := range c.totals() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), c.series[i]...)
	}
}

// seriesOf lists each value as a one-label series.
func seriesOf(values []string) [][]string {
	out := make([][]string, len(values))
	for i, v := range values {
		out[i] = []string{v}
	}
	return out
}
