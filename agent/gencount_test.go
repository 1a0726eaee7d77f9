package agent_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/proctrack"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// TestGenerationCountedWhenSeen: pqwatch_generation_handshakes_total does
// not wait for the access-log join (it did: a connection without a request
// was counted when the join gave up on it, 72 s later). With the log
// joined, half the connections send a request and half only shake hands
// (no line ever comes); within seconds of the last handshake the
// generation's count equals the clients'.
func TestGenerationCountedWhenSeen(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	// With accept events the worker is named and the count is taken at
	// once; without, the attribution names the generation and the line's
	// $pid may still decide (counted when the line comes, or 500 ms later).
	t.Run("accept events", func(t *testing.T) { generationCounted(t, false) })
	t.Run("no accept events", func(t *testing.T) { generationCounted(t, true) })
}

func generationCounted(t *testing.T, noAccept bool) {
	pair := testenv.NewPair(t, 1500)
	l := newSwapLab(t, pair.S)
	master := l.start()
	logFormat, err := logparse.ParseLogFormat(strings.Trim(testenv.RecommendedLogFormat, "'"))
	if err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Ifaces: []string{pair.SIf}, Ports: []uint16{443}, Workers: 1, TrackProcesses: true, NoAcceptEvents: noAccept,
		NginxLogs: []agent.NginxLog{{Path: l.access, Format: logFormat}}, Listener: ml, RecycleRecords: true}
	// The run summary, as `pqwatch run -format json` keeps it.
	sum := report.New(forecast.DefaultPolicy)
	cfg.Sinks = []record.Sink{sum}
	var a *agent.Agent
	if err := testenv.InNS(pair.S, func() (err error) { a, err = agent.New(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	var gen string
	waitUntil(t, 10*time.Second, "the generation found", func() bool {
		for _, g := range a.Processes().Generations() {
			if g.MasterPID == master && len(g.Workers) == 2 {
				gen = g.ID
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // the rings bound
	server := net.JoinHostPort(pair.SAddr, "443")
	const n = 40
	made := 0
	first := time.Now()
	testenv.InNS(pair.C, func() error {
		for i := range n {
			if i%2 == 0 {
				if _, err := oneRequest(server); err == nil {
					made++
				}
				continue
			}
			c, err := net.DialTimeout("tcp", server, 2*time.Second)
			if err != nil {
				continue
			}
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test"})
			if tc.Handshake() == nil {
				made++
			}
			tc.Close()
		}
		return nil
	})
	last := time.Now()
	count := func() float64 {
		body, _, _ := scrape(t, "http://"+ml.Addr().String())
		total := 0.0
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "pqwatch_generation_handshakes_total{") && strings.Contains(line, `generation="`+gen+`"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				total += v
			}
		}
		return total
	}
	// 1.6 s on an idle 2-core machine (the next process scan, then 500 ms
	// for a line that never comes); a busy CI host is allowed more, never
	// the join's 72 s.
	got := 0.0
	for time.Since(last) < 10*time.Second {
		if got = count(); got == float64(made) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	lag := time.Since(last)
	t.Logf("%v of %d handshakes counted %v after the last", got, made, lag.Round(time.Millisecond))
	// Without accept events a connection that closed before its lookup
	// and outside a quiet period (other tests' nginx swap on a CI host)
	// has no generation at all: not a lag, and not this test's subject.
	src, _ := a.Processes().AttributionSource()
	want := float64(made)
	if src != proctrack.SourceEBPF && got >= 0.8*float64(made) && lag <= 10*time.Second {
		t.Logf("attribution by %s: %v of %d attributed and counted", src, got, made)
		want = got
	} else if got != float64(made) || made < n-2 || lag > 5*time.Second {
		t.Errorf("pqwatch_generation_handshakes_total{generation=%q} = %v %v after the last handshake, want %d (the clients' handshakes) within seconds", gen, got, lag.Round(time.Millisecond), made)
	}

	// The run summary's generations say the same: the generation's row
	// counts what the metric counted (the clients' handshakes with accept
	// events), all completed, none hybrid (Debian 12's nginx on OpenSSL
	// 3.0), first and last seen around the clients' run.
	stop()
	a.Result().Finish(sum)
	var row *report.GenerationRow
	for _, g := range sum.Generations {
		if g.ID == gen {
			row = g
		} else if g.Handshakes > 0 {
			t.Errorf("summary: generation %s has %d handshakes; only %s served", g.ID, g.Handshakes, gen)
		}
	}
	switch {
	case row == nil:
		t.Errorf("summary: no row for generation %s (rows %+v)", gen, sum.Generations)
	case float64(row.Handshakes) != want || row.Completed != row.Handshakes || row.PQ != 0 || row.OpenSSL == "" ||
		row.FirstSeen.Before(first) || row.LastSeen.After(last.Add(time.Second)):
		t.Errorf("summary row %+v: want %v handshakes, all completed, none PQ, its OpenSSL, seen between %v and %v", *row, want, first, last)
	default:
		t.Logf("summary row: %s %s: %d handshakes, %d completed, first %v, last %v", row.ID, row.OpenSSL, row.Handshakes, row.Completed,
			row.FirstSeen.Format(time.StampMilli), row.LastSeen.Format(time.StampMilli))
	}
}
