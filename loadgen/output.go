package loadgen

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Output file names inside Config.OutDir.
const (
	FileResults  = "results.json"
	FileRequests = "requests.csv"
	FileTrials   = "trials.csv"
	FileSummary  = "summary.md"
	FileLatency  = "latency.svg"
	FileCPU      = "cpu.svg"
	FileRate     = "rate.svg"
)

type outputs struct {
	dir  string
	reqF *os.File
	reqW *csv.Writer
}

func openOutputs(dir string) (*outputs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOutput, err)
	}
	f, err := os.Create(filepath.Join(dir, FileRequests))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOutput, err)
	}
	o := &outputs{dir: dir, reqF: f, reqW: csv.NewWriter(f)}
	if err := o.reqW.Write([]string{"arm", "rate", "trial", "seq", "warmup", "intended_s", "start_s",
		"latency_us", "service_us", "group", "hrr", "pid", "status", "error", "trial_id", "resume_attempt", "resumed"}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOutput, err)
	}
	return o, nil
}

func (o *outputs) close() {
	if o.reqF != nil {
		o.reqW.Flush()
		_ = o.reqF.Close()
		o.reqF = nil
	}
}

// writeRequests appends one CSV row per request; times are seconds since
// the run started.
func (o *outputs) writeRequests(reqs []Request, runStart time.Time) error {
	sec := func(t time.Time) string { return strconv.FormatFloat(t.Sub(runStart).Seconds(), 'f', 6, 64) }
	for i := range reqs {
		r := &reqs[i]
		pid := ""
		if r.PID != 0 {
			pid = strconv.Itoa(r.PID)
		}
		st := ""
		if r.Status != 0 {
			st = strconv.Itoa(r.Status)
		}
		if err := o.reqW.Write([]string{r.Arm, fmtF(r.Rate), strconv.Itoa(r.Trial), strconv.Itoa(r.Seq),
			strconv.FormatBool(r.Warmup), sec(r.Intended), sec(r.Start),
			strconv.FormatInt(r.Latency.Microseconds(), 10), strconv.FormatInt(r.Service.Microseconds(), 10),
			r.Group, strconv.FormatBool(r.HRR), pid, st, r.Err, strconv.Itoa(r.TrialID),
			strconv.FormatBool(r.ResumeAttempt), strconv.FormatBool(r.Resumed)}); err != nil {
			return fmt.Errorf("%w: %v", ErrOutput, err)
		}
	}
	o.reqW.Flush()
	if err := o.reqW.Error(); err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	return nil
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtOpt(p *float64, prec int) string {
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'f', prec, 64)
}

func (o *outputs) writeAll(res *Results) error {
	o.close()
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	files := map[string][]byte{
		FileResults: append(b, '\n'),
		FileTrials:  trialsCSV(res),
		FileSummary: []byte(SummaryMarkdown(res)),
		FileLatency: latencyChart(res),
		FileCPU:     cpuChart(res),
		FileRate:    rateChart(res),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(o.dir, name), data, 0o644); err != nil {
			return fmt.Errorf("%w: %v", ErrOutput, err)
		}
	}
	return nil
}

func trialsCSV(res *Results) []byte {
	var sb strings.Builder
	w := csv.NewWriter(&sb)
	_ = w.Write([]string{"id", "arm", "rate", "trial", "rate_target", "rate_achieved", "requests", "ok", "errors",
		"hrr", "groups", "p50_ms", "p90_ms", "p99_ms", "max_ms", "server_cpu_us_per_handshake",
		"client_cpu_us_per_handshake", "server_rss_max_bytes", "server_pids", "rate_completed", "send_lag_max_ms", "p95_ms",
		"send_lag_p99_ms", "timeouts", "server_cpu_us", "server_cpu_pids", "valid", "invalid_reasons", "group_mismatch",
		"idle_sessions", "server_rss_per_idle_session_bytes", "resumed"})
	for _, t := range res.Trials {
		var groups, pids []string
		for _, g := range sortedKeys(t.Groups) {
			groups = append(groups, g+"="+strconv.Itoa(t.Groups[g]))
		}
		for _, p := range t.ServerPIDs {
			pids = append(pids, strconv.Itoa(p))
		}
		var cpuPIDs []string
		for _, p := range t.ServerCPUPIDs {
			cpuPIDs = append(cpuPIDs, strconv.Itoa(p))
		}
		cpuUs := ""
		if t.ServerCPUUs != nil {
			cpuUs = strconv.FormatInt(*t.ServerCPUUs, 10)
		}
		_ = w.Write([]string{strconv.Itoa(t.ID), t.Arm, fmtF(t.Rate), strconv.Itoa(t.Trial), fmtF(t.RateTarget),
			strconv.FormatFloat(t.RateAchieved, 'f', 2, 64), strconv.Itoa(t.Requests), strconv.Itoa(t.OK),
			strconv.Itoa(t.Errors), strconv.Itoa(t.HRR), strings.Join(groups, " "),
			ms3(t.LatencyMS.P50), ms3(t.LatencyMS.P90), ms3(t.LatencyMS.P99), ms3(t.LatencyMS.Max),
			fmtOpt(t.ServerCPUUsPerHandshake, 1), strconv.FormatFloat(t.ClientCPUUsPerHandshake, 'f', 1, 64),
			strconv.FormatInt(t.ServerRSSMaxBytes, 10), strings.Join(pids, " "),
			strconv.FormatFloat(t.RateCompleted, 'f', 2, 64), ms3(t.SendLagMS.Max), ms3(t.LatencyMS.P95),
			ms3(t.SendLagMS.P99), strconv.Itoa(t.Timeouts), cpuUs, strings.Join(cpuPIDs, " "), strconv.FormatBool(t.Valid),
			strings.Join(t.InvalidReasons, "; "), t.GroupMismatch, strconv.Itoa(t.IdleSessions), fmtOpt(t.ServerRSSPerIdleSessionBytes, 0),
			strconv.Itoa(t.Resumed)})
	}
	w.Flush()
	return []byte(sb.String())
}

// maxRateMarkdown renders the max-rate searches.
func maxRateMarkdown(res *Results) string {
	if len(res.MaxRates) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Max handshake rate\n\nEach arm's rate doubled while a one-trial step passed (valid, p99 under the limit), then the last pass and the first failure were bisected.\n\n" +
		"| arm | max rate/s | limited by | ladder server-only ceiling/s | with loadgen's CPU/s | agrees (25%) |\n|---|--:|---|--:|--:|---|\n")
	for _, m := range res.MaxRates {
		lim := strings.Join(m.LimitedBy, "; ")
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.0f | %.0f | %v |\n", m.Arm, m.Rate, strings.ReplaceAll(lim, "|", "/"), m.ServerCeiling, m.SharedCeiling, m.Agrees)
	}
	for _, m := range res.MaxRates {
		fmt.Fprintf(&b, "\n%s: %s.\n\n| rate/s | pass | completed/s | p99 ms | send lag p99 ms | errors | server CPU µs/handshake | why not |\n|--:|---|--:|--:|--:|--:|--:|---|\n",
			m.Arm, m.Note)
		for _, st := range m.Steps {
			fmt.Fprintf(&b, "| %g | %v | %.1f | %.3f | %.3f | %d | %s | %s |\n", st.Rate, st.Pass, st.RateCompleted, st.P99MS,
				st.SendLagP99MS, st.Errors, fmtOpt(st.ServerCPUUsPerHandshake, 1), strings.ReplaceAll(strings.Join(st.Why, "; "), "|", "/"))
		}
	}
	return b.String()
}

// idleMarkdown renders the idle-session figures, when a run held any.
func idleMarkdown(res *Results) string {
	var b strings.Builder
	for _, s := range res.Summary {
		if s.ServerRSSPerIdleSessionBytes == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n**Idle sessions** (held open, handshake done and no request, while the load ran; valid trials only). " +
				"Each is a live TLS connection on the server: its memory is the memory per SSL context:\n\n" +
				"| arm | rate/s | idle sessions held | server RSS with them, bytes (± sd) | server RSS per idle session, bytes (± sd) |\n|---|--:|--:|--:|--:|\n")
		}
		sp, with := s.ServerRSSPerIdleSessionBytes, s.ServerRSSWithIdleBytes
		fmt.Fprintf(&b, "| %s | %g | %d | %.0f ± %.0f | %.0f ± %.0f |\n", s.Arm, s.Rate, s.IdleSessions, with.Mean, with.StdDev, sp.Mean, sp.StdDev)
	}
	return b.String()
}

// studyMarkdown renders res.Study: one row per arm, the columns of the
// nginx live-swap study's table.
func studyMarkdown(res *Results) string {
	if len(res.Study) == 0 {
		return ""
	}
	var b strings.Builder
	what := "server CPU"
	if res.Study[0].CPUSource == "client" {
		what = "client CPU (no server measured)"
	}
	fmt.Fprintf(&b, "\n**Per arm, over every rate** (valid trials only):\n\n"+
		"| arm | measures | negotiated | valid trials | %s µs per full handshake (± sd) | vs baseline | implied ceiling/s on %d cores | by rate, µs | flat across rates | trial-to-trial spread |\n"+
		"|---|---|---|--:|--:|--:|--:|---|---|---|\n", what, res.Cores)
	for _, r := range res.Study {
		var neg []string
		for _, g := range sortedKeys(r.Negotiated) {
			neg = append(neg, fmt.Sprintf("%s %d", g, r.Negotiated[g]))
		}
		negotiated := strings.Join(neg, ", ")
		if r.GroupMismatch != "" {
			negotiated += " **(not " + r.Measures + ")**"
		}
		if r.ValidTrials == 0 {
			fmt.Fprintf(&b, "| %s | %s | %s | **0/%d** | no valid trial | | | | | |\n", r.Arm, r.Measures, negotiated, r.Trials)
			continue
		}
		vs := "n/a"
		if r.VsBaseline != nil {
			vs = fmt.Sprintf("%+.1f%%", 100**r.VsBaseline)
		}
		ceil := "n/a"
		if r.CeilingPerSecond > 0 {
			ceil = fmt.Sprintf("%.0f", r.CeilingPerSecond)
		}
		var by []string
		for _, c := range r.ByRate {
			by = append(by, fmt.Sprintf("%g/s: %.1f", c.Rate, c.Mean))
		}
		spread := "one trial per rate"
		if r.SpreadUs > 0 || r.RangeUs > 0 {
			spread = fmt.Sprintf("sd %.1f µs, widest range %.1f µs", r.SpreadUs, r.RangeUs)
		}
		arm := r.Arm
		if strings.Contains(r.Note, "offer a ticket") {
			arm += " (resumes)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %.1f ± %.1f | %s | %s | %s | %s | %s |\n", arm, r.Measures, negotiated,
			r.ValidTrials, r.Trials, r.ServerCPUUsPerHandshake.Mean, r.ServerCPUUsPerHandshake.StdDev, vs, ceil,
			strings.Join(by, ", "), r.Flatness, spread)
	}
	return b.String()
}

// mdText makes text safe inside a Markdown paragraph or table cell.
func mdText(s string) string {
	if s == "" {
		return "(no text)"
	}
	return "`" + strings.NewReplacer("`", "'", "|", "/", "\n", " ").Replace(s) + "`"
}

func ms3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// SummaryMarkdown renders the study-style table of a run.
func SummaryMarkdown(res *Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# pqwatch loadgen: %s\n\n", res.Target)
	fmt.Fprintf(&b, "%s to %s, %d cores, %s, %s arrivals, %g s per trial after %g s warm-up; baseline arm %q.\n\n",
		res.Started.UTC().Format(time.RFC3339), res.Finished.UTC().Format(time.RFC3339), res.Cores,
		res.GoVersion, res.Arrival, res.Duration, res.Warmup, res.Baseline)
	if len(res.Warnings) > 0 {
		b.WriteString("**Warnings**\n\n")
		for _, w := range res.Warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
		b.WriteString("\n")
	}
	b.WriteString("| arm | groups offered | measures | rate/s | valid trials | completed/s | negotiated | server CPU µs/handshake (± sd) | implied ceiling/s on " +
		strconv.Itoa(res.Cores) + " cores | client CPU µs/handshake | cost ratio | p50 ms | p95 ms | p99 ms | errors | HRR |\n")
	b.WriteString("|---|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	groups := map[string]string{}
	for _, a := range res.Arms {
		groups[a.Name] = strings.Join(a.Groups, ",")
	}
	for _, s := range res.Summary {
		var neg []string
		for _, g := range sortedKeys(s.Groups) {
			neg = append(neg, fmt.Sprintf("%s %d", g, s.Groups[g]))
		}
		negotiated := strings.Join(neg, ", ")
		if s.GroupMismatch != "" {
			negotiated += " **(not " + s.Measures + ")**"
		}
		valid := fmt.Sprintf("%d/%d", s.ValidTrials, s.Trials)
		if s.ValidTrials == 0 {
			fmt.Fprintf(&b, "| %s | %s | %s | %g | **%s** | | %s | no valid trial | | | n/a | | | | %d | %d |\n",
				s.Arm, groups[s.Arm], s.Measures, s.Rate, valid, negotiated, s.Errors, s.HRR)
			continue
		}
		srv, ceil := "n/a", "n/a"
		if s.ServerCPUUsPerHandshake != nil {
			srv = fmt.Sprintf("%.1f ± %.1f", s.ServerCPUUsPerHandshake.Mean, s.ServerCPUUsPerHandshake.StdDev)
			ceil = fmt.Sprintf("%.0f", s.CeilingPerSecond)
		}
		ratio := "n/a"
		if s.CostRatio > 0 {
			ratio = fmt.Sprintf("%.3f", s.CostRatio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %g | %s | %.1f | %s | %s | %s | %.1f ± %.1f | %s | %.3f | %.3f | %.3f | %d | %d |\n",
			s.Arm, groups[s.Arm], s.Measures, s.Rate, valid, s.RateCompleted.Mean, negotiated, srv, ceil,
			s.ClientCPUUsPerHandshake.Mean, s.ClientCPUUsPerHandshake.StdDev, ratio, s.P50MS, s.P95MS, s.P99MS, s.Errors, s.HRR)
	}
	b.WriteString(studyMarkdown(res))
	b.WriteString(idleMarkdown(res))
	b.WriteString("\nOnly valid trials enter the figures of a row (an invalid trial is listed below with its reason). " +
		"completed/s: requests that completed OK inside the measured window, per second. " +
		"Cost ratio: the arm's mean server CPU per handshake over the baseline arm's at the same rate " +
		"(client CPU when no server process is measured); not drawn for an arm that did not negotiate the group it measures. " +
		"Latency is measured from the intended send time (coordinated omission corrected).\n")
	if in := res.Server; in != nil && len(in.PIDs) > 0 {
		var procs []string
		for _, p := range in.Processes {
			procs = append(procs, fmt.Sprintf("%d (%s)", p.PID, p.Comm))
		}
		how := in.SelectedBy
		if len(in.Listen) > 0 {
			how += " " + strings.Join(in.Listen, ", ")
		}
		fmt.Fprintf(&b, "\nServer CPU: run time of every thread from /proc/PID/task/TID/schedstat (nanoseconds) "+
			"of the processes %s, selected by %s, and their descendants.\n", strings.Join(procs, ", "), how)
	}
	b.WriteString("\n## Trials\n\n| trial | arm | rate/s | # | valid | completed/s | sent OK/s | send lag p99 ms | errors | timeouts | resumed | server CPU ms | server CPU µs/handshake | p99 ms | invalid because |\n")
	b.WriteString("|--:|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, t := range res.Trials {
		valid := "yes"
		if !t.Valid {
			valid = "**INVALID**"
		}
		cpuMS := ""
		if t.ServerCPUUs != nil {
			cpuMS = fmt.Sprintf("%.1f", float64(*t.ServerCPUUs)/1000)
		}
		why := strings.Join(t.InvalidReasons, "; ")
		if t.GroupMismatch != "" {
			why = strings.TrimPrefix(why+"; "+t.GroupMismatch, "; ")
		}
		fmt.Fprintf(&b, "| %d | %s | %g | %d | %s | %.1f | %.1f | %.3f | %d | %d | %d | %s | %s | %.3f | %s |\n",
			t.ID, t.Arm, t.Rate, t.Trial, valid, t.RateCompleted, t.RateAchieved, t.SendLagMS.P99, t.Errors, t.Timeouts, t.Resumed,
			cpuMS, fmtOpt(t.ServerCPUUsPerHandshake, 1), t.LatencyMS.P99, strings.ReplaceAll(why, "|", "/"))
	}
	if len(res.Failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range res.Failures {
			fmt.Fprintf(&b, "- arm **%s**: %d of %d measured requests failed with `%s` (%d trials). First error: %s\n",
				f.Arm, f.Count, f.Requests, f.Reason, f.Trials, mdText(f.FirstError))
			if f.Fix != "" {
				fmt.Fprintf(&b, "  Fix: %s.\n", f.Fix)
			}
		}
	}
	b.WriteString(maxRateMarkdown(res))
	if h := res.H2Load; h != nil {
		fmt.Fprintf(&b, "\nClient CPU per handshake, arm %s at %g/s: loadgen %.1f µs, h2load %.1f µs (%d handshakes): ratio %.2f. h2load negotiated %s.\n",
			h.Arm, h.Rate, h.LoadgenUsPerHS, h.H2LoadUsPerHandshake, h.Succeeded, h.Ratio, cmp.Or(h.Group, "(not reported)"))
	}
	if res.ScenarioStatus != "" {
		fmt.Fprintf(&b, "\n## Scenario: %s\n\n", res.ScenarioStatus)
		for _, s := range res.Scenarios {
			fmt.Fprintf(&b, "- trial %d %s: **%s** (master %d -> %d) %s\n", s.TrialID, s.Kind, s.Status, s.OldMaster, s.NewMaster, s.Detail)
		}
		b.WriteString("\n| t (s) | trial | step | pid | verified | detail |\n|--:|--:|---|--:|---|---|\n")
		for _, e := range res.Events {
			ok := "FAILED"
			if e.OK {
				ok = "yes"
			}
			fmt.Fprintf(&b, "| %.3f | %d | %s | %d | %s | %s |\n", e.Offset, e.TrialID, e.Step, e.PID, ok,
				strings.ReplaceAll(e.Detail, "|", "/"))
		}
	}
	return b.String()
}
