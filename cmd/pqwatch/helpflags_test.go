package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFlagsDoc: docs/flags.md is what `pqwatch help flags` writes from the
// flag definitions, so the flags, defaults and meanings the docs state
// cannot drift from the binary's (go test -run TestFlagsDoc -update
// rewrites it).
func TestFlagsDoc(t *testing.T) {
	code, out, errs := run(t, "help", "flags")
	if code != exitOK {
		t.Fatalf("pqwatch help flags: exit %d\n%s", code, errs)
	}
	path := filepath.Join(repoRoot, "docs", "flags.md")
	if *update {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: write it with: %s", err, flagsDocRegenerate)
	}
	if out != string(want) {
		got, have := strings.Split(out, "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(got) && i < len(have) && got[i] == have[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Errorf("docs/flags.md differs from the flag definitions at line %d:\n  docs:  %s\n  flags: %s\nregenerate it with: %s",
			i+1, line(have), line(got), flagsDocRegenerate)
	}
}

// TestFlagsDocCommands: every command with flags has its section, with
// every flag `-h` prints.
func TestFlagsDocCommands(t *testing.T) {
	for _, c := range commands {
		if !slices.Contains(flagDocCommands, c) {
			t.Errorf("pqwatch %s has flags but no section in docs/flags.md (flagDocCommands)", c)
		}
	}
	var b bytes.Buffer
	if err := writeFlagsDoc(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for c, flags := range commandFlags(t) {
		_, sec, ok := strings.Cut(doc, "## `pqwatch "+c+"`\n")
		if !ok {
			t.Errorf("no section for pqwatch %s", c)
			continue
		}
		sec, _, _ = strings.Cut(sec, "\n## ")
		for f := range flags {
			if f != "h" && !strings.Contains(sec, "| `-"+f+"`") && !strings.Contains(sec, "| `-"+f+" ") {
				t.Errorf("pqwatch %s -h lists -%s; its section does not", c, f)
			}
		}
	}
}
