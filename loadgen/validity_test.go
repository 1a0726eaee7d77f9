package loadgen

import (
	"crypto/tls"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestArmMeasures(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want tls.CurveID
	}{
		{"a=x25519", tls.X25519},
		{"a=X25519MLKEM768,x25519", tls.X25519MLKEM768},
		{"a=x25519,X25519MLKEM768", tls.X25519MLKEM768}, // crypto/tls's order, not the flag's
		{"a=secp256r1,x25519", tls.X25519},
		{"a=secp384r1", tls.CurveP384},
	} {
		a, err := ParseArm(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Measures(); got != tc.want {
			t.Errorf("%s measures %v, want %v", tc.spec, got, tc.want)
		}
	}
}

func TestJudge(t *testing.T) {
	c := &Config{Target: "x:1", Arms: mustArms(t, "a=x25519"), Rates: []float64{100}, Duration: time.Second}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ws := time.Unix(1000, 0)
	good := func() *TrialResult {
		return &TrialResult{Requests: 1000, OK: 1000, Completed: 1000, RateCompleted: 1000, WindowStart: ws, WindowEnd: ws.Add(time.Second),
			SendLagMS: Latency{P99: 2, Max: 5}}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*TrialResult)
		codes []string
	}{
		{"valid", func(*TrialResult) {}, nil},
		{"lag at the limit", func(tr *TrialResult) { tr.SendLagMS.P99 = 10 }, nil},
		{"lagged", func(tr *TrialResult) { tr.SendLagMS.P99 = 10.5 }, []string{InvalidSendLag}},
		{"1% short is fine", func(tr *TrialResult) { tr.Completed = 990 }, nil},
		{"short", func(tr *TrialResult) { tr.Completed = 989 }, []string{InvalidShort}},
		{"more than scheduled is fine", func(tr *TrialResult) { tr.Completed = 1040 }, nil},
		{"one request short of a small schedule is fine", func(tr *TrialResult) { tr.Requests, tr.OK, tr.Completed = 95, 95, 94 }, nil},
		{"two requests short of a small schedule", func(tr *TrialResult) { tr.Requests, tr.OK, tr.Completed = 95, 95, 93 }, []string{InvalidShort}},
		{"one error in 1000 is fine", func(tr *TrialResult) { tr.Errors, tr.OK = 1, 999 }, nil},
		{"two errors in 1000", func(tr *TrialResult) {
			tr.Errors, tr.OK, tr.Timeouts = 2, 998, 2
			tr.ErrorReasons = map[string]int{"handshake_timeout": 2}
		}, []string{InvalidErrors}},
		{"everything", func(tr *TrialResult) {
			tr.SendLagMS.P99, tr.Completed, tr.Errors, tr.OK = 4000, 410, 546, 454
		}, []string{InvalidSendLag, InvalidShort, InvalidErrors}},
		{"empty", func(tr *TrialResult) { tr.Requests, tr.OK, tr.Completed = 0, 0, 0 }, []string{InvalidEmpty}},
		{"idle sessions held", func(tr *TrialResult) { tr.IdleSessionsWanted, tr.IdleSessionsOpened, tr.IdleSessions = 10, 10, 10 }, nil},
		{"idle session closed", func(tr *TrialResult) { tr.IdleSessionsWanted, tr.IdleSessionsOpened, tr.IdleSessions = 10, 10, 9 }, []string{InvalidIdle}},
		{"idle session not opened", func(tr *TrialResult) {
			tr.IdleSessionsWanted, tr.IdleSessionsOpened, tr.IdleSessions, tr.IdleFirstError = 10, 8, 8, "idle_refused: x"
		}, []string{InvalidIdle}},
		{"CPU read 10 ms late (the limit)", func(tr *TrialResult) {
			tr.CPUSampledFrom, tr.CPUSampledTo = ws.Add(10*time.Millisecond), ws.Add(time.Second)
		}, nil},
		{"CPU read late at the start", func(tr *TrialResult) {
			tr.CPUSampledFrom, tr.CPUSampledTo = ws.Add(11*time.Millisecond), ws.Add(time.Second)
		}, []string{InvalidSampleLate}},
		{"CPU read late at the end", func(tr *TrialResult) {
			tr.CPUSampledFrom, tr.CPUSampledTo = ws, ws.Add(time.Second+360*time.Millisecond)
		}, []string{InvalidSampleLate}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := good()
			tc.edit(tr)
			why := judge(tr, c)
			if len(why) != len(tc.codes) {
				t.Fatalf("judge = %q, want codes %v", why, tc.codes)
			}
			for i, code := range tc.codes {
				if !strings.HasPrefix(why[i], code+": ") {
					t.Errorf("reason %d %q does not open with %s", i, why[i], code)
				}
			}
		})
	}
	off := *c
	off.MaxSendLag, off.MaxShortfall, off.MaxErrorRate = -1, -1, -1
	tr := good()
	tr.SendLagMS.P99, tr.Completed, tr.Errors = 4000, 10, 900
	if why := judge(tr, &off); why != nil {
		t.Fatalf("limits off: %q", why)
	}
}

// TestSummarizeValidOnly: invalid trials stay in the counts but out of the
// CPU figures, ceilings and ratios; an arm that negotiated another group
// gets no ratio; a baseline without a valid trial gives nobody a ratio.
func TestSummarizeValidOnly(t *testing.T) {
	c := &Config{Target: "x:1", Arms: mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519"), Rates: []float64{100, 5000}, Duration: time.Second}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cpu := func(v float64) *float64 { return &v }
	trial := func(arm string, rate float64, valid bool, us float64, group string) *TrialResult {
		tr := &TrialResult{Arm: arm, Rate: rate, Valid: valid, Requests: 100, OK: 100, Groups: map[string]int{group: 100},
			ServerCPUUsPerHandshake: cpu(us)}
		if !valid {
			tr.InvalidReasons = []string{"send_lag: test"}
		}
		return tr
	}
	res := &Results{Cores: 2, Trials: []*TrialResult{
		trial("classical", 100, true, 600, "x25519"),
		trial("classical", 100, true, 620, "x25519"),
		trial("classical", 100, false, 200, "x25519"), // lagged: would drag the mean down
		trial("hybrid", 100, true, 725, "X25519MLKEM768"),
		trial("hybrid", 100, true, 735, "X25519MLKEM768"),
		trial("classical", 5000, false, 300, "x25519"),
		trial("hybrid", 5000, true, 700, "X25519MLKEM768"),
	}}
	sum := summarize(res, c)
	if len(sum) != 4 {
		t.Fatalf("%d rows", len(sum))
	}
	cl, hy, cl5, hy5 := sum[0], sum[1], sum[2], sum[3]
	if cl.Trials != 3 || cl.ValidTrials != 2 || cl.Requests != 300 || cl.ServerCPUUsPerHandshake.Mean != 610 || cl.ServerCPUUsPerHandshake.N != 2 {
		t.Errorf("classical@100 %+v %+v", cl, cl.ServerCPUUsPerHandshake)
	}
	if want := 730.0 / 610; hy.CostRatio != want || hy.CeilingPerSecond != 2e6/730 {
		t.Errorf("hybrid@100 ratio %v ceiling %v, want %v", hy.CostRatio, hy.CeilingPerSecond, want)
	}
	if cl5.ValidTrials != 0 || cl5.ServerCPUUsPerHandshake != nil || cl5.CeilingPerSecond != 0 || cl5.Note == "" {
		t.Errorf("classical@5000 %+v", cl5)
	}
	if hy5.CostRatio != 0 || !strings.Contains(hy5.Note, "baseline") {
		t.Errorf("hybrid@5000 ratio %v note %q", hy5.CostRatio, hy5.Note)
	}

	// OpenSSL 3.0: the hybrid arm falls back to x25519.
	res.Trials = []*TrialResult{trial("classical", 100, true, 600, "x25519"), trial("hybrid", 100, true, 601, "x25519")}
	sum = summarize(res, c)
	if h := sum[1]; h.GroupMismatch == "" || h.CostRatio != 0 || !strings.Contains(h.Note, "X25519MLKEM768") {
		t.Errorf("mismatch: %+v", h)
	}
	if sum[0].CostRatio != 1 {
		t.Errorf("baseline ratio %v", sum[0].CostRatio)
	}
	if w := warnings(&Results{Summary: sum, Server: &ServerInfo{PIDs: []int{1}}}); len(w) != 1 || !strings.Contains(w[0], "not X25519MLKEM768") {
		t.Errorf("warnings %q", w)
	}
	if err := noValidTrial(&Results{Arms: []ArmInfo{{Name: "classical"}}, Trials: []*TrialResult{trial("classical", 100, false, 1, "x25519")}}); err == nil ||
		!strings.Contains(err.Error(), "send_lag") {
		t.Errorf("noValidTrial = %v", err)
	}
}

func TestParseNetTCP(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1060 1 00000000b7eed0bf 100 0 0 10 0
   1: 0100007F:A207 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 741601 1 00000000dafda51f 100 0 0 10 0
   2: 0100007F:A207 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 741700 1 0000000000000000 20 4 30 10 -1
   3: garbage
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5555 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6666 1 0000000000000000 100 0 0 10 0
`
	got := ParseNetTCP([]byte(tcp))
	want := []Listener{{netip.MustParseAddrPort("0.0.0.0:2024"), 1060}, {netip.MustParseAddrPort("127.0.0.1:41479"), 741601}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("tcp: %v, want %v", got, want)
	}
	got6 := ParseNetTCP([]byte(tcp6))
	if len(got6) != 2 || got6[0].Addr != netip.MustParseAddrPort("[::]:443") || got6[1].Addr != netip.MustParseAddrPort("[::1]:8080") || got6[1].Inode != 6666 {
		t.Fatalf("tcp6: %v", got6)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		l    Listener
		ip   netip.Addr
		port uint16
		want bool
	}{
		{want[1], lo, 41479, true},
		{want[1], lo, 41480, false},
		{want[1], netip.MustParseAddr("127.0.0.2"), 41479, false},
		{want[0], lo, 2024, true},  // 0.0.0.0
		{got6[0], lo, 443, true},   // [::] takes IPv4 too
		{got6[1], lo, 8080, false}, // ::1 is not 127.0.0.1
		{Listener{Addr: netip.MustParseAddrPort("[::ffff:127.0.0.1]:9")}, lo, 9, true},
	} {
		if got := tc.l.matches(tc.ip, tc.port); got != tc.want {
			t.Errorf("%v matches %v:%d = %v", tc.l.Addr, tc.ip, tc.port, got)
		}
	}
}

func FuzzParseNetTCP(f *testing.F) {
	f.Add([]byte("   1: 0100007F:A207 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 741601 1 0 100 0 0 10 0\n"))
	f.Add([]byte("   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 6666\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range ParseNetTCP(b) {
			if !l.Addr.IsValid() || l.Inode == 0 {
				t.Fatalf("accepted %v from %q", l, b)
			}
		}
	})
}

// TestStudy: the per-arm table over every rate, from valid trials only:
// the live-swap study's shape (classical 600 µs, hybrid 725 µs: +21%).
func TestStudy(t *testing.T) {
	c := &Config{Target: "x:1", Arms: mustArms(t, "classical=x25519", "hybrid=X25519MLKEM768,x25519", "p256=secp256r1", "fallback=SecP256r1MLKEM768,secp256r1"),
		Rates: []float64{1000, 2000, 4000}, Duration: time.Second}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cpu := func(v float64) *float64 { return &v }
	var trials []*TrialResult
	add := func(arm, group string, rate float64, valid bool, us ...float64) {
		for _, v := range us {
			trials = append(trials, &TrialResult{Arm: arm, Rate: rate, Valid: valid, OK: 10, Groups: map[string]int{group: 10}, ServerCPUUsPerHandshake: cpu(v)})
		}
	}
	add("classical", "x25519", 1000, true, 598, 602)
	add("classical", "x25519", 2000, true, 596, 604)
	add("classical", "x25519", 4000, true, 601, 599)
	add("classical", "x25519", 4000, false, 300) // lagged: not in any figure
	add("hybrid", "X25519MLKEM768", 1000, true, 700, 710)
	add("hybrid", "X25519MLKEM768", 2000, true, 725, 725)
	add("hybrid", "X25519MLKEM768", 4000, true, 750, 740)
	add("p256", "secp256r1", 1000, false, 500)
	add("fallback", "secp256r1", 1000, true, 650)
	rows := study(&Results{Cores: 2, Trials: trials}, c)
	if len(rows) != 4 {
		t.Fatalf("%d rows", len(rows))
	}
	cl, hy, p, fb := rows[0], rows[1], rows[2], rows[3]
	if cl.ValidTrials != 6 || cl.Trials != 7 || cl.ServerCPUUsPerHandshake.Mean != 600 || cl.CeilingPerSecond != 2e6/600 ||
		cl.Flat == nil || !*cl.Flat || !strings.HasPrefix(cl.Flatness, "flat across 1000-4000/s") || *cl.VsBaseline != 0 {
		t.Errorf("classical %+v", cl)
	}
	// pooled sd of (598,602), (596,604), (601,599): sqrt((8+32+2)/3)
	if want := 3.7416573867739413; math.Abs(cl.SpreadUs-want) > 1e-9 || cl.RangeUs != 8 {
		t.Errorf("classical spread %v range %v, want %v and 8", cl.SpreadUs, cl.RangeUs, want)
	}
	if hy.Flat == nil || *hy.Flat || !strings.HasPrefix(hy.Flatness, "not flat: rises 5.7% from 1000/s") || hy.VsBaseline == nil ||
		math.Abs(*hy.VsBaseline-0.2083333333) > 1e-6 {
		t.Errorf("hybrid %+v (vs %v)", hy, *hy.VsBaseline)
	}
	if p.ValidTrials != 0 || p.Note != "no valid trial" || p.VsBaseline != nil {
		t.Errorf("p256 %+v", p)
	}
	if fb.VsBaseline != nil || !strings.Contains(fb.Note, "not SecP256r1MLKEM768") || fb.Flat != nil {
		t.Errorf("fallback %+v", fb)
	}
	md := studyMarkdown(&Results{Cores: 2, Study: rows})
	for _, want := range []string{"| hybrid | X25519MLKEM768 |", "+20.8%", "no valid trial", "**(not SecP256r1MLKEM768)**", "sd 3.7 µs, widest range 8.0 µs"} {
		if !strings.Contains(md, want) {
			t.Errorf("study table lacks %q:\n%s", want, md)
		}
	}
}

// TestSearchMaxRate runs the search against a made-up server that
// sustains capacity handshakes per second.
func TestSearchMaxRate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    float64
		capacity float64
		want     float64 // the max rate found, within 5%
	}{
		{"doubles then bisects", 100, 1000, 1000},
		{"start fails, halves", 100, 30, 30},
		{"capped", 100, 1e9, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Target: "x:1", Arms: mustArms(t, "a=x25519"), Rates: []float64{tc.start}, Duration: time.Second,
				MaxRateSearch: true, Search: Search{Start: tc.start, Steps: 6, Max: 800}}
			if tc.capacity < 1e9 {
				c.Search.Max = 0
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			var tried []float64
			m := c.searchMaxRate(t.Context(), c.Arms[0], func(rate float64) *TrialResult {
				tried = append(tried, rate)
				tr := &TrialResult{Valid: rate <= tc.capacity, LatencyMS: Latency{P99: 5}}
				if !tr.Valid {
					tr.InvalidReasons = []string{"short: made up"}
				}
				return tr
			})
			if m.Rate > tc.want || m.Rate < 0.95*tc.want || len(m.Steps) > c.Search.MaxTrials {
				t.Fatalf("max rate %v after %v, want about %v", m.Rate, tried, tc.want)
			}
			if tc.capacity < 1e9 && (len(m.LimitedBy) == 0 || m.LimitedBy[0] != "short: made up") {
				t.Fatalf("limited by %q", m.LimitedBy)
			}
			t.Logf("tried %v: max %v", tried, m.Rate)
		})
	}
	// Latency past the limit fails a step even when the trial is valid.
	c := &Config{Target: "x:1", Arms: mustArms(t, "a=x25519"), Rates: []float64{100}, Duration: time.Second, MaxRateSearch: true,
		Search: Search{Steps: 3}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := c.searchMaxRate(t.Context(), c.Arms[0], func(rate float64) *TrialResult {
		return &TrialResult{Valid: true, LatencyMS: Latency{P99: rate / 4}} // 400/s: 100 ms
	})
	if m.Rate < 300 || m.Rate > 400 || !strings.HasPrefix(m.LimitedBy[0], "p99: ") {
		t.Fatalf("p99 limit: %v, %q", m.Rate, m.LimitedBy)
	}
}

func TestCompareCeiling(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	res := &Results{Cores: 2, Trials: []*TrialResult{
		{Arm: "a", Rate: 200, Valid: true, ServerCPUUsPerHandshake: v(500), ClientCPUUsPerHandshake: 1500},
		{Arm: "a", Rate: 200, Valid: false, ServerCPUUsPerHandshake: v(100), ClientCPUUsPerHandshake: 100},
	}}
	// Server-only ceiling 4000/s, shared 1000/s.
	m := MaxRate{Arm: "a", Rate: 900, LimitedBy: []string{"send_lag: p99 send lag 30 ms"}}
	compareCeiling(&m, res)
	if m.ServerCeiling != 4000 || m.SharedCeiling != 1000 || !m.Agrees || !strings.Contains(m.Note, "agree within 25%") {
		t.Fatalf("agrees: %+v", m)
	}
	m = MaxRate{Arm: "a", Rate: 500, LimitedBy: []string{"send_lag: p99 send lag 30 ms"}}
	compareCeiling(&m, res)
	if m.Agrees || !strings.Contains(m.Note, "failed before the cores were saturated") || !strings.Contains(m.Note, "its limit on this machine") {
		t.Fatalf("below: %+v", m)
	}
	m = MaxRate{Arm: "a", Rate: 3200, LimitedBy: []string{"short: x"},
		Steps: []SearchStep{{Rate: 3200, Pass: true, ServerCPUUsPerHandshake: v(250), ClientCPUUsPerHandshake: 350}}}
	compareCeiling(&m, res)
	if m.Agrees || !strings.Contains(m.Note, "not flat") || !strings.Contains(m.Note, "ceiling is 3333/s (-4%)") {
		t.Fatalf("above: %+v", m)
	}
	// Above the ladder's ceiling and well below its own: loadgen lagged.
	m = MaxRate{Arm: "a", Rate: 1600, LimitedBy: []string{"send_lag: p99 send lag 30 ms"},
		Steps: []SearchStep{{Rate: 1600, Pass: true, ServerCPUUsPerHandshake: v(250), ClientCPUUsPerHandshake: 350}}}
	compareCeiling(&m, res)
	if m.Agrees || !strings.Contains(m.Note, "ceiling is 3333/s (-52%)") || !strings.Contains(m.Note, "even at that cost they disagree") ||
		!strings.Contains(m.Note, "loadgen lagged first") {
		t.Fatalf("above, lagged: %+v", m)
	}
	m = MaxRate{Arm: "a", Rate: 3200, LimitedBy: []string{"short: x"},
		Steps: []SearchStep{{Rate: 3200, Pass: true, ServerCPUUsPerHandshake: v(250), ClientCPUUsPerHandshake: 350}}}
	if compareCeiling(&m, res); strings.Contains(m.Note, "even at that cost") {
		t.Fatalf("above, agreeing at its own cost: %+v", m)
	}
	m = MaxRate{Arm: "b"}
	if compareCeiling(&m, res); !strings.Contains(m.Note, "no valid ladder trial") {
		t.Fatalf("no ladder: %+v", m)
	}
}
