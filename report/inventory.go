package report

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// Inventory bounds and names.
const (
	// MaxInventoryEndpoints is the default cap on endpoints: past it, the
	// records of a new endpoint are counted (Inventory.OverflowHandshakes)
	// and not kept.
	MaxInventoryEndpoints = 10_000
	// MaxInventoryNames bounds each endpoint's SNIs, server addresses and
	// server generations; past it a name is counted, not kept.
	MaxInventoryNames = 64
	// MaxInventoryIDs bounds the record ids kept to drop duplicates
	// (at-least-once Kafka delivery): some 40 MB at the cap; past it
	// records are not checked (IDsUnchecked).
	MaxInventoryIDs = 1_000_000
	// InventoryNoNode is the node of records that carry none (analyze's).
	InventoryNoNode = "(no node)"
)

// counted is a bounded name -> count table.
type counted struct {
	n        map[string]int
	overflow int
}

func (c *counted) add(name string, cap int) {
	if c.n == nil {
		c.n = map[string]int{}
	}
	if _, ok := c.n[name]; !ok && cap > 0 && len(c.n) >= cap {
		c.overflow++
		return
	}
	c.n[name]++
}

// ranked is c's names, most counted first, then by name.
func (c *counted) ranked() []string {
	names := slices.Collect(maps.Keys(c.n))
	slices.SortFunc(names, func(a, b string) int {
		if d := cmp.Compare(c.n[b], c.n[a]); d != 0 {
			return d
		}
		return cmp.Compare(a, b)
	})
	return names
}

// EndpointKey identifies an endpoint: the node that saw it, the address
// clients connected to (the record's frontend, else its server) and the
// transport (TLS over TCP and QUIC on one port are two endpoints).
type EndpointKey struct {
	Node, Endpoint, Transport string
}

// suiteKey is a negotiated version and cipher suite.
type suiteKey struct{ version, cipher string }

// Endpoint is what the inventory knows of one endpoint.
type Endpoint struct {
	EndpointKey
	Frontend bool // Endpoint is a frontend address (else a server's)

	Handshakes int // records
	Completed  int // outcome ok
	PQ         int // completed with a PQ or hybrid group
	PQOffered  int // records whose ClientHello offered a PQ group
	// PQOfferedClassical: completed, a PQ group offered, a classical one
	// (or none) negotiated: clients that could have had hybrid.
	PQOfferedClassical int
	HRR                int
	Resumed            int
	First, Last        time.Time

	Servers     counted // server addresses behind a frontend (or the server itself)
	SNIs        counted
	Versions    counted // completed records by version
	Groups      counted // completed records by negotiated group
	Offered     counted // records by each group their ClientHello offered
	Outcomes    counted
	Generations counted // generation ids
	Binaries    counted // generation exe and its SHA-256, "exe sha256"
	Libraries   counted // generation openssl
	suites      map[suiteKey]*counted
}

// HybridShare is PQ / Completed (0 when none completed).
func (e *Endpoint) HybridShare() float64 { return ratio(e.PQ, e.Completed) }

// OfferedClassicalShare is PQOfferedClassical / Completed.
func (e *Endpoint) OfferedClassicalShare() float64 { return ratio(e.PQOfferedClassical, e.Completed) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Classical says the endpoint completed handshakes and none was hybrid.
func (e *Endpoint) Classical() bool { return e.Completed > 0 && e.PQ == 0 }

// Inventory collects TLS endpoints from handshake records, bounded in the
// number of endpoints (not of records). It is not safe for concurrent use
// except through Write, which locks.
type Inventory struct {
	// MaxEndpoints caps the endpoints kept (0: MaxInventoryEndpoints).
	MaxEndpoints int

	Read         int // records given to Add
	Duplicates   int // of them, dropped: an id already seen
	IDsUnchecked int // kept without a duplicate check (past MaxInventoryIDs)
	Records      int // records counted
	// OverflowHandshakes are records of endpoints past MaxEndpoints,
	// counted here only.
	OverflowHandshakes int
	NoNode             int
	First, Last        time.Time

	mu        sync.Mutex
	endpoints map[EndpointKey]*Endpoint
	ids       map[uint64]struct{}
	seed      maphash.Seed
}

// NewInventory returns an empty inventory.
func NewInventory() *Inventory {
	return &Inventory{endpoints: map[EndpointKey]*Endpoint{}, ids: map[uint64]struct{}{}, seed: maphash.MakeSeed()}
}

// Write implements record.Sink (the offline pipeline's records).
func (inv *Inventory) Write(h *record.Handshake) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.Add(h)
	return nil
}

// Add counts one record: its endpoint is its Frontend (the address the
// client dialled, in front of the node's NAT), else its Server.
func (inv *Inventory) Add(h *record.Handshake) {
	frontend := h.Frontend
	inv.Read++
	if h.HasID() {
		var b [64]byte
		id := maphash.Bytes(inv.seed, h.AppendID(b[:0]))
		if _, dup := inv.ids[id]; dup {
			inv.Duplicates++
			return
		}
		if len(inv.ids) < MaxInventoryIDs {
			inv.ids[id] = struct{}{}
		} else {
			inv.IDsUnchecked++
		}
	}
	inv.Records++
	if !h.TS.IsZero() {
		if inv.First.IsZero() || h.TS.Before(inv.First) {
			inv.First = h.TS
		}
		if h.TS.After(inv.Last) {
			inv.Last = h.TS
		}
	}
	k := EndpointKey{Node: h.Node, Endpoint: frontend, Transport: h.Transport}
	if k.Node == "" {
		k.Node = InventoryNoNode
		inv.NoNode++
	}
	if k.Endpoint == "" {
		k.Endpoint = h.Server
	}
	e := inv.endpoints[k]
	if e == nil {
		limit := inv.MaxEndpoints
		if limit <= 0 {
			limit = MaxInventoryEndpoints
		}
		if len(inv.endpoints) >= limit {
			inv.OverflowHandshakes++
			return
		}
		e = &Endpoint{EndpointKey: k, Frontend: frontend != "", suites: map[suiteKey]*counted{}}
		inv.endpoints[k] = e
	}
	e.add(h)
}

func (e *Endpoint) add(h *record.Handshake) {
	e.Handshakes++
	if !h.TS.IsZero() {
		if e.First.IsZero() || h.TS.Before(e.First) {
			e.First = h.TS
		}
		if h.TS.After(e.Last) {
			e.Last = h.TS
		}
	}
	e.Servers.add(h.Server, MaxInventoryNames)
	if h.SNI != "" {
		e.SNIs.add(h.SNI, MaxInventoryNames)
	}
	e.Outcomes.add(h.Outcome, 0)
	if h.PQOffered {
		e.PQOffered++
	}
	for _, g := range h.OfferedGroups {
		e.Offered.add(g, 0)
	}
	if h.HRR {
		e.HRR++
	}
	if g := h.Generation; g != nil {
		e.Generations.add(g.ID, MaxInventoryNames)
		if g.Exe != "" || g.ExeSHA256 != "" {
			e.Binaries.add(strings.TrimSpace(g.Exe+" "+g.ExeSHA256), MaxInventoryNames)
		}
		if g.OpenSSL != "" {
			e.Libraries.add(g.OpenSSL, MaxInventoryNames)
		}
	}
	if h.Outcome != record.OutcomeOK {
		return
	}
	e.Completed++
	if h.Resumed {
		e.Resumed++
	}
	if h.PQ {
		e.PQ++
	} else if h.PQOffered {
		e.PQOfferedClassical++
	}
	e.Versions.add(cmp.Or(h.Version, "unknown"), 0)
	group := record.GroupLabel(h)
	e.Groups.add(group, 0)
	if h.Cipher != "" {
		k := suiteKey{h.Version, h.Cipher}
		s := e.suites[k]
		if s == nil {
			s = &counted{}
			e.suites[k] = s
		}
		if h.Group != "" {
			s.add(h.Group, 0)
		} else {
			s.add("", 0) // counts the suite; no group to name
		}
	}
}

// Endpoints are the endpoints kept, by node, endpoint and transport.
func (inv *Inventory) Endpoints() []*Endpoint {
	out := slices.Collect(maps.Values(inv.endpoints))
	slices.SortFunc(out, func(a, b *Endpoint) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Transport, b.Transport))
	})
	return out
}

// WriteText writes the people's summary: the totals, then the endpoints
// still classical (completed handshakes, none hybrid) ranked by
// handshakes, then those that negotiate hybrid.
func (inv *Inventory) WriteText(w io.Writer) error {
	eps := inv.Endpoints()
	var classical, hybrid, none []*Endpoint
	for _, e := range eps {
		switch {
		case e.Classical():
			classical = append(classical, e)
		case e.PQ > 0:
			hybrid = append(hybrid, e)
		default:
			none = append(none, e)
		}
	}
	byHandshakes := func(a, b *Endpoint) int {
		return cmp.Or(cmp.Compare(b.Handshakes, a.Handshakes), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Transport, b.Transport))
	}
	slices.SortStableFunc(classical, byHandshakes)
	slices.SortStableFunc(hybrid, byHandshakes)
	fmt.Fprintf(w, "pqwatch TLS inventory: %d handshakes, %d endpoints", inv.Records, len(eps))
	if !inv.First.IsZero() {
		fmt.Fprintf(w, ", %s to %s", inv.First.UTC().Format(time.RFC3339Nano), inv.Last.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "endpoints negotiating hybrid: %d; still classical: %d; without a completed handshake: %d\n", len(hybrid), len(classical), len(none))
	if inv.Duplicates > 0 {
		fmt.Fprintf(w, "duplicates dropped: %d\n", inv.Duplicates)
	}
	if inv.OverflowHandshakes > 0 {
		fmt.Fprintf(w, "handshakes of endpoints past the %d-endpoint cap (not listed): %d\n", inv.limit(), inv.OverflowHandshakes)
	}
	table := func(title string, rows []*Endpoint) {
		fmt.Fprintf(w, "\n%s\n", title)
		if len(rows) == 0 {
			fmt.Fprintln(w, "  (none)")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  node\tendpoint\ttransport\thandshakes\tcompleted\thybrid\toffered hybrid, got classical\tversions\tgroups\tsni")
		for _, e := range rows {
			sni := strings.Join(first(e.SNIs.ranked(), 3), ",")
			if n := len(e.SNIs.n) + e.SNIs.overflow; n > 3 {
				sni += fmt.Sprintf(",+%d", n-3)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%.1f%%\t%d (%.1f%%)\t%s\t%s\t%s\n", e.Node, e.Endpoint, e.Transport, e.Handshakes, e.Completed,
				100*e.HybridShare(), e.PQOfferedClassical, 100*e.OfferedClassicalShare(),
				joinCounts(&e.Versions), joinCounts(&e.Groups), cmp.Or(sni, "-"))
		}
		tw.Flush()
	}
	table("still classical (completed handshakes, none hybrid), by handshakes:", classical)
	table("negotiating hybrid, by handshakes:", hybrid)
	return nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// joinCounts is "name=count,..." most counted first.
func joinCounts(c *counted) string {
	var parts []string
	for _, n := range c.ranked() {
		parts = append(parts, n+"="+strconv.Itoa(c.n[n]))
	}
	if c.overflow > 0 {
		parts = append(parts, "(other)="+strconv.Itoa(c.overflow))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func (inv *Inventory) limit() int {
	if inv.MaxEndpoints > 0 {
		return inv.MaxEndpoints
	}
	return MaxInventoryEndpoints
}
