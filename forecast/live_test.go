package forecast_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// client is one kind of client in the mix.
type client struct {
	name string
	run  func(ns, addr string)
}

func goClient(name string, curves []tls.CurveID, maxVer uint16) client {
	return client{name, func(ns, addr string) {
		c, err := testenv.Dial(ns, addr, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		cl := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test", CurvePreferences: curves, MaxVersion: maxVer})
		cl.SetDeadline(time.Now().Add(5 * time.Second))
		cl.Handshake()
	}}
}

func opensslClient(name string, args ...string) client {
	return client{name, func(ns, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a := append([]string{"s_client", "-connect", addr, "-servername", "pqwatch.test", "-no_ticket"}, args...)
		cmd := testenv.Cmd(ctx, ns, "openssl", a...)
		cmd.Stdin = strings.NewReader("")
		cmd.Run()
	}}
}

var mix = []client{
	goClient("go-default", nil, 0),
	goClient("go-x25519", []tls.CurveID{tls.X25519}, 0),
	goClient("go-p256", []tls.CurveID{tls.CurveP256}, 0),
	goClient("go-x25519-p256-tls12", []tls.CurveID{tls.X25519, tls.CurveP256}, tls.VersionTLS12),
	goClient("go-pq-only", []tls.CurveID{tls.X25519MLKEM768}, 0),
	opensslClient("openssl-p256-x25519", "-groups", "P-256:X25519"),
	opensslClient("openssl-x448-p256", "-groups", "X448:P-256"),
	opensslClient("openssl-tls12-p256-x25519", "-tls1_2", "-groups", "P-256:X25519"),
}

const rounds = 3

// capture runs the client mix rounds times against addr while tcpdump
// records port, and returns the records in ClientHello order.
func capture(t *testing.T, pair *testenv.Pair, port int) ([]*record.Handshake, string) {
	t.Helper()
	capt := testenv.StartCapture(t, pair.S, pair.SIf, fmt.Sprintf("tcp port %d", port))
	addr := net.JoinHostPort(pair.SAddr, fmt.Sprint(port))
	for range rounds {
		for _, c := range mix {
			c.run(pair.C, addr)
			time.Sleep(20 * time.Millisecond)
		}
	}
	capt.Stop()
	if keep := os.Getenv("FORECAST_KEEP_PCAP"); keep != "" {
		exec.Command("cp", capt.File, fmt.Sprintf("%s/forecast-%d.pcap", keep, port)).Run()
	}
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	if _, err := sniffer.ReadFile(capt.File, s, nil); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	slices.SortFunc(recs, func(a, b *record.Handshake) int { return a.TS.Compare(b.TS) })
	if len(recs) != rounds*len(mix) {
		t.Fatalf("port %d: %d records, want %d", port, len(recs), rounds*len(mix))
	}
	return recs, capt.File
}

func observedKind(r *record.Handshake) forecast.Kind {
	switch {
	case r.Outcome != record.OutcomeOK:
		return forecast.Fail
	case r.HRR:
		return forecast.HRR
	case r.PQ:
		return forecast.PQ
	}
	return forecast.Classical
}

// TestForecastMatchesRealMigration captures the same client mix twice over a
// veth pair: against Debian's nginx (OpenSSL 3.0, ssl_ecdh_curve
// X25519:prime256v1, classical only) and against a Go crypto/tls server with
// default curve preferences (hybrid first). The forecast made from the nginx
// capture with the Go server's policy must equal, handshake by handshake,
// what the Go capture shows: PQ/HRR/classical, the group, and the
// ServerHello size (so the byte growth too). The nginx policy in
// ModeClientShare must also reproduce the nginx capture itself.
func TestForecastMatchesRealMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("live capture test; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "nginx", "tcpdump", "openssl")
	pair := testenv.NewPair(t, 1500)

	testenv.StartNginx(t, testenv.NginxOptions{NS: pair.S, Listen: "8443", ECDHCurve: "X25519:prime256v1"})
	before, _ := capture(t, pair, 8443)

	_, _, cert := testenv.Cert(t, t.TempDir())
	ln, err := testenv.Listen(pair.S, ":8444")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
				s.SetDeadline(time.Now().Add(5 * time.Second))
				s.Handshake()
			}()
		}
	}()
	after, afterFile := capture(t, pair, 8444)

	nginxPolicy, err := forecast.ParsePolicy("openssl3.0=X25519:prime256v1")
	if err != nil {
		t.Fatal(err)
	}
	rep := report.NewForecast(forecast.GoPolicy)
	var predictedGrowth, measuredGrowth, n, tls12, tls12Delta int
	for i, b := range before {
		a := after[i]
		name := mix[i%len(mix)].name
		o := rep.Add(b)
		got := fmt.Sprintf("%s %s", o.Kind, tlsparse.Group(o.Group))
		want := fmt.Sprintf("%s %s", observedKind(a), a.Group)
		if got != want {
			t.Errorf("%s #%d: forecast %s, Go server did %s", name, i, got, want)
		}
		switch {
		case a.Version == "TLS1.3":
			// The key exchange lives in the ServerHello: exact.
			if o.ServerHelloBytes != a.ServerHelloBytes {
				t.Errorf("%s #%d: forecast ServerHello %d bytes, Go server sent %d", name, i, o.ServerHelloBytes, a.ServerHelloBytes)
			}
			if o.Modeled {
				predictedGrowth += o.ServerHelloGrowth
				measuredGrowth += a.ServerHelloBytes - b.ServerHelloBytes
				n++
			}
		default:
			// TLS 1.2: the forecast keeps the ServerHello; OpenSSL's lists
			// three EC point formats, Go's one (2 bytes), outside the model.
			if o.ServerHelloGrowth != 0 || a.ServerHelloBytes-o.ServerHelloBytes != -2 {
				t.Errorf("%s #%d: TLS 1.2 ServerHello forecast %d (growth %d), Go server sent %d", name, i, o.ServerHelloBytes, o.ServerHelloGrowth, a.ServerHelloBytes)
			}
			tls12++
			tls12Delta += a.ServerHelloBytes - b.ServerHelloBytes
		}
		// The nginx policy reproduces the nginx capture.
		self := forecast.Predict(nginxPolicy, b)
		selfGot := fmt.Sprintf("%s %s", self.Kind, tlsparse.Group(self.Group))
		if self.Kind == forecast.Fail {
			selfGot = "fail "
		}
		selfWant := fmt.Sprintf("%s %s", observedKind(b), b.Group)
		if selfGot != selfWant {
			t.Errorf("%s #%d: nginx policy predicts %s for its own capture, nginx did %s", name, i, selfGot, selfWant)
		}
		if i < len(mix) {
			t.Logf("%-26s nginx: %-9s %-15s SH %4d | forecast: %-9s %-15s SH %4d (%+5d) %-48q | go: %-9s %-15s SH %4d",
				name, observedKind(b), b.Group, b.ServerHelloBytes, o.Kind, tlsparse.Group(o.Group), o.ServerHelloBytes, o.ServerHelloGrowth, o.Reason,
				observedKind(a), a.Group, a.ServerHelloBytes)
		}
	}
	if predictedGrowth != measuredGrowth {
		t.Errorf("TLS 1.3 ServerHello growth: forecast %d bytes over %d handshakes, measured %d", predictedGrowth, n, measuredGrowth)
	}
	t.Logf("TLS 1.2 handshakes: %d, forecast growth 0, measured %+d (ec_point_formats)", tls12, tls12Delta)
	rep.Finish()
	// The report's counts equal the Go capture's.
	var pq, hrr int
	for _, a := range after {
		if a.PQ {
			pq++
		}
		if a.HRR {
			hrr++
		}
	}
	if rep.PQ+rep.HRRPQ != pq || rep.HRR != hrr {
		t.Errorf("report: pq %d hrr %d, Go capture pq %d hrr %d", rep.PQ+rep.HRRPQ, rep.HRR, pq, hrr)
	}
	t.Logf("TLS 1.3 ServerHello growth: forecast %+d, measured %+d bytes over %d handshakes with a ServerHello in both; report mean %+.1f per handshake", predictedGrowth, measuredGrowth, n, rep.AddedServerHelloBytes)
	t.Logf("\n%s", rep.Text())

	// The byte model's HelloRetryRequest size against the real ones.
	if _, err := exec.LookPath("tshark"); err == nil {
		var hrrs []int
		for _, h := range testenv.Tshark(t, afterFile, 8444) {
			if h.HRR {
				hrrs = append(hrrs, h.Length+4)
			}
		}
		i := 0
		for _, a := range after {
			if !a.HRR {
				continue
			}
			gp, _ := tlsparse.ParseGroup(a.Group)
			g := uint16(gp)
			if i >= len(hrrs) || forecast.HelloRetryRequestSize(a.ServerHelloBytes, g) != hrrs[i] {
				t.Errorf("HRR for %s: model %d bytes, tshark %v", a.Group, forecast.HelloRetryRequestSize(a.ServerHelloBytes, g), hrrs)
			}
			i++
		}
		t.Logf("HelloRetryRequests: %d, sizes %v, model agrees", i, hrrs)
	}
}
