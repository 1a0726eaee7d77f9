// Command benchlive is `make bench`'s live figures (issues 4 and 20):
//
//  1. pqwatch's CPU per handshake while real handshakes run against nginx
//     from Debian on a loopback port, next to nginx's (schedstat run time of
//     every thread of both, over the same window), at 600/s and at the
//     highest rate nginx completes on this machine (loadgen asking for far
//     more, no agent running). pqwatch's cost counts its threads and the run time of
//     its BPF programs (the capture's socket filter and the accept
//     tracepoints run in other processes' contexts), from
//     kernel.bpf_stats_enabled, which benchlive turns on for the run. Arms
//     (-arms): the defaults (classic capture filter, process tracking with
//     the eBPF accept attribution), -no-accept-events, no process tracking
//     (so no accept program), the same with the eBPF capture filter, and
//     no agent at all: the whole host's busy CPU
//     per request (/proc/stat) beside each arm's is the cross-check. Each
//     arm runs three times, interleaved; the median is shown with the range,
//     then what remains per handshake: packets read, wakeups, the rest.
//     The aim is pqwatch at most 1.5% of nginx (1% the goal).
//
//  2. A replay of a large capture of real handshakes with bulk traffic
//     (package pcapgen) with tcpreplay onto a veth whose peer, in another
//     network namespace, pqwatch captures: a packet-rate ladder, stopping at
//     the first step that loses packets; the highest rate with zero drops,
//     and whether every connection of the capture was counted.
//
//     go run ./internal/benchlive -pqwatch bin/pqwatch
//
// It needs root (AF_PACKET, namespaces), nginx, ip and tcpreplay; without
// them it says what is missing and exits 0. Everything it starts (nginx,
// pqwatch, namespaces, temp files) is stopped and removed when it ends, on
// SIGINT/SIGTERM too, and the whole run is bounded (-timeout).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

type options struct {
	bin      string
	rate     float64
	rates    []string // "max": the highest rate nginx sustains here (a loadgen search)
	duration time.Duration
	warmup   time.Duration
	conns    int
	bulk     int
	ladder   []int // packets per second; 0 = --topspeed
	timeout  time.Duration
	only     string
	loop     int
	verbose  bool
	arms     string
	trials   int
}

func main() {
	// -ticker: the reference process of the idle figure (see cpuFigure).
	if len(os.Args) == 2 && os.Args[1] == "-ticker" {
		for range time.Tick(time.Second) {
		}
	}
	var o options
	var ladder string
	flag.StringVar(&o.bin, "pqwatch", "bin/pqwatch", "pqwatch `binary`")
	var rates string
	flag.StringVar(&rates, "rate", "600,max", "handshakes per second of the live load, a comma-separated list; max: the highest rate this machine sustains without pqwatch (from 90% of what nginx completes when asked for 4000/s, down by tenths until loadgen keeps its schedule)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured window of the live load")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "loadgen warm-up before the window (pqwatch's CPU counts it too)")
	flag.IntVar(&o.conns, "conns", 2000, "connections in the replayed capture")
	flag.IntVar(&o.bulk, "bulk", 32<<10, "bytes of application data per replayed connection")
	flag.StringVar(&ladder, "pps", "50000,100000,200000,400000,top", "replay packet-rate ladder (top = --topspeed); stops at the first step that loses packets")
	flag.DurationVar(&o.timeout, "timeout", 25*time.Minute, "bound on the whole run")
	flag.StringVar(&o.only, "only", "", "run only one part: cpu or replay")
	flag.IntVar(&o.loop, "loop", 1, "replay the capture this many times per step (the same connections again: pqwatch should count each time)")
	flag.BoolVar(&o.verbose, "v", false, "show the subprocesses' output")
	flag.IntVar(&o.trials, "trials", 3, "runs of each CPU arm, interleaved; the median is shown")
	flag.StringVar(&o.arms, "arms", "|-no-accept-events|-no-process-tracking|-no-process-tracking PQWATCH_CAPTURE_FILTER=ebpf|none", "pqwatch run variants for the CPU figure, separated by |: extra flags, NAME=value words set in its environment (GOMAXPROCS=1), and @PATH for another pqwatch binary (two builds compared in one run, their trials interleaved); none: no pqwatch (the whole-host reference)")
	flag.Parse()
	for _, r := range strings.Split(rates, ",") {
		if r = strings.TrimSpace(r); r == "max" {
			o.rates = append(o.rates, r)
		} else if x, err := strconv.ParseFloat(r, 64); err == nil && x > 0 {
			o.rates = append(o.rates, r)
		} else {
			fmt.Fprintf(os.Stderr, "benchlive: -rate: bad rate %q\n", r)
			os.Exit(2)
		}
	}
	for _, s := range strings.Split(ladder, ",") {
		s = strings.TrimSpace(s)
		if s == "top" || s == "topspeed" {
			o.ladder = append(o.ladder, 0)
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "benchlive: -pps: bad step %q\n", s)
			os.Exit(2)
		}
		o.ladder = append(o.ladder, n)
	}
	os.Exit(run(o))
}

// cleanups run in reverse order, once, at exit or on a signal.
var cleanups struct {
	sync.Mutex
	fns []func()
	ran bool
}

func atExit(fn func()) {
	cleanups.Lock()
	defer cleanups.Unlock()
	cleanups.fns = append(cleanups.fns, fn)
}

func runCleanups() {
	cleanups.Lock()
	defer cleanups.Unlock()
	for i := len(cleanups.fns) - 1; i >= 0; i-- {
		cleanups.fns[i]()
	}
	cleanups.fns = nil
}

func skip(format string, args ...any) int {
	fmt.Printf("benchlive: skipped: "+format+"\n", args...)
	return 0
}

func run(o options) int {
	if runtime.GOOS != "linux" {
		return skip("needs Linux (AF_PACKET, network namespaces)")
	}
	if os.Geteuid() != 0 {
		return skip("needs root (AF_PACKET capture, network namespaces); CI runs as root")
	}
	if _, err := os.Stat(o.bin); err != nil {
		fmt.Fprintf(os.Stderr, "benchlive: pqwatch binary: %v (make build)\n", err)
		return 1
	}
	if abs, err := filepath.Abs(o.bin); err == nil {
		o.bin = abs
	}
	needCPU := []string{"nginx"}
	needReplay := []string{"ip", "tcpreplay"}
	doCPU, doReplay := o.only != "replay", o.only != "cpu"
	if m := missing(needCPU); doCPU && m != "" {
		fmt.Printf("benchlive: CPU figure skipped: needs %s (installed by .ci/run)\n", m)
		doCPU = false
	}
	if m := missing(needReplay); doReplay && m != "" {
		fmt.Printf("benchlive: replay figure skipped: needs %s (installed by .ci/run)\n", m)
		doReplay = false
	}
	if !doCPU && !doReplay {
		return 0
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	defer runCleanups()
	// First signal: cancel, let the deferred cleanups run. Second signal, or
	// the cleanups hanging past the bound: clean up now and leave.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "benchlive: interrupted, cleaning up")
		cancel()
		select {
		case <-sigs:
		case <-time.After(15 * time.Second):
		}
		runCleanups()
		os.Exit(1)
	}()
	watchdog := time.AfterFunc(o.timeout+20*time.Second, func() {
		fmt.Fprintln(os.Stderr, "benchlive: watchdog: run exceeded its bound, cleaning up")
		runCleanups()
		os.Exit(1)
	})
	defer watchdog.Stop()

	tmp, err := os.MkdirTemp("", "pqwatch-benchlive-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchlive:", err)
		return 1
	}
	atExit(func() { os.RemoveAll(tmp) })

	status := 0
	if doCPU {
		if enableBPFStats() {
			fmt.Println("benchlive: BPF run-time statistics on for the run (BPF_ENABLE_STATS): BPF run time counted")
		} else {
			fmt.Println("benchlive: BPF run-time statistics could not be turned on: BPF run time not counted")
		}
		fmt.Printf("benchlive: %d CPUs, load average %s at the start\n", runtime.NumCPU(), loadAvg())
		for ri, rate := range o.rates {
			if ctx.Err() != nil {
				break
			}
			ro := o
			if rate == "max" {
				mr, why, err := maxRate(ctx, o, filepath.Join(tmp, "maxrate"))
				if err != nil {
					fmt.Fprintln(os.Stderr, "benchlive: max-rate search:", err)
					status = 1
					continue
				}
				fmt.Printf("\nbenchlive: highest rate this machine sustains (no agent; nginx %s): %.0f/s\n", why, mr)
				ro.rate = mr
			} else {
				ro.rate, _ = strconv.ParseFloat(rate, 64)
			}
			if st := cpuRuns(ctx, ro, filepath.Join(tmp, fmt.Sprintf("rate%d", ri))); st != 0 {
				status = st
			}
		}
	}
	if doReplay && ctx.Err() == nil {
		steps, conns, err := replayFigure(ctx, o, filepath.Join(tmp, "replay"))
		if steps != nil {
			printReplay(steps, conns*max(o.loop, 1))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchlive: replay figure:", err)
			status = 1
		}
	}
	if ctx.Err() != nil && status == 0 {
		fmt.Fprintln(os.Stderr, "benchlive:", ctx.Err())
		status = 1
	}
	return status
}

func missing(bins []string) string {
	var m []string
	for _, b := range bins {
		if _, err := testenv.LookBin(b); err != nil {
			m = append(m, b)
		}
	}
	return strings.Join(m, ", ")
}

// cpuRuns runs every arm o.trials times at o.rate, interleaved (a machine
// that gets busier affects every arm alike), and prints the trial with the
// median ratio of each arm, with the range of all.
func cpuRuns(ctx context.Context, o options, dir string) int {
	arms := strings.Split(o.arms, "|")
	all := make([][]*cpuResult, len(arms))
	status := 0
trials:
	for t := range max(o.trials, 1) {
		for i, arm := range arms {
			if ctx.Err() != nil {
				break trials
			}
			r, err := cpuFigure(ctx, o, filepath.Join(dir, fmt.Sprintf("cpu%d-%d", i, t)), strings.Fields(arm)...)
			if err != nil {
				fmt.Fprintln(os.Stderr, "benchlive: CPU figure:", err)
				status = 1
				break trials
			}
			all[i] = append(all[i], r)
		}
	}
	var rs []*cpuResult
	var spread []string
	n := 0
	for _, runs := range all {
		if len(runs) == 0 {
			continue
		}
		n = max(n, len(runs))
		key := (*cpuResult).totalRatio
		if runs[0].noAgent {
			key = (*cpuResult).hostUs
		}
		slices.SortFunc(runs, func(a, b *cpuResult) int { return cmp.Compare(key(a), key(b)) })
		rs = append(rs, runs[len(runs)/2])
		if runs[0].noAgent {
			spread = append(spread, fmt.Sprintf("host %.0f–%.0f µs", runs[0].hostUs(), runs[len(runs)-1].hostUs()))
		} else {
			spread = append(spread, fmt.Sprintf("%.2f%%–%.2f%%", runs[0].totalRatio(), runs[len(runs)-1].totalRatio()))
		}
	}
	if len(rs) > 0 {
		printCPU(o, rs, spread, n)
	}
	return status
}
