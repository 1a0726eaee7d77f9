package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
)

// How an nginx access log's format was chosen (logjoin.NginxLog.How, shown
// in the summary and in warnings).
const (
	howPerFile   = "-nginx-log-as"
	howFlag      = "-nginx-log-format"
	howConfPath  = "nginx.conf access_log"
	howFound     = "found: the format its lines parse in"
	howDefault   = "default"
	sampleLines  = 200      // lines tried per candidate format
	sampleTailKB = 64 << 10 // run: the existing log's last bytes are tried
)

// nginxLogs resolves the format of every nginx access log the flags name,
// in this order: -nginx-log-as NAME=PATH; -nginx-log-format (a conf format
// name, or a definition); the format -nginx-conf's access_log line names
// for that path; the conf format (combined included) under which most of
// the log's own lines parse (its first lines; with fromEnd, the last ones,
// as run starts at the end); combined.
func nginxLogs(cf *commonFlags, fromEnd bool) ([]logjoin.NginxLog, error) {
	var conf *logparse.NginxConfig
	if cf.nginxConf != "" {
		text, err := readConfined(cf.nginxConf, cf.symlinkDirList())
		if err != nil {
			return nil, fmt.Errorf("-nginx-conf: %w", err)
		}
		conf, err = logparse.ParseNginxConfig(text)
		if conf == nil {
			return nil, fmt.Errorf("-nginx-conf %s: %w", cf.nginxConf, err)
		}
	}
	byName := func(name string) *logparse.Format {
		if conf != nil {
			return conf.Formats[name]
		}
		if name == "combined" {
			return logparse.Combined
		}
		return nil
	}
	var explicit *logparse.Format
	if def := cf.nginxLogFmt; def != "" {
		if !strings.Contains(def, "$") {
			// A value with no variable is the name of a conf format.
			if explicit = byName(strings.TrimSpace(def)); explicit == nil {
				return nil, fmt.Errorf("-nginx-log-format %q: no log_format of that name%s (pass a format definition, or the name of one defined in -nginx-conf)", def, confNames(conf))
			}
		} else {
			f, err := logparse.ParseLogFormat(def)
			if err != nil {
				return nil, fmt.Errorf("-nginx-log-format: %w", err)
			}
			explicit = f
		}
	}
	var out []logjoin.NginxLog
	for _, v := range cf.nginxLogsAs {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("-nginx-log-as %q: want NAME=PATH (NAME a log_format of -nginx-conf, or combined)", v)
		}
		f := byName(name)
		if f == nil {
			return nil, fmt.Errorf("-nginx-log-as %q: no log_format %q%s", v, name, confNames(conf))
		}
		out = append(out, logjoin.NginxLog{Path: path, Format: f, How: howPerFile})
	}
	for _, path := range cf.nginxLogs {
		l := logjoin.NginxLog{Path: path, Format: logparse.Combined, How: howDefault}
		var fromConf *logparse.Format
		if conf != nil {
			fromConf = confFormat(conf, path)
		}
		switch {
		case explicit != nil:
			l.Format, l.How = explicit, howFlag
		case fromConf != nil:
			l.Format, l.How = fromConf, howConfPath
		default:
			cands := []*logparse.Format{logparse.Combined}
			if conf != nil {
				cands = conf.Candidates()
			}
			if sample := sampleOf(path, cf.symlinkDirList(), fromEnd); len(sample) > 0 {
				if f, n := logparse.DiscoverFormat(sample, cands); f != nil && n > 0 {
					l.Format, l.How = f, howFound
				}
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// confFormat is the format the conf's access_log line for path names.
func confFormat(conf *logparse.NginxConfig, path string) *logparse.Format {
	for _, al := range conf.AccessLogs {
		if al.Path == path && al.Format != nil {
			return al.Format
		}
	}
	return nil
}

// confNames lists the conf's format names for an error message.
func confNames(conf *logparse.NginxConfig) string {
	if conf == nil {
		return " (no -nginx-conf given; only combined is known)"
	}
	return " in -nginx-conf (it has " + strings.Join(conf.Order, ", ") + ")"
}

// sampleOf reads up to sampleLines lines of path: its first ones, or with
// fromEnd the whole lines of its last sampleTailKB. A file that cannot be
// read gives none (the reader reports it later).
func sampleOf(path string, dirs []string, fromEnd bool) [][]byte {
	f, err := logparse.OpenLog(path, dirs)
	if err != nil {
		return nil
	}
	defer f.Close()
	r := io.LimitReader(f, 4<<20)
	first := false // skip a partial line where the tail began
	if fromEnd {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > sampleTailKB {
			if _, err := f.Seek(st.Size()-sampleTailKB, io.SeekStart); err != nil {
				return nil
			}
			first = true
		}
		r = io.LimitReader(f, sampleTailKB)
	}
	var lines [][]byte
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		if b := bytes.TrimRight(sc.Bytes(), "\r"); len(b) > 0 {
			lines = append(lines, bytes.Clone(b))
		}
	}
	if len(lines) > sampleLines {
		if fromEnd {
			lines = lines[len(lines)-sampleLines:]
		} else {
			lines = lines[:sampleLines]
		}
	}
	return lines
}

// readConfined reads the file at path opened as a log is
// (logparse.OpenLog: a symbolic link only into dirs).
func readConfined(path string, dirs []string) ([]byte, error) {
	f, err := logparse.OpenLog(path, dirs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// logFiles are the logs the flags name, each nginx log with its format.
func (c *commonFlags) logFiles() (logjoin.Files, error) {
	f := logjoin.Files{Caddy: c.caddyLogs, ErrorLog: c.nginxErrorLog, SymlinkDirs: c.symlinkDirList()}
	if f.Empty() && len(c.nginxLogs)+len(c.nginxLogsAs) == 0 {
		return f, nil
	}
	nl, err := nginxLogs(c, false)
	if err != nil {
		return f, err
	}
	f.Nginx = nl
	return f, nil
}
