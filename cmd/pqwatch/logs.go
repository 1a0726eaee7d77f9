package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/pqwatch/pqwatch/join"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

func init() { report.UAFamily = join.UAFamily }

// logJoin reads the access logs named on the command line and joins them
// with the capture's records (offline).
type logJoin struct {
	nginx    []nginxLog
	caddy    []string
	errorLog string
}

type nginxLog struct {
	path   string
	format *logparse.Format
}

// nginxFormat decides how an nginx access log reads: -nginx-log-format,
// else the log_format that -nginx-conf's access_log line names for the
// path, else the conf's only format, else combined.
func nginxFormats(cf *commonFlags) (func(path string) *logparse.Format, error) {
	var explicit *logparse.Format
	if cf.nginxLogFmt != "" {
		f, err := logparse.ParseLogFormat(cf.nginxLogFmt)
		if err != nil {
			return nil, fmt.Errorf("-nginx-log-format: %w", err)
		}
		explicit = f
	}
	var conf *logparse.NginxConfig
	if cf.nginxConf != "" {
		text, err := os.ReadFile(cf.nginxConf)
		if err != nil {
			return nil, fmt.Errorf("-nginx-conf: %w", err)
		}
		conf, err = logparse.ParseNginxConfig(text)
		if conf == nil {
			return nil, fmt.Errorf("-nginx-conf %s: %w", cf.nginxConf, err)
		}
	}
	return func(path string) *logparse.Format {
		if explicit != nil {
			return explicit
		}
		if conf != nil {
			for _, al := range conf.AccessLogs {
				if al.Path == path && al.Format != nil {
					return al.Format
				}
			}
			if len(conf.Order) == 1 {
				if f := conf.Formats[conf.Order[0]]; f != nil {
					return f
				}
			}
		}
		return logparse.Combined
	}, nil
}

func newLogJoin(cf *commonFlags) (*logJoin, error) {
	if len(cf.nginxLogs)+len(cf.caddyLogs) == 0 && cf.nginxErrorLog == "" {
		return nil, nil
	}
	formatFor, err := nginxFormats(cf)
	if err != nil {
		return nil, err
	}
	j := &logJoin{caddy: cf.caddyLogs, errorLog: cf.nginxErrorLog}
	for _, p := range cf.nginxLogs {
		j.nginx = append(j.nginx, nginxLog{path: p, format: formatFor(p)})
	}
	return j, nil
}

// eachLine calls fn for every line of path (over-long lines are counted by
// the caller through the error).
func eachLine(path string, fn func([]byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fn(bytes.TrimRight(sc.Bytes(), "\r"))
	}
	return sc.Err()
}

func (j *logJoin) run(recs []*record.Handshake, sum *report.Summary) {
	var lines []join.Line
	malformed := map[string]int{}
	var nl logparse.NginxLine
	for _, l := range j.nginx {
		err := eachLine(l.path, func(b []byte) {
			if len(b) == 0 {
				return
			}
			sum.LogLines[join.SourceNginx]++
			if err := l.format.Parse(b, &nl); err != nil {
				malformed[join.SourceNginx]++
				return
			}
			if jl, ok := join.FromNginx(&nl); ok {
				lines = append(lines, jl)
			} else {
				malformed[join.SourceNginx]++
			}
		})
		if err != nil {
			sum.Errors["log_read_error"]++
			fmt.Fprintf(os.Stderr, "pqwatch: %s: %v\n", l.path, err)
		}
	}
	var cl logparse.CaddyLine
	for _, p := range j.caddy {
		err := eachLine(p, func(b []byte) {
			if len(b) == 0 {
				return
			}
			sum.LogLines[join.SourceCaddy]++
			if err := logparse.ParseCaddyLine(b, &cl); err != nil {
				malformed[join.SourceCaddy]++
				return
			}
			if jl, ok := join.FromCaddy(&cl); ok {
				lines = append(lines, jl)
			} else {
				malformed[join.SourceCaddy]++
			}
		})
		if err != nil {
			sum.Errors["log_read_error"]++
			fmt.Fprintf(os.Stderr, "pqwatch: %s: %v\n", p, err)
		}
	}
	if j.errorLog != "" {
		var el logparse.ErrorLine
		_ = eachLine(j.errorLog, func(b []byte) {
			if logparse.ParseErrorLine(b, time.Local, &el) == nil && el.Level.Severe() && len(sum.ServerErrors) < 50 {
				sum.ServerErrors = append(sum.ServerErrors, string(b))
			}
		})
	}
	if len(j.nginx)+len(j.caddy) == 0 {
		return
	}
	st := join.Batch(recs, lines, join.Options{})
	js := &report.JoinStats{
		Joined: int(st.Joined), UnmatchedHandshakes: int(st.UnmatchedHandshakes), Ambiguous: int(st.AmbiguousHandshakes),
		CurveChecked: int(st.CurveChecked), CurveMismatch: int(st.CurveMismatch), Malformed: malformed,
	}
	for src, ss := range st.Sources {
		sum.LogUnmatched[src] += int(ss.Unmatched)
	}
	sum.Joins = js
}
