package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// GenerationRow is what one server generation served in a run: the
// records attributed to it (live only: offline records carry none).
type GenerationRow struct {
	ID         string    `json:"id"`
	Exe        string    `json:"exe,omitempty"`
	OpenSSL    string    `json:"openssl,omitempty"`
	Handshakes int       `json:"handshakes"`
	Completed  int       `json:"completed"`
	PQ         int       `json:"pq"`
	PQShare    float64   `json:"pq_share"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
}

// SwapEvent is one event of the swap state machine in a run (a USR2, a
// WINCH, a failed swap, ...), as the tracker reports it.
type SwapEvent struct {
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Generation string    `json:"generation"`
	Other      string    `json:"other,omitempty"`
	Message    string    `json:"message"`
}

// maxGenerationRows bounds the generations a summary keeps; records of
// the rest count under "(other)".
const maxGenerationRows = 256

// addGeneration counts r under its generation. The caller holds s.mu.
func (s *Summary) addGeneration(r *record.Handshake) {
	g := r.Generation
	if g == nil || g.ID == "" {
		return
	}
	row := s.lastGen
	if row == nil || row.ID != g.ID {
		if s.gens == nil {
			s.gens = map[string]*GenerationRow{}
		}
		id := g.ID
		if row = s.gens[id]; row == nil {
			if len(s.gens) >= maxGenerationRows {
				id = "(other)"
			}
			if row = s.gens[id]; row == nil {
				row = &GenerationRow{ID: id, FirstSeen: r.TS}
				if id == g.ID {
					row.Exe, row.OpenSSL = g.Exe, g.OpenSSL
				}
				s.gens[id] = row
			}
		}
		s.lastGen = row
	}
	row.Handshakes++
	if r.Outcome == record.OutcomeOK {
		row.Completed++
		if r.PQ {
			row.PQ++
		}
	}
	if r.TS.Before(row.FirstSeen) {
		row.FirstSeen = r.TS
	}
	if r.TS.After(row.LastSeen) {
		row.LastSeen = r.TS
	}
}

// finishGenerations fills Generations, first seen first. The caller holds
// s.mu.
func (s *Summary) finishGenerations() {
	s.Generations = s.Generations[:0]
	for _, row := range s.gens {
		if row.Completed > 0 {
			row.PQShare = float64(row.PQ) / float64(row.Completed)
		}
		s.Generations = append(s.Generations, row)
	}
	slices.SortFunc(s.Generations, func(a, b *GenerationRow) int {
		return cmp.Or(a.FirstSeen.Compare(b.FirstSeen), cmp.Compare(a.ID, b.ID))
	})
}

// writeGenerations is the text report's generations and swap events.
func (s *Summary) writeGenerations(b *strings.Builder) {
	if len(s.Generations) > 0 {
		b.WriteString("\nby server generation\n")
		fmt.Fprintf(b, "  %-32s %-10s %8s %8s %-20s %-20s %s\n", "generation", "OpenSSL", "count", "PQ", "first seen", "last seen", "binary")
		for _, g := range s.Generations {
			fmt.Fprintf(b, "  %-32s %-10s %8d %7.1f%% %-20s %-20s %s\n", g.ID, opensslVersion(g.OpenSSL), g.Handshakes, 100*g.PQShare,
				g.FirstSeen.UTC().Format(time.DateTime), g.LastSeen.UTC().Format(time.DateTime), g.Exe)
		}
	}
	if len(s.SwapEvents) > 0 {
		b.WriteString("\nswap events\n")
		for _, e := range s.SwapEvents {
			fmt.Fprintf(b, "  %s  %-10s %s", e.Time.UTC().Format(time.DateTime), e.Kind, e.Generation)
			if e.Other != "" {
				fmt.Fprintf(b, " (%s)", e.Other)
			}
			fmt.Fprintf(b, ": %s\n", e.Message)
		}
	}
}

// opensslVersion shortens "OpenSSL 3.5.4 30 Sep 2025" to "3.5.4".
func opensslVersion(s string) string {
	if f := strings.Fields(s); len(f) >= 2 {
		return f[1]
	}
	return s
}
