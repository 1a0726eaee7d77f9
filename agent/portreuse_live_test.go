package agent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// reuseConn is what the client saw of one connection.
type reuseConn struct {
	port        uint16
	dial, shake time.Time // before connect, after the handshake
	paths       []string  // its requests' paths (unique), in order
}

// TestAgentPortReuse: clients in a namespace whose ip_local_port_range
// has four ports, so that each port carries a connection after another
// within milliseconds (nginx closes first: Connection: close, the client
// keeps no TIME_WAIT) and within a second or two (the client closes
// first: TIME_WAIT, reused under tcp_tw_reuse), some connections with
// three requests, some with none (a handshake only). The live agent joins
// the capture with nginx's access log (the recommended format): every
// record of a connection that made a request is joined to that
// connection's first request, identified by its unique path, or left
// ambiguous (a handshake-only connection begun within the millisecond the
// previous connection's line was logged in); none to another's.
func TestAgentPortReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx")
	pair := testenv.NewPair(t, 1500)
	for _, kv := range []string{"net.ipv4.ip_local_port_range=40000 40003", "net.ipv4.tcp_tw_reuse=1"} {
		if out, err := testenv.Cmd(context.Background(), pair.C, "sysctl", "-w", kv).CombinedOutput(); err != nil {
			t.Skipf("sysctl %s: %v %s", kv, err, out)
		}
	}
	// Keep-alive where the requests go (the server block has none).
	ngx := testenv.StartNginx(t, testenv.NginxOptions{NS: pair.S, Listen: "443", Workers: 2,
		Extra: `location /reuse { keepalive_timeout 65s; return 200 "ok $pid\n"; }`})
	logFormat, err := logparse.ParseLogFormat(strings.Trim(testenv.RecommendedLogFormat, "'"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []*record.Handshake
	var a *agent.Agent
	err = testenv.InNS(pair.S, func() (err error) {
		a, err = agent.New(agent.Config{
			Ifaces: []string{pair.SIf}, Ports: []uint16{443}, Workers: 2, TrackProcesses: true,
			NginxLogs:      []agent.NginxLog{{Path: ngx.AccessLog, Format: logFormat}},
			RecycleRecords: true,
			OnRecord:       func(r *record.Handshake) { c := *r; mu.Lock(); recs = append(recs, &c); mu.Unlock() },
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(500 * time.Millisecond) // the capture is up

	server := net.JoinHostPort(pair.SAddr, "443")
	var conns []*reuseConn
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 200 && time.Now().Before(deadline); i++ {
		reqs := 1
		switch i % 10 {
		case 3, 7:
			reqs = 3
		case 5:
			reqs = 0 // a handshake only
		}
		clientCloses := i%4 == 1 || reqs == 0
		c := &reuseConn{dial: time.Now()}
		var raw net.Conn
		for {
			// All four ports may be in TIME_WAIT for up to a second.
			if raw, err = testenv.Dial(pair.C, server, 5*time.Second); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
			c.dial = time.Now()
		}
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.port = uint16(raw.LocalAddr().(*net.TCPAddr).Port)
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test"})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("connection %d: handshake: %v", i, err)
		}
		c.shake = time.Now()
		br := bufio.NewReader(tc)
		for r := range reqs {
			p := fmt.Sprintf("/reuse?c=%d&r=%d", i, r)
			hdr := ""
			if r == reqs-1 && !clientCloses {
				hdr = "Connection: close\r\n"
			}
			fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: pqwatch.test\r\n%s\r\n", p, hdr)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("connection %d request %d: %v", i, r, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			c.paths = append(c.paths, p)
		}
		if !clientCloses {
			io.Copy(io.Discard, br) // nginx closes first
		}
		tc.Close()
		conns = append(conns, c)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Each record is a connection: the one on its port whose connect and
	// handshake bracket its ClientHello.
	mu.Lock()
	defer mu.Unlock()
	byPort := map[uint16][]*reuseConn{}
	reused := 0
	for _, c := range conns {
		if len(byPort[c.port]) > 0 {
			reused++
		}
		byPort[c.port] = append(byPort[c.port], c)
	}
	withReq, joined, wrong, unknown, missed := 0, 0, 0, 0, 0
	seen := map[*reuseConn]bool{}
	for _, r := range recs {
		if r.Outcome != record.OutcomeOK {
			continue
		}
		var c *reuseConn
		for _, cc := range byPort[r.ClientAddrPort().Port()] {
			// One clock: the capture's timestamps are the kernel's.
			if !r.TS.Before(cc.dial) && !r.TS.After(cc.shake) {
				c = cc
			}
		}
		if c == nil || seen[c] {
			unknown++
			continue
		}
		seen[c] = true
		if len(c.paths) > 0 {
			withReq++
		}
		switch {
		case r.Log == nil:
			if len(c.paths) > 0 {
				missed++
				t.Logf("port %d, connection of %s: not joined", c.port, c.paths[0])
			}
		case len(c.paths) == 0 || r.Log.Path != c.paths[0]:
			wrong++
			t.Errorf("port %d: record of the connection of %v joined %s", c.port, c.paths, r.Log.Path)
		default:
			joined++
		}
	}
	st := a.JoinStats()
	t.Logf("%d connections over %d ports (%d on a port used before), %d records: %d of %d with a request joined to their own first request, %d wrong, %d not matched to a connection; join stats %+v",
		len(conns), len(byPort), reused, len(recs), joined, withReq, wrong, unknown, st)
	// A connection that made no request, begun within the millisecond in
	// which the previous connection's line was logged, leaves that line
	// two candidates that no fact tells apart: ambiguous, never wrong.
	if missed > int(st.AmbiguousHandshakes) || missed*100 > 5*withReq {
		t.Errorf("%d of %d connections with a request not joined, %d ambiguous", missed, withReq, st.AmbiguousHandshakes)
	}
	if len(seen) != len(conns) || unknown > 0 {
		t.Errorf("%d connections, %d records matched to one", len(conns), len(seen))
	}
	if len(byPort) > 4 || reused < len(conns)/2 {
		t.Errorf("ports: %d, reused %d: the port range did not hold", len(byPort), reused)
	}
}
