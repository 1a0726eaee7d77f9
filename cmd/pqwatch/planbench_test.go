package main

import (
	"testing"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/report"
)

const benchRecords = 100_000

func BenchmarkPlanRecords(b *testing.B) {
	p, err := forecast.ParsePolicy("X25519MLKEM768,x25519,secp256r1")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		pl := report.NewPlan(p, nil)
		var kinds planKinds
		if err := readPlanRecords("-", newRecordGen(b, benchRecords, 200), pl, &kinds); err != nil {
			b.Fatal(err)
		}
		if pl.Handshakes != benchRecords {
			b.Fatalf("%d handshakes", pl.Handshakes)
		}
	}
	b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(benchRecords)/float64(b.N), "ns/record")
}
