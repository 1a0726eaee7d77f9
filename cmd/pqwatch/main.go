// Command pqwatch watches TLS and QUIC handshakes and tracks post-quantum key
// exchange: see `pqwatch help` and SPEC.md.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
  pqwatch plan [flags] FILE...      fleet capacity plan from handshake records (JSONL) and loadgen costs
  pqwatch inventory [flags] FILE... TLS endpoint inventory (text, or CycloneDX 1.7) from records or captures
  pqwatch version

Run 'pqwatch COMMAND -h' for a command's flags, 'pqwatch help flags' for every
command's flags as markdown (docs/flags.md).
`

// Exit codes of SPEC.md.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signalContext()
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext returns a context that the first SIGINT or SIGTERM ends: a
// clean stop, which drains within deadlines. It carries a second context
// (hardStop) that the next signal ends: stop at once.
func signalContext() (context.Context, func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	hard, cancelHard := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		for _, end := range []context.CancelCauseFunc{cancel, cancelHard} {
			select {
			case s := <-sigs:
				end(fmt.Errorf("%v", s))
			case <-done:
				return
			}
		}
	}()
	return context.WithValue(ctx, hardStopKey{}, hard), func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
		cancelHard(nil)
	}
}

type hardStopKey struct{}

// hardStop is the context that a second signal ends, nil when ctx does not
// come from signalContext (tests).
func hardStop(ctx context.Context) context.Context {
	h, _ := ctx.Value(hardStopKey{}).(context.Context)
	return h
}

// sayStopping logs, when a signal ends ctx, that the agent is stopping and
// that a second signal stops it at once, and then that one came. The
// returned function ends the watch.
func sayStopping(ctx context.Context, logger *slog.Logger) func() {
	hard := hardStop(ctx)
	if hard == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			logger.Info("stopping: flushing records (a second SIGINT or SIGTERM stops at once)", "signal", context.Cause(ctx).Error())
		case <-done:
			return
		}
		select {
		case <-hard.Done():
			logger.Warn("stopping at once: records not delivered yet go to the Kafka spool if there is one, else they are dropped and counted", "signal", context.Cause(hard).Error())
		case <-done:
		}
	}()
	return func() { close(done) }
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
	case "plan":
		return cmdPlan(ctx, args[1:], stdout, stderr)
	case "inventory":
		return cmdInventory(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "pqwatch", version())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "flags" {
			if err := writeFlagsDoc(stdout); err != nil {
				fmt.Fprintln(stderr, "pqwatch help flags:", err)
				return exitFailure
			}
			return exitOK
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "pqwatch: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
