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
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// TestTwoNginxAcceptAttribution: two nginx instances on different ports
// of one host, requests interleaved, each record handed to the Attribution
// stage after its connection closed: every record names the master of the
// worker that served it (X-Pid), and that worker unless the quiet
// generation answered it (one nginx's accepts are only counted by
// default: two workers, so no worker then); the other nginx's accepts,
// on another port, are reported and named by their events.
func TestTwoNginxAcceptAttribution(t *testing.T) {
	requireNginx(t)
	openAccepts(t, 0).Close() // skips without root or BTF
	type inst struct {
		port   int
		master int
		ng     *testenv.Nginx
	}
	var ins []*inst
	for range 2 {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ng := testenv.StartNginx(t, testenv.NginxOptions{Listen: "127.0.0.1:" + strconv.Itoa(port), Workers: 2})
		t.Cleanup(func() { ng.Stop() })
		ins = append(ins, &inst{port: port, master: readPid(ng.PidFile), ng: ng})
	}
	// A third nginx held in a binary swap meanwhile (as another test's may
	// be on a CI host): a swap elsewhere does not stop the quiet choice.
	other := newNginxLab(t)
	other.writeConf("x25519")
	om := other.start()
	other.signal(om, syscall.SIGUSR2)
	waitFor(t, 15*time.Second, "the swapping nginx's new master", func() bool { p := readPid(other.pid); return p > 0 && p != om })
	tr, err := New(Config{ScanInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	scanDone := make(chan struct{})
	go func() { defer close(scanDone); _ = tr.Run(ctx) }()
	defer func() { cancel(); <-scanDone; tr.Close() }()
	for _, in := range ins {
		genByMaster(t, tr, in.master, 2)
	}
	// The scan that sees the third nginx's two masters may come after the
	// ones that found the first two.
	waitFor(t, 10*time.Second, "the third nginx seen in a swap", func() bool { _, swapping := tr.QuietSince(); return swapping })
	var mu sync.Mutex
	var out []*record.Handshake
	at := NewAttribution(tr, func(r *record.Handshake) { mu.Lock(); out = append(out, r); mu.Unlock() })
	go at.Run()

	type sent struct {
		r            *record.Handshake
		xpid, master int
	}
	var all []sent
	tr2 := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	for i := range 200 {
		in := ins[i%2]
		var client string
		tr2.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				client = c.LocalAddr().String()
			}
			return c, err
		}
		start := time.Now()
		resp, err := (&http.Client{Transport: tr2, Timeout: 5 * time.Second}).Get("https://127.0.0.1:" + strconv.Itoa(in.port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		xpid, _ := strconv.Atoi(resp.Header.Get("X-Pid"))
		// A completed handshake: the server answered (ServerHelloBytes).
		r := &record.Handshake{Transport: record.TransportTCP, Client: client, Server: "127.0.0.1:" + strconv.Itoa(in.port), FlowStart: start, ServerHelloBytes: 123}
		at.Process(r)
		all = append(all, sent{r, xpid, in.master})
	}
	at.Flush()
	perMaster, noWorker := map[int]int{}, 0
	for i, s := range all {
		g := s.r.Generation
		if g == nil || (g.WorkerPID != s.xpid && g.WorkerPID != 0) || g.MasterPID != s.master {
			t.Fatalf("request %d: served by worker %d of master %d, attributed %+v", i, s.xpid, s.master, g)
		}
		if g.WorkerPID == 0 {
			noWorker++
		}
		perMaster[g.MasterPID]++
	}
	st := tr.Stats()
	t.Logf("%d records on two nginx, each the X-Pid worker's master, %d without the worker; per master %v; stats %+v", len(all), noWorker, perMaster, st)
	if st.ByAccept+st.ByAcceptQuiet != uint64(len(all)) || uint64(noWorker) > st.ByAcceptQuiet || st.ByAccept == 0 || st.ByAcceptQuiet == 0 {
		t.Errorf("%d of %d by accept, %d by the quiet generation (%d without a worker): want all by one or the other, some by each", st.ByAccept, len(all), st.ByAcceptQuiet, noWorker)
	}
}
