//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package capture

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// TestLivePacketsPerHandshake runs real handshakes of each kind (crypto/tls
// on both ends, over lo, one after another) under the classic and the eBPF
// filter, feeds what the ring delivers to a sniffer, and states how many
// packets of each handshake reached user space. Checked: the records are
// what each client saw (version, group, HelloRetryRequest, outcome) under
// both filters, and with the eBPF filter a TLS 1.3 handshake delivers its
// SYN, SYN-ACK, ClientHello and ServerHello and nothing more.
func TestLivePacketsPerHandshake(t *testing.T) {
	for _, iface := range []string{"lo", Any} {
		t.Run(iface, func(t *testing.T) { livePacketsPerHandshake(t, iface) })
	}
}

// livePacketsPerHandshake captures iface: lo (SOCK_RAW, Ethernet frames)
// or any (SOCK_DGRAM, the outgoing copy on lo dropped by device).
func livePacketsPerHandshake(t *testing.T, iface string) {
	testenv.NeedRoot(t)
	testEBPF(t, nil)
	cert, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := func() func() *tls.Config { return func() *tls.Config { return &tls.Config{} } }
	kinds := []struct {
		name     string
		srv, cli func() *tls.Config
		outcome  string
		eBPF     int // packets per handshake with the eBPF filter, when exact
	}{
		{"TLS 1.3 (X25519MLKEM768)", cfg(), cfg(), "ok", 4},
		{"TLS 1.2", cfg(), func() *tls.Config { return &tls.Config{MaxVersion: tls.VersionTLS12} }, "ok", 0},
		{"TLS 1.3 after HelloRetryRequest", func() *tls.Config { return &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}} }, cfg(), "ok", 0},
		{"failed (protocol_version alert)", func() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS13} },
			func() *tls.Config { return &tls.Config{MaxVersion: tls.VersionTLS12} }, "alert", 0},
	}
	const n = 5
	for _, k := range kinds {
		srvCfg := k.srv()
		srvCfg.Certificates = []tls.Certificate{cert}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					if c.(*tls.Conn).Handshake() == nil {
						c.Write([]byte("HTTP/1.1 200 OK\r\n\r\nok"))
					}
					c.Close()
				}()
			}
		}()
		var per [2]float64
		var retrans uint64 // TCP segments the host retransmitted during the eBPF run
		for i, filter := range []string{FilterClassic, FilterEBPF} {
			before := retransSegs(t)
			var mu sync.Mutex
			var recs []*record.Handshake
			sn := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
			c, stop := startCapture(t, "", Config{Ifaces: []string{iface}, Ports: []uint16{port(ln.Addr())}, Workers: 1, SkipNoise: true, Filter: filter, BlockTimeout: 10 * time.Millisecond},
				func(_, _ int, ts time.Time, link int, data []byte) {
					mu.Lock()
					sn.Packet(ts, link, data)
					mu.Unlock()
				})
			var truth []string
			for range n {
				cliCfg := k.cli()
				cliCfg.InsecureSkipVerify = true
				cc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cliCfg)
				if err != nil {
					truth = append(truth, "alert")
					continue
				}
				st := cc.ConnectionState()
				truth = append(truth, fmt.Sprintf("ok %s %s hrr=%v", tlsparse.VersionName(st.Version), tlsparse.Group(st.CurveID), st.HelloRetryRequest))
				b := make([]byte, 64)
				cc.Read(b)
				cc.Close()
			}
			time.Sleep(300 * time.Millisecond) // the last packets, past the block timeout
			pkts := c.Stats().Packets
			stop()
			mu.Lock()
			sn.Flush()
			if len(recs) != n {
				t.Fatalf("%s, %s filter: %d records of %d handshakes", k.name, filter, len(recs), n)
			}
			for j, r := range recs {
				got := r.Outcome
				if r.Outcome == "ok" {
					got = fmt.Sprintf("ok %s %s hrr=%v", r.Version, r.Group, r.HRR)
				}
				if got != truth[j] {
					t.Errorf("%s, %s filter: record %d is %q, the client saw %q", k.name, filter, j, got, truth[j])
				}
			}
			mu.Unlock()
			per[i] = float64(pkts) / n
			if filter == FilterEBPF {
				retrans = retransSegs(t) - before
			}
		}
		ln.Close()
		t.Logf("%-34s packets per handshake reaching user space on %s: classic filter %.1f, eBPF filter %.1f", k.name, iface, per[0], per[1])
		// A segment retransmitted meanwhile (a loaded host: a SYN or a
		// ClientHello whose ACK came late) is one packet more.
		if k.eBPF > 0 && (per[1] < float64(k.eBPF) || per[1] > float64(k.eBPF)+float64(retrans)/n) {
			t.Errorf("%s: %.1f packets per handshake with the eBPF filter, want %d (and %d retransmitted segments in %d handshakes)", k.name, per[1], k.eBPF, retrans, n)
		}
		if per[1] > per[0] {
			t.Errorf("%s: the eBPF filter delivers more packets (%.1f) than the classic (%.1f)", k.name, per[1], per[0])
		}
	}
}

// retransSegs is the host's (the network namespace's) count of TCP segments
// retransmitted, from /proc/net/snmp.
func retransSegs(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RetransSegs" && i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	t.Fatal("/proc/net/snmp has no Tcp: RetransSegs")
	return 0
}
