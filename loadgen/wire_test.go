package loadgen

import (
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// The test's own reading of every request's latency: the packets on the
// loopback interface, captured by dumpcap (the kernel's timestamps, a BPF
// filter on the target's port) and read here, not by loadgen.

const dumpcapBin = "/usr/bin/dumpcap"

// wireConn is one TCP connection to the target as the capture saw it.
type wireConn struct {
	port uint16    // the client's port
	syn  time.Time // the client's SYN
	// last is the client's close: its first FIN, or without one (a
	// server's RST came first) its last packet with a payload (the TLS
	// close_notify). Not the connection's last packet: a server that
	// lingers on its side of the close sends its last ones when it gets
	// round to it, after the client is done.
	last     time.Time
	fin      bool
	lastData time.Time
}

// wireCapture is a running dumpcap.
type wireCapture struct {
	cmd    *exec.Cmd
	file   string
	stderr *testenv.Buffer
	port   int
}

// startWireCapture captures the TCP packets to and from port on lo until
// stop. It skips the test without root or dumpcap.
func startWireCapture(t testing.TB, port int) *wireCapture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("capturing on lo needs root")
	}
	if _, err := os.Stat(dumpcapBin); err != nil {
		t.Skipf("dumpcap not installed (apt-get install tshark): %v", err)
	}
	w := &wireCapture{file: filepath.Join(t.TempDir(), "wire.pcap"), stderr: new(testenv.Buffer), port: port}
	// 128 bytes a packet hold every header; 32 MiB of kernel buffer.
	w.cmd = exec.Command(dumpcapBin, "-i", "lo", "-f", fmt.Sprintf("tcp port %d", port), "-s", "128", "-B", "32",
		"-P", "-w", w.file)
	w.cmd.Stderr = w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	// dumpcap says "Capturing on" once its socket and filter are set.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.stderr.String(), "Capturing on") {
		if time.Now().After(deadline) {
			t.Fatalf("dumpcap did not start: %s", w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w
}

var (
	dumpcapDropped  = regexp.MustCompile(`received/dropped on interface '[^']*': (\d+)/(\d+)`)
	dumpcapCaptured = regexp.MustCompile(`Packets captured: (\d+)`)
	dumpcapCount    = regexp.MustCompile(`Packets: (\d+)`)
)

// stop ends the capture and returns the connections it saw, in the order
// of their SYNs. A packet dropped by the capture fails the test: the
// reading would be incomplete.
func (w *wireCapture) stop(t testing.TB) []wireConn {
	t.Helper()
	// dumpcap reads the kernel's buffer behind the traffic, more so on a
	// busy host, and stops reading at SIGINT: wait until the count it
	// reports (every 100 ms) has stood still for half a second.
	last, since := -1, time.Now()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n := -1
		if m := dumpcapCount.FindAllStringSubmatch(w.stderr.String(), -1); len(m) > 0 {
			n, _ = strconv.Atoi(m[len(m)-1][1])
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 500*time.Millisecond {
			break
		}
	}
	_ = w.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
		t.Fatalf("dumpcap did not stop: %s", w.stderr.String())
	}
	m, c := dumpcapDropped.FindStringSubmatch(w.stderr.String()), dumpcapCaptured.FindStringSubmatch(w.stderr.String())
	if m == nil || c == nil {
		t.Fatalf("dumpcap did not report its counts: %s", w.stderr.String())
	}
	if m[2] != "0" || m[1] != c[1] {
		t.Fatalf("the capture dropped packets, or stopped before it read them all: %s", w.stderr.String())
	}
	conns, err := readWire(w.file, uint16(w.port))
	if err != nil {
		t.Fatal(err)
	}
	return conns
}

// readWire reads the connections to port in a pcap file of Ethernet
// frames (Linux's lo): a client's SYN opens one, until the next SYN from
// its port.
func readWire(file string, port uint16) ([]wireConn, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, err
	}
	if lt := r.LinkType(); lt != 1 {
		return nil, fmt.Errorf("link type %v, want Ethernet", lt)
	}
	var conns []wireConn
	open := map[uint16]int{} // client port -> index in conns
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		// Ethernet, IPv4 (or IPv6), TCP.
		if len(data) < 14 {
			continue
		}
		var tcp []byte
		var tcpLen int // the TCP segment's length from the IP header (the capture keeps 128 bytes)
		switch binary.BigEndian.Uint16(data[12:14]) {
		case 0x0800:
			ip := data[14:]
			if len(ip) < 20 || ip[9] != 6 {
				continue
			}
			hl := int(ip[0]&0xf) * 4
			tcp, tcpLen = ip[hl:], int(binary.BigEndian.Uint16(ip[2:4]))-hl
		case 0x86dd:
			ip := data[14:]
			if len(ip) < 40 || ip[6] != 6 {
				continue
			}
			tcp, tcpLen = ip[40:], int(binary.BigEndian.Uint16(ip[4:6]))
		default:
			continue
		}
		if len(tcp) < 14 {
			continue
		}
		src, dst, flags := binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4]), tcp[13]
		payload := tcpLen - int(tcp[12]>>4)*4
		const fFIN, fSYN, fACK = 0x01, 0x02, 0x10
		client := src
		if src == port {
			client = dst
		}
		if dst == port && flags&fSYN != 0 && flags&fACK == 0 {
			if i, ok := open[client]; ok && conns[i].syn.Equal(ci.Timestamp) {
				continue // a retransmitted SYN
			}
			open[client] = len(conns)
			conns = append(conns, wireConn{port: client, syn: ci.Timestamp})
			continue
		}
		if i, ok := open[client]; ok && dst == port {
			c := &conns[i]
			if flags&fFIN != 0 && !c.fin {
				c.fin, c.last = true, ci.Timestamp
			}
			if payload > 0 {
				c.lastData = ci.Timestamp
			}
		}
	}
	for i := range conns {
		if !conns[i].fin {
			conns[i].last = conns[i].lastData
		}
	}
	slices.SortStableFunc(conns, func(a, b wireConn) int { return a.syn.Compare(b.syn) })
	return conns, nil
}

// nearestRank is the ceil(q*n)-th smallest of xs (sorted), or the one
// up ranks above it.
func nearestRank(xs []float64, q float64, up int) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1 + up
	return xs[min(max(i, 0), len(xs)-1)]
}

// Latency from the wire agrees with loadgen's within wireTolMS plus
// wireTolShare of the figure, beyond the rank band of checkWire: loadgen's
// clock reads before its dial and after its close, a few tens of µs from
// the SYN and the FIN; the histogram's percentiles are up to 0.78% high;
// the schedule's origin is estimated from the SYNs (below).
const (
	wireTolMS    = 0.5
	wireTolShare = 0.05
)

// wireReq is what the join of a connection to loadgen's request takes
// from loadgen: which request it was (trial, seq) and when its dial began.
type wireReq struct {
	trial, seq int
	start      time.Time
}

// wireReqs lists the requests of res (KeepRequests).
func wireReqs(res *Results) []wireReq {
	var out []wireReq
	for _, r := range res.Requests {
		out = append(out, wireReq{trial: r.TrialID, seq: r.Seq, start: r.Start})
	}
	return out
}

// wireReqsCSV lists the requests of a run's requests.csv.
func wireReqsCSV(t testing.TB, dir string, res *Results) []wireReq {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, FileRequests))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("requests.csv: %v", err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	var out []wireReq
	for _, r := range rows[1:] {
		id, _ := strconv.Atoi(r[col["trial_id"]])
		seq, _ := strconv.Atoi(r[col["seq"]])
		st, _ := strconv.ParseFloat(r[col["start_s"]], 64)
		out = append(out, wireReq{trial: id, seq: seq, start: res.Started.Add(time.Duration(st * 1e9))})
	}
	return out
}

// checkWire checks each valid trial's latency percentiles (latency_ms
// p50/p95/p99: from the intended send to the end; service_ms: from the
// send), its send lag p99 and its rate_achieved against the capture.
// Constant arrivals only: request seq k of a trial is due at T0 + k/rate,
// with T0 the trial's start.
//
// A trial's connections are those whose SYN falls between its start and
// the next trial's. They are joined to loadgen's requests in order: the
// i-th SYN is the request whose dial began i-th (loadgen's requests
// record when each dial began and its seq; a request's goroutine may be
// scheduled late, after the next one's, so the order of the SYNs is not
// the order of the seqs). The test does not take T0 from loadgen: no
// request is sent before it is due, so T0 is the earliest SYN - seq/rate
// (late by the shortest send lag, tens of µs). Each request's latency is
// then the client's close on the wire (its FIN) minus T0 + seq/rate, its
// service time that minus its SYN, its send lag its SYN minus T0 + seq/rate.
func checkWire(t *testing.T, res *Results, conns []wireConn, reqs []wireReq, warmup time.Duration) {
	t.Helper()
	trials := slices.Clone(res.Trials)
	slices.SortFunc(trials, func(a, b *TrialResult) int { return a.Start.Compare(b.Start) })
	byTrial := map[int][]wireReq{}
	for _, r := range reqs {
		byTrial[r.trial] = append(byTrial[r.trial], r)
	}
	checked := 0
	for i, tr := range trials {
		var mine []wireConn
		for _, c := range conns {
			if !c.syn.Before(tr.Start) && (i+1 == len(trials) || c.syn.Before(trials[i+1].Start)) {
				mine = append(mine, c)
			}
		}
		if !tr.Valid || tr.Errors != 0 {
			t.Logf("trial %d %s: not checked against the wire (valid %v, %d errors)", tr.ID, tr.Arm, tr.Valid, tr.Errors)
			continue
		}
		gap := float64(time.Second) / tr.Rate
		due := func(k int) time.Duration { return time.Duration(float64(k) * gap) }
		nWarm := 0
		for due(nWarm) < warmup {
			nWarm++
		}
		rs := byTrial[tr.ID]
		slices.SortStableFunc(rs, func(a, b wireReq) int { return a.start.Compare(b.start) })
		if len(mine) != nWarm+tr.Requests || len(rs) != len(mine) {
			t.Errorf("trial %d %s: the capture has %d connections, loadgen %d requests (%d in the warm-up; %d listed)", tr.ID, tr.Arm,
				len(mine), nWarm+tr.Requests, nWarm, len(rs))
			continue
		}
		t0 := mine[0].syn
		for k, c := range mine {
			if s := c.syn.Add(-due(rs[k].seq)); s.Before(t0) {
				t0 = s
			}
		}
		var lat, svc, lag []float64
		for k, c := range mine {
			if rs[k].seq < nWarm {
				continue
			}
			intended := t0.Add(due(rs[k].seq))
			lat = append(lat, float64(c.last.Sub(intended))/1e6)
			svc = append(svc, float64(c.last.Sub(c.syn))/1e6)
			lag = append(lag, float64(c.syn.Sub(intended))/1e6)
		}
		slices.Sort(lat)
		slices.Sort(svc)
		slices.Sort(lag)
		// Loadgen reads its clock before its dial and after its close: a
		// thread preempted in between (on this shared host, milliseconds)
		// makes that request's send late on the wire and its end early
		// there. So loadgen's latency and service percentiles lie at or
		// above the wire's at the same rank and at or below the wire's a
		// few ranks higher, its send lag's at or below the wire's and at
		// or above a few ranks lower: a preempted dial or close is allowed
		// for 2% of the requests (at least one).
		slack := max(1, int(math.Ceil(0.02*float64(len(lat)))))
		type fig struct {
			name string
			got  float64
			xs   []float64
			q    float64
			dir  int // the ranks the band extends: +1 up, -1 down
		}
		figs := []fig{
			{"latency p50", tr.LatencyMS.P50, lat, 0.50, 1},
			{"latency p95", tr.LatencyMS.P95, lat, 0.95, 1},
			{"latency p99", tr.LatencyMS.P99, lat, 0.99, 1},
			{"service p50", tr.ServiceMS.P50, svc, 0.50, 1},
			{"service p95", tr.ServiceMS.P95, svc, 0.95, 1},
			{"service p99", tr.ServiceMS.P99, svc, 0.99, 1},
			{"send lag p99", tr.SendLagMS.P99, lag, 0.99, -1},
		}
		// rate_achieved: the requests sent in the window, by their SYNs
		// (one either way at the window's edges: loadgen's clock reads
		// before its dial).
		sent := 0
		for _, c := range mine {
			if !c.syn.Before(tr.WindowStart) && c.syn.Before(tr.WindowEnd) {
				sent++
			}
		}
		if d := float64(sent) - tr.RateAchieved*tr.WindowEnd.Sub(tr.WindowStart).Seconds(); math.Abs(d) > 2.5 {
			t.Errorf("trial %d %s: rate_achieved %.1f/s, the capture has %d SYNs in the window", tr.ID, tr.Arm, tr.RateAchieved, sent)
		}
		var b strings.Builder
		for _, f := range figs {
			lo, hi := nearestRank(f.xs, f.q, 0), nearestRank(f.xs, f.q, f.dir*slack)
			if lo > hi {
				lo, hi = hi, lo
			}
			fmt.Fprintf(&b, " %s %.3f (wire %.3f", f.name, f.got, lo)
			if hi != lo {
				fmt.Fprintf(&b, "..%.3f", hi)
			}
			b.WriteString(")")
			if f.got < lo-wireTolMS-wireTolShare*lo || f.got > hi+wireTolMS+wireTolShare*hi {
				t.Errorf("trial %d %s: %s %.3f ms, the capture's %.3f..%.3f ms (at its rank and %d rank(s) off; tolerance %.1f ms + %.0f%%)", tr.ID,
					tr.Arm, f.name, f.got, lo, hi, slack, wireTolMS, 100*wireTolShare)
			}
		}
		t.Logf("trial %d %s: %d connections on the wire, %d SYNs in the window (rate_achieved %.1f/s);%s ms; schedule origin from the SYNs %s after loadgen's",
			tr.ID, tr.Arm, len(mine), sent, tr.RateAchieved, b.String(), t0.Sub(tr.Start))
		checked++
	}
	if checked == 0 {
		t.Errorf("no trial was checked against the wire")
	}
}

// portOf is the port of a host:port address.
func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
