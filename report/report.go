// Package report aggregates handshake records into the summary of SPEC.md
// (the `-format json` object) and renders the human text report.
package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/pqwatch/pqwatch/record"
)

// GroupStats is one row of the per-group table.
type GroupStats struct {
	Count                  int `json:"count"`
	HRR                    int `json:"hrr"`
	MedianClientHelloBytes int `json:"median_client_hello_bytes"`
	MedianServerHelloBytes int `json:"median_server_hello_bytes"`
	MedianKeyShareBytes    int `json:"median_client_key_share_bytes,omitempty"`
	chBytes, shBytes       []int
}

// ClassicalDespitePQ groups the clients that offered a PQ group but
// negotiated a classical one.
type ClassicalDespitePQ struct {
	JA4    string `json:"ja4"`
	SNI    string `json:"sni,omitempty"`
	Server string `json:"server"`
	Group  string `json:"group"`
	Count  int    `json:"count"`
}

// LogStats counts one log source's lines.
type LogStats struct {
	Lines     int `json:"lines"`
	Unmatched int `json:"unmatched"`
	Malformed int `json:"malformed"`
}

// Summary is the `-format json` object.
type Summary struct {
	Handshakes         int                    `json:"handshakes"`
	Completed          int                    `json:"completed"`
	PQ                 int                    `json:"pq"`
	PQShare            float64                `json:"pq_share"`
	PQOffered          int                    `json:"pq_offered"`
	HRR                int                    `json:"hrr"`
	Transports         map[string]int         `json:"transports"`
	Versions           map[string]int         `json:"versions"`
	Groups             map[string]int         `json:"groups"`
	GroupTable         map[string]*GroupStats `json:"group_table"`
	Outcomes           map[string]int         `json:"outcomes"`
	Failures           map[string]int         `json:"failures"`
	PQOfferedClassical int                    `json:"pq_offered_negotiated_classical"`
	ClassicalClients   []ClassicalDespitePQ   `json:"pq_offered_negotiated_classical_clients,omitempty"`
	Joined             int                    `json:"joined"`
	LogLines           map[string]int         `json:"log_lines"`
	LogUnmatched       map[string]int         `json:"log_unmatched"`
	Errors             map[string]uint64      `json:"errors"`
	Packets            uint64                 `json:"packets"`
	Files              []FileInfo             `json:"files,omitempty"`
	// Extra sections filled by other parts (joins, forecast).
	Extra map[string]any `json:"-"`

	classical map[[4]string]int
}

// FileInfo describes one input file.
type FileInfo struct {
	Path    string `json:"path"`
	Format  string `json:"format,omitempty"`
	Packets uint64 `json:"packets"`
	Error   string `json:"error,omitempty"`
}

// New returns an empty Summary.
func New() *Summary {
	return &Summary{
		Transports:   map[string]int{},
		Versions:     map[string]int{},
		Groups:       map[string]int{},
		GroupTable:   map[string]*GroupStats{},
		Outcomes:     map[string]int{},
		Failures:     map[string]int{},
		LogLines:     map[string]int{},
		LogUnmatched: map[string]int{},
		Errors:       map[string]uint64{},
		classical:    map[[4]string]int{},
	}
}

// Add counts one record.
func (s *Summary) Add(r *record.Handshake) {
	s.Handshakes++
	s.Transports[r.Transport]++
	s.Outcomes[r.Outcome]++
	if r.PQOffered {
		s.PQOffered++
	}
	if r.HRR {
		s.HRR++
	}
	if r.Log != nil {
		s.Joined++
	}
	if r.Outcome != record.OutcomeOK {
		reason := r.Outcome
		if r.Alert != "" {
			reason += ":" + r.Alert
		}
		s.Failures[reason]++
		return
	}
	s.Completed++
	if r.Version != "" {
		s.Versions[r.Version]++
	}
	g := r.Group
	if g == "" {
		g = "none"
	}
	s.Groups[g]++
	gs := s.GroupTable[g]
	if gs == nil {
		gs = &GroupStats{}
		s.GroupTable[g] = gs
	}
	gs.Count++
	if r.HRR {
		gs.HRR++
	}
	if r.ClientHelloBytes > 0 {
		gs.chBytes = append(gs.chBytes, r.ClientHelloBytes)
	}
	if r.ServerHelloBytes > 0 {
		gs.shBytes = append(gs.shBytes, r.ServerHelloBytes)
	}
	if r.PQ {
		s.PQ++
	} else if r.PQOffered {
		s.PQOfferedClassical++
		s.classical[[4]string{r.JA4, r.SNI, r.Server, g}]++
	}
}

// Finish computes the derived fields (shares, medians, sorted lists).
func (s *Summary) Finish() {
	if s.Completed > 0 {
		s.PQShare = float64(s.PQ) / float64(s.Completed)
	}
	for _, gs := range s.GroupTable {
		gs.MedianClientHelloBytes = median(gs.chBytes)
		gs.MedianServerHelloBytes = median(gs.shBytes)
	}
	s.ClassicalClients = s.ClassicalClients[:0]
	for k, n := range s.classical {
		s.ClassicalClients = append(s.ClassicalClients, ClassicalDespitePQ{JA4: k[0], SNI: k[1], Server: k[2], Group: k[3], Count: n})
	}
	slices.SortFunc(s.ClassicalClients, func(a, b ClassicalDespitePQ) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.JA4+a.SNI+a.Server, b.JA4+b.SNI+b.Server)
	})
}

func median(v []int) int {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// WriteText renders the human report.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pqwatch report\n\n")
	fmt.Fprintf(&b, "handshakes         %d (%s)\n", s.Handshakes, kv(s.Transports))
	fmt.Fprintf(&b, "completed          %d\n", s.Completed)
	fmt.Fprintf(&b, "PQ share           %.1f%% (%d of %d completed negotiated a PQ/hybrid group)\n", 100*s.PQShare, s.PQ, s.Completed)
	fmt.Fprintf(&b, "PQ offered         %d of %d handshakes\n", s.PQOffered, s.Handshakes)
	fmt.Fprintf(&b, "HelloRetryRequest  %d\n", s.HRR)
	if len(s.LogLines) > 0 {
		fmt.Fprintf(&b, "joined to logs     %d of %d\n", s.Joined, s.Handshakes)
	}
	b.WriteString("\nby negotiated group\n")
	fmt.Fprintf(&b, "  %-26s %8s %8s %12s %12s\n", "group", "count", "HRR", "median CH B", "median SH B")
	groups := make([]string, 0, len(s.GroupTable))
	for g := range s.GroupTable {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		a, c := s.GroupTable[groups[i]], s.GroupTable[groups[j]]
		if a.Count != c.Count {
			return a.Count > c.Count
		}
		return groups[i] < groups[j]
	})
	for _, g := range groups {
		gs := s.GroupTable[g]
		fmt.Fprintf(&b, "  %-26s %8d %8d %12d %12d\n", g, gs.Count, gs.HRR, gs.MedianClientHelloBytes, gs.MedianServerHelloBytes)
	}
	if len(s.ClassicalClients) > 0 {
		fmt.Fprintf(&b, "\noffered PQ but negotiated classical: %d\n", s.PQOfferedClassical)
		fmt.Fprintf(&b, "  %-6s %-38s %-24s %-22s %s\n", "count", "ja4", "server", "group", "sni")
		for i, c := range s.ClassicalClients {
			if i == 20 {
				fmt.Fprintf(&b, "  ... %d more\n", len(s.ClassicalClients)-i)
				break
			}
			fmt.Fprintf(&b, "  %-6d %-38s %-24s %-22s %s\n", c.Count, c.JA4, c.Server, c.Group, c.SNI)
		}
	}
	if len(s.Failures) > 0 {
		b.WriteString("\nfailures by reason\n")
		for _, k := range sortedKeys(s.Failures) {
			fmt.Fprintf(&b, "  %-40s %d\n", k, s.Failures[k])
		}
	}
	for _, name := range sortedKeys(s.Extra) {
		if t, ok := s.Extra[name].(interface{ Text() string }); ok {
			b.WriteString("\n")
			b.WriteString(t.Text())
		}
	}
	if len(s.Errors) > 0 {
		b.WriteString("\ninput problems (counted, skipped)\n")
		for _, k := range sortedKeys(s.Errors) {
			fmt.Fprintf(&b, "  %-40s %d\n", k, s.Errors[k])
		}
	}
	for _, f := range s.Files {
		if f.Error != "" {
			fmt.Fprintf(&b, "\nfile %s: %s\n", f.Path, f.Error)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func kv(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
