package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// planPeak runs the test binary as `pqwatch plan -format json -` over n
// generated records of nodes nodes on its stdin (a duplicate every 1000th
// line, 500 lines late) and returns the plan's records_read and
// duplicates_dropped, the process's peak RSS in MiB, its CPU time and
// the wall time.
func planPeak(tb testing.TB, n, nodes int) (read, dups int, peakMiB float64, cpu, wall time.Duration) {
	tb.Helper()
	g := newRecordGen(tb, n, nodes)
	g.dupEvery, g.dupLag = 1000, 500
	js, _ := json.Marshal([]string{"plan", "-format", "json", "-"})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PQWATCH_TEST_MAIN="+string(js))
	var out, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = g, &out, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		tb.Fatalf("plan: %v: %s", err, stderr.String())
	}
	wall = time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var pl struct {
		Read int `json:"records_read"`
		Dups int `json:"duplicates_dropped"`
	}
	if err := json.Unmarshal(out.Bytes(), &pl); err != nil {
		tb.Fatal(err)
	}
	if pl.Read != n+g.dups || pl.Dups != g.dups {
		tb.Fatalf("%d records read, %d duplicates dropped; generated %d and %d duplicates", pl.Read, pl.Dups, n, g.dups)
	}
	return pl.Read, pl.Dups, float64(ru.Maxrss) / 1024, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), wall
}

// The plan of 1,000,000 records (200 nodes) stays within 64 MiB of RSS
// and drops every generated duplicate. 10,000,000: BenchmarkPlanPeakMemory.
func TestPlanPeakMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("1,000,000 records: not with -short or -race (its memory is the race detector's)")
	}
	read, dups, peak, cpu, wall := planPeak(t, 1_000_000, 200)
	t.Logf("%d records (%d duplicates dropped): peak RSS %.1f MiB, %v CPU, %v wall, %.0f records/cpu-s", read, dups, peak, cpu, wall, float64(read)/cpu.Seconds())
	if peak > 64 {
		t.Errorf("peak RSS %.1f MiB, want at most 64", peak)
	}
}

// BenchmarkPlanPeakMemory: peak RSS of plan over 1 M and 10 M generated
// records (the 10 M soak only here, never in the test run).
func BenchmarkPlanPeakMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmtCount(n), func(b *testing.B) {
			for b.Loop() {
				read, _, peak, cpu, _ := planPeak(b, n, 200)
				b.ReportMetric(peak, "peak-RSS-MiB")
				b.ReportMetric(float64(read)/cpu.Seconds(), "records/cpu-s")
			}
		})
	}
}

func fmtCount(n int) string {
	if n%1_000_000 == 0 {
		return fmt.Sprintf("records=%dM", n/1_000_000)
	}
	return "records"
}
