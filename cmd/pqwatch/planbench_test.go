package main

import (
	"bytes"
	"encoding/json"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/report"
)

const benchRecords = 100_000

// cpuTime is the process's user + system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPlanRecords plans 100,000 generated records of 200 nodes (about
// 700 bytes a line, ids of the agent's form) read as plan reads a file:
// with encoding/json (reference, the decoder plan had before the
// PlanDecoder) and with the PlanDecoder (fast), in the same run. The input
// is generated before the clock starts: the figures are the plan's alone.
// records/cpu-s and GiB/cpu-s count the process's CPU time, GC included
// (on a shared machine wall time says little); fast also reports them as
// ratios to the reference's (x-ref-...).
func BenchmarkPlanRecords(b *testing.B) {
	p, err := forecast.ParsePolicy("X25519MLKEM768,x25519,secp256r1")
	if err != nil {
		b.Fatal(err)
	}
	input, err := io.ReadAll(newRecordGen(b, benchRecords, 200))
	if err != nil {
		b.Fatal(err)
	}
	var refRate float64
	for _, dec := range []string{"reference", "fast"} {
		b.Run("decoder="+dec, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(input)))
			cpu0 := cpuTime(b)
			for b.Loop() {
				pl := report.NewPlan(p, nil)
				kinds := planKinds{reference: dec == "reference"}
				if err := readPlanInput(bytes.NewReader(input), pl, &kinds); err != nil {
					b.Fatal(err)
				}
				pl.Finish()
				if pl.Handshakes != benchRecords {
					b.Fatalf("%d handshakes", pl.Handshakes)
				}
			}
			cpu := (cpuTime(b) - cpu0).Seconds()
			n := float64(benchRecords) * float64(b.N)
			rate := n / cpu
			b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(rate, "records/cpu-s")
			b.ReportMetric(float64(len(input))*float64(b.N)/(1<<30)/cpu, "GiB/cpu-s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
			if dec == "reference" {
				refRate = rate
			} else if refRate > 0 {
				b.ReportMetric(rate/refRate, "x-ref-records/cpu-s")
			}
		})
	}
}

// The plan of generated records (duplicates among them) is the same JSON
// read by the PlanDecoder as by encoding/json, with a policy check too
// (its listed violations name the client).
func TestPlanFastEqualsReference(t *testing.T) {
	p, err := forecast.ParsePolicy("X25519MLKEM768,x25519,secp256r1")
	if err != nil {
		t.Fatal(err)
	}
	es, err := expectations([]string{"openssl3.5=X25519MLKEM768,x25519"})
	if err != nil {
		t.Fatal(err)
	}
	var out [2][]byte
	for i, ref := range []bool{true, false} {
		pl := report.NewPlan(p, nil)
		pl.PolicyCheck = policyCheck(es)
		g := newRecordGen(t, 20_000, 13)
		g.dupEvery, g.dupLag = 97, 40
		kinds := planKinds{reference: ref}
		if err := readPlanInput(g, pl, &kinds); err != nil {
			t.Fatal(err)
		}
		pl.Finish()
		if pl.Duplicates != g.dups || pl.Handshakes != 20_000 {
			t.Fatalf("%d duplicates of %d, %d handshakes", pl.Duplicates, g.dups, pl.Handshakes)
		}
		if pl.PolicyCheck.Checked == 0 || len(pl.PolicyCheck.First) == 0 {
			t.Fatalf("policy check: %d checked, %d listed", pl.PolicyCheck.Checked, len(pl.PolicyCheck.First))
		}
		if out[i], err = json.Marshal(pl); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Errorf("plans differ:\nreference %s\nfast      %s", out[0], out[1])
	}
}
