package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
)

func (a *Agent) tailOpts(path string) logparse.TailOptions {
	o := logparse.TailOptions{Counters: &a.lines, Logger: a.log, SymlinkDirs: a.cfg.SymlinkDirs}
	if a.cfg.StateDir != "" {
		o.OffsetFile = logparse.OffsetFileFor(a.cfg.StateDir, path)
		o.OnSave = a.stateDirSaves()
	} else {
		o.StartAtEnd = true
	}
	return o
}

// stateDirSaves returns one tailer's OnSave: the state directory is
// degraded while any tailer's last save failed, and each failed save is
// counted lost.
func (a *Agent) stateDirSaves() func(error) {
	sh := a.health.Sink("state_dir")
	failing := false
	return func(err error) {
		switch {
		case err != nil && !failing:
			failing = true
			if a.stateFailing.Add(1) == 1 {
				sh.Fail(err.Error())
			}
		case err == nil && failing:
			failing = false
			if a.stateFailing.Add(-1) == 0 {
				sh.OK()
			}
		}
		if err != nil {
			sh.Lost(1, 0)
		}
	}
}

// prepareStateDir creates -state-dir (0700) when it is missing. When it
// cannot, offsets are not saved: each log is read from its end at start,
// as without the flag, and the state directory reports degraded.
func (a *Agent) prepareStateDir() {
	if a.cfg.StateDir == "" {
		return
	}
	a.health.Sink("state_dir") // its series from the start
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		a.log.Warn("-state-dir cannot be created: log offsets are not saved, and each log is read from its end at every start; give a writable directory", "dir", a.cfg.StateDir, "err", err)
		a.health.Sink("state_dir").Fail(err.Error())
		a.cfg.StateDir = ""
	}
}

// tail follows path with opts until ctx ends, handing fn each line.
func (a *Agent) tail(ctx context.Context, wg *sync.WaitGroup, path string, opts logparse.TailOptions, fn func(line []byte, ts time.Time)) {
	t := logparse.NewTailer(path, opts)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := t.Run(ctx, fn); err != nil && ctx.Err() == nil {
			a.log.Error("log tail stopped", "path", path, "err", err)
		}
	}()
}

// tailAccess follows the access log path, read by lr (its format chosen
// as how says), until ctx ends: its lines are counted, checked and handed
// to the join.
func (a *Agent) tailAccess(ctx context.Context, wg *sync.WaitGroup, path, how string, lr *logjoin.LineReader, opts logparse.TailOptions) {
	lr.SetPath(path) // a pod's container log names the pod
	src := lr.Source()
	m := &matchCheck{path: path, how: how, lr: lr, log: a.log}
	f := &logFile{lf: logjoin.LogFile{Path: path, Source: src, Format: lr.FormatName(), How: how}, m: m}
	a.logMu.Lock()
	a.logFiles = append(a.logFiles, f)
	a.logMu.Unlock()
	a.tail(ctx, wg, path, opts, func(line []byte, _ time.Time) {
		l, res, why := lr.ReadWhy(line)
		if res == logjoin.LineSkipped {
			return // a container log's partial or stderr line: no access-log line
		}
		m.add(line, res, why)
		f.add(line, res, why)
		a.accessLine(src, l, res)
	})
}

// startTails follows every configured log until ctx ends, and the access
// logs found under -pod-logs.
func (a *Agent) startTails(ctx context.Context, wg *sync.WaitGroup) {
	run := func(path string, fn func(line []byte, ts time.Time)) { a.tail(ctx, wg, path, a.tailOpts(path), fn) }
	access := func(path, how string, lr *logjoin.LineReader) { a.tailAccess(ctx, wg, path, how, lr, a.tailOpts(path)) }
	for _, nl := range a.cfg.NginxLogs {
		access(nl.Path, nl.How, logjoin.NewNginxReader(nl.Format))
	}
	for _, p := range a.cfg.CaddyLogs {
		access(p, "", logjoin.NewCaddyReader())
	}
	a.startPodLogs(ctx, wg)
	for _, p := range a.cfg.NginxErrorLogs {
		var e logparse.ErrorLine
		run(p, func(line []byte, _ time.Time) {
			if err := logparse.ParseErrorLine(line, time.Local, &e); err != nil {
				return
			}
			if e.Level.Severe() {
				// A summary, never the raw line: the path may lead to
				// another file than nginx's error log.
				a.log.Warn("nginx error log", "path", p, "level", e.Level.String(), "pid", e.PID, "msg", errorSummary(e.Message))
				if a.procs != nil {
					a.procs.NoteEmergIn(p, e.Time, e.PID, string(e.Message))
				}
			}
		})
	}
}

// accessLine counts one access-log line of source (logjoin.SourceNginx or
// logjoin.SourceCaddy, the same names as the metric's source label) and
// hands it to the joiner: unparsable lines are counted malformed there too;
// a line that parsed but cannot be joined is malformed for the metric only.
func (a *Agent) accessLine(source string, l logjoin.Line, res logjoin.LineResult) {
	switch res {
	case logjoin.LineMalformed:
		a.metrics.LogLine(source, exporter.LogLineMalformed)
		a.joiner.CountMalformed(source)
	case logjoin.LineUnusable:
		a.metrics.LogLine(source, exporter.LogLineMalformed)
	default:
		a.metrics.LogLine(source, exporter.LogLineOK)
		a.joiner.AddLine(l, time.Now())
	}
}

// matchCheck watches the first lines a tailer reads from an access log and
// warns once when under 90% of them can be joined: which file, the format,
// the first failing line and why, and what to pass instead.
type matchCheck struct {
	path, how string
	lr        *logjoin.LineReader
	log       *slog.Logger
	n, good   int
	firstBad  string
	firstErr  error
}

const matchSample = 100

func (m *matchCheck) add(line []byte, res logjoin.LineResult, why error) {
	if m.n >= matchSample || len(line) == 0 {
		return
	}
	m.n++
	if res == logjoin.LineOK {
		m.good++
	} else if m.firstErr == nil {
		m.firstBad, m.firstErr = logparse.DescribeLine(line), why
		// The line itself only at debug level: a log path may lead to a
		// file that is not a log, and pqwatch's own log is read by whoever
		// may read the pod's logs.
		m.log.Debug("access log line that cannot be joined", "path", m.path, "line", string(line[:min(len(line), 200)]), "reason", why)
	}
	if m.n == matchSample {
		m.judge()
	}
}

// judge warns when under 90% of the lines seen can be joined. The tailer
// calls it at the 100th line; the drain for a log that had fewer.
func (m *matchCheck) judge() {
	if m.good*10 < m.n*9 {
		hint := "pass its format: -nginx-conf FILE, -nginx-log-as NAME=" + m.path + ", or -nginx-log-format 'DEFINITION'"
		if m.lr.Source() == logjoin.SourceCaddy {
			hint = "-caddy-log reads Caddy's JSON access log (the http.log.access logger, format json)"
		}
		m.log.Warn("access log matches badly: its handshakes will not be joined", "path", m.path, "source", m.lr.Source(),
			"format", m.lr.FormatName(), "format_from", m.how, "joinable", m.good, "of", m.n,
			"first_failing_line", m.firstBad, "reason", m.firstErr, "fix", hint,
			"see_line", "-log-level debug shows it")
	}
}

// maxErrorMsg bounds the part of an nginx error message pqwatch repeats in
// its own log.
const maxErrorMsg = 160

// errorSummary is an nginx error message as pqwatch's log repeats it:
// truncated to maxErrorMsg bytes and quoted (control characters and
// invalid UTF-8 escaped), so no raw line of the file reaches the log.
func errorSummary(msg []byte) string {
	cut := ""
	if len(msg) > maxErrorMsg {
		msg, cut = msg[:maxErrorMsg], fmt.Sprintf("... (%d bytes more)", len(msg)-maxErrorMsg)
	}
	return strconv.Quote(string(msg)) + cut
}

// logFile counts what the tailer read from one access log (lines since the
// tail began: the end of the file at start, or the saved offset), as
// analyze counts a whole file.
type logFile struct {
	mu sync.Mutex
	lf logjoin.LogFile
	n  int // lines read, empty ones included: FirstBad counts them
	m  *matchCheck
}

// judgeShortLogs warns, once the tails have stopped, about each access log
// that matched badly in fewer lines than the tailer's sample: a log read
// in the wrong format is never silent, however few lines it had.
func (a *Agent) judgeShortLogs() {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	for _, f := range a.logFiles {
		if f.m.n > 0 && f.m.n < matchSample {
			f.m.judge()
		}
	}
}

func (f *logFile) add(line []byte, res logjoin.LineResult, why error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(line) == 0 {
		return
	}
	f.lf.Lines++
	if res == logjoin.LineOK {
		f.lf.Good++
	} else if f.lf.FirstBad == 0 {
		f.lf.FirstBad, f.lf.FirstBadText, f.lf.FirstBadErr = f.n, logparse.DescribeLine(line), why
	}
}

// LogResult reports the access logs tailed so far as analyze reports the
// files it read: per log its format and line counts, per source the lines
// read, those that could not be joined and those no handshake joined, and
// the join's counters. Call it after Run for the final counts (Run's drain
// decides every waiting line).
func (a *Agent) LogResult() logjoin.FileResult {
	res := logjoin.FileResult{Lines: map[string]int{}, Malformed: map[string]int{}, Unmatched: map[string]int{}}
	a.logMu.Lock()
	files := slices.Clone(a.logFiles)
	a.logMu.Unlock()
	for _, f := range files {
		f.mu.Lock()
		lf := f.lf
		f.mu.Unlock()
		res.Logs = append(res.Logs, lf)
		res.Lines[lf.Source] += lf.Lines
		res.Malformed[lf.Source] += lf.Lines - lf.Good
	}
	res.NotTaken = a.podLogs.notTakenLogs()
	if a.joiner != nil {
		res.Joined = true
		res.Stats = a.joiner.Stats()
		for src, ss := range res.Stats.Sources {
			res.Unmatched[src] += int(ss.Unmatched)
		}
	}
	return res
}
