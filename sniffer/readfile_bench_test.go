package sniffer_test

import (
	"os"
	"testing"

	"github.com/pqwatch/pqwatch/sniffer"
)

// BenchmarkReadFile measures the offline path end to end (pcap reading,
// decoding, flow table, TLS parsing) on PQWATCH_BENCH_CAPTURE.
func BenchmarkReadFile(b *testing.B) {
	path := os.Getenv("PQWATCH_BENCH_CAPTURE")
	if path == "" {
		b.Skip("set PQWATCH_BENCH_CAPTURE to a capture file")
	}
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		s := sniffer.New(sniffer.Config{})
		if _, err := sniffer.ReadFile(path, s, nil); err != nil {
			b.Fatal(err)
		}
		s.Flush()
	}
}
