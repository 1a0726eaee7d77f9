package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/procfs"
)

func TestScheduleConstant(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
		span time.Duration
		want int
	}{
		{"200/s for 2s", 200, 2 * time.Second, 400},
		{"3/s for 1s", 3, time.Second, 3},
		{"1000/s for 10s", 1000, 10 * time.Second, 10000},
		{"7/s for 1s", 7, time.Second, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSchedule(ArrivalConstant, tc.rate, tc.span, 1)
			if err != nil {
				t.Fatal(err)
			}
			gap := time.Duration(float64(time.Second) / tc.rate)
			var n int
			var prev time.Duration = -1
			for {
				off, ok := s.Next()
				if !ok {
					break
				}
				want := time.Duration(float64(n) * float64(time.Second) / tc.rate)
				if d := off - want; d < -time.Nanosecond || d > time.Nanosecond {
					t.Fatalf("arrival %d at %v, want %v", n, off, want)
				}
				if prev >= 0 && (off-prev < gap-time.Nanosecond || off-prev > gap+time.Nanosecond) {
					t.Fatalf("gap %v, want %v", off-prev, gap)
				}
				prev = off
				n++
			}
			if n != tc.want {
				t.Fatalf("%d arrivals, want %d", n, tc.want)
			}
		})
	}
}

func TestSchedulePoisson(t *testing.T) {
	const rate, secs = 1000.0, 100
	s, err := NewSchedule(ArrivalPoisson, rate, secs*time.Second, 42)
	if err != nil {
		t.Fatal(err)
	}
	var gaps []float64
	perSec := make([]int, secs)
	prev := time.Duration(0)
	for {
		off, ok := s.Next()
		if !ok {
			break
		}
		gaps = append(gaps, float64(off-prev))
		perSec[int(off/time.Second)]++
		prev = off
	}
	n := float64(len(gaps))
	// Count: Poisson(100000), sd 316; allow 5 sd.
	if math.Abs(n-rate*secs) > 5*math.Sqrt(rate*secs) {
		t.Fatalf("%v arrivals, want about %v", n, rate*secs)
	}
	// Exponential gaps: mean = sd = 1/rate.
	sp := spreadOf(gaps)
	if want := 1e9 / rate; math.Abs(sp.Mean-want)/want > 0.02 || math.Abs(sp.StdDev-want)/want > 0.03 {
		t.Fatalf("gap mean %.0f sd %.0f ns, want both about %.0f", sp.Mean, sp.StdDev, want)
	}
	// Per-second counts: variance about equal to the mean (dispersion index 1).
	var c []float64
	for _, v := range perSec {
		c = append(c, float64(v))
	}
	cs := spreadOf(c)
	if d := cs.StdDev * cs.StdDev / cs.Mean; d < 0.6 || d > 1.5 {
		t.Fatalf("dispersion index %.2f, want about 1 (Poisson)", d)
	}
	// Same seed, same schedule; other seed, other schedule.
	a, _ := NewSchedule(ArrivalPoisson, rate, time.Second, 7)
	b, _ := NewSchedule(ArrivalPoisson, rate, time.Second, 7)
	o, _ := NewSchedule(ArrivalPoisson, rate, time.Second, 8)
	x, _ := a.Next()
	y, _ := b.Next()
	z, _ := o.Next()
	if x != y || x == z {
		t.Fatalf("seeding: %v %v %v", x, y, z)
	}
}

func TestScheduleErrors(t *testing.T) {
	if _, err := NewSchedule(ArrivalConstant, 0, time.Second, 1); !errors.Is(err, ErrUsage) {
		t.Fatalf("rate 0: %v", err)
	}
	if _, err := NewSchedule("burst", 1, time.Second, 1); !errors.Is(err, ErrUsage) {
		t.Fatalf("bad arrival: %v", err)
	}
}

func TestHistogramAccuracy(t *testing.T) {
	var h Histogram
	rng := rand.New(rand.NewPCG(1, 2))
	var vals []int64
	for range 100000 {
		v := int64(rng.ExpFloat64() * 2e6) // ns, mean 2 ms
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-exact)) / float64(exact); rel > 1.0/histHalf {
			t.Errorf("q%.3f = %d, exact %d (rel err %.4f)", q, got, exact, rel)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] || h.Count() != uint64(len(vals)) {
		t.Fatalf("max/min/count wrong")
	}
	for _, v := range []int64{0, 1, 255, 256, 257, 1 << 20, 1<<40 + 12345, math.MaxInt64} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets || histUpper(i) < v || (i > 0 && histUpper(i-1) >= v) {
			t.Fatalf("value %d -> bucket %d [.., %d]", v, i, histUpper(i))
		}
	}
	var m Histogram
	m.Merge(&h)
	if m.Quantile(0.99) != h.Quantile(0.99) || m.Count() != h.Count() {
		t.Fatal("merge")
	}
	h.Reset()
	if h.Count() != 0 || h.Quantile(0.5) != 0 {
		t.Fatal("reset")
	}
}

func TestHistogramRecordAllocs(t *testing.T) {
	h := new(Histogram)
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Fatalf("Record allocates %v", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := new(Histogram)
	b.ReportAllocs()
	v := int64(1)
	for b.Loop() {
		h.Record(v)
		v = (v*7 + 13) & (1<<34 - 1)
	}
}

func BenchmarkHistogramQuantile(b *testing.B) {
	h := new(Histogram)
	for i := range int64(100000) {
		h.Record(i * 977)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Quantile(0.99)
	}
}

func TestParseArm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []tls.CurveID
		err  error
	}{
		{"classical=x25519", []tls.CurveID{tls.X25519}, nil},
		{"hybrid=X25519MLKEM768,x25519", []tls.CurveID{tls.X25519MLKEM768, tls.X25519}, nil},
		{"p256=secp256r1", []tls.CurveID{tls.CurveP256}, nil},
		{"p=P-256, secp384r1", []tls.CurveID{tls.CurveP256, tls.CurveP384}, nil},
		{"h=x25519mlkem768", []tls.CurveID{tls.X25519MLKEM768}, nil},
		{"s=SecP256r1MLKEM768", []tls.CurveID{tls.SecP256r1MLKEM768}, nil},
		{"r=x25519;resume=0.5", []tls.CurveID{tls.X25519}, nil},
		{"r=x25519; resume=25%", []tls.CurveID{tls.X25519}, nil},
		{"r=x25519;resume=1.5", nil, ErrUsage},
		{"r=x25519;resume=-1%", nil, ErrUsage},
		{"r=x25519;resume=x", nil, ErrUsage},
		{"r=x25519;nope=1", nil, ErrUsage},
		{"x=MLKEM768", nil, ErrUnsupportedGroup},
		{"x=x448", nil, ErrUnsupportedGroup},
		{"noequals", nil, ErrUsage},
		{"=x25519", nil, ErrUsage},
		{"a=", nil, ErrUsage},
	} {
		t.Run(tc.in, func(t *testing.T) {
			a, err := ParseArm(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(a.Groups, tc.want) {
				t.Fatalf("got %v %v, want %v", a.Groups, err, tc.want)
			}
		})
	}
	for spec, want := range map[string]float64{"r=x25519;resume=0.5": 0.5, "r=x25519; resume=25%": 0.25, "r=x25519": 0} {
		if a, _ := ParseArm(spec); a.Resume != want {
			t.Errorf("%s: resume %v, want %v", spec, a.Resume, want)
		}
	}
	if GroupName(tls.X25519MLKEM768) != "X25519MLKEM768" || GroupName(tls.CurveP256) != "secp256r1" || GroupName(0x1234) != "0x1234" {
		t.Fatal("GroupName")
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (nginx: worker) (x)) S 4241 4241 4241 0 -1 4194624 100 0 0 0 123 45 6 7 20 0 1 0 98765 1000000 321 18446744073709551615\n"
	p, err := procfs.ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != 4242 || p.PPID != 4241 || p.Comm != "nginx: worker) (x)" || p.State != 'S' ||
		p.UTime != 123 || p.STime != 45 || p.CUTime != 6 || p.CSTime != 7 || p.StartTime != 98765 || p.RSS != 321 || p.TicksWithChildren() != 181 {
		t.Fatalf("%+v", p)
	}
	if _, err := procfs.ParseStat([]byte("12 (x) S 1")); !errors.Is(err, procfs.ErrBadStat) {
		t.Fatalf("short: %v", err)
	}
}

// TestServerCPUSelf tracks this test process (burning CPU) and checks the
// accounting grows by about what getrusage says.
func TestServerCPUSelf(t *testing.T) {
	pt := NewServerCPU("", ServerSelection{PIDs: []int{osGetpid()}})
	if !pt.Refresh() {
		t.Fatal("nothing selected")
	}
	s0, err := pt.Sample()
	if err != nil {
		t.Fatal(err)
	}
	c0 := selfCPU()
	deadline := time.Now().Add(300 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	s1, err := pt.Sample()
	if err != nil {
		t.Fatal(err)
	}
	got := time.Duration(s1.CPUMicros()-s0.CPUMicros()) * time.Microsecond
	want := selfCPU() - c0
	if d := got - want; d < -40*time.Millisecond || d > 40*time.Millisecond {
		t.Fatalf("ServerCPU %v, getrusage %v", got, want)
	}
	if !slices.Contains(s1.PIDs, osGetpid()) || s1.RSSBytes <= 0 {
		t.Fatalf("sample %+v", s1)
	}
	_ = x
}

func TestMainUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"no target", nil, 2, "-target is required"},
		{"bad arm", []string{"-target", "127.0.0.1:1", "-arm", "x=foo"}, 2, "unsupported group"},
		{"bad rate", []string{"-target", "127.0.0.1:1", "-rates", "10,x"}, 2, "bad rate"},
		{"bad scenario", []string{"-target", "127.0.0.1:1", "-scenario", "explode"}, 2, "scenario"},
		{"scenario without pid", []string{"-target", "127.0.0.1:1", "-scenario", "swap"}, 2, "-server-pid"},
		{"bad flag", []string{"-nope"}, 2, "not defined"},
		{"help", []string{"-h"}, 0, "-arm"},
		{"stray arg", []string{"-target", "127.0.0.1:1", "extra"}, 2, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := Main(context.Background(), tc.args, &out, &errb); got != tc.want {
				t.Fatalf("exit %d, want %d; stderr %s", got, tc.want, errb.String())
			}
			if !strings.Contains(errb.String(), tc.msg) {
				t.Fatalf("stderr %q lacks %q", errb.String(), tc.msg)
			}
		})
	}
}

func TestMainRefused(t *testing.T) {
	// A closed loopback port: every request fails, the run itself succeeds
	// unless -fail-on-errors.
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	args := []string{"-target", addr, "-insecure", "-rate", "50", "-duration", "0.2", "-warmup", "0", "-trials", "1",
		"-arm", "c=x25519", "-fail-on-errors", "-timeout", "1s"}
	if got := Main(context.Background(), args, &out, &errb); got != 1 {
		t.Fatalf("exit %d, want 1; %s", got, errb.String())
	}
	if !strings.Contains(out.String(), "| c |") {
		t.Fatalf("summary missing: %s", out.String())
	}
}

// TestClassifyReal makes real requests that fail the ways a new user's
// first run fails, and checks each gets its own reason, keeps the error
// text, and that the fix names the flag.
func TestClassifyReal(t *testing.T) {
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(okHandler))
	tlsSrv.EnableHTTP2 = false
	tlsSrv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(okHandler))
	defer plain.Close()
	closed := listenLoopback(t)
	closedAddr := closed.Addr().String()
	closed.Close()
	pool := x509.NewCertPool()
	pool.AddCert(tlsSrv.Certificate())

	for _, tc := range []struct {
		name, target, sni string
		roots             *x509.CertPool
		reason, text, fix string
	}{
		{"self-signed", tlsSrv.Listener.Addr().String(), "", nil,
			"handshake_unknown_authority", "x509: certificate signed by unknown authority", "-ca FILE"},
		{"wrong name", tlsSrv.Listener.Addr().String(), "wrong.invalid", pool,
			"handshake_bad_certificate_name", "wrong.invalid", "-sni"},
		{"plain HTTP", plain.Listener.Addr().String(), "", nil,
			"handshake_not_tls", "does not look like a TLS handshake", "-target"},
		{"refused", closedAddr, "", nil, "dial_refused", "connection refused", "-target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Target: tc.target, SNI: tc.sni, RootCAs: tc.roots, Timeout: 2 * time.Second}
			q := newRequester(c, Arm{Name: "c", Groups: []tls.CurveID{tls.X25519}})
			r := Request{Intended: time.Now()}
			q.do(context.Background(), &r)
			if r.Err != tc.reason || !strings.Contains(r.ErrText, tc.text) {
				t.Fatalf("reason %q text %q, want %q with %q", r.Err, r.ErrText, tc.reason, tc.text)
			}
			if fix := FixFor(r.Err); !strings.Contains(fix, tc.fix) {
				t.Fatalf("fix for %s: %q lacks %q", r.Err, fix, tc.fix)
			}
		})
	}
}

func TestFailuresAggregate(t *testing.T) {
	res := &Results{Arms: []ArmInfo{{Name: "a"}, {Name: "b"}}, Trials: []*TrialResult{
		{Arm: "a", Requests: 10, ErrorReasons: map[string]int{"handshake_timeout": 2, "dial_refused": 1},
			ErrorSamples: map[string]string{"handshake_timeout": "i/o timeout", "dial_refused": "connection refused"}},
		{Arm: "a", Requests: 10, ErrorReasons: map[string]int{"handshake_timeout": 3},
			ErrorSamples: map[string]string{"handshake_timeout": "later timeout"}},
		{Arm: "b", Requests: 10},
	}}
	got := failures(res)
	if len(got) != 2 || got[0].Reason != "handshake_timeout" || got[0].Count != 5 || got[0].Trials != 2 ||
		got[0].Requests != 20 || got[0].FirstError != "i/o timeout" || got[1].Reason != "dial_refused" || got[1].Fix == "" {
		t.Fatalf("failures = %+v", got)
	}
	if err := allFailed(&Results{Trials: []*TrialResult{{Requests: 5}}, Failures: got}); !errors.Is(err, ErrFailed) ||
		!strings.Contains(err.Error(), "handshake_timeout") {
		t.Fatalf("allFailed = %v", err)
	}
	if err := allFailed(&Results{Trials: []*TrialResult{{Requests: 5}, {Requests: 5, OK: 1}}}); err != nil {
		t.Fatalf("one success: %v", err)
	}
}

func TestResumeAttempt(t *testing.T) {
	for _, share := range []float64{0, 0.1, 0.25, 0.5, 1} {
		n := 0
		for seq := range 1000 {
			if resumeAttempt(seq, share) {
				n++
			}
		}
		// seq 0 never resumes (no ticket yet): at most one short.
		if want := int(share * 1000); n != want && n != want-1 {
			t.Errorf("share %v: %d of 1000 attempts", share, n)
		}
	}
}

// TestH2LoadGroup reads the group from h2load's output (nghttp2 1.52 on
// OpenSSL 3.0, as printed against Caddy).
func TestH2LoadGroup(t *testing.T) {
	for out, want := range map[string]string{
		"TLS Protocol: TLSv1.3\nCipher: TLS_AES_128_GCM_SHA256\nServer Temp Key: X25519 253 bits\n": "x25519",
		"Server Temp Key: ECDH prime256v1 256 bits\n":                                               "secp256r1",
		"Server Temp Key: ECDH secp384r1 384 bits\n":                                                "secp384r1",
		"TLS Protocol: TLSv1.3\n":                                                                   "",
	} {
		if got := h2loadGroup(out); got != want {
			t.Errorf("h2loadGroup(%q) = %q, want %q", out, got, want)
		}
	}
}

// BenchmarkServerCPUSample is one sample of a server (this process): a
// scan of the process table and every thread's schedstat, every 50 ms of a
// trial.
func BenchmarkServerCPUSample(b *testing.B) {
	s := NewServerCPU("", ServerSelection{PIDs: []int{osGetpid()}})
	if !s.Refresh() {
		b.Skip("nothing selected")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}
