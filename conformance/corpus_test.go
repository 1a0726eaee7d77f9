package conformance

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// corpusDir is the shared public capture corpus, relative to this package.
const corpusDir = "../../shared/corpus"

var dumpNew = flag.Bool("conformance.dump", false,
	"print new disagreements as Go literals for knownDisagreements")

// corpus returns the corpus root, or skips the test when it is absent.
func corpus(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(corpusDir, "analysis.json")); err != nil {
		t.Skipf("public capture corpus not found at %s (see README: it turns on the conformance tests): %v", corpusDir, err)
	}
	return corpusDir
}

// result is what the sniffer made of one capture.
type result struct {
	Records []*record.Handshake
	File    sniffer.FileStats
	Stats   sniffer.Stats
	Err     error // ReadFile's error: unreadable or unrecognised file
	Panic   string
}

var (
	runMu    sync.Mutex
	runCache = map[string]*result{}
)

// run feeds capture rel (relative to the corpus root) through a fresh
// sniffer, once per test binary, and never lets a panic escape: it is
// recorded in result.Panic so that the robustness test can fail on it and
// the comparison tests can carry on.
func run(t *testing.T, rel string) *result {
	t.Helper()
	runMu.Lock()
	defer runMu.Unlock()
	if r, ok := runCache[rel]; ok {
		return r
	}
	r := &result{}
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.Panic = fmt.Sprintf("%v\n%s", p, debug.Stack())
			}
		}()
		s := sniffer.New(sniffer.Config{OnRecord: func(h *record.Handshake) { r.Records = append(r.Records, h) }})
		r.File, r.Err = sniffer.ReadFile(filepath.Join(corpusDir, rel), s, nil)
		s.Flush()
		r.Stats = s.Stats()
	}()
	runCache[rel] = r
	return r
}

// analysisEntry is one capture of analysis.json (tshark 4.0's summary).
type analysisEntry struct {
	File        string   `json:"file"`
	Packets     int      `json:"packets"`
	TsharkRC    int      `json:"tshark_rc"`
	CH          int      `json:"ch"`
	SH          int      `json:"sh"`
	HRR         int      `json:"hrr"`
	CHKeyShare  []string `json:"ch_keyshare"`
	SHKeyShare  []string `json:"sh_keyshare"`
	HRRSelected []string `json:"hrr_selected"`
	CHGroups    []string `json:"ch_supported_groups"`
	QUICInit    int      `json:"quic_initials"`
	QUICCH      int      `json:"quic_ch"`
	DTLSCH      int      `json:"dtls_ch"`
	SNI         []string `json:"sni"`
	TLS13SH     int      `json:"tls13_sh"`
}

func loadAnalysis(t *testing.T, root string) []analysisEntry {
	t.Helper()
	var a []analysisEntry
	readJSON(t, filepath.Join(root, "analysis.json"), &a)
	return a
}

// loadExpectedMap reads expected_outputs_map.json: capture -> [[file, kind]].
func loadExpectedMap(t *testing.T, root string) map[string][][2]string {
	t.Helper()
	var m map[string][][2]string
	readJSON(t, filepath.Join(root, "expected_outputs_map.json"), &m)
	return m
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// byClient indexes records by client ip:port. A capture can hold the same
// client address twice (port reuse, or one TCP and one QUIC connection);
// all are kept in capture order.
func byClient(recs []*record.Handshake) map[string][]*record.Handshake {
	m := make(map[string][]*record.Handshake, len(recs))
	for _, r := range recs {
		m[r.ClientText()] = append(m[r.ClientText()], r)
	}
	return m
}

// hostPort formats an address the way record.Handshake does.
func hostPort(ip, port string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + port
	}
	return ip + ":" + port
}

// disagreement is one field where pqwatch and another tool differ.
type disagreement struct {
	Tool    string // "zeek", "foxio", "arkime", "suricata", "tshark"
	Capture string // path relative to the corpus root
	Conn    string // client ip:port, or "" for per-capture facts
	Field   string
	Ours    string
	Theirs  string
}

func (d disagreement) key() string {
	return d.Tool + "|" + d.Capture + "|" + d.Conn + "|" + d.Field
}

// known is a disagreement we have looked at, with the reason.
type known struct {
	disagreement
	Why string
}

// tally counts one tool's comparisons.
type tally struct {
	tool     string
	captures map[string]bool
	conns    int // connections (or per-capture facts) compared
	agree    int // fields that agree
	found    []disagreement
	notes    []string
	skipped  int
	skipWhy  map[string]int
}

func newTally(tool string) *tally {
	return &tally{tool: tool, captures: map[string]bool{}, skipWhy: map[string]int{}}
}

// eq compares one field and records the outcome.
func (ty *tally) eq(capture, conn, field, ours, theirs string) {
	if ours == theirs {
		ty.agree++
		return
	}
	ty.found = append(ty.found, disagreement{ty.tool, capture, conn, field, ours, theirs})
}

func (ty *tally) skip(why string) { ty.skipped++; ty.skipWhy[why]++ }

// check fails the test on every disagreement that knownDisagreements does
// not list with the same values, and on every listed one for this tool that
// no longer occurs.
func (ty *tally) check(t *testing.T) {
	t.Helper()
	kn := map[string]known{}
	for _, k := range knownDisagreements {
		if k.Tool == ty.tool {
			if _, dup := kn[k.key()]; dup {
				t.Errorf("knownDisagreements lists %s twice", k.key())
			}
			kn[k.key()] = k
		}
	}
	seen := map[string]bool{}
	var fresh []disagreement
	nKnown := 0
	for _, d := range ty.found {
		seen[d.key()] = true
		k, ok := kn[d.key()]
		switch {
		case !ok:
			fresh = append(fresh, d)
			t.Errorf("NEW disagreement with %s: %s %s %s: ours %q, theirs %q", d.Tool, d.Capture, d.Conn, d.Field, d.Ours, d.Theirs)
		case k.Ours != d.Ours || k.Theirs != d.Theirs:
			fresh = append(fresh, d)
			t.Errorf("known disagreement changed with %s: %s %s %s: ours %q (listed %q), theirs %q (listed %q)",
				d.Tool, d.Capture, d.Conn, d.Field, d.Ours, k.Ours, d.Theirs, k.Theirs)
		default:
			nKnown++
			t.Logf("known: %s %s %s: ours %q, theirs %q: %s", d.Capture, d.Conn, d.Field, d.Ours, d.Theirs, k.Why)
		}
	}
	for key, k := range kn {
		if !seen[key] {
			t.Errorf("known disagreement with %s no longer occurs (fixed? remove it): %s %s %s", k.Tool, k.Capture, k.Conn, k.Field)
		}
	}
	whys := make([]string, 0, len(ty.skipWhy))
	for w, n := range ty.skipWhy {
		whys = append(whys, fmt.Sprintf("%s=%d", w, n))
	}
	sort.Strings(whys)
	for _, n := range ty.notes {
		t.Log(n)
	}
	t.Logf("%s: %d captures, %d connections compared, %d fields agree, %d known disagreements, %d new; not compared: %s",
		ty.tool, len(ty.captures), ty.conns, ty.agree, nKnown, len(fresh), strings.Join(whys, " "))
	if *dumpNew && len(fresh) > 0 {
		var b strings.Builder
		for _, d := range fresh {
			fmt.Fprintf(&b, "\t{disagreement{%q, %q, %q, %q, %q, %q}, \"TODO\"},\n", d.Tool, d.Capture, d.Conn, d.Field, d.Ours, d.Theirs)
		}
		t.Logf("new disagreements as Go literals:\n%s", b.String())
	}
}

func itoa(n int) string { return fmt.Sprint(n) }
