package main

import (
	"context"
	"io"

	"github.com/pqwatch/pqwatch/loadgen"
)

func cmdLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return loadgen.Main(ctx, args, stdout, stderr)
}
