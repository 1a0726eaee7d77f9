package proctrack

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// TestCaddyRestartAcceptAttribution: Caddy stopped and a new Caddy process
// started on the same port under load; each record, handed to the
// Attribution stage after its connection closed, names the process that
// served it (the one running at the time: they do not overlap).
func TestCaddyRestartAcceptAttribution(t *testing.T) {
	if testing.Short() {
		t.Skip("live Caddy test skipped in -short mode")
	}
	openAccepts(t, 0).Close() // skips without root or BTF
	if _, err := testenv.LookBin("caddy"); err != nil {
		t.Skip(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	start := func() *testenv.Caddy { return testenv.StartCaddy(t, testenv.CaddyConf, port) }
	a := start()
	defer a.Stop()
	tr, err := New(Config{ScanInterval: 100 * time.Millisecond, ServerPorts: []uint16{uint16(port)},
		NginxComms: []string{noNginx}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	scanDone := make(chan struct{})
	go func() { defer close(scanDone); _ = tr.Run(ctx) }()
	defer func() { cancel(); <-scanDone; tr.Close() }()
	waitFor(t, 5*time.Second, "caddy as a server", func() bool { _, ok := tr.GenerationOf(a.PID()); return ok })
	var mu sync.Mutex
	at := NewAttribution(tr, func(*record.Handshake) {})
	go at.Run()

	type sent struct {
		r   *record.Handshake
		pid int // the Caddy running when the connection was made
	}
	var all []sent
	running := a.PID()
	loadStop, loadDone := make(chan struct{}), make(chan struct{})
	failed := 0
	go func() {
		defer close(loadDone)
		for range 3000 { // bounded
			select {
			case <-loadStop:
				return
			case <-time.After(8 * time.Millisecond):
			}
			mu.Lock()
			pid := running
			mu.Unlock()
			var client string
			tp := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}, DisableKeepAlives: true,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err == nil {
						client = c.LocalAddr().String()
					}
					return c, err
				}}
			begin := time.Now()
			resp, err := (&http.Client{Transport: tp, Timeout: 3 * time.Second}).Get("https://" + addr + "/")
			if err != nil {
				failed++ // the gap between the two processes
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			same := pid == running && pid != 0
			mu.Unlock()
			if !same {
				continue // made across the restart: no truth by time
			}
			// A completed handshake: the server answered (ServerHelloBytes).
			r := &record.Handshake{Transport: record.TransportTCP, Client: client, Server: addr, FlowStart: begin, ServerHelloBytes: 123}
			at.Process(r)
			all = append(all, sent{r, pid})
		}
	}()
	time.Sleep(time.Second)
	mu.Lock()
	running = 0
	mu.Unlock()
	a.Stop()
	b := start()
	defer b.Stop()
	mu.Lock()
	running = b.PID()
	mu.Unlock()
	time.Sleep(time.Second)
	close(loadStop)
	<-loadDone
	waitFor(t, 5*time.Second, "the new caddy as a server", func() bool { _, ok := tr.GenerationOf(b.PID()); return ok })
	time.Sleep(acceptGrace + 3*tr.cfg.ScanInterval) // the records waiting for it are asked again
	at.Flush()
	per := map[int]int{}
	for i, s := range all {
		g := s.r.Generation
		if g == nil || g.MasterPID != s.pid {
			t.Errorf("record %d: served by caddy %d, attributed %+v", i, s.pid, g)
			continue
		}
		if g.Nginx() { // the log join keeps nginx lines off it by this
			t.Errorf("record %d: caddy's generation %s counts as nginx's", i, g.ID)
		}
		per[s.pid]++
	}
	st := tr.Stats()
	t.Logf("caddy %d then %d: %d records attributed per process %v, %d requests failed in the restart; stats %+v", a.PID(), b.PID(), len(all), per, failed, st)
	if per[a.PID()] == 0 || per[b.PID()] == 0 {
		t.Errorf("want records on both processes: %v", per)
	}
}
