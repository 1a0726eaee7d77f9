// Command benchcmp is `make bench`'s offline comparison: pqwatch analyze,
// tcpdump's read (`tcpdump -r FILE -w /dev/null`: every packet read and
// written nowhere) and tshark on the same multi-megabyte capture of real
// handshakes with bulk traffic between them, warm page cache, the tools'
// runs alternating (the machine may be shared: a burst of load hits every
// tool alike). It prints each tool's median wall and CPU time and pqwatch's
// speed as a ratio to tcpdump's read and to tshark, measured in the same
// run, and checks that pqwatch and tshark found the same number of
// ClientHellos and that pqwatch's records are the same from the file and
// from a pipe.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/pcapgen"
)

func main() {
	bin := flag.String("pqwatch", "bin/pqwatch", "pqwatch binary")
	conns := flag.Int("conns", 1000, "connections in the generated capture")
	bulk := flag.Int("bulk", 128<<10, "bytes of application data per connection")
	runs := flag.Int("runs", 5, "runs of each tool, alternating (the median counts)")
	tsharkRuns := flag.Int("tshark-runs", 3, "runs of tshark (seconds each), alternating with the others")
	file := flag.String("capture", "", "use this capture instead of generating one")
	flag.Parse()
	if err := run(*bin, *file, *conns, *bulk, *runs, *tsharkRuns); err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

// tool is one command measured.
type tool struct {
	name string
	runs int    // how many times it runs
	pipe bool   // the capture comes through a pipe (from cat) on stdin
	env  string // added to the environment
	args []string
	wall []time.Duration
	cpu  []time.Duration // user + system, the tool's own
	out  []byte          // the last run's stdout
	skip string          // why it was not run
}

func run(bin, file string, conns, bulk, runs, tsharkRuns int) error {
	if file == "" {
		dir, err := os.MkdirTemp("", "pqwatch-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		file = filepath.Join(dir, "bench.pcap")
		if err := generate(file, conns, bulk); err != nil {
			return err
		}
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	// Warm the page cache: every tool reads the capture from memory.
	if f, err := os.Open(file); err == nil {
		_, _ = io.Copy(io.Discard, f)
		f.Close()
	}
	analyze := []string{bin, "analyze", "-format", "json", file}
	tools := []*tool{
		{name: "tcpdump -r FILE -w /dev/null", args: []string{"tcpdump", "-r", file, "-w", "/dev/null"}},
		{name: "pqwatch analyze, GOMAXPROCS=1", env: "GOMAXPROCS=1", args: analyze},
		{name: "pqwatch analyze", args: analyze},
		{name: "cat FILE | tcpdump -r - -w /dev/null", pipe: true, args: []string{"tcpdump", "-r", "-", "-w", "/dev/null"}},
		{name: "cat FILE | pqwatch analyze -, GOMAXPROCS=1", pipe: true, env: "GOMAXPROCS=1", args: []string{bin, "analyze", "-format", "json", "-"}},
		{name: "tshark (TLS dissection)", args: []string{"tshark", "-r", file, "-n", "-Y", "tls.handshake.type==1", "-T", "fields", "-e", "tcp.stream"}},
	}
	tcpdump, pq1, pq, tcpdumpPipe, pqPipe, tshark := tools[0], tools[1], tools[2], tools[3], tools[4], tools[5]
	for _, t := range tools {
		t.runs = runs
	}
	tshark.runs = tsharkRuns
	for _, t := range []*tool{tcpdump, tcpdumpPipe, tshark} {
		if _, err := exec.LookPath(t.args[0]); err != nil {
			t.skip = t.args[0] + " not installed"
		}
	}
	for i := range max(runs, tsharkRuns) {
		for _, t := range tools {
			if t.skip != "" || i >= t.runs {
				continue
			}
			if err := t.measure(file); err != nil {
				return err
			}
		}
	}
	var sum struct {
		Handshakes int    `json:"handshakes"`
		Packets    uint64 `json:"packets"`
	}
	if err := json.Unmarshal(pq.out, &sum); err != nil {
		return fmt.Errorf("pqwatch output: %w", err)
	}
	fmt.Printf("capture: %s, %.1f MB, %d packets, %d TLS connections; median of %d alternating runs (tshark %d), warm page cache, %d CPUs\n\n",
		file, float64(st.Size())/1e6, sum.Packets, sum.Handshakes, runs, tsharkRuns, runtime.NumCPU())
	fmt.Printf("%-42s %9s %19s %9s %12s\n", "tool", "wall s", "(range)", "CPU s", "packets/s")
	for _, t := range tools {
		if t.skip != "" {
			fmt.Printf("%-42s skipped: %s\n", t.name, t.skip)
			continue
		}
		w := median(t.wall)
		fmt.Printf("%-42s %9.3f %19s %9.3f %12.0f\n", t.name, w.Seconds(),
			fmt.Sprintf("(%.3f-%.3f)", slices.Min(t.wall).Seconds(), slices.Max(t.wall).Seconds()),
			median(t.cpu).Seconds(), float64(sum.Packets)/w.Seconds())
	}
	fmt.Println()
	ratio := func(ref, t *tool, what, target string) {
		if ref.skip != "" || t.skip != "" {
			return
		}
		fmt.Printf("%-54s %6.2fx wall, %6.2fx CPU  %s\n", what, median(ref.wall).Seconds()/median(t.wall).Seconds(),
			median(ref.cpu).Seconds()/median(t.cpu).Seconds(), target)
	}
	ratio(tcpdump, pq1, "pqwatch (GOMAXPROCS=1) / tcpdump read speed:", "(target >= 1.5x)")
	ratio(tcpdump, pq, "pqwatch (all CPUs) / tcpdump read speed:", "")
	ratio(tcpdumpPipe, pqPipe, "from a pipe: pqwatch (GOMAXPROCS=1) / tcpdump read:", "(target >= 1x)")
	ratio(tshark, pq, "pqwatch / tshark speed:", "(target >= 50x)")
	if tshark.skip == "" {
		streams := map[string]bool{}
		for _, f := range strings.Fields(string(tshark.out)) {
			streams[f] = true
		}
		agree := "agree"
		if len(streams) != sum.Handshakes {
			agree = "DISAGREE"
		}
		fmt.Printf("connections with a ClientHello: tshark %d, pqwatch %d: %s\n", len(streams), sum.Handshakes, agree)
	}
	// The records, from the file and from a pipe.
	fromFile, err := exec.Command(bin, "analyze", "-format", "jsonl", file).Output()
	if err != nil {
		return fmt.Errorf("pqwatch analyze -format jsonl: %w", err)
	}
	c := exec.Command(bin, "analyze", "-format", "jsonl", "-")
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	c.Stdin = struct{ io.Reader }{f} // a pipe, not the file
	fromPipe, err := c.Output()
	if err != nil {
		return fmt.Errorf("pqwatch analyze -format jsonl -: %w", err)
	}
	same := "identical"
	if !bytes.Equal(fromFile, fromPipe) {
		same = "DIFFERENT"
	}
	fmt.Printf("records from the file and from a pipe: %d and %d lines, %s\n", bytes.Count(fromFile, []byte("\n")), bytes.Count(fromPipe, []byte("\n")), same)
	if same != "identical" {
		return fmt.Errorf("pqwatch's records differ between the file and a pipe")
	}
	return nil
}

func generate(file string, conns, bulk int) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
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
	return f.Close()
}

// measure runs t once: its wall time and its own CPU time.
func (t *tool) measure(file string) error {
	c := exec.Command(t.args[0], t.args[1:]...)
	if t.env != "" {
		c.Env = append(os.Environ(), t.env)
	}
	var stdout bytes.Buffer
	c.Stdout = &stdout
	var feed *exec.Cmd
	if t.pipe {
		feed = exec.Command("cat", file)
		p, err := feed.StdoutPipe()
		if err != nil {
			return err
		}
		c.Stdin = p
	}
	start := time.Now()
	if feed != nil {
		if err := feed.Start(); err != nil {
			return err
		}
	}
	err := c.Run()
	wall := time.Since(start)
	if feed != nil {
		_ = feed.Wait()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(t.args, " "), err)
	}
	t.wall = append(t.wall, wall)
	t.cpu = append(t.cpu, c.ProcessState.UserTime()+c.ProcessState.SystemTime())
	t.out = stdout.Bytes()
	return nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
