package pipeline

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// Result is what a run saw. The pipeline fills the sniffers' counters, the
// merge's, the files read (a Files source) and the offline log join; the
// live caller adds what only it knows (its tailed logs' result, the swap
// events) before Finish.
type Result struct {
	Sniffer   sniffer.Stats
	Merge     merge.Stats
	Delivered uint64 // records handed to the sinks
	// Files are the capture files read, in order; FileErrors counts the
	// files that failed by reason (unreadable_file, truncated_file, ...);
	// Failed is the files that could not be read at all.
	Files      []report.FileInfo
	FileErrors map[string]uint64
	Failed     int
	// Log is the log join's result; nil when no log was joined.
	Log        *logjoin.FileResult
	SwapEvents []report.SwapEvent
}

// Finish completes sum with what the run saw and finishes it: every
// command's summary is finished here, once.
func (r Result) Finish(sum *report.Summary) {
	for _, fi := range r.Files {
		sum.AddFile(fi)
	}
	for k, v := range r.FileErrors {
		sum.Errors[k] += v
	}
	sum.Packets = r.Sniffer.Packets
	sum.PacketsOutsidePorts = r.Sniffer.Filtered
	sum.ViewsMerged, sum.ViewsLate = r.Merge.Merged, r.Merge.Late
	AddSnifferErrors(sum.Errors, r.Sniffer)
	if r.Log != nil {
		AddLogResult(sum, *r.Log)
	}
	sum.SwapEvents = append(sum.SwapEvents, r.SwapEvents...)
	sum.Finish()
}

// warnLogs says on stderr which files of an offline join could not be read
// or match badly.
func warnLogs(stderr io.Writer, fr logjoin.FileResult) {
	for _, err := range fr.ReadErrors {
		fmt.Fprintf(stderr, "pqwatch: %v\n", err)
	}
	for _, l := range fr.Logs {
		warnLogMatch(stderr, l)
	}
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
	for _, n := range fr.NotTaken {
		sum.LogsNotTaken = append(sum.LogsNotTaken, report.LogNotTaken{Path: n.Path, Reason: n.Reason})
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
