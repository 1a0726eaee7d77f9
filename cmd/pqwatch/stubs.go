package main

import (
	"context"
	"fmt"
	"io"

)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "pqwatch run: not built yet")
	return exitFailure
}


func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "pqwatch demo: not built yet")
	return exitFailure
}
