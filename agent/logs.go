package agent

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/join"
	"github.com/pqwatch/pqwatch/logparse"
)

func addrPort(s string) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(s)
	return ap
}

func (a *Agent) tailOpts(path string) logparse.TailOptions {
	o := logparse.TailOptions{Counters: &a.lines, Logger: a.log}
	if a.cfg.StateDir != "" {
		o.OffsetFile = logparse.OffsetFileFor(a.cfg.StateDir, path)
	} else {
		o.StartAtEnd = true
	}
	return o
}

// startTails follows every configured log until ctx ends.
func (a *Agent) startTails(ctx context.Context, wg *sync.WaitGroup) {
	run := func(path string, fn func(line []byte, ts time.Time)) {
		t := logparse.NewTailer(path, a.tailOpts(path))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.Run(ctx, fn); err != nil && ctx.Err() == nil {
				a.log.Error("log tail stopped", "path", path, "err", err)
			}
		}()
	}
	for _, nl := range a.cfg.NginxLogs {
		f := nl.Format
		if f == nil {
			f = logparse.Combined
		}
		var l logparse.NginxLine
		run(nl.Path, func(line []byte, _ time.Time) {
			if err := f.Parse(line, &l); err != nil {
				a.accessLine(join.SourceNginx, join.Line{}, false, true)
				return
			}
			jl, ok := join.FromNginx(&l)
			a.accessLine(join.SourceNginx, jl, ok, false)
		})
	}
	for _, p := range a.cfg.CaddyLogs {
		var c logparse.CaddyLine
		run(p, func(line []byte, _ time.Time) {
			if err := logparse.ParseCaddyLine(line, &c); err != nil {
				a.accessLine(join.SourceCaddy, join.Line{}, false, true)
				return
			}
			jl, ok := join.FromCaddy(&c)
			a.accessLine(join.SourceCaddy, jl, ok, false)
		})
	}
	for _, p := range a.cfg.NginxErrorLogs {
		var e logparse.ErrorLine
		run(p, func(line []byte, _ time.Time) {
			if err := logparse.ParseErrorLine(line, time.Local, &e); err != nil {
				return
			}
			if e.Level.Severe() {
				a.log.Warn("nginx error log", "level", e.Level.String(), "pid", e.PID, "msg", string(e.Message))
				if a.procs != nil {
					a.procs.NoteEmerg(e.Time, e.PID, string(e.Message))
				}
			}
		})
	}
}

// accessLine counts one access-log line of source (join.SourceNginx or
// join.SourceCaddy, the same names as the metric's source label) and hands
// it to the joiner: unparsable lines are counted malformed there too; a
// line that parsed but cannot be joined (ok false) is malformed for the
// metric only.
func (a *Agent) accessLine(source string, jl join.Line, ok, unparsable bool) {
	switch {
	case unparsable:
		a.metrics.LogLine(source, exporter.LogLineMalformed)
		a.joiner.CountMalformed(source)
	case !ok:
		a.metrics.LogLine(source, exporter.LogLineMalformed)
	default:
		a.metrics.LogLine(source, exporter.LogLineOK)
		a.joiner.AddLine(jl, time.Now())
	}
}
