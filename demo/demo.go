// Package demo runs the whole pqwatch pipeline on one machine with no setup:
// a local TLS server that prefers hybrid key exchange, a mix of real
// crypto/tls clients (hybrid, classical-only, one that triggers a
// HelloRetryRequest, TLS 1.2, one the server refuses), live capture of
// loopback, /metrics, and a live-updating summary. Without the privilege to
// capture it says so and falls back to generating a capture of the same
// handshakes (package pcapgen) and analysing it.
package demo

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/pipeline"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// Options shape a demo run.
type Options struct {
	Duration     time.Duration // how long clients run (default 15s)
	Rate         int           // client connections per second (default 20)
	MetricsAddr  string        // default 127.0.0.1:9810; a busy port falls back to a free one
	ForceOffline bool          // skip live capture
	Logger       *slog.Logger
}

// Run runs the demo and writes its report to out, progress to errw.
func Run(ctx context.Context, o Options, out, errw io.Writer) error {
	if o.Duration <= 0 {
		o.Duration = 15 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "127.0.0.1:9810"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cert, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: server: %w", err)
	}
	defer ln.Close()
	go serve(ln, cert)
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	sum := report.New(forecast.DefaultPolicy)
	if !o.ForceOffline {
		err := runLive(ctx, o, port, sum, out, errw)
		if err == nil {
			return nil
		}
		var nc noCaptureError
		if !errors.As(err, &nc) {
			return err
		}
		fmt.Fprintf(errw, "pqwatch demo: cannot capture live on loopback (%v).\n", nc.err)
		fmt.Fprintf(errw, "pqwatch demo: run as root (or with CAP_NET_RAW) for the live pipeline; generating a capture of the same real handshakes instead.\n\n")
	}
	return runOffline(ctx, o, out, errw, sum)
}

// noCaptureError says live capture could not start, and why.
type noCaptureError struct{ err error }

func (e noCaptureError) Error() string { return "demo: live capture unavailable: " + e.err.Error() }
func (e noCaptureError) Unwrap() error { return e.err }

func serve(ln net.Listener, cert tls.Certificate) {
	pcapgen.Respond(ln, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: pcapgen.DemoServerCurves, SessionTicketsDisabled: true})
}

// client makes one connection as kind c and reports errors only for
// clients expected to succeed.
func client(ctx context.Context, addr string, c pcapgen.Client) error {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, ServerName: c.SNI, CurvePreferences: c.Curves, MaxVersion: c.MaxTLS}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: pqwatch.test\r\nUser-Agent: pqwatch-demo/%s\r\n\r\n", c.Name)
	_, err = io.Copy(io.Discard, conn)
	return err
}

func runLive(ctx context.Context, o Options, port uint16, sum *report.Summary, out, errw io.Writer) error {
	ml, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		ml, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
	}
	a, err := agent.New(agent.Config{
		Ifaces: []string{"lo"}, Ports: []uint16{port}, Workers: 1, Listener: ml,
		TrackProcesses: true, Sinks: []record.Sink{sum}, Logger: o.Logger,
		Sniffer: sniffer.Config{FlowTimeout: 10 * time.Second},
	})
	if err != nil {
		ml.Close()
		return noCaptureError{err}
	}
	actx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	time.Sleep(300 * time.Millisecond) // rings up before the first client

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	fmt.Fprintf(errw, "pqwatch demo: TLS server on %s (prefers X25519MLKEM768), capturing loopback live, metrics at http://%s/metrics\n", addr, ml.Addr())
	fmt.Fprintf(errw, "pqwatch demo: %d clients/s for %s: hybrid, classical, HelloRetryRequest, TLS 1.2, refused P-256-only\n\n", o.Rate, o.Duration)
	clients := pcapgen.DefaultClients(5)
	tty := isTTY(errw)
	deadline := time.Now().Add(o.Duration)
	tick := time.NewTicker(time.Second / time.Duration(o.Rate))
	status := time.NewTicker(time.Second)
	var wg sync.WaitGroup
	sent := 0
	limit := int(o.Duration.Seconds()*float64(o.Rate)) + 1
loop:
	for sent < limit && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			c := clients[sent%len(clients)]
			sent++
			wg.Add(1)
			go func() { defer wg.Done(); _ = client(ctx, addr, c) }()
		case <-status.C:
			line := liveLine(sum.Snapshot(), sent)
			if tty {
				fmt.Fprintf(errw, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(errw, line)
			}
		}
	}
	tick.Stop()
	status.Stop()
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // last packets through the ring
	if tty {
		fmt.Fprint(errw, "\r\033[K")
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	a.Result().Finish(sum)
	if pt := a.Processes(); pt != nil {
		for _, g := range pt.Generations() {
			if g.Connections > 0 {
				fmt.Fprintf(out, "server generation %s (%s, %s): %d handshakes attributed\n", g.ID, g.Exe, g.OpenSSL, g.Connections)
			}
		}
	}
	return sum.WriteText(out)
}

func liveLine(s report.Counts, sent int) string {
	pq := 0.0
	if s.Completed > 0 {
		pq = 100 * float64(s.PQ) / float64(s.Completed)
	}
	var groups []string
	for g, n := range s.Groups {
		groups = append(groups, fmt.Sprintf("%s=%d", g, n))
	}
	return fmt.Sprintf("sent %d  seen %d  completed %d  PQ %.1f%%  HRR %d  failed %d  [%s]",
		sent, s.Handshakes, s.Completed, pq, s.HRR, s.Handshakes-s.Completed, strings.Join(sortStrings(groups), " "))
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runOffline writes a capture of the demo's handshakes and analyses it.
func runOffline(ctx context.Context, o Options, out, errw io.Writer, sum *report.Summary) error {
	dir, err := os.MkdirTemp("", "pqwatch-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "demo.pcap")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	n := min(o.Rate*int(o.Duration.Seconds()), 200)
	if _, err := pcapgen.Generate(ctx, w, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(n)}); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	p := pipeline.New(pipeline.Config{Source: &pipeline.Files{Paths: []string{path}, Command: "demo"},
		Merge: &merge.Config{Offline: true}, Sinks: []record.Sink{sum}, Stderr: errw})
	err = p.Run(ctx)
	if cerr := p.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	res := p.Result()
	res.Finish(sum)
	if res.Failed > 0 {
		return fmt.Errorf("demo: the generated capture %s could not be read", path)
	}
	fmt.Fprintf(out, "(offline: %d connections of real crypto/tls handshakes written to a capture and analysed)\n\n", n)
	return sum.WriteText(out)
}
