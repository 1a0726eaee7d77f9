// Package report aggregates handshake records into the summary of SPEC.md
// (the `-format json` object) and renders the human text report.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

// GroupStats is one row of the per-group table.
type GroupStats struct {
	Count                  int `json:"count"`
	HRR                    int `json:"hrr"`
	MedianClientHelloBytes int `json:"median_client_hello_bytes"`
	MedianServerHelloBytes int `json:"median_server_hello_bytes"`
	MedianKeyShareBytes    int `json:"median_client_key_share_bytes,omitempty"`
	// Sizes seen and how often: exact medians in memory bounded by the
	// distinct sizes, not by the handshakes (run keeps a Summary for days).
	chBytes, shBytes sizeCounts
}

// sizeCounts counts occurrences of each size.
type sizeCounts map[int]int

func (c *sizeCounts) add(v int) {
	if *c == nil {
		*c = sizeCounts{}
	}
	(*c)[v]++
}

// ClassicalDespitePQ groups the clients that offered a PQ group but
// negotiated a classical one. JA4 leaves supported_groups out, so the row
// also says whether the client offered a PQ group (always, in this table)
// and whether it sent a key share for one.
type ClassicalDespitePQ struct {
	JA4        string `json:"ja4"`
	PQOffered  bool   `json:"pq_offered"`
	PQKeyShare bool   `json:"pq_key_share"`
	SNI        string `json:"sni,omitempty"`
	Server     string `json:"server"`
	Group      string `json:"group"`
	Count      int    `json:"count"`
}

// classicalKey is a row of the "offered PQ but negotiated classical" table.
type classicalKey struct {
	ja4, sni, server, group string
	pqOffered, pqShare      bool
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
	Resumed            int                    `json:"resumed"`       // completed records of resumed sessions
	GroupMissing       map[string]int         `json:"group_missing"` // completed records without a group, by group_missing
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
	// PacketsOutsidePorts were skipped by -ports.
	PacketsOutsidePorts uint64 `json:"packets_outside_ports,omitempty"`
	// ViewsMerged are the records merged into another: the same handshake
	// seen on several interfaces or address pairs (before and after a
	// NAT); ViewsLate, the views dropped as twins that came too late.
	ViewsMerged uint64     `json:"views_merged,omitempty"`
	ViewsLate   uint64     `json:"views_late,omitempty"`
	Span        *Span      `json:"span,omitempty"` // capture time of the packets read
	Files       []FileInfo `json:"files,omitempty"`
	// Log joins (present when access logs were given).
	Joins       *JoinStats           `json:"joins,omitempty"`
	ByServer    map[string]*ShareRow `json:"pq_share_by_server,omitempty"`
	BySNI       map[string]*ShareRow `json:"pq_share_by_sni,omitempty"`
	ByHost      map[string]*ShareRow `json:"pq_share_by_host,omitempty"`
	ByUserAgent map[string]*ShareRow `json:"pq_share_by_user_agent_family,omitempty"`
	// Logs says how each access log was read (offline).
	Logs []LogFile `json:"logs,omitempty"`
	// LogsNotTaken are the container logs run's -pod-logs found and did
	// not read as access logs, and why.
	LogsNotTaken []LogNotTaken `json:"logs_not_taken,omitempty"`
	// ServerErrors are severe nginx error-log lines ([emerg], [alert], [crit]).
	ServerErrors []string `json:"server_errors,omitempty"`
	// Forecast is the migration forecast section.
	Forecast *Forecast `json:"forecast,omitempty"`
	// Policy is the policy check (set by the caller when policies are
	// declared: NewPolicyCheck).
	Policy *PolicyCheck `json:"policy,omitempty"`
	// Generations are the server generations records were attributed to
	// (run), first seen first; SwapEvents the tracker's events of the run
	// (set by the caller).
	Generations []*GenerationRow `json:"generations,omitempty"`
	SwapEvents  []SwapEvent      `json:"swap_events,omitempty"`

	mu        sync.Mutex // Write may be called from several goroutines
	classical map[classicalKey]int
	// Per-record counts kept in tallies, flushed into the maps above
	// (Transports, Outcomes, Versions, Groups) when they are read.
	transports, outcomes, versions, groups tally[string]
	// The rows the last record counted in, by key: a live node's records
	// mostly repeat their server, SNI and group.
	lastGroup, lastServer, lastSNI string
	lastGS                         *GroupStats
	lastServerRow, lastSNIRow      *ShareRow
	gens                           map[string]*GenerationRow
	lastGen                        *GenerationRow
}

// JoinStats summarises the access-log join.
type JoinStats struct {
	Joined              int            `json:"joined"`
	UnmatchedHandshakes int            `json:"unmatched_handshakes"`
	Ambiguous           int            `json:"ambiguous"`
	CurveChecked        int            `json:"ssl_curve_checked"`
	CurveMismatch       int            `json:"ssl_curve_mismatch"`
	Malformed           map[string]int `json:"malformed_lines"`
}

// LogFile is how one access log was read.
type LogFile struct {
	Path      string `json:"path"`
	Source    string `json:"source"`           // nginx or caddy
	Format    string `json:"format,omitempty"` // the nginx log_format it was read with
	How       string `json:"format_from,omitempty"`
	Lines     int    `json:"lines"`
	Joinable  int    `json:"joinable_lines"` // parsed, with a client address and time
	FirstBad  int    `json:"first_bad_line,omitempty"`
	BadReason string `json:"first_bad_reason,omitempty"`
}

// LogNotTaken is a log found and not read as an access log.
type LogNotTaken struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ShareRow is the PQ share of one host or user-agent family.
type ShareRow struct {
	Completed int     `json:"completed"`
	PQ        int     `json:"pq"`
	PQShare   float64 `json:"pq_share"`
}

// FileInfo describes one input file.
type FileInfo struct {
	Path    string    `json:"path"`
	Format  string    `json:"format,omitempty"`
	Packets uint64    `json:"packets"`
	First   time.Time `json:"first,omitzero"`
	Last    time.Time `json:"last,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Span is the capture time the packets read cover.
type Span struct {
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
	Seconds float64   `json:"seconds"`
}

// AddFile records one input file and widens the span.
func (s *Summary) AddFile(fi FileInfo) {
	s.Files = append(s.Files, fi)
	if fi.First.IsZero() {
		return
	}
	if s.Span == nil {
		s.Span = &Span{First: fi.First, Last: fi.Last}
	}
	if fi.First.Before(s.Span.First) {
		s.Span.First = fi.First
	}
	if fi.Last.After(s.Span.Last) {
		s.Span.Last = fi.Last
	}
	s.Span.Seconds = s.Span.Last.Sub(s.Span.First).Seconds()
}

// New returns an empty Summary whose forecast section predicts under policy.
func New(policy forecast.Policy) *Summary {
	return &Summary{
		Forecast:     NewForecast(policy),
		Transports:   map[string]int{},
		Versions:     map[string]int{},
		Groups:       map[string]int{},
		GroupMissing: map[string]int{},
		GroupTable:   map[string]*GroupStats{},
		Outcomes:     map[string]int{},
		Failures:     map[string]int{},
		LogLines:     map[string]int{},
		LogUnmatched: map[string]int{},
		Errors:       map[string]uint64{},
		classical:    map[classicalKey]int{},
	}
}

// Write counts one record (record.Sink); safe for concurrent use.
func (s *Summary) Write(r *record.Handshake) error {
	s.mu.Lock()
	s.add(r)
	s.Forecast.Add(r)
	if s.Policy != nil {
		s.Policy.Add(r)
	}
	s.mu.Unlock()
	return nil
}

func (s *Summary) add(r *record.Handshake) {
	s.Handshakes++
	s.addGeneration(r)
	s.transports.add(r.Transport, 1, into(s.Transports))
	s.outcomes.add(r.Outcome, 1, into(s.Outcomes))
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
		s.versions.add(r.Version, 1, into(s.Versions))
	}
	if r.Resumed {
		s.Resumed++
	}
	g := r.Group
	if g == "" {
		g = "none"
		why := r.GroupMissing
		if why == "" {
			why = record.GroupMissingUnknown // a record from before group_missing
		}
		s.GroupMissing[why]++
	}
	s.groups.add(g, 1, into(s.Groups))
	gs := s.lastGS
	if gs == nil || g != s.lastGroup {
		if gs = s.GroupTable[g]; gs == nil {
			gs = &GroupStats{}
			s.GroupTable[g] = gs
		}
		s.lastGroup, s.lastGS = g, gs
	}
	gs.Count++
	if r.HRR {
		gs.HRR++
	}
	if r.ClientHelloBytes > 0 {
		gs.chBytes.add(r.ClientHelloBytes)
	}
	if r.ServerHelloBytes > 0 {
		gs.shBytes.add(r.ServerHelloBytes)
	}
	if s.ByServer == nil {
		s.ByServer, s.BySNI = map[string]*ShareRow{}, map[string]*ShareRow{}
	}
	if s.lastServerRow == nil || r.Server != s.lastServer {
		s.lastServer, s.lastServerRow = r.Server, shareRow(s.ByServer, r.Server)
	}
	s.lastServerRow.add(r.PQ)
	sni := r.SNI
	if sni == "" {
		sni = "(none)"
	}
	if s.lastSNIRow == nil || sni != s.lastSNI {
		s.lastSNI, s.lastSNIRow = sni, shareRow(s.BySNI, sni)
	}
	s.lastSNIRow.add(r.PQ)
	if r.Log != nil {
		if s.ByHost == nil {
			s.ByHost, s.ByUserAgent = map[string]*ShareRow{}, map[string]*ShareRow{}
		}
		host := r.Log.Host
		if host == "" {
			host = "(none)"
		}
		addShare(s.ByHost, host, r.PQ)
		addShare(s.ByUserAgent, UAFamily(r.Log.UserAgent), r.PQ)
	}
	if r.PQ {
		s.PQ++
	} else if r.PQOffered {
		s.PQOfferedClassical++
		k := classicalKey{ja4: r.JA4, sni: r.SNI, server: r.Server, group: g, pqOffered: r.PQOffered, pqShare: PQKeyShare(r)}
		if _, ok := s.classical[k]; !ok && len(s.classical) >= maxClassicalRows {
			k = classicalKey{ja4: "(other)", pqOffered: k.pqOffered, pqShare: k.pqShare}
		}
		s.classical[k]++
	}
}

// flush moves the tallies' counts into their maps. The caller holds s.mu.
func (s *Summary) flush() {
	s.transports.flush(into(s.Transports))
	s.outcomes.flush(into(s.Outcomes))
	s.versions.flush(into(s.Versions))
	s.groups.flush(into(s.Groups))
}

// Finish computes the derived fields (shares, medians, sorted lists), the
// forecast section's too.
func (s *Summary) Finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush()
	s.finishGenerations()
	s.Forecast.Finish()
	if s.Completed > 0 {
		s.PQShare = float64(s.PQ) / float64(s.Completed)
	}
	for _, gs := range s.GroupTable {
		gs.MedianClientHelloBytes = median(gs.chBytes)
		gs.MedianServerHelloBytes = median(gs.shBytes)
	}
	for _, m := range []map[string]*ShareRow{s.ByServer, s.BySNI, s.ByHost, s.ByUserAgent} {
		for _, row := range m {
			row.PQShare = float64(row.PQ) / float64(row.Completed)
		}
	}
	s.ClassicalClients = s.ClassicalClients[:0]
	for k, n := range s.classical {
		s.ClassicalClients = append(s.ClassicalClients, ClassicalDespitePQ{JA4: k.ja4, PQOffered: k.pqOffered, PQKeyShare: k.pqShare,
			SNI: k.sni, Server: k.server, Group: k.group, Count: n})
	}
	slices.SortFunc(s.ClassicalClients, func(a, b ClassicalDespitePQ) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.JA4+a.SNI+a.Server, b.JA4+b.SNI+b.Server),
			cmpBool(a.PQOffered, b.PQOffered), cmpBool(a.PQKeyShare, b.PQKeyShare), cmp.Compare(a.Group, b.Group))
	})
}

// maxClassicalRows bounds the distinct clients kept for the "offered PQ but
// negotiated classical" table; the rest are counted as "(other)".
const maxClassicalRows = 10000

func addShare(m map[string]*ShareRow, k string, pq bool) { shareRow(m, k).add(pq) }

// shareRow is k's row in m, made when new; past 1000 rows new keys share
// "(other)".
func shareRow(m map[string]*ShareRow, k string) *ShareRow {
	row := m[k]
	if row == nil {
		if len(m) >= 1000 {
			k = "(other)"
			row = m[k]
		}
		if row == nil {
			row = &ShareRow{}
			m[k] = row
		}
	}
	return row
}

func (row *ShareRow) add(pq bool) {
	row.Completed++
	if pq {
		row.PQ++
	}
}

// median is the median of the counted values (the mean of the two middle
// ones, rounded down, for an even count).
func median(c sizeCounts) int {
	n := 0
	keys := make([]int, 0, len(c))
	for v, k := range c {
		keys = append(keys, v)
		n += k
	}
	if n == 0 {
		return 0
	}
	slices.Sort(keys)
	// nth returns the i-th value (0-based) in sorted order.
	nth := func(i int) int {
		for _, v := range keys {
			if i < c[v] {
				return v
			}
			i -= c[v]
		}
		return keys[len(keys)-1]
	}
	if n%2 == 1 {
		return nth(n / 2)
	}
	return (nth(n/2-1) + nth(n/2)) / 2
}

// WriteJSON writes the summary as one indented JSON object (-format json).
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// Render writes the summary in format "json" or, otherwise, as text.
func (s *Summary) Render(w io.Writer, format string) error {
	if format == "json" {
		return s.WriteJSON(w)
	}
	return s.WriteText(w)
}

// WriteText renders the human report.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pqwatch report\n\n")
	s.writeInput(&b)
	if len(s.Transports) > 0 {
		fmt.Fprintf(&b, "handshakes         %d (%s)\n", s.Handshakes, kv(s.Transports))
	} else {
		fmt.Fprintf(&b, "handshakes         %d\n", s.Handshakes)
	}
	fmt.Fprintf(&b, "completed          %d\n", s.Completed)
	fmt.Fprintf(&b, "PQ share           %.1f%% (%d of %d completed negotiated a PQ/hybrid group)\n", 100*s.PQShare, s.PQ, s.Completed)
	fmt.Fprintf(&b, "PQ offered         %d of %d handshakes\n", s.PQOffered, s.Handshakes)
	fmt.Fprintf(&b, "HelloRetryRequest  %d\n", s.HRR)
	if s.Completed > 0 {
		fmt.Fprintf(&b, "resumed            %d of %d completed\n", s.Resumed, s.Completed)
	}
	if len(s.GroupMissing) > 0 {
		fmt.Fprintf(&b, "no group           %d completed (%s)\n", s.Groups["none"], kv(s.GroupMissing))
	}
	if len(s.Versions) > 0 {
		fmt.Fprintf(&b, "versions           %s\n", kv(s.Versions))
	}
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
		fmt.Fprintf(&b, "  %-6s %-38s %-18s %-24s %-22s %s\n", "count", "ja4", "pq", "server", "group", "sni")
		for i, c := range s.ClassicalClients {
			if i == 20 {
				fmt.Fprintf(&b, "  ... %d more\n", len(s.ClassicalClients)-i)
				break
			}
			fmt.Fprintf(&b, "  %-6d %-38s %-18s %-24s %-22s %s\n", c.Count, c.JA4, PQColumn(c.PQOffered, c.PQKeyShare), c.Server, c.Group, c.SNI)
		}
	}
	if len(s.Failures) > 0 {
		b.WriteString("\nfailures by reason\n")
		for _, k := range sortedKeys(s.Failures) {
			fmt.Fprintf(&b, "  %-40s %d\n", k, s.Failures[k])
		}
	}
	if j := s.Joins; j != nil {
		b.WriteString("\naccess-log join\n")
		fmt.Fprintf(&b, "  joined %d, unmatched handshakes %d, ambiguous %d\n", j.Joined, j.UnmatchedHandshakes, j.Ambiguous)
		for _, src := range sortedKeys(s.LogLines) {
			fmt.Fprintf(&b, "  %-6s lines %d, unmatched lines %d, malformed %d\n", src, s.LogLines[src], s.LogUnmatched[src], j.Malformed[src])
		}
		for _, l := range s.Logs {
			how := ""
			if l.Format != "" {
				how = fmt.Sprintf(" as log_format %q (%s)", l.Format, l.How)
			}
			fmt.Fprintf(&b, "  %s: %d of %d lines joinable%s\n", l.Path, l.Joinable, l.Lines, how)
		}
		for _, l := range s.LogsNotTaken {
			fmt.Fprintf(&b, "  %s: not taken: %s\n", l.Path, l.Reason)
		}
		if j.CurveChecked > 0 {
			fmt.Fprintf(&b, "  self-check: $ssl_curve vs wire group: %d checked, %d mismatches\n", j.CurveChecked, j.CurveMismatch)
		}
	}
	if len(s.ByServer) > 1 {
		writeShares(&b, "PQ share by server", s.ByServer)
	}
	if len(s.BySNI) > 1 {
		writeShares(&b, "PQ share by SNI", s.BySNI)
	}
	writeShares(&b, "PQ share by Host", s.ByHost)
	writeShares(&b, "PQ share by user-agent family", s.ByUserAgent)
	s.writeGenerations(&b)
	if len(s.ServerErrors) > 0 {
		b.WriteString("\nserver error log (emerg/alert/crit)\n")
		for _, l := range s.ServerErrors {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	if s.Forecast != nil {
		b.WriteString("\n")
		b.WriteString(s.Forecast.Text())
	}
	if s.Policy != nil {
		b.WriteString("\n")
		b.WriteString(s.Policy.Text())
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

// writeInput opens the text report with what was read, and why nothing
// was found when nothing was.
func (s *Summary) writeInput(b *strings.Builder) {
	n := b.Len()
	if len(s.Files) > 0 {
		names := make([]string, len(s.Files))
		for i, f := range s.Files {
			names[i] = f.Path
		}
		fmt.Fprintf(b, "read               %s: %d packets", strings.Join(names, ", "), s.Packets)
		if sp := s.Span; sp != nil {
			fmt.Fprintf(b, ", %s to %s (%s)", sp.First.UTC().Format("2006-01-02 15:04:05.000"), sp.Last.UTC().Format("2006-01-02 15:04:05.000 MST"),
				sp.Last.Sub(sp.First).Round(time.Millisecond))
		}
		b.WriteString("\n")
	}
	if s.PacketsOutsidePorts > 0 {
		fmt.Fprintf(b, "outside -ports     %d packets skipped\n", s.PacketsOutsidePorts)
	}
	if s.ViewsMerged+s.ViewsLate > 0 {
		fmt.Fprintf(b, "views merged       %d (one record per handshake seen on several interfaces or address pairs)", s.ViewsMerged)
		if s.ViewsLate > 0 {
			fmt.Fprintf(b, ", %d late twins dropped", s.ViewsLate)
		}
		b.WriteString("\n")
	}
	if s.Handshakes == 0 && s.Packets > 0 {
		if s.PacketsOutsidePorts > 0 {
			fmt.Fprintf(b, "no handshake found: %d of %d packets were outside -ports; run without -ports (TLS is found by content on any port)\n", s.PacketsOutsidePorts, s.Packets)
		} else {
			fmt.Fprintf(b, "no handshake found: none of the %d packets carried the start of a TLS ClientHello (TCP) or a QUIC Initial (UDP)\n", s.Packets)
		}
	}
	if b.Len() > n {
		b.WriteString("\n")
	}
}

// NothingFound says why a summary holds no handshake ("" when it holds
// some): for stderr, naming the fix.
func (s *Summary) NothingFound() string {
	switch {
	case s.Handshakes > 0:
		return ""
	case s.Packets == 0:
		return "no packets were read"
	case s.PacketsOutsidePorts > 0:
		return fmt.Sprintf("no TLS handshake found: %d of %d packets were outside -ports; run without -ports (TLS is found by content on any port)", s.PacketsOutsidePorts, s.Packets)
	}
	return fmt.Sprintf("no TLS handshake found in %d packets: none carried the start of a TLS ClientHello (TCP) or a QUIC Initial (UDP); was the capture started after the handshakes, or is the traffic not TLS?", s.Packets)
}

func writeShares(b *strings.Builder, title string, m map[string]*ShareRow) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n", title)
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]].Completed > m[keys[j]].Completed })
	for i, k := range keys {
		if i == 20 {
			fmt.Fprintf(b, "  ... %d more\n", len(keys)-i)
			break
		}
		r := m[k]
		fmt.Fprintf(b, "  %-32s %6.1f%% of %d\n", k, 100*r.PQShare, r.Completed)
	}
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

// Counts are a summary's headline counts at one moment.
type Counts struct {
	Handshakes, Completed, PQ, HRR int
	Groups                         map[string]int // completed handshakes by group
}

// Snapshot copies the headline counts while records may still arrive.
func (s *Summary) Snapshot() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush()
	c := Counts{Handshakes: s.Handshakes, Completed: s.Completed, PQ: s.PQ, HRR: s.HRR, Groups: make(map[string]int, len(s.Groups))}
	for g, n := range s.Groups {
		c.Groups[g] = n
	}
	return c
}
