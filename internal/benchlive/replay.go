// Part 2 (see the package comment): the replay packet-rate ladder.

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/pcapgen"
)

type replayStep struct {
	pps        int // target; 0 = topspeed
	sent       uint64
	secs       float64
	achieved   float64 // packets/s tcpreplay reports
	captured   uint64  // ring packets (pqwatch_capture_packets_total, drops included)
	drops      uint64  // ring drops (pqwatch_capture_drops_total)
	rxDropped  uint64  // veth-s rx_dropped: lost before any packet tap
	handshakes float64
	ok         float64
	cpuMs      float64
}

func (s replayStep) lost() uint64 {
	l := s.drops
	if s.sent > s.captured {
		l += s.sent - s.captured
	}
	return l
}

// rxDropped reads the rx_dropped counter of dev in ns.
func rxDropped(ns, dev string) uint64 {
	out, err := testenv.Cmd(context.Background(), ns, "cat", "/sys/class/net/"+dev+"/statistics/rx_dropped").Output()
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	return v
}

func genCapture(ctx context.Context, file string, conns, bulk int) (int, error) {
	f, err := os.Create(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	clients := pcapgen.DefaultClients(conns)
	for i := range clients {
		clients[i].BulkBytes = bulk
	}
	res, err := pcapgen.Generate(ctx, w, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients})
	if err != nil {
		return 0, err
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return len(res), f.Close()
}

var (
	reActual = regexp.MustCompile(`Actual: (\d+) packets \((\d+) bytes\) sent in ([0-9.]+) seconds`)
	reRated  = regexp.MustCompile(`Rated: [0-9.]+ Bps, [0-9.]+ Mbps, ([0-9.]+) pps`)
)

func replayFigure(ctx context.Context, o options, dir string) ([]replayStep, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	file := filepath.Join(dir, "replay.pcap")
	gstart := time.Now()
	conns, err := genCapture(ctx, file, o.conns, o.bulk)
	if err != nil {
		return nil, 0, fmt.Errorf("generating the capture: %w", err)
	}
	st, _ := os.Stat(file)
	fmt.Printf("\nreplay: %d connections, %d B bulk each, %.1f MB capture (generated in %.1fs)\n",
		conns, o.bulk, float64(st.Size())/1e6, time.Since(gstart).Seconds())

	pr, err := testenv.NewPairE(1500)
	if err != nil {
		return nil, conns, err
	}
	atExit(func() { pr.Close() })
	const maddr = "127.0.0.1:9810" // inside the server namespace
	var steps []replayStep
	for _, pps := range o.ladder {
		if ctx.Err() != nil {
			return steps, conns, ctx.Err()
		}
		// A fresh agent per step: clean counters and an empty flow table.
		// -capture-all: every frame reaches the ring, so "captured" can be
		// compared with what tcpreplay sent.
		pq, sc, err := startPqwatch(ctx, o, pr.S, pr.SIf, maddr, "-capture-all")
		if err != nil {
			return steps, conns, err
		}
		step, err := replayOnce(ctx, pr, pq, sc, file, pps, o.loop)
		pq.stop()
		if err != nil {
			return steps, conns, err
		}
		steps = append(steps, step)
		if step.lost() > 0 {
			break
		}
	}
	return steps, conns, nil
}

func replayOnce(ctx context.Context, pr *testenv.Pair, pq *proc, sc *scraper, file string, pps, loop int) (replayStep, error) {
	s := replayStep{pps: pps}
	before, err := sc.scrape(ctx)
	if err != nil {
		return s, err
	}
	rx0 := rxDropped(pr.S, pr.SIf)
	c0, err := cpuTicks(pq.pid())
	if err != nil {
		return s, err
	}
	rate := "--topspeed"
	if pps > 0 {
		rate = fmt.Sprintf("--pps=%d", pps)
	}
	rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	cmd := testenv.Cmd(rctx, pr.C, "tcpreplay", "-q", "-i", pr.CIf, rate, fmt.Sprintf("--loop=%d", max(loop, 1)), file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 3 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err = spawn(cmd); err == nil {
		err = cmd.Wait()
	}
	out := buf.Bytes()
	if err != nil {
		return s, fmt.Errorf("tcpreplay %s: %v: %s", rate, err, out)
	}
	m := reActual.FindSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("tcpreplay: no summary in %q", out)
	}
	s.sent, _ = strconv.ParseUint(string(m[1]), 10, 64)
	s.secs, _ = strconv.ParseFloat(string(m[3]), 64)
	if m := reRated.FindSubmatch(out); m != nil {
		s.achieved, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	// Let the rings drain and the last handshakes be counted: the ring's
	// packet counter moves at once, the last partly filled block reaches
	// pqwatch only when its timeout expires.
	time.Sleep(capture.DefaultBlockTimeout + 250*time.Millisecond)
	var after sample
	for i := 0; i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		a, err := sc.scrape(ctx)
		if err != nil {
			return s, err
		}
		done := after != nil && a.sum("pqwatch_handshakes_total") == after.sum("pqwatch_handshakes_total") &&
			a.sum("pqwatch_capture_packets_total") == after.sum("pqwatch_capture_packets_total")
		after = a
		if done {
			break
		}
	}
	c1, err := cpuTicks(pq.pid())
	if err != nil {
		return s, err
	}
	s.cpuMs = float64((c1-c0)*tickUs) / 1000
	d := func(name string) float64 { return after.sum(name) - before.sum(name) }
	s.captured = uint64(d("pqwatch_capture_packets_total"))
	s.drops = uint64(d("pqwatch_capture_drops_total"))
	s.handshakes = d("pqwatch_handshakes_total")
	s.ok = after.sumWhere("pqwatch_handshakes_total", `outcome="ok"`) - before.sumWhere("pqwatch_handshakes_total", `outcome="ok"`)
	s.rxDropped = rxDropped(pr.S, pr.SIf) - rx0
	return s, nil
}

func printReplay(steps []replayStep, conns int) {
	fmt.Printf("  %-10s %9s %7s %10s %9s %9s %7s %7s %10s %8s\n",
		"target", "sent", "s", "pps", "captured", "ringdrop", "rxdrop", "lost", "handshakes", "cpu ms")
	best := -1
	for i, s := range steps {
		t := "top"
		if s.pps > 0 {
			t = strconv.Itoa(s.pps)
		}
		fmt.Printf("  %-10s %9d %7.2f %10.0f %9d %9d %7d %7d %10.0f %8.0f\n",
			t, s.sent, s.secs, s.achieved, s.captured, s.drops, s.rxDropped, s.lost(), s.handshakes, s.cpuMs)
		if s.lost() == 0 {
			best = i
		}
	}
	if best < 0 {
		fmt.Println("  no step without loss")
	} else {
		fmt.Printf("  highest rate with zero drops: %.0f packets/s\n", steps[best].achieved)
	}
	for _, s := range steps {
		if s.lost() == 0 && int(s.handshakes) != conns {
			fmt.Printf("  MISMATCH at %.0f pps: pqwatch counted %.0f handshakes (%.0f ok), the capture holds %d connections\n",
				s.achieved, s.handshakes, s.ok, conns)
		}
	}
	if best >= 0 && int(steps[best].handshakes) == conns {
		fmt.Printf("  handshakes counted = capture's connections (%d) at every lossless step\n", conns)
	}
	fmt.Println("  (captured: ring packets incl. ring drops; rxdrop: lost at veth-s before any tap; lost = ringdrop + sent-captured)")
}
