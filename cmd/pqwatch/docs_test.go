package main

// The user docs (README.md, docs/*.md) and deploy/'s dashboards and rules
// against the binary, where that is cheap: links stay inside the
// repository, every flag a doc names exists on its command (and every flag
// of a command is in its doc's flag table), the analyze examples that need
// no outside file run and the output the docs call real is real, the record
// fields, summary keys, groups and metrics of docs/contract.md are the ones
// the code has, and every pqwatch_* metric a doc or a dashboard names
// exists.
//
// The run, loadgen and demo examples run in TestDocExamplesLive
// (docs_examples_live_test.go: as root, on loopback, against servers the
// test starts, with their files and ports substituted and short durations).
//
// Not checked: analyze command lines that need files outside the
// repository (a capture of one's own, /etc/nginx), prose that is not a
// flag, field, key, group or metric name.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/proctrack"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/tlsparse"
)

const repoRoot = "../.."

// commands are the commands whose flags docs name.
var commands = []string{"analyze", "run", "loadgen", "demo", "plan", "inventory"}

// foreignFlags are flags in loose backticks that belong to another tool,
// not to pqwatch.
var foreignFlags = map[string]string{
	"tls1_2": "openssl s_client (README, Measured)",
}

// foreignTools start code that is not a pqwatch command line.
var foreignTools = map[string]bool{
	"tcpdump": true, "openssl": true, "go": true, "kubectl": true, "helm": true, "docker": true,
	"nginx": true, "curl": true, "tshark": true, "promtool": true, "make": true, "git": true,
}

// userDocs are README.md and docs/*.md, relative to the repository root.
func userDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(d, repoRoot+string(filepath.Separator))))
	}
	return out
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --- a little markdown

type fence struct {
	lang, body string
	line       int // of the opening fence, 0-based
}

// splitFences returns the fenced code blocks of text and text with their
// lines blanked (so line numbers stay).
func splitFences(text string) ([]fence, string) {
	lines := strings.Split(text, "\n")
	var out []fence
	var cur *fence
	var body []string
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		if strings.HasPrefix(trim, "```") {
			if cur == nil {
				cur = &fence{lang: strings.TrimSpace(strings.TrimPrefix(trim, "```")), line: i}
				body = body[:0]
			} else {
				cur.body = strings.Join(body, "\n")
				out = append(out, *cur)
				cur = nil
			}
			lines[i] = ""
			continue
		}
		if cur != nil {
			body = append(body, l)
			lines[i] = ""
		}
	}
	return out, strings.Join(lines, "\n")
}

var spanRe = regexp.MustCompile("`([^`]+)`")

type span struct {
	text string
	line int
}

// spans are the inline code spans of text (fences removed); a span may
// run over a line break.
func spans(rest string) []span {
	var out []span
	for _, m := range spanRe.FindAllStringSubmatchIndex(rest, -1) {
		out = append(out, span{text: strings.ReplaceAll(rest[m[2]:m[3]], "\n", " "), line: strings.Count(rest[:m[0]], "\n")})
	}
	return out
}

var headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)

// slug is GitHub's anchor of a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	_, rest := splitFences(text)
	out := map[string]bool{}
	for _, l := range strings.Split(rest, "\n") {
		if m := headingRe.FindStringSubmatch(l); m != nil {
			out[slug(m[2])] = true
		}
	}
	return out
}

// section is the text from the heading whose text is title (without the
// #s) to the next heading of the same or a higher level.
func section(t *testing.T, text, title string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start, level := -1, 0
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if start >= 0 && len(m[1]) <= level {
			return strings.Join(lines[start:i], "\n")
		}
		if start < 0 && m[2] == title {
			start, level = i, len(m[1])
		}
	}
	if start < 0 {
		t.Fatalf("no heading %q", title)
	}
	return strings.Join(lines[start:], "\n")
}

// tableRows are the rows of the first markdown table in text (header and
// separator left out), each a list of trimmed cells.
func tableRows(text string) [][]string {
	var rows [][]string
	seen := false
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			if seen && len(rows) > 0 {
				break
			}
			continue
		}
		if !seen {
			seen = true // the header
			continue
		}
		if strings.Trim(l, "|-: ") == "" {
			continue
		}
		l = strings.ReplaceAll(strings.Trim(l, "|"), `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(l, "|") {
			cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|"))
		}
		rows = append(rows, cells)
	}
	return rows
}

// ticked is the first backticked word of a cell.
func ticked(cell string) string {
	if m := spanRe.FindStringSubmatch(cell); m != nil {
		return strings.Fields(m[1] + " ")[0]
	}
	return ""
}

func allTicked(cell string) []string {
	var out []string
	for _, m := range spanRe.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// --- links

var (
	linkRe    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	refLinkRe = regexp.MustCompile(`(?m)^\[[^\]]+\]:\s*(\S+)`)
)

// TestDocsPointInside: README.md and docs/*.md link only to files of the
// repository (and their headings), and name no file outside it.
func TestDocsPointInside(t *testing.T) {
	root, _ := filepath.Abs(repoRoot)
	for _, doc := range userDocs(t) {
		text := readRepo(t, doc)
		for _, bad := range []string{"../shared", "SPEC.md"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s mentions %s, which users do not have: point at docs/contract.md", doc, bad)
			}
		}
		_, rest := splitFences(text)
		var targets []string
		for _, m := range linkRe.FindAllStringSubmatch(rest, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refLinkRe.FindAllStringSubmatch(rest, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join(repoRoot, filepath.Dir(doc), file)
			if file == "" {
				path = filepath.Join(repoRoot, doc)
			}
			abs, _ := filepath.Abs(path)
			if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links to %s, outside the repository", doc, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") {
				b, _ := os.ReadFile(path)
				if !anchors(string(b))[frag] {
					t.Errorf("%s links to %s: no heading with that anchor", doc, target)
				}
			}
		}
	}
}

// --- flags

var helpFlagRe = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)`)

// commandFlags are each command's flags, read from its -h output.
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, c := range commands {
		_, stdout, stderr := run(t, c, "-h")
		flags := map[string]bool{"h": true}
		for _, m := range helpFlagRe.FindAllStringSubmatch(stdout+stderr, -1) {
			flags[m[1]] = true
		}
		if len(flags) < 3 {
			t.Fatalf("pqwatch %s -h lists no flags:\n%s%s", c, stdout, stderr)
		}
		out[c] = flags
	}
	return out
}

var (
	flagRe    = regexp.MustCompile(`(?:^|[\s\[(|])--?([A-Za-z](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)`)
	cmdLineRe = regexp.MustCompile(`(?:^|[\s/])pqwatch (analyze|run|loadgen|demo|inventory)(\s|$)`)
	cmdHeadRe = regexp.MustCompile("`pqwatch (analyze|run|loadgen|demo|inventory)`")
)

func flagsIn(s string) []string {
	var out []string
	for _, m := range flagRe.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// commandLine splits code that runs a pqwatch command into the command and
// its arguments (up to a pipe, a redirection or a comment); ok is false
// when the code runs none. stdin says a pipe feeds it.
func commandLine(code string) (cmd string, args []string, stdin, ok bool) {
	m := cmdLineRe.FindStringSubmatchIndex(code)
	if m == nil {
		return "", nil, false, false
	}
	cmd = code[m[2]:m[3]]
	rest := code[m[3]:]
	for _, stop := range []string{" | ", " > ", " 2>", " # ", " && ", ";"} {
		if i := strings.Index(rest, stop); i >= 0 {
			rest = rest[:i]
		}
	}
	return cmd, strings.Fields(rest), strings.Contains(code[:m[0]], "|"), true
}

// codeLines are the logical lines of a shell fence (backslash
// continuations joined).
func codeLines(body string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(body, "\n") {
		if strings.HasSuffix(strings.TrimRight(l, " "), `\`) {
			cur += strings.TrimSuffix(strings.TrimRight(l, " "), `\`) + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

func isShell(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// sectionCommands says, per line of text, the command the innermost
// heading naming `pqwatch CMD` is about ("" outside such a section).
func sectionCommands(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	type head struct {
		level int
		cmd   string
	}
	var stack []head
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if m := headingRe.FindStringSubmatch(l); m != nil && !inFence {
			for len(stack) > 0 && stack[len(stack)-1].level >= len(m[1]) {
				stack = stack[:len(stack)-1]
			}
			cmd := ""
			if c := cmdHeadRe.FindStringSubmatch(m[2]); c != nil {
				cmd = c[1]
			}
			stack = append(stack, head{len(m[1]), cmd})
		}
		for j := len(stack) - 1; j >= 0; j-- {
			if stack[j].cmd != "" {
				out[i] = stack[j].cmd
				break
			}
		}
	}
	return out
}

// TestDocFlags: every flag the docs name exists on the command they name
// it for (a command line's own command, else the section's `pqwatch CMD`,
// else any command), and the flag tables of analyze.md, agent.md and
// loadgen.md (and agent.md's demo section) list every flag of theirs.
func TestDocFlags(t *testing.T) {
	flags := commandFlags(t)
	onAny := func(f string) bool {
		for _, c := range commands {
			if flags[c][f] {
				return true
			}
		}
		return false
	}
	for _, doc := range userDocs(t) {
		text := readRepo(t, doc)
		fences, rest := splitFences(text)
		cmds := sectionCommands(text)
		check := func(where string, line int, code string) {
			if cmd, args, _, ok := commandLine(code); ok {
				for _, f := range flagsIn(" " + strings.Join(args, " ")) {
					if !flags[cmd][f] {
						t.Errorf("%s:%d: `pqwatch %s` has no flag -%s (%s)", doc, line+1, cmd, f, where)
					}
				}
				return
			}
			if w := strings.Fields(code); len(w) > 0 && foreignTools[w[0]] {
				return
			}
			for _, f := range flagsIn(code) {
				if _, ok := foreignFlags[f]; ok {
					continue
				}
				if c := cmds[line]; c != "" && !flags[c][f] {
					t.Errorf("%s:%d: -%s is not a flag of pqwatch %s, which this section is about (%s)", doc, line+1, f, c, where)
				} else if !onAny(f) {
					t.Errorf("%s:%d: -%s is not a flag of any pqwatch command (%s)", doc, line+1, f, where)
				}
			}
		}
		for _, f := range fences {
			if !isShell(f.lang) {
				continue
			}
			for i, l := range codeLines(f.body) {
				check("code block", f.line+1+i, l)
			}
		}
		for _, s := range spans(rest) {
			check("`"+s.text+"`", s.line, s.text)
		}
	}

	// The flag tables list every flag of their command.
	for doc, cmd := range map[string]string{"docs/analyze.md": "analyze", "docs/agent.md": "run", "docs/loadgen.md": "loadgen", "docs/inventory.md": "inventory"} {
		listed := map[string]bool{"h": true}
		for _, row := range tableRows(section(t, readRepo(t, doc), "Flags")) {
			for _, f := range flagsIn(ticked(row[0])) {
				listed[f] = true
				if !flags[cmd][f] {
					t.Errorf("%s: the flag table lists -%s, which pqwatch %s does not have", doc, f, cmd)
				}
			}
		}
		for f := range flags[cmd] {
			if !listed[f] {
				t.Errorf("%s: the flag table lacks -%s of pqwatch %s", doc, f, cmd)
			}
		}
	}
	demo := map[string]bool{"h": true}
	for _, s := range spans(section(t, readRepo(t, "docs/agent.md"), "`pqwatch demo`")) {
		for _, f := range flagsIn(s.text) {
			demo[f] = true
		}
	}
	for f := range flags["demo"] {
		if !demo[f] {
			t.Errorf("docs/agent.md, `pqwatch demo`: -%s is not described", f)
		}
	}

	// README: "The flags most people need: ... for `run` ...": the README
	// names a few, each doc's table has them all.
	readme := readRepo(t, "README.md")
	i := strings.Index(readme, "The flags most people need:")
	if i < 0 {
		t.Fatal("README.md has no \"The flags most people need:\" paragraph")
	}
	para, _, _ := strings.Cut(readme[i:], "\n\n")
	common, forRun, ok := strings.Cut(para, "for `run`")
	if !ok {
		t.Fatal("README.md: no \"for `run`\" in the flags paragraph")
	}
	for _, s := range spans(common) {
		for _, f := range flagsIn(s.text) {
			if !flags["analyze"][f] || !flags["run"][f] {
				t.Errorf("README.md names -%s among the flags of analyze and run: analyze %v, run %v", f, flags["analyze"][f], flags["run"][f])
			}
		}
	}
	for _, s := range spans(forRun) {
		for _, f := range flagsIn(s.text) {
			if !flags["run"][f] {
				t.Errorf("README.md says run has -%s; it does not", f)
			}
		}
	}
}

// --- examples

var (
	pathLikeRe    = regexp.MustCompile(`/|\.(pcap|pcapng|gz|log|conf|json|jsonl|txt)$`)
	placeholderRe = regexp.MustCompile(`\.\.\.|^\[|<|^[A-Z][A-Z0-9_]+$`)
	realOutputRe  = regexp.MustCompile("(?i)real output of `([^`]+)`")
)

// runnable turns an analyze (or inventory) command line of a doc into
// arguments for runMain, run from the repository root; ok is false when it needs
// something outside the repository (or writes a file, or reads stdin, or
// names no capture).
func runnable(cmd string, args []string, stdin bool) ([]string, bool) {
	if stdin {
		return nil, false
	}
	out := []string{cmd}
	files := 0
	for i, a := range args {
		switch {
		case a == "-" || a == "-h" || a == "-o" && i+1 < len(args) && args[i+1] != "-":
			return nil, false
		case placeholderRe.MatchString(a):
			return nil, false
		case !strings.HasPrefix(a, "-") && pathLikeRe.MatchString(a):
			if _, err := os.Stat(a); err != nil {
				return nil, false
			}
			files++
		}
		out = append(out, a)
	}
	return out, files > 0
}

// TestDocExamples runs every `pqwatch analyze` command line of README.md
// and docs/*.md whose files are in the repository (testdata/...), checks
// that the output a doc calls real is the output, and that the record
// lines the docs show are lines of the capture's JSONL.
func TestDocExamples(t *testing.T) {
	texts := map[string]string{}
	docs := userDocs(t)
	for _, doc := range docs {
		texts[doc] = readRepo(t, doc)
	}
	t.Chdir(repoRoot) // the docs' paths are relative to the repository root
	ran := 0
	var skipped []string
	for _, doc := range docs {
		text := texts[doc]
		fences, rest := splitFences(text)
		var codes []string
		for _, f := range fences {
			if isShell(f.lang) {
				codes = append(codes, codeLines(f.body)...)
			}
		}
		for _, s := range spans(rest) {
			codes = append(codes, s.text)
		}
		for _, code := range codes {
			cmd, args, stdin, ok := commandLine(code)
			if !ok || cmd != "analyze" && cmd != "inventory" {
				continue
			}
			argv, ok := runnable(cmd, args, stdin)
			if !ok {
				skipped = append(skipped, doc+": "+strings.TrimSpace(code))
				continue
			}
			code, stdout, stderr := run(t, argv...)
			ran++
			if code != exitOK || stdout == "" {
				t.Errorf("%s: `pqwatch %s` exits %d:\n%s", doc, strings.Join(argv, " "), code, stderr)
			}
		}
		// "real output of `CMD`:" and the next fence.
		for _, m := range realOutputRe.FindAllStringSubmatchIndex(text, -1) {
			cmdText := text[m[2]:m[3]]
			line := strings.Count(text[:m[0]], "\n")
			cmd, args, stdin, ok := commandLine(cmdText)
			argv, ok2 := runnable(cmd, args, stdin)
			if !ok || !ok2 {
				t.Errorf("%s:%d: cannot run %q to check its output", doc, line+1, cmdText)
				continue
			}
			var next *fence
			for i := range fences {
				if fences[i].line > line {
					next = &fences[i]
					break
				}
			}
			if next == nil {
				t.Errorf("%s:%d: no code block after %q", doc, line+1, cmdText)
				continue
			}
			_, stdout, _ := run(t, argv...)
			if strings.TrimRight(stdout, "\n") != strings.TrimRight(next.body, "\n") {
				t.Errorf("%s:%d: the output shown for `%s` is not what it prints now:\n%s", doc, line+1, cmdText, stdout)
			}
		}
	}
	if ran < 3 {
		t.Errorf("only %d analyze examples ran: the test no longer finds them", ran)
	}
	t.Logf("ran %d analyze examples; not run (outside files, stdin, placeholders, output files): %d", ran, len(skipped))
	for _, s := range skipped {
		t.Logf("  not run: %s", s)
	}

	// Record lines shown in JSON blocks are lines of the shipped capture.
	_, jsonl, _ := run(t, "analyze", "-format", "jsonl", filepath.Join("testdata", "handshakes.pcap"))
	have := map[string]bool{}
	for _, l := range strings.Split(jsonl, "\n") {
		have[l] = true
	}
	for _, doc := range docs {
		fences, _ := splitFences(texts[doc])
		for _, f := range fences {
			if f.lang != "json" {
				continue
			}
			for _, l := range strings.Split(f.body, "\n") {
				if strings.HasPrefix(l, `{"ts":`) && !have[l] {
					t.Errorf("%s: this record is not a line of `pqwatch analyze -format jsonl testdata/handshakes.pcap`:\n%s", doc, l)
				}
			}
		}
	}
}

// --- the record, the summary, the groups

// setDiff is what only a has and what only b has, sorted.
func setDiff(a, b []string) (onlyA, onlyB []string) {
	for _, x := range a {
		if !slices.Contains(b, x) {
			onlyA = append(onlyA, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			onlyB = append(onlyB, x)
		}
	}
	sort.Strings(onlyA)
	sort.Strings(onlyB)
	return onlyA, onlyB
}

// jsonTags are the json names of t's exported fields, in order.
func jsonTags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// fill sets every settable field of v to a non-zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			return
		}
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				fill(v.Field(i))
			}
		}
	}
}

// objectKeys are the keys of a JSON object, in order.
func objectKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

type docRow struct{ name, written string }

func docRows(t *testing.T, text string) []docRow {
	t.Helper()
	var out []docRow
	for _, r := range tableRows(text) {
		if len(r) < 3 || ticked(r[0]) == "" {
			t.Fatalf("a row without a `name`: %q", r)
		}
		out = append(out, docRow{ticked(r[0]), r[2]})
	}
	return out
}

// TestContractRecord: the record tables of docs/contract.md are the json
// fields of record.Handshake (and of its key_shares, log and generation
// objects), in the order the JSONL/Kafka encoder writes them; a field the
// doc calls "not yet" is one the record does not have.
func TestContractRecord(t *testing.T) {
	contract := readRepo(t, "docs/contract.md")
	var h record.Handshake
	fill(reflect.ValueOf(&h).Elem())
	line := exporter.AppendJSON(nil, &h)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		t.Fatalf("AppendJSON wrote %s: %v", line, err)
	}
	for _, c := range []struct {
		heading string
		typ     reflect.Type
		encoded []byte
	}{
		{"The handshake record", reflect.TypeFor[record.Handshake](), line},
		{"`key_shares` entries", reflect.TypeFor[record.KeyShare](), bytes.Trim(obj["key_shares"], "[]")},
		{"`log`", reflect.TypeFor[record.Log](), obj["log"]},
		{"`generation`", reflect.TypeFor[record.Generation](), obj["generation"]},
	} {
		tags := jsonTags(c.typ)
		if got := objectKeys(t, c.encoded); !slices.Equal(got, tags) {
			t.Errorf("%s: the encoder writes %v for a full record, the json tags are %v", c.typ, got, tags)
		}
		var doc []string
		for _, r := range docRows(t, section(t, contract, c.heading)) {
			has := slices.Contains(tags, r.name)
			switch {
			case r.written == "not yet" && has:
				t.Errorf("docs/contract.md (%s): `%s` is \"not yet\", but %s has it: say when it is written", c.heading, r.name, c.typ)
			case r.written != "not yet" && !has:
				t.Errorf("docs/contract.md (%s): `%s` is not a field of %s (mark it \"not yet\" or drop it)", c.heading, r.name, c.typ)
			case has:
				doc = append(doc, r.name)
			}
		}
		if !slices.Equal(doc, tags) {
			t.Errorf("docs/contract.md (%s) lists %v; %s writes %v (same set, same order)", c.heading, doc, c.typ, tags)
		}
	}
	// docs/analyze.md's field table names only fields the record has.
	fields := jsonTags(reflect.TypeFor[record.Handshake]())
	for _, r := range tableRows(section(t, readRepo(t, "docs/analyze.md"), "Fields")) {
		for _, f := range allTicked(r[0]) {
			if !slices.Contains(fields, f) {
				t.Errorf("docs/analyze.md, Fields: `%s` is not a record field", f)
			}
		}
	}
}

// TestContractSummary: the summary and forecast tables of docs/contract.md
// are the json keys of report.Summary and report.Forecast; analyze.md's
// summary table names only keys that exist.
func TestContractSummary(t *testing.T) {
	contract := readRepo(t, "docs/contract.md")
	for heading, typ := range map[string]reflect.Type{
		"The summary (`-format json`)": reflect.TypeFor[report.Summary](),
		"`forecast`":                   reflect.TypeFor[report.Forecast](),
		"`policy`":                     reflect.TypeFor[report.PolicyCheck](),
	} {
		tags := jsonTags(typ)
		var doc []string
		for _, r := range tableRows(section(t, contract, heading)) {
			doc = append(doc, ticked(r[0]))
		}
		if extra, missing := setDiff(doc, tags); len(extra)+len(missing) > 0 {
			t.Errorf("docs/contract.md (%s) lists keys %s does not have: %v; and lacks its keys %v", heading, typ, extra, missing)
		}
	}
	tags := jsonTags(reflect.TypeFor[report.Summary]())
	for _, r := range tableRows(section(t, readRepo(t, "docs/analyze.md"), "JSON summary (`-format json`)")) {
		for _, k := range allTicked(r[0]) {
			if !slices.Contains(tags, k) {
				t.Errorf("docs/analyze.md, JSON summary: `%s` is not a summary key", k)
			}
		}
	}
}

// TestContractGroups: the group table of docs/contract.md is the metrics'
// own label set (tlsparse.CommonGroups) with the registry's codepoints and
// PQ flags, the table and the list after it are every registered name, and
// the aliases it names parse.
func TestContractGroups(t *testing.T) {
	text := section(t, readRepo(t, "docs/contract.md"), "Group names")
	var names []string
	for _, r := range tableRows(text) {
		name, cp, pq := ticked(r[0]), ticked(r[1]), r[2]
		g, ok := tlsparse.ParseGroup(name)
		if !ok || g.String() != name {
			t.Errorf("group %s: ParseGroup gives %v (%v)", name, g, ok)
		}
		if want, _ := tlsparse.ParseGroup(cp); want != g {
			t.Errorf("group %s: the doc says %s, the registry %#04x", name, cp, uint16(g))
		}
		if g.IsPQ() != (pq == "yes") {
			t.Errorf("group %s: the doc says PQ %s, IsPQ %v", name, pq, g.IsPQ())
		}
		names = append(names, name)
	}
	var common []string
	for _, g := range tlsparse.CommonGroups {
		common = append(common, g.String())
	}
	if !slices.Equal(names, common) {
		t.Errorf("docs/contract.md's group table is %v; the metrics' groups (tlsparse.CommonGroups) are %v", names, common)
	}
	_, after, ok := strings.Cut(text, "The other registered names")
	if !ok {
		t.Fatal("docs/contract.md: no \"The other registered names\" paragraph")
	}
	para, rest, _ := strings.Cut(after, "\n\n")
	for _, s := range spans(para) {
		names = append(names, s.text)
	}
	var registered []string
	for v := range 1 << 16 {
		if s := tlsparse.Group(v).String(); !strings.HasPrefix(s, "0x") {
			registered = append(registered, s)
		}
	}
	if extra, missing := setDiff(names, registered); len(extra)+len(missing) > 0 {
		t.Errorf("docs/contract.md names groups the registry does not have: %v; and lacks registered ones: %v", extra, missing)
	}
	aliases, _, _ := strings.Cut(rest, "\n\n")
	word := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*$`)
	n := 0
	for _, s := range spans(aliases) {
		if word.MatchString(s.text) {
			n++
			if _, ok := tlsparse.ParseGroup(s.text); !ok {
				t.Errorf("docs/contract.md: alias %q does not parse", s.text)
			}
		}
	}
	if n < 5 {
		t.Errorf("docs/contract.md: found %d aliases; the paragraph moved?", n)
	}
}

// --- metrics

// describing registers collectors with reg and keeps each metric's label
// names from its descriptors (which exist even while a collector has no
// series, as the per-generation ones before a generation is seen).
type describing struct {
	reg    *prometheus.Registry
	labels map[string][]string
}

var descRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := descRe.FindStringSubmatch(desc.String())
		if m == nil {
			panic("cannot read " + desc.String())
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		d.labels[m[1]] = labels
	}
	return d.reg.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func (d *describing) Unregister(c prometheus.Collector) bool { return d.reg.Unregister(c) }

// agentMetrics builds the pqwatch_* metrics the way agent.New does, without
// the capture (which needs CAP_NET_RAW): exporter.NewMetrics, the capture
// collector, the process tracker's collector and a Kafka sink's. It
// returns label names by metric and the type of each metric that has
// series (the per-generation ones have none without a server process).
func agentMetrics(t *testing.T) (map[string][]string, map[string]string) {
	t.Helper()
	d := &describing{reg: prometheus.NewRegistry(), labels: map[string][]string{}}
	exporter.NewMetrics(d, exporter.WithBuildInfo("test", ""))
	d.MustRegister(exporter.NewCaptureCollector(func() exporter.CaptureStats {
		return exporter.CaptureStats{Interfaces: map[string]exporter.IfaceStats{"lo": {}}}
	}))
	procRoot := t.TempDir()
	if err := os.WriteFile(filepath.Join(procRoot, "stat"), []byte("btime 1764480000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pt, err := proctrack.New(proctrack.Config{ProcRoot: procRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pt.Close() })
	d.MustRegister(pt.Collector(), proctrack.NewLogPID(pt), logjoin.New(logjoin.Options{}).Collector())
	// With -kafka-brokers, the Kafka sink's health (nothing listens at
	// port 1: the sink only fails to deliver, which is all this needs).
	k, err := exporter.NewKafka(exporter.KafkaConfig{Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = k.Close(ctx)
	})
	d.MustRegister(k.Collector())
	// The writers' health (with -o and -state-dir).
	h := &exporter.Health{}
	h.Sink("jsonl")
	d.MustRegister(h)
	// With -expect-policy (cmd/pqwatch/policy.go).
	exporter.NewPolicyMetrics(d, []uint16{443})
	return d.labels, gatheredTypes(t, d.reg)
}

func gatheredTypes(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		out[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return out
}

var metricRe = regexp.MustCompile(`(?:^|[^:A-Za-z0-9_])(pqwatch_[a-z0-9_]*[a-z0-9])`)

// TestDocMetrics: docs/contract.md's metric table is every pqwatch_*
// metric the agent builds, with its type and labels; every pqwatch_* name
// in README.md, docs/*.md and deploy/ (dashboards, rules, manifests,
// runbook) is one of them. As root it also builds a real agent (capture on
// lo, not run) and checks that its registry has nothing else.
func TestDocMetrics(t *testing.T) {
	labels, types := agentMetrics(t)
	rows := tableRows(section(t, readRepo(t, "docs/contract.md"), "Metrics"))
	docType := map[string]string{}
	present := map[string]string{}
	for _, r := range rows {
		name, typ := ticked(r[0]), r[1]
		docType[name], present[name] = typ, r[3]
		want, ok := labels[name]
		if !ok {
			t.Errorf("docs/contract.md: %s is not a metric of the agent", name)
			continue
		}
		doc := allTicked(r[2])
		if !slices.Equal(doc, want) {
			t.Errorf("docs/contract.md: %s has labels %v, the code %v", name, doc, want)
		}
		if got, ok := types[name]; ok && got != typ {
			t.Errorf("docs/contract.md: %s is a %s, the code says %s", name, typ, got)
		}
	}
	for name := range labels {
		if _, ok := docType[name]; !ok {
			t.Errorf("docs/contract.md: the agent has %s, the metric table does not", name)
		}
	}

	known := func(name string) bool {
		if _, ok := labels[name]; ok {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok && docType[base] == "histogram" {
				return true
			}
		}
		return false
	}
	files := userDocs(t)
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		for _, m := range metricRe.FindAllStringSubmatch(readRepo(t, f), -1) {
			seen++
			if !known(m[1]) {
				t.Errorf("%s names %s, which the agent does not export", f, m[1])
			}
		}
	}
	if seen < 50 {
		t.Errorf("found only %d metric names in the docs and deploy/: the scan is broken", seen)
	}

	// As root: the agent's own registry.
	reg := prometheus.NewRegistry()
	a, err := agent.New(agent.Config{Ifaces: []string{"lo"}, Workers: 1, TrackProcesses: true, ProcRoot: "/proc",
		Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Skipf("the agent's own registry not checked: %v (needs CAP_NET_RAW)", err)
	}
	defer a.Close()
	got := gatheredTypes(t, reg)
	for name, typ := range got {
		if !strings.HasPrefix(name, "pqwatch_") {
			continue
		}
		if _, ok := labels[name]; !ok {
			t.Errorf("the agent exports %s, which this test's registry (and maybe the docs) lack", name)
		} else if docType[name] != typ {
			t.Errorf("the agent exports %s as a %s, docs/contract.md says %s", name, typ, docType[name])
		}
	}
	for name := range labels {
		if _, ok := got[name]; !ok && present[name] != "per generation" && present[name] != "with Kafka" && present[name] != "with an access log" && present[name] != "with a file writer" && present[name] != "with `-expect-policy`" && (a.Processes() != nil || present[name] != "tracking") {
			t.Errorf("docs/contract.md says %s is there %s; the agent's registry has no %s", name, present[name], name)
		}
	}
}
