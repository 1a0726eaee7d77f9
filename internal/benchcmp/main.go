// Command benchcmp is `make bench`'s comparison: pqwatch, tshark and
// tcpdump on the same multi-megabyte capture of real handshakes with bulk
// traffic between them. It prints packets per second of each and the ratios,
// and checks that pqwatch and tshark found the same number of ClientHellos.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/pcapgen"
)

func main() {
	bin := flag.String("pqwatch", "bin/pqwatch", "pqwatch binary")
	conns := flag.Int("conns", 1000, "connections in the generated capture")
	bulk := flag.Int("bulk", 128<<10, "bytes of application data per connection")
	runs := flag.Int("runs", 3, "runs of each tool (the fastest counts)")
	file := flag.String("capture", "", "use this capture instead of generating one")
	flag.Parse()
	if err := run(*bin, *file, *conns, *bulk, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

func run(bin, file string, conns, bulk, runs int) error {
	if file == "" {
		dir, err := os.MkdirTemp("", "pqwatch-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		file = filepath.Join(dir, "bench.pcap")
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(f, 1<<20)
		clients := pcapgen.DefaultClients(conns)
		for i := range clients {
			clients[i].BulkBytes = bulk
		}
		if _, err := pcapgen.Generate(context.Background(), w, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients}); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		f.Close()
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	// pqwatch
	var sum struct {
		Handshakes int    `json:"handshakes"`
		Packets    uint64 `json:"packets"`
	}
	pq, out, err := best(runs, bin, "analyze", "-format", "json", file)
	if err != nil {
		return fmt.Errorf("pqwatch: %w", err)
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		return fmt.Errorf("pqwatch output: %w", err)
	}
	fmt.Printf("capture: %s, %.1f MB, %d packets, %d TLS connections\n\n", file, float64(st.Size())/1e6, sum.Packets, sum.Handshakes)
	pps := func(d time.Duration) float64 { return float64(sum.Packets) / d.Seconds() }
	fmt.Printf("%-28s %10s %14s\n", "tool", "seconds", "packets/s")
	fmt.Printf("%-28s %10.3f %14.0f\n", "pqwatch analyze", pq.Seconds(), pps(pq))
	if _, err := exec.LookPath("tcpdump"); err == nil {
		td, _, err := best(runs, "tcpdump", "-r", file, "-w", "/dev/null")
		if err == nil {
			fmt.Printf("%-28s %10.3f %14.0f\n", "tcpdump -r -w /dev/null", td.Seconds(), pps(td))
			defer fmt.Printf("pqwatch / tcpdump speed: %.2fx (target >= 0.5x)\n", td.Seconds()/pq.Seconds())
		}
	} else {
		fmt.Println("tcpdump: not installed, skipped")
	}
	if _, err := exec.LookPath("tshark"); err == nil {
		ts, out, err := best(1, "tshark", "-r", file, "-n", "-Y", "tls.handshake.type==1", "-T", "fields", "-e", "tcp.stream")
		if err == nil {
			streams := map[string]bool{}
			for _, f := range strings.Fields(string(out)) {
				streams[f] = true
			}
			chs := len(streams)
			fmt.Printf("%-28s %10.3f %14.0f\n", "tshark (TLS dissection)", ts.Seconds(), pps(ts))
			fmt.Printf("\npqwatch / tshark speed: %.1fx (target >= 50x)\n", ts.Seconds()/pq.Seconds())
			agree := "agree"
			if chs != sum.Handshakes {
				agree = "DISAGREE"
			}
			fmt.Printf("connections with a ClientHello: tshark %d, pqwatch %d: %s\n", chs, sum.Handshakes, agree)
		}
	} else {
		fmt.Println("tshark: not installed, skipped")
	}
	return nil
}

// best runs a command n times and returns the fastest wall time and the
// output of the last run.
func best(n int, name string, args ...string) (time.Duration, []byte, error) {
	var min time.Duration
	var out []byte
	for range n {
		start := time.Now()
		o, err := exec.Command(name, args...).Output()
		d := time.Since(start)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", name, err)
		}
		if min == 0 || d < min {
			min = d
		}
		out = o
	}
	return min, out, nil
}
