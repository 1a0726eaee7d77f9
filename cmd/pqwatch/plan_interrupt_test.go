package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanInterrupted: a plan cut short by a signal (its context done)
// says what it covers and exits 1, not 0 with a partial plan.
func TestPlanInterrupted(t *testing.T) {
	code, jsonl, stderr := run(t, "analyze", "-format", "jsonl", filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if code != 0 {
		t.Fatalf("analyze: %d %s", code, stderr)
	}
	f := filepath.Join(t.TempDir(), "node.jsonl")
	if err := os.WriteFile(f, []byte(jsonl), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	if code := runMain(ctx, []string{"plan", f, f}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("interrupted plan: exit %d, stderr %q", code, errb.String())
	}
	if code, _, stderr := run(t, "plan", f); code != 0 {
		t.Errorf("the same plan, not interrupted: exit %d %s", code, stderr)
	}
}
