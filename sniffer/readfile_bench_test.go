package sniffer_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/sniffer"
)

// benchCapture is PQWATCH_BENCH_CAPTURE, else a capture written in dir:
// 200 real handshakes with 128 KiB of bulk data each (23 MB, 18,000
// packets), the mix of make bench's capture, smaller.
func benchCapture(dir string) (string, error) {
	if p := os.Getenv("PQWATCH_BENCH_CAPTURE"); p != "" {
		return p, nil
	}
	path := filepath.Join(dir, "bench.pcap")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	clients := pcapgen.DefaultClients(200)
	for i := range clients {
		clients[i].BulkBytes = 128 << 10
	}
	if _, err := pcapgen.Generate(context.Background(), w, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients}); err != nil {
		return "", err
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// BenchmarkReadFile measures the offline path end to end (pcap reading,
// decoding, flow table, TLS parsing) on PQWATCH_BENCH_CAPTURE, else on a
// generated capture, in each way a classic pcap file can be read
// (PQWATCH_PCAP_READER): read(2) on the sniffer's goroutine (inline, the
// default) and read ahead on a goroutine of its own (ahead), a memory
// mapping (mmap) and gopacket's pcapgo; and from a pipe.
func BenchmarkReadFile(b *testing.B) {
	path, err := benchCapture(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"inline", "ahead", "mmap", "pcapgo"} {
		b.Run(mode, func(b *testing.B) {
			b.Setenv("PQWATCH_PCAP_READER", mode)
			b.SetBytes(st.Size())
			b.ReportAllocs()
			var pkts uint64
			cpu := cpuTime(b)
			for b.Loop() {
				s := sniffer.New(sniffer.Config{})
				fs, err := sniffer.ReadFile(path, s, nil)
				if err != nil || fs.Err != nil {
					b.Fatal(err, fs.Err)
				}
				s.Flush()
				pkts = fs.Packets
			}
			b.ReportMetric(float64(pkts)*float64(b.N)/b.Elapsed().Seconds(), "packets/s")
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	for _, mode := range []string{"inline", "ahead"} {
		b.Run("pipe-"+mode, func(b *testing.B) {
			b.Setenv("PQWATCH_PCAP_READER", mode)
			b.SetBytes(st.Size())
			cpu := cpuTime(b)
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				r, w, err := os.Pipe()
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					_, _ = w.ReadFrom(f)
					w.Close()
				}()
				s := sniffer.New(sniffer.Config{})
				fs, err := sniffer.ReadFrom("pipe", r, s, nil)
				if err != nil || fs.Err != nil {
					b.Fatal(err, fs.Err)
				}
				s.Flush()
				r.Close()
				f.Close()
			}
			// The writer's CPU time is counted too, as a pipe's
			// writer (tcpdump -w -, cat) would spend it.
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
