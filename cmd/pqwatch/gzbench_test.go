package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// BenchmarkPlanGunzip decompresses 100,000 generated records (gzip -6)
// with compress/gzip and with klauspost/compress's gzip: MB/cpu-s counts
// the process's CPU time (the machine is shared).
func BenchmarkPlanGunzip(b *testing.B) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	io.Copy(zw, newRecordGen(b, 100_000, 200))
	zw.Close()
	for _, name := range []string{"std", "klauspost"} {
		b.Run(name, func(b *testing.B) {
			var total int64
			cpu0 := cpuTime(b)
			for b.Loop() {
				var r io.Reader
				var err error
				if name == "std" {
					r, err = gzip.NewReader(bytes.NewReader(z.Bytes()))
				} else {
					r, err = kgzip.NewReader(bytes.NewReader(z.Bytes()))
				}
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, r)
				if err != nil {
					b.Fatal(err)
				}
				total += n
				b.SetBytes(n)
			}
			b.ReportMetric(float64(total)/1e6/(cpuTime(b)-cpu0).Seconds(), "MB/cpu-s")
		})
	}
}
