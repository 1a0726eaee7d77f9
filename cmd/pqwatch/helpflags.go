package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagDocCommands are the commands `pqwatch help flags` lists, in its order.
var flagDocCommands = []string{"analyze", "run", "demo", "loadgen", "plan", "inventory"}

// flagsDocRegenerate is how docs/flags.md is written.
const flagsDocRegenerate = "go run ./cmd/pqwatch help flags > docs/flags.md"

// flagCatcher is the stderr of a command that writeFlagsDoc runs with -h:
// the command hands it its flag set as it makes it (newFlagSet,
// loadgen.Main), defines its flags, prints its usage (discarded) and
// returns without doing anything else.
type flagCatcher struct {
	fs       *flag.FlagSet
	synopsis string
}

func (c *flagCatcher) Write(p []byte) (int, error) { return len(p), nil }

// CatchFlagSet keeps a command's flag set and its usage synopsis.
func (c *flagCatcher) CatchFlagSet(fs *flag.FlagSet, synopsis string) {
	c.fs, c.synopsis = fs, synopsis
}

// commandFlagSet returns cmd's flag set as the command defines it, and its
// synopsis.
func commandFlagSet(cmd string) (*flag.FlagSet, string, error) {
	c := &flagCatcher{}
	runMain(context.Background(), []string{cmd, "-h"}, io.Discard, c)
	if c.fs == nil {
		return nil, "", fmt.Errorf("pqwatch %s -h made no flag set", cmd)
	}
	return c.fs, c.synopsis, nil
}

// writeFlagsDoc writes every command's flags as markdown (docs/flags.md):
// per command its synopsis and a table of its flags (name and argument,
// default, usage), read from the flag sets themselves.
func writeFlagsDoc(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Flags by command\n\n")
	b.WriteString("Every flag of every command, with its default and what it does, as `pqwatch COMMAND -h`\n")
	b.WriteString("prints them. This page is written from the flag definitions by `pqwatch help flags`; the\n")
	b.WriteString("command docs ([analyze.md](analyze.md), [agent.md](agent.md), [loadgen.md](loadgen.md),\n")
	b.WriteString("[plan.md](plan.md), [inventory.md](inventory.md)) say more about each.\n")
	for _, cmd := range flagDocCommands {
		fs, synopsis, err := commandFlagSet(cmd)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n## `pqwatch %s`\n\n", cmd)
		if synopsis != "" {
			use, about, _ := strings.Cut(synopsis, "\n\n")
			fmt.Fprintf(&b, "`%s`\n\n", strings.TrimPrefix(use, "usage: "))
			if about != "" {
				b.WriteString(about + "\n\n")
			}
		}
		b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			name := "-" + f.Name
			if arg != "" {
				name += " " + arg
			}
			def := ""
			if f.DefValue != "" {
				def = "`" + f.DefValue + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(name), cell(def), cell(usage))
		})
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell is s as one markdown table cell: pipes escaped, lines joined.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
