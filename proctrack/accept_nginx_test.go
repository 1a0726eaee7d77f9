package proctrack

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// TestNginxSwapAcceptAttribution: an nginx binary swap (USR2, WINCH, QUIT)
// under load, each connection's record handed to the Attribution stage
// only after the connection closed, as the capture hands on short
// connections. With every accept reported, every record names the worker
// (X-Pid) and master that served it, the overlap window included; by
// default (the busiest generation's accepts only counted outside swaps)
// every record names its master, and its worker unless the quiet
// generation answered it (two workers: no worker then); without accept
// events (the fallback, for comparison) the figures are logged.
func TestNginxSwapAcceptAttribution(t *testing.T) {
	requireNginx(t)
	openAccepts(t, 0).Close() // skips without root or BTF
	for _, tc := range []struct {
		name          string
		noAccept, all bool
	}{{"ebpf", false, false}, {"ebpf-all", false, true}, {"fallback", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			st, res := swapWithAttribution(t, Config{NoAcceptEvents: tc.noAccept, AllAcceptEvents: tc.all})
			bad, none, closed, noWorker := 0, 0, 0, 0
			for _, s := range res {
				switch g := s.r.Generation; {
				case g == nil:
					none++
				case s.xpid == 0:
					closed++ // a draining worker closed it before the request: no X-Pid
				case g.WorkerPID == 0 && g.MasterPID == s.master && !tc.all:
					noWorker++ // the quiet answers (the fallback's, the quiet generation's) and listener answers name no worker
				case g.WorkerPID != s.xpid || g.MasterPID != s.master:
					bad++
					report := t.Errorf
					if tc.noAccept {
						// Today's path, measured, not the subject here:
						// its rare misses (a quiet answer naming a
						// generation of the previous subtest's nginx,
						// stopped on another port) are logged.
						report = t.Logf
					}
					report("served by worker %d of master %d, attributed to worker %d master %d (%s)",
						s.xpid, s.master, s.r.Generation.WorkerPID, s.r.Generation.MasterPID, s.r.Generation.ID)
				}
			}
			t.Logf("%s: %d records, %d without a generation, %d misattributed, %d with the right generation but no worker, %d closed before the request; stats %+v",
				tc.name, len(res), none, bad, noWorker, closed, st)
			if !tc.noAccept && (none > 0 || st.ByAccept == 0) {
				t.Errorf("with accept events %d of %d records have no generation (%d by accept)", none, len(res), st.ByAccept)
			}
			switch {
			case tc.all && (noWorker > 0 || st.ByAcceptQuiet > 0):
				t.Errorf("every accept reported: %d records without a worker, %d answered by the quiet generation", noWorker, st.ByAcceptQuiet)
			case !tc.noAccept && !tc.all && (st.ByAcceptQuiet == 0 || uint64(noWorker) > st.ByAcceptQuiet):
				t.Errorf("%d records without a worker, %d answered by the quiet generation (want some, and every worker-less record among them)", noWorker, st.ByAcceptQuiet)
			}
		})
	}
}

type swapServed struct {
	r            *record.Handshake
	xpid, master int
}

func swapWithAttribution(t *testing.T, tcfg Config) (Stats, []swapServed) {
	l := newNginxLab(t)
	l.writeConf("x25519")
	masterA := l.start()
	defer l.stopAll()
	tcfg.ScanInterval = 100 * time.Millisecond
	tcfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tr, err := New(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	scanDone := make(chan struct{})
	go func() { defer close(scanDone); _ = tr.Run(ctx) }()
	defer func() { cancel(); <-scanDone; tr.Close() }()

	var mu sync.Mutex
	var out []*record.Handshake
	queued := map[*record.Handshake]time.Time{} // Process -> handed on
	var delays []time.Duration
	at := NewAttribution(tr, func(r *record.Handshake) {
		mu.Lock()
		out = append(out, r)
		delays = append(delays, time.Since(queued[r]))
		mu.Unlock()
	})
	go at.Run()
	genA := genByMaster(t, tr, masterA, 2)

	// The truth: which master each worker pid belongs to, from /proc.
	stop := make(chan struct{})
	wi := watchWorkers(tr, stop)
	server := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(l.port))
	cfg := &tls.Config{RootCAs: l.pool, ServerName: "localhost"}
	var res []swapServed
	var errs []error
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(8 * time.Millisecond)
		defer tick.Stop()
		for range 2000 { // bounded: 16 s at most
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", server.String(), cfg)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			// A completed handshake: the server answered (ServerHelloBytes).
			r := &record.Handshake{Transport: record.TransportTCP, Client: c.LocalAddr().String(), Server: server.String(), FlowStart: start, ServerHelloBytes: 123}
			xpid := 0
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err == nil {
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					xpid, _ = strconv.Atoi(resp.Header.Get("X-Pid"))
				}
			}
			c.Close()
			mu.Lock()
			queued[r] = time.Now()
			mu.Unlock()
			at.Process(r) // after the connection closed
			res = append(res, swapServed{r: r, xpid: xpid})
		}
	}()
	time.Sleep(700 * time.Millisecond)
	l.writeConf("secp256r1")
	l.installB()
	l.signal(masterA, syscall.SIGUSR2)
	waitEvent(t, tr, 5*time.Second, KindUSR2, genA.ID)
	var masterB int
	waitFor(t, 5*time.Second, "new pid file", func() bool { masterB = readPid(l.pid); return masterB > 0 && masterB != masterA })
	genByMaster(t, tr, masterB, 2)
	time.Sleep(700 * time.Millisecond)
	l.signal(masterA, syscall.SIGWINCH)
	waitEvent(t, tr, 5*time.Second, KindWINCH, genA.ID)
	time.Sleep(500 * time.Millisecond)
	l.signal(masterA, syscall.SIGQUIT)
	waitEvent(t, tr, 5*time.Second, KindQUIT, genA.ID)
	time.Sleep(700 * time.Millisecond)
	close(stop)
	<-loadDone
	at.Flush()
	if len(errs) > 0 {
		t.Errorf("%d handshake errors, first: %v", len(errs), errs[0])
	}
	slices.Sort(delays)
	if len(delays) > 0 {
		t.Logf("attribution delay (Process to handed on): median %v, p99 %v, max %v",
			delays[len(delays)/2].Round(time.Microsecond), delays[len(delays)*99/100].Round(time.Microsecond), delays[len(delays)-1].Round(time.Microsecond))
		if p99 := delays[len(delays)*99/100]; p99 > 2*time.Second {
			t.Errorf("p99 attribution delay %v, over 2 s", p99)
		}
	}
	workers := wi.snapshot()
	masters := map[string]int{}
	for _, g := range tr.Generations() {
		masters[g.ID] = g.MasterPID
	}
	for i := range res {
		if id, ok := workers[res[i].xpid]; ok {
			res[i].master = masters[id]
		} else if res[i].xpid != 0 {
			t.Errorf("worker %d (X-Pid) never seen in a scan", res[i].xpid)
		}
	}
	return tr.Stats(), res
}
