package main

// docs/migration-study.md against the repository and against its own
// captures: every command it gives exists as written (scripts and their
// subcommands and settings, make targets, go run packages and their flags;
// its pqwatch command lines are TestDocFlags'), the scripts parse, and the
// byte table is what pqwatch analyze reads from the capture it came from
// (testdata/study). The swap table and chart are checked in
// internal/genchart, the CPU table in TestMigrationStudyCPU.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const studyDoc = "docs/migration-study.md"

// studyCommands are the doc's shell lines and code spans that run a
// script, make or go run, with any VAR=value settings in front.
func studyCommands(t *testing.T) []string {
	t.Helper()
	text := readRepo(t, studyDoc)
	fences, rest := splitFences(text)
	var out []string
	keep := func(l string) {
		w := strings.Fields(l)
		for len(w) > 0 && strings.Contains(w[0], "=") {
			w = w[1:]
		}
		if len(w) > 0 && (strings.HasPrefix(w[0], "scripts/") || w[0] == "make" || (w[0] == "go" && len(w) > 1 && w[1] == "run")) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	for _, f := range fences {
		if isShell(f.lang) {
			for _, l := range codeLines(f.body) {
				keep(l)
			}
		}
	}
	for _, s := range spans(rest) {
		keep(s.text)
	}
	return out
}

var (
	makeTargetRe = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+):`)
	scriptCaseRe = regexp.MustCompile(`(?m)^([a-z|-]+)\) `)
	scriptVarRe  = regexp.MustCompile(`\$\{([A-Z0-9_]+):-`)
	goFlagRe     = regexp.MustCompile(`flag\.(?:String|Bool|Int|Float64|Duration|Var)\((?:&\w+, )?"([a-z0-9-]+)"`)
)

func TestMigrationStudyCommands(t *testing.T) {
	cmds := studyCommands(t)
	if len(cmds) < 6 {
		t.Fatalf("%s: %d commands found: %q", studyDoc, len(cmds), cmds)
	}
	targets := map[string]bool{}
	for _, m := range makeTargetRe.FindAllStringSubmatch(readRepo(t, "Makefile"), -1) {
		targets[m[1]] = true
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		w := strings.Fields(c)
		var env []string
		for len(w) > 0 && strings.Contains(w[0], "=") {
			env = append(env, strings.SplitN(w[0], "=", 2)[0])
			w = w[1:]
		}
		switch {
		case w[0] == "make":
			for _, target := range w[1:] {
				if !targets[target] {
					t.Errorf("%s: `%s`: the Makefile has no target %s", studyDoc, c, target)
				}
			}
		case w[0] == "go":
			pkg := w[2]
			src, err := os.ReadFile(filepath.Join(repoRoot, pkg, "main.go"))
			if err != nil {
				t.Errorf("%s: `%s`: %v", studyDoc, c, err)
				continue
			}
			flags := map[string]bool{}
			for _, m := range goFlagRe.FindAllStringSubmatch(string(src), -1) {
				flags[m[1]] = true
			}
			for _, f := range flagsIn(" " + strings.Join(w[3:], " ")) {
				if !flags[f] {
					t.Errorf("%s: `%s`: %s has no flag -%s", studyDoc, c, pkg, f)
				}
			}
		default: // a script
			path := filepath.Join(repoRoot, w[0])
			st, err := os.Stat(path)
			if err != nil || st.Mode()&0o111 == 0 {
				t.Errorf("%s: `%s`: %s is not an executable file (%v)", studyDoc, c, w[0], err)
				continue
			}
			src := readRepo(t, w[0])
			if !seen[w[0]] {
				seen[w[0]] = true
				if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
					t.Errorf("%s does not parse: %v\n%s", w[0], err, out)
				}
			}
			if len(w) > 1 {
				var subs []string
				for _, m := range scriptCaseRe.FindAllStringSubmatch(src, -1) {
					subs = append(subs, strings.Split(m[1], "|")...)
				}
				if !slices.Contains(subs, w[1]) {
					t.Errorf("%s: `%s`: %s has no subcommand %s (it has %v)", studyDoc, c, w[0], w[1], subs)
				}
			}
			vars := map[string]bool{}
			for _, m := range scriptVarRe.FindAllStringSubmatch(src, -1) {
				vars[m[1]] = true
			}
			for _, v := range env {
				if !vars[v] {
					t.Errorf("%s: `%s`: %s reads no setting %s", studyDoc, c, w[0], v)
				}
			}
		}
	}
	// The settings the doc's prose names (`RATE`, `SEED`, ...) are the
	// script's.
	src := readRepo(t, "scripts/migration-study.sh")
	_, rest := splitFences(readRepo(t, studyDoc))
	for _, s := range spans(rest) {
		name := strings.SplitN(s.text, "=", 2)[0]
		if regexp.MustCompile(`^[A-Z][A-Z_]{2,}$`).MatchString(name) && !strings.Contains(src, "${"+name+":-") {
			t.Errorf("%s names the setting %s, which scripts/migration-study.sh does not read", studyDoc, name)
		}
	}
}

// TestMigrationStudyBytes: the byte table is pqwatch analyze's reading of
// the capture it was measured on.
func TestMigrationStudyBytes(t *testing.T) {
	code, out, errb := run(t, "analyze", "-format", "jsonl", filepath.Join(repoRoot, "testdata/study/caddy-openssl35.pcap"))
	if code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, errb)
	}
	var got [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Offered []string `json:"offered_groups"`
			Group   string   `json:"group"`
			CH      int      `json:"client_hello_bytes"`
			SH      int      `json:"server_hello_bytes"`
			Segs    int      `json:"client_hello_segments"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, []string{strings.Join(r.Offered, ","), r.Group, fmt.Sprint(r.CH), fmt.Sprint(r.SH), fmt.Sprint(r.Segs)})
	}
	rows := tableRows(section(t, readRepo(t, studyDoc), "ClientHello and ServerHello bytes against Caddy"))
	if len(rows) != len(got) {
		t.Fatalf("the doc's byte table has %d rows, the capture %d handshakes: %q", len(rows), len(got), got)
	}
	for i, row := range rows {
		want := got[i]
		// The doc names the s_client argument (X25519), pqwatch the group (x25519).
		if !strings.EqualFold(row[0], want[0]) || !slices.Equal(row[1:], want[1:]) {
			t.Errorf("the doc's row %q, the capture's %q", row, want)
		}
	}
}

// studyTrial is one trial of the CPU table, as testdata/study/cpu-trials.json
// keeps it (migration-study.sh cpu's results.json files, trimmed).
type studyTrial struct {
	N      int            `json:"n"` // position in the shuffled order
	Config string         `json:"config"`
	Trial  int            `json:"trial"`
	Valid  bool           `json:"valid"`
	CPU    *float64       `json:"server_cpu_us_per_handshake"`
	Groups map[string]int `json:"groups"`
}

func meanSD(v []float64) (m, sd float64) {
	for _, x := range v {
		m += x
	}
	m /= float64(len(v))
	if len(v) > 1 {
		for _, x := range v {
			sd += (x - m) * (x - m)
		}
		sd = math.Sqrt(sd / float64(len(v)-1))
	}
	return m, sd
}

// TestMigrationStudyCPU: the doc's CPU table is the trials' mean and sd,
// and the trials ran in one shuffled order.
func TestMigrationStudyCPU(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "testdata/study/cpu-trials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var trials []studyTrial
	if err := json.Unmarshal(b, &trials); err != nil {
		t.Fatal(err)
	}
	rows := tableRows(section(t, readRepo(t, studyDoc), "Server CPU per full handshake"))
	if len(rows) != 3 {
		t.Fatalf("the doc's CPU table has %d rows, want 3", len(rows))
	}
	fmtMS := func(v []float64) string {
		if len(v) == 0 {
			return "no valid trial"
		}
		m, sd := meanSD(v)
		return fmt.Sprintf("%.1f ± %.1f", m, sd)
	}
	var baseValid, baseAll float64
	for i, row := range rows {
		var valid, all []float64
		groups := map[string]int{}
		n := 0
		for _, tr := range trials {
			if tr.Config != row[0] {
				continue
			}
			n++
			for g, c := range tr.Groups {
				groups[g] += c
			}
			if tr.CPU == nil {
				continue
			}
			all = append(all, *tr.CPU)
			if tr.Valid {
				valid = append(valid, *tr.CPU)
			}
		}
		if n == 0 {
			t.Errorf("the doc's row %q: no such configuration in the trials", row[0])
			continue
		}
		var gs []string
		for g, c := range groups {
			gs = append(gs, fmt.Sprintf("%s %d", g, c))
		}
		slices.Sort(gs)
		want := []string{strings.Join(gs, ", "), fmt.Sprintf("%d/%d", len(valid), n), fmtMS(valid), fmtMS(all)}
		if got := []string{row[4], row[5], row[6], row[8]}; !slices.Equal(got, want) {
			t.Errorf("the doc's row %q: the trials give %q", row, want)
		}
		vs := func(v []float64, base float64) string {
			if len(v) == 0 {
				return ""
			}
			m, _ := meanSD(v)
			p := math.Round((m/base-1)*1000) / 10
			if p >= 0 {
				return fmt.Sprintf("+%.1f%%", p)
			}
			return fmt.Sprintf("%.1f%%", p)
		}
		if i == 0 {
			if len(valid) > 0 {
				baseValid, _ = meanSD(valid)
			}
			baseAll, _ = meanSD(all)
			continue
		}
		if baseValid > 0 && row[7] != vs(valid, baseValid) {
			t.Errorf("the doc's row %q: vs OpenSSL 3.0 (valid) %s, the trials give %s", row[0], row[7], vs(valid, baseValid))
		}
		if row[9] != vs(all, baseAll) {
			t.Errorf("the doc's row %q: vs OpenSSL 3.0 (every trial) %s, the trials give %s", row[0], row[9], vs(all, baseAll))
		}
	}
	// Shuffled: the configurations interleave.
	slices.SortFunc(trials, func(a, b studyTrial) int { return a.N - b.N })
	runs := 1
	for i := 1; i < len(trials); i++ {
		if trials[i].Config != trials[i-1].Config {
			runs++
		}
	}
	if runs < len(trials)/3 {
		t.Errorf("the trials ran in %d blocks of one configuration: not shuffled", runs)
	}
}
