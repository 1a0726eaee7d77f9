package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// planRun is one `pqwatch plan` over generated records: what it read and
// dropped, the input's size, its peak RSS, CPU and wall time.
type planRun struct {
	read, dups int
	bytes      int64
	peakMiB    float64
	cpu, wall  time.Duration
}

func (r planRun) recordsPerCPU() float64 { return float64(r.read) / r.cpu.Seconds() }
func (r planRun) gibPerCPU() float64     { return float64(r.bytes) / (1 << 30) / r.cpu.Seconds() }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// planPeak runs the test binary as `pqwatch plan -format json -` over n
// generated records of nodes nodes on its stdin (a duplicate every 1000th
// line, 500 lines late), with the reference decoder when reference is set.
func planPeak(tb testing.TB, n, nodes int, reference bool) planRun {
	tb.Helper()
	g := newRecordGen(tb, n, nodes)
	g.dupEvery, g.dupLag = 1000, 500
	js, _ := json.Marshal([]string{"plan", "-format", "json", "-"})
	cmd := exec.Command(os.Args[0])
	peakFile := filepath.Join(tb.TempDir(), "peak-rss")
	cmd.Env = append(os.Environ(), "PQWATCH_TEST_MAIN="+string(js), "PQWATCH_TEST_PEAK_RSS="+peakFile)
	if reference {
		cmd.Env = append(cmd.Env, "PQWATCH_TEST_PLAN_REFERENCE=1")
	}
	var out, stderr bytes.Buffer
	in := &countingReader{r: g}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		tb.Fatalf("plan: %v: %s", err, stderr.String())
	}
	run := planRun{wall: time.Since(start), bytes: in.n}
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
	run.read, run.dups = pl.Read, pl.Dups
	// The child's own VmHWM (writePeakRSS): wait4's ru_maxrss would be
	// the test process's when that is larger.
	b, err := os.ReadFile(peakFile)
	if err != nil {
		tb.Fatal(err)
	}
	kib, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		tb.Fatalf("peak RSS %q: %v", b, err)
	}
	run.peakMiB = kib / 1024
	run.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return run
}

// BenchmarkPlanPeakMemory runs `pqwatch plan` as a process over 1 M
// generated records (200 nodes, a duplicate every 1000th line) with the
// reference decoder (encoding/json), then with the PlanDecoder over 1 M and
// 10 M, in the same run: peak RSS, records and GiB of input per CPU second
// (the process's user + system time), and each figure as a ratio to the
// reference's (x-ref-...); the 10 M run also as a ratio to the 1 M run's
// peak (x-1M-peak-RSS: about 1 when memory is bounded whatever the input's
// size). The input is generated as it is read, never stored.
func BenchmarkPlanPeakMemory(b *testing.B) {
	var ref, fast1M planRun
	report := func(b *testing.B, r planRun) {
		b.ReportMetric(r.peakMiB, "peak-RSS-MiB")
		b.ReportMetric(r.recordsPerCPU(), "records/cpu-s")
		b.ReportMetric(r.gibPerCPU(), "GiB/cpu-s")
		b.ReportMetric(float64(r.read)/r.wall.Seconds(), "records/s")
		if ref.read > 0 {
			b.ReportMetric(r.recordsPerCPU()/ref.recordsPerCPU(), "x-ref-records/cpu-s")
			b.ReportMetric(r.gibPerCPU()/ref.gibPerCPU(), "x-ref-GiB/cpu-s")
			b.ReportMetric(r.peakMiB/ref.peakMiB, "x-ref-peak-RSS")
		}
	}
	for _, c := range []struct {
		name      string
		n         int
		reference bool
	}{{"decoder=reference/records=1M", 1_000_000, true}, {"decoder=fast/records=1M", 1_000_000, false}, {"decoder=fast/records=10M", 10_000_000, false}} {
		b.Run(c.name, func(b *testing.B) {
			if raceEnabled {
				b.Skip("peak memory: not with -race (its memory is the race detector's)")
			}
			for b.Loop() {
				r := planPeak(b, c.n, 200, c.reference)
				switch {
				case c.reference:
					ref = r
					report(b, r)
					continue
				case c.n == 1_000_000:
					fast1M = r
				case fast1M.read > 0:
					b.ReportMetric(r.peakMiB/fast1M.peakMiB, "x-1M-peak-RSS")
				}
				report(b, r)
			}
		})
	}
}
