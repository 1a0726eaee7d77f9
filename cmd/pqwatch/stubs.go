package main

import (
	"context"
	"fmt"
	"io"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

type logJoin struct{}

func newLogJoin(cf *commonFlags) (*logJoin, error) {
	if len(cf.nginxLogs)+len(cf.caddyLogs) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("log joins are not wired yet")
}

func (j *logJoin) run(recs []*record.Handshake, sum *report.Summary) {}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "pqwatch run: not built yet")
	return exitFailure
}

func cmdLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "pqwatch loadgen: not built yet")
	return exitFailure
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "pqwatch demo: not built yet")
	return exitFailure
}
