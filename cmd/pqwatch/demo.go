package main

import (
	"context"
	"fmt"
	"io"

	"github.com/pqwatch/pqwatch/demo"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "usage: pqwatch demo [flags]\n\nThe whole pipeline on this machine, no setup.", stderr)
	var o demo.Options
	fs.DurationVar(&o.Duration, "duration", 15e9, "how long the clients run")
	fs.IntVar(&o.Rate, "rate", 20, "client connections per second")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "127.0.0.1:9810", "`address` for /metrics while the demo runs (a busy port falls back to a free one)")
	fs.BoolVar(&o.ForceOffline, "offline", false, "skip live capture: generate a capture and analyse it")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if o.Rate <= 0 || o.Rate > 1000 || o.Duration <= 0 || o.Duration > 3600e9 {
		fmt.Fprintln(stderr, "pqwatch demo: -rate must be 1..1000 and -duration up to 1h")
		return exitUsage
	}
	if err := demo.Run(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pqwatch demo:", err)
		return exitFailure
	}
	return exitOK
}
