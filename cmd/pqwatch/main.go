// Command pqwatch watches TLS and QUIC handshakes and tracks post-quantum key
// exchange: see `pqwatch help` and SPEC.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `pqwatch: passive post-quantum TLS handshake tracker

usage:
  pqwatch analyze [flags] FILE...   read pcap/pcapng captures (plain or gzip), print a report
  pqwatch run [flags]               live agent: AF_PACKET capture, /metrics, logs, Kafka
  pqwatch loadgen [flags]           A/B handshake load generator
  pqwatch demo                      the whole pipeline on this machine, no setup
  pqwatch version

Run 'pqwatch COMMAND -h' for a command's flags.
`

// Exit codes of SPEC.md.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "analyze":
		return cmdAnalyze(ctx, args[1:], stdout, stderr)
	case "run":
		return cmdRun(ctx, args[1:], stdout, stderr)
	case "loadgen":
		return cmdLoadgen(ctx, args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "pqwatch", version())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "pqwatch: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
