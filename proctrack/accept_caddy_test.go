package proctrack

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

const caddyAcceptConf = `{
  "admin": {"disabled": true},
  "storage": {"module": "file_system", "root": "{{dir}}/data"},
  "logging": {"logs": {"default": {"level": "ERROR", "writer": {"output": "file", "filename": "{{dir}}/caddy.log"}}}},
  "apps": {
    "http": {"servers": {"s": {
      "listen": ["127.0.0.1:{{port}}"],
      "protocols": ["h1"],
      "automatic_https": {"disable_redirects": true},
      "tls_connection_policies": [{}],
      "routes": [{"handle": [{"handler": "static_response", "status_code": 200, "body": "ok\n"}]}]
    }}},
    "tls": {
      "certificates": {"automate": ["localhost"]},
      "automation": {"policies": [{"subjects": ["localhost"], "issuers": [{"module": "internal"}]}]}
    },
    "pki": {"certificate_authorities": {"local": {"install_trust": false}}}
  }
}`

// TestCaddyRestartAcceptAttribution: Caddy stopped and a new Caddy process
// started on the same port under load; each record, handed to the
// Attribution stage after its connection closed, names the process that
// served it (the one running at the time: they do not overlap).
func TestCaddyRestartAcceptAttribution(t *testing.T) {
	if testing.Short() {
		t.Skip("live Caddy test skipped in -short mode")
	}
	openAccepts(t, 0).Close() // skips without root or BTF
	bin, err := testenv.LookBin("caddy")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(conf, []byte(strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port)).Replace(caddyAcceptConf)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", conf)
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}); err == nil {
				c.Close()
				return cmd
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("caddy did not serve TLS on %s:\n%s", addr, out.String())
		return nil
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
	a := start()
	defer func() {
		if a.ProcessState == nil {
			stop(a)
		}
	}()
	tr, err := New(Config{ScanInterval: 100 * time.Millisecond, ServerPorts: []uint16{uint16(port)},
		NginxComms: []string{noNginx}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	scanDone := make(chan struct{})
	go func() { defer close(scanDone); _ = tr.Run(ctx) }()
	defer func() { cancel(); <-scanDone; tr.Close() }()
	waitFor(t, 5*time.Second, "caddy as a server", func() bool { _, ok := tr.GenerationOf(a.Process.Pid); return ok })
	var mu sync.Mutex
	at := NewAttribution(tr, func(*record.Handshake) {})
	go at.Run()

	type sent struct {
		r   *record.Handshake
		pid int // the Caddy running when the connection was made
	}
	var all []sent
	running := a.Process.Pid
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
			r := &record.Handshake{Transport: record.TransportTCP, Client: client, Server: addr, FlowStart: begin}
			at.Process(r)
			all = append(all, sent{r, pid})
		}
	}()
	time.Sleep(time.Second)
	mu.Lock()
	running = 0
	mu.Unlock()
	stop(a)
	b := start()
	defer stop(b)
	mu.Lock()
	running = b.Process.Pid
	mu.Unlock()
	time.Sleep(time.Second)
	close(loadStop)
	<-loadDone
	waitFor(t, 5*time.Second, "the new caddy as a server", func() bool { _, ok := tr.GenerationOf(b.Process.Pid); return ok })
	time.Sleep(acceptGrace + 3*tr.cfg.ScanInterval) // the records waiting for it are asked again
	at.Flush()
	per := map[int]int{}
	for i, s := range all {
		g := s.r.Generation
		if g == nil || g.MasterPID != s.pid {
			t.Errorf("record %d: served by caddy %d, attributed %+v", i, s.pid, g)
			continue
		}
		per[s.pid]++
	}
	st := tr.Stats()
	t.Logf("caddy %d then %d: %d records attributed per process %v, %d requests failed in the restart; stats %+v", a.Process.Pid, b.Process.Pid, len(all), per, failed, st)
	if per[a.Process.Pid] == 0 || per[b.Process.Pid] == 0 {
		t.Errorf("want records on both processes: %v", per)
	}
}
