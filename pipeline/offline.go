package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// Offline is an analysis of capture files: `analyze`, and the demo without
// capture privileges.
type Offline struct {
	Files   []string
	Sniffer sniffer.Config // Ports, MaxFlows, ...; OnRecord is the pipeline's
	Logs    logjoin.Files  // access logs to join, the error log to report
	Summary *report.Summary
	Sinks   []record.Sink // after the summary (JSONL)
	// Progress, when set, reports reading progress per file; Done is
	// called after each file.
	Progress func(path string) sniffer.Progress
	Done     func()
	Stderr   io.Writer // warnings naming the input; nil: discarded
	Stdin    io.Reader // the capture a file named "-" stands for
	// NoMerge keeps every view of a handshake a record of its own (the
	// merge, package merge, is on by default).
	NoMerge bool
}

// OfflineResult says how the run went.
type OfflineResult struct {
	Stats  sniffer.Stats
	Failed int // files that could not be read at all
}

// Run reads every file through the sniffer and the pipeline into the
// summary (finished) and the sinks (flushed).
func (o *Offline) Run(ctx context.Context) (OfflineResult, error) {
	stderr := o.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	sum := o.Summary
	cfg := Config{Sinks: append([]record.Sink{sum}, o.Sinks...)}
	if !o.NoMerge {
		// By capture time: `tcpdump -i any` captures give one record per
		// handshake too.
		cfg.Merge = &merge.Config{Offline: true}
	}
	var batch *logjoin.BatchStage
	if !o.Logs.Empty() {
		cfg.Stages = append(cfg.Stages, func(next func(*record.Handshake)) Stage {
			batch = logjoin.NewBatchStage(o.Logs, next)
			return batch
		})
	}
	p := New(cfg)
	sc := o.Sniffer
	sc.OnRecord = p.Record
	sn := sniffer.New(sc)
	var res OfflineResult
	for _, path := range o.Files {
		if ctx.Err() != nil {
			break
		}
		var prog sniffer.Progress
		if o.Progress != nil {
			prog = o.Progress(path)
		}
		var st sniffer.FileStats
		var err error
		if path == "-" && o.Stdin != nil {
			st, err = sniffer.ReadFrom("stdin", o.Stdin, sn, prog)
		} else {
			st, err = sniffer.ReadFile(path, sn, prog)
		}
		if m := p.Merge(); m != nil {
			// One capture's views are merged, not two files': the same
			// capture given twice stays two captures.
			m.Reset()
		}
		if o.Done != nil {
			o.Done()
		}
		fi := report.FileInfo{Path: path, Format: st.Format, Packets: st.Packets, First: st.First, Last: st.Last}
		switch {
		case err != nil:
			fmt.Fprintln(stderr, "pqwatch analyze:", err)
			fi.Error = err.Error()
			res.Failed++
			sum.Errors["unreadable_file"]++
		case st.Err != nil:
			fmt.Fprintln(stderr, "pqwatch analyze: warning:", st.Err)
			fi.Error = st.Err.Error()
			sum.Errors[fileErrReason(st.Err)]++
		}
		sum.AddFile(fi)
	}
	sn.Flush()
	res.Stats = sn.Stats()
	p.Flush()
	if batch != nil {
		addFileResult(sum, batch.Result(), stderr)
	}
	sum.Packets = res.Stats.Packets
	sum.PacketsOutsidePorts = res.Stats.Filtered
	AddSnifferErrors(sum.Errors, res.Stats)
	sum.Finish()
	return res, p.Close(ctx)
}

// addFileResult puts what the log join found into the summary, and says
// on stderr which files could not be read or match badly.
func addFileResult(sum *report.Summary, fr logjoin.FileResult, stderr io.Writer) {
	for _, err := range fr.ReadErrors {
		fmt.Fprintf(stderr, "pqwatch: %v\n", err)
	}
	for _, l := range fr.Logs {
		warnLogMatch(stderr, l)
	}
	AddLogResult(sum, fr)
}

// AddLogResult puts what a log join found into the summary: log_lines,
// log_unmatched, logs, joins and log_read_error. analyze and run fill the
// same fields.
func AddLogResult(sum *report.Summary, fr logjoin.FileResult) {
	if len(fr.ReadErrors) > 0 {
		sum.Errors["log_read_error"] += uint64(len(fr.ReadErrors))
	}
	for src, n := range fr.Lines {
		sum.LogLines[src] += n
	}
	sum.ServerErrors = append(sum.ServerErrors, fr.ServerErrors...)
	for _, l := range fr.Logs {
		lf := report.LogFile{Path: l.Path, Source: l.Source, Format: l.Format, How: l.How, Lines: l.Lines, Joinable: l.Good, FirstBad: l.FirstBad}
		if l.FirstBadErr != nil {
			lf.BadReason = l.FirstBadErr.Error()
		}
		sum.Logs = append(sum.Logs, lf)
	}
	if !fr.Joined {
		return
	}
	st := fr.Stats
	sum.Joins = &report.JoinStats{
		Joined: int(st.Joined), UnmatchedHandshakes: int(st.UnmatchedHandshakes), Ambiguous: int(st.AmbiguousHandshakes),
		CurveChecked: int(st.CurveChecked), CurveMismatch: int(st.CurveMismatch), Malformed: fr.Malformed,
	}
	for src, n := range fr.Unmatched {
		sum.LogUnmatched[src] += n
	}
}

// warnLogMatch says on stderr when an access log matches badly (under 90%
// of its lines can be joined): which file, the format tried, the first line
// that failed and why, and what to pass instead.
func warnLogMatch(w io.Writer, l logjoin.LogFile) {
	if l.Lines == 0 {
		fmt.Fprintf(w, "pqwatch: warning: %s log %s has no lines: nothing to join\n", l.Source, l.Path)
		return
	}
	if l.Good*10 >= l.Lines*9 {
		return
	}
	fmt.Fprintf(w, "pqwatch: warning: %s log %s: only %d of %d lines can be joined", l.Source, l.Path, l.Good, l.Lines)
	if l.Format != "" {
		fmt.Fprintf(w, " (read as log_format %q, %s)", l.Format, l.How)
	}
	fmt.Fprintf(w, "; first failing line %d (%s; sed -n %dp shows it): %v\n", l.FirstBad, l.FirstBadText, l.FirstBad, l.FirstBadErr)
	switch {
	case errors.Is(l.FirstBadErr, logjoin.ErrNoJoinKey):
		fmt.Fprintf(w, "  its lines carry no client address or time: log $remote_addr (and $remote_port, $msec or $time_local)\n")
	case l.Source == logjoin.SourceNginx:
		fmt.Fprintf(w, "  pass the format it is written in: -nginx-conf FILE (its log_format lines), -nginx-log-as NAME=%s, or -nginx-log-format 'DEFINITION'\n", l.Path)
	default:
		fmt.Fprintf(w, "  -caddy-log reads Caddy's JSON access log (the http.log.access logger, format json)\n")
	}
}

func fileErrReason(err error) string {
	switch {
	case errors.Is(err, sniffer.ErrTruncated):
		return "truncated_file"
	case errors.Is(err, sniffer.ErrCorruptEntry):
		return "corrupt_file"
	}
	return "file_error"
}

// AddSnifferErrors adds a sniffer's error counters to a summary's errors
// (SnifferErrors): analyze, run and the metrics report the same reasons.
func AddSnifferErrors(errs map[string]uint64, st sniffer.Stats) {
	SnifferErrors(st, func(n uint64, reason string) {
		if n > 0 || !strings.HasPrefix(reason, "quic_") && reason != "flows_evicted" {
			errs[reason] += n
		}
	})
}

// SnifferErrors reports a sniffer's error counters by reason: parse errors
// as the sniffer names them, QUIC packets that could not be used as
// quic_REASON, and flows evicted from a full table as flows_evicted.
func SnifferErrors(st sniffer.Stats, add func(n uint64, reason string)) {
	for k, v := range st.Errors {
		add(v, k)
	}
	for _, k := range QUICErrors {
		add(st.QUIC[k], "quic_"+k)
	}
	add(st.FlowsEvicted, "flows_evicted")
}

// QUICErrors are the QUIC counters that count packets that could not be
// used; the others are totals and normal events (datagrams, connections,
// retries, version negotiation, skipped Handshake and 0-RTT packets).
var QUICErrors = []string{"decrypt_failed", "frame_error", "unexpected_frame", "malformed", "unknown_version", "crypto_overflow", "bad_handshake", "evicted"}
