package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestForgedFloodAgentProcess is the flood of TestForgedFlood against
// `pqwatch run` as a process of its own, as on an edge node, under
// GOMEMLIMIT=256MiB (the DaemonSet's budget). Its memory is read from
// /proc/PID/status, so nothing the test holds is counted: VmRSS (rings
// included) stays under the limit throughout, comes back within a minute
// to within 20% of its level before the flood plus the ring (the ring is
// mapped at start and becomes resident as packets fill its blocks), the
// real handshake in the middle of the flood is recorded correctly, and no
// forged segment or Initial becomes a record.
func TestForgedFloodAgentProcess(t *testing.T) {
	testenv.NeedRoot(t)
	if testing.Short() {
		t.Skip("builds and runs pqwatch and waits up to a minute for its memory; skipped with -short")
	}
	const limit = 256 << 20
	bin := filepath.Join(t.TempDir(), "pqwatch")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pqwatch").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fl := newFlood(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "run", "-iface", "lo", "-ports", strconv.Itoa(fl.port), "-workers", "1",
		"-format", "jsonl", "-o", out, "-line-buffered", "-no-process-tracking",
		"-metrics-addr", metrics, "-log-level", "debug")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=256MiB")
	cmd.Stderr = &syncWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("pqwatch stderr:\n%s", stderr.String())
		}
	}()
	waitHealthy(t, metrics)
	pid := cmd.Process.Pid

	// Settle the agent's own start-up memory first: a real handshake
	// through the ring, then a moment.
	fl.dialReal(t)
	time.Sleep(time.Second)
	rss0 := pidRSS(t, pid)

	var peak int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				peak = max(peak, pidRSS(t, pid))
			}
		}
	}()
	half := holdHalfHellos(t, fl.port)
	fl.send(t)
	settle()
	half.release()
	close(stop)
	wg.Wait()
	rss1 := pidRSS(t, pid)
	if peak*1024 > limit {
		t.Errorf("VmRSS peaked at %d kB during the flood, over the %d MiB limit", peak, limit>>20)
	}
	buffered, budget := scrapeGauge(t, metrics, "pqwatch_buffered_bytes"), scrapeGauge(t, metrics, "pqwatch_buffer_budget_bytes")
	if budget <= 0 || budget > limit/4 {
		t.Errorf("pqwatch_buffer_budget_bytes %v: want a quarter of the %d MiB limit at most", budget, limit>>20)
	}

	// Given back within a minute (forged flows expire after 30 s idle,
	// then the agent returns their memory).
	ring := capture.DefaultBlockSize * capture.DefaultNumBlocks >> 10 // kB, one worker on lo
	bound := rss0*12/10 + ring
	start := time.Now()
	rss2 := pidRSS(t, pid)
	for rss2 > bound && time.Since(start) < time.Minute {
		time.Sleep(time.Second)
		rss2 = pidRSS(t, pid)
	}
	t.Logf("pqwatch VmRSS: %d kB before the flood, peak %d kB (limit %d kB), %d kB just after (buffered %.0f of a %.0f-byte budget), %d kB %v later (bound %d kB = 120%% of before + %d kB ring)",
		rss0, peak, limit>>10, rss1, buffered, budget, rss2, time.Since(start).Round(time.Second), bound, ring)
	if rss2 > bound {
		t.Errorf("VmRSS %d kB a minute after the flood: more than 20%% (plus the %d kB ring) over %d kB before it", rss2, ring, rss0)
	}

	// The agent still records a real handshake correctly after the flood.
	after, err := tlsDial(fmt.Sprintf("127.0.0.1:%d", fl.port))
	if err != nil {
		t.Fatalf("handshake after the flood: %v", err)
	}
	afterClient, afterState := after.LocalAddr().String(), after.ConnectionState()
	after.Close()
	time.Sleep(1500 * time.Millisecond) // a block timeout
	errs := scrapeCounters(t, metrics, "pqwatch_parse_errors_total", "reason")
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("pqwatch run: %v", err)
	}
	recs := readJSONL(t, out)
	// The warm-up handshake is real too, and the half-sent hellos come
	// from their own address: leave them out of the forged flood's check.
	var flood []*record.Handshake
	halfOutcomes := map[string]int{}
	afterSeen := 0
	for _, r := range recs {
		switch {
		case r.ClientText() == fl.warmClient:
		case r.ClientText() == afterClient:
			afterSeen++
			if r.Outcome != record.OutcomeOK || r.Version != "TLS1.3" || r.Group != afterState.CurveID.String() {
				t.Errorf("the handshake after the flood (group %v) recorded as %+v", afterState.CurveID, r)
			}
		case strings.HasPrefix(r.ClientText(), halfHelloSrc+":"):
			halfOutcomes[r.Outcome]++
		default:
			flood = append(flood, r)
		}
	}
	if afterSeen != 1 {
		t.Errorf("the handshake after the flood: %d records, want 1", afterSeen)
	}
	// Each half-sent hello is a plausible ClientHello that never
	// completes: incomplete, or truncated when the budget evicted it.
	t.Logf("%d half-sent %d-byte hellos held: records %v, memory_evicted %d", half.n, halfHelloSent, halfOutcomes, errs["memory_evicted"])
	if got := halfOutcomes[record.OutcomeIncomplete] + halfOutcomes[record.OutcomeTruncated]; got != half.n || len(halfOutcomes) > 2 {
		t.Errorf("half-sent hellos: records %v, want %d incomplete or truncated", halfOutcomes, half.n)
	}
	fl.check(t, flood, sniffer.Stats{Errors: errs}, true)
}

// The half-sent hellos: from their own loopback address, each a TLS record
// header and ClientHello header announcing 16 KB and the first
// halfHelloSent bytes of it.
const (
	halfHelloSrc  = "127.0.0.30"
	halfHelloSent = 15000
)

type halfHellos struct {
	n     int
	conns []net.Conn
}

// holdHalfHellos opens connections that each send most of a large
// ClientHello and hold it unfinished: reassembly buffers the flood's
// budget bounds (1,000 connections in make test, 3,000 in make soak,
// the figure that OOM-killed the agent before issue 14).
func holdHalfHellos(t *testing.T, port int) *halfHellos {
	n := 1000
	if os.Getenv("PQWATCH_SOAK") != "" {
		n = 3000
	}
	body := make([]byte, halfHelloSent)
	const total = 16 << 10
	hdr := []byte{22, 3, 1, (total + 4) >> 8, (total + 4) & 0xff, 1, 0, total >> 8, total & 0xff, 3, 3}
	copy(body, hdr)
	for i := len(hdr); i < len(body); i++ {
		body[i] = byte(i * 7)
	}
	h := &halfHellos{}
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(halfHelloSrc)}}
	for range n {
		c, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("half-sent hello %d: %v", len(h.conns), err)
		}
		h.conns = append(h.conns, c)
		if _, err := c.Write(body); err != nil {
			t.Fatalf("half-sent hello %d: %v", len(h.conns), err)
		}
	}
	h.n = n
	t.Cleanup(h.release)
	return h
}

// release closes the connections (the flows end, with no ClientHello
// completed).
func (h *halfHellos) release() {
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// dialReal makes one real handshake outside the flood (the warm-up).
func (fl *flood) dialReal(t *testing.T) {
	c, err := tlsDial(fmt.Sprintf("127.0.0.1:%d", fl.port))
	if err != nil {
		t.Fatalf("warm-up handshake: %v", err)
	}
	fl.warmClient = c.LocalAddr().String()
	c.Close()
}

// pidRSS is process pid's VmRSS in kB.
func pidRSS(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read VmRSS: %v", err)
		return 0
	}
	return statusRSS(b)
}

// waitHealthy waits (at most 10 s) for the agent's /healthz.
func waitHealthy(t *testing.T, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				time.Sleep(300 * time.Millisecond) // rings up after the listener
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pqwatch /healthz at %s did not answer within 10 s", addr)
}

// scrape reads the agent's /metrics text.
func scrape(t *testing.T, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String()
}

// scrapeGauge is the value of an unlabelled series.
func scrapeGauge(t *testing.T, addr, name string) float64 {
	for l := range strings.SplitSeq(scrape(t, addr), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Errorf("%s not on /metrics", name)
	return 0
}

// scrapeCounters are a counter's values by one label.
func scrapeCounters(t *testing.T, addr, name, label string) map[string]uint64 {
	out := map[string]uint64{}
	prefix := name + "{" + label + "=\""
	for l := range strings.SplitSeq(scrape(t, addr), "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		val, num, ok := strings.Cut(rest, "\"} ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(num, 64)
		out[val] = uint64(f)
	}
	return out
}

// readJSONL decodes the agent's records.
func readJSONL(t *testing.T, path string) []*record.Handshake {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*record.Handshake
	for l := range bytes.SplitSeq(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		r := new(record.Handshake)
		if err := json.Unmarshal(l, r); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// syncWriter serialises writes from the command's stderr copier and reads
// from the test.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
