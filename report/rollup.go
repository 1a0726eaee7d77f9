package report

import (
	"sort"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// Byte histograms of the rollups: exact to rollupBucketWidth bytes up to
// rollupMaxBytes, then one overflow bucket reported as the largest size seen.
const (
	rollupBucketWidth = 16
	rollupMaxBytes    = 8192
	rollupBuckets     = rollupMaxBytes / rollupBucketWidth
)

// commonGroupNames are the group names a rollup row keeps as they are
// (tlsparse.CommonGroups, the metrics' label set).
var commonGroupNames = func() map[string]bool {
	m := make(map[string]bool, len(tlsparse.CommonGroups))
	for _, g := range tlsparse.CommonGroups {
		m[g.String()] = true
	}
	return m
}()

// groupLabel bounds a group name: "none" when absent, "other" when not one
// of the common groups.
func groupLabel(name string) string {
	switch {
	case name == "":
		return "none"
	case commonGroupNames[name]:
		return name
	}
	return "other"
}

// RollupOtherServer is the server value that collects every server beyond
// the rollup's cap.
const RollupOtherServer = "other"

// Percentiles are byte-size percentiles of one window; values are upper
// bounds of 16-byte buckets (exact above 8 KiB: the largest size seen).
type Percentiles struct {
	P50 int `json:"p50"`
	P90 int `json:"p90"`
	P99 int `json:"p99"`
}

// RollupGroup is the per-group part of a rollup row.
type RollupGroup struct {
	Handshakes       int          `json:"handshakes"`
	PQ               bool         `json:"pq"`
	ClientHelloBytes *Percentiles `json:"client_hello_bytes,omitempty"`
	ServerHelloBytes *Percentiles `json:"server_hello_bytes,omitempty"`
}

// RollupRow summarises one server over one window. It is the JSON value of a
// message on the rollup topic, keyed by server.
type RollupRow struct {
	Start            time.Time              `json:"start"`
	End              time.Time              `json:"end"`
	Node             string                 `json:"node,omitempty"`
	Server           string                 `json:"server"`
	Handshakes       int                    `json:"handshakes"`
	Completed        int                    `json:"completed"`
	PQ               int                    `json:"pq"`
	PQShare          float64                `json:"pq_share"`
	PQOffered        int                    `json:"pq_offered"`
	HRR              int                    `json:"hrr"`
	ClientHelloBytes *Percentiles           `json:"client_hello_bytes,omitempty"`
	ServerHelloBytes *Percentiles           `json:"server_hello_bytes,omitempty"`
	Groups           map[string]RollupGroup `json:"groups,omitempty"`
	// OfferClasses are the row's handshakes by ClientHello offer class and
	// today's outcome (see OfferClass): what a plan's forecast needs. At
	// most RollupMaxClasses distinct classes; past it a handshake's offer
	// is folded into an Other class (its outcome kept) and counted in
	// OfferClassesOther.
	OfferClasses      []OfferClass `json:"offer_classes,omitempty"`
	OfferClassesOther int          `json:"offer_classes_other,omitempty"`
}

type sizeHist struct {
	n       int
	max     int
	buckets [rollupBuckets + 1]uint32
}

func (h *sizeHist) add(v int) {
	if v <= 0 {
		return
	}
	h.n++
	h.max = max(h.max, v)
	h.buckets[min((v-1)/rollupBucketWidth, rollupBuckets)]++
}

func (h *sizeHist) quantile(q float64) int {
	rank := int(q*float64(h.n) + 0.999999)
	rank = max(rank, 1)
	seen := 0
	for i, c := range h.buckets {
		seen += int(c)
		if seen >= rank {
			if i == rollupBuckets {
				return h.max
			}
			return min((i+1)*rollupBucketWidth, h.max)
		}
	}
	return h.max
}

func (h *sizeHist) percentiles() *Percentiles {
	if h.n == 0 {
		return nil
	}
	return &Percentiles{P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99)}
}

type rollupGroupAgg struct {
	handshakes int
	pq         bool
	ch, sh     sizeHist
}

type rollupAgg struct {
	handshakes, completed, pq, pqOffered, hrr int
	ch, sh                                    sizeHist
	groups                                    map[string]*rollupGroupAgg
	classes                                   map[string]*OfferClass
	classesOther                              int
}

// rollupKey is a rollup row's identity in a window.
type rollupKey struct{ node, server string }

// Rollup aggregates records per server and group over a window. The number
// of servers is capped; group names are reduced to the bounded label set of
// the metrics. It is safe for concurrent use.
type Rollup struct {
	mu         sync.Mutex
	maxServers int
	start      time.Time
	servers    map[rollupKey]*rollupAgg
	keyBuf     []byte
}

// NewRollup returns a Rollup whose window starts at start and which keeps at
// most maxServers servers (the rest are folded into RollupOtherServer).
func NewRollup(start time.Time, maxServers int) *Rollup {
	return &Rollup{maxServers: max(maxServers, 1), start: start, servers: map[rollupKey]*rollupAgg{}}
}

// Write implements record.Sink.
func (r *Rollup) Write(h *record.Handshake) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := rollupKey{h.Node, h.Server}
	a := r.servers[key]
	if a == nil {
		if len(r.servers) >= r.maxServers {
			key.server = RollupOtherServer
			a = r.servers[key]
		}
		if a == nil {
			a = &rollupAgg{groups: map[string]*rollupGroupAgg{}, classes: map[string]*OfferClass{}}
			r.servers[key] = a
		}
	}
	a.handshakes++
	if h.Outcome == record.OutcomeOK {
		a.completed++
		if h.PQ {
			a.pq++
		}
	}
	if h.PQOffered {
		a.pqOffered++
	}
	if h.HRR {
		a.hrr++
	}
	a.ch.add(h.ClientHelloBytes)
	a.sh.add(h.ServerHelloBytes)
	g := groupLabel(h.Group)
	ga := a.groups[g]
	if ga == nil {
		ga = &rollupGroupAgg{pq: h.PQ}
		a.groups[g] = ga
	}
	ga.handshakes++
	ga.ch.add(h.ClientHelloBytes)
	ga.sh.add(h.ServerHelloBytes)
	r.keyBuf = a.addClass(h, r.keyBuf)
	return nil
}

// Flush returns the rows of the window that ends at end, sorted by server,
// and starts a new window there. A window without records yields no rows.
func (r *Rollup) Flush(end time.Time) []RollupRow {
	r.mu.Lock()
	servers, start := r.servers, r.start
	r.servers, r.start = map[rollupKey]*rollupAgg{}, end
	r.mu.Unlock()

	rows := make([]RollupRow, 0, len(servers))
	for key, a := range servers {
		row := RollupRow{
			Start: start.UTC(), End: end.UTC(), Node: key.node, Server: key.server,
			Handshakes: a.handshakes, Completed: a.completed, PQ: a.pq,
			PQOffered: a.pqOffered, HRR: a.hrr,
			ClientHelloBytes: a.ch.percentiles(), ServerHelloBytes: a.sh.percentiles(),
			Groups: make(map[string]RollupGroup, len(a.groups)),
		}
		if a.completed > 0 {
			row.PQShare = float64(a.pq) / float64(a.completed)
		}
		for name, g := range a.groups {
			row.Groups[name] = RollupGroup{
				Handshakes: g.handshakes, PQ: g.pq,
				ClientHelloBytes: g.ch.percentiles(), ServerHelloBytes: g.sh.percentiles(),
			}
		}
		row.OfferClasses, row.OfferClassesOther = a.offerClasses(), a.classesOther
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Node != rows[j].Node {
			return rows[i].Node < rows[j].Node
		}
		return rows[i].Server < rows[j].Server
	})
	return rows
}
