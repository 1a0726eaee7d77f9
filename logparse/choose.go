package logparse

import (
	"fmt"
	"io"
	"strings"
)

// How an nginx access log's format was chosen (ChosenLog.How, shown in
// pqwatch's summary and warnings).
const (
	HowPerFile   = "-nginx-log-as"
	HowFlag      = "-nginx-log-format"
	HowConfPath  = "nginx.conf access_log"
	HowFound     = "found: the format its lines parse in"
	HowDefault   = "default"
	sampleLines  = 200      // lines tried per candidate format
	sampleTailKB = 64 << 10 // run: the existing log's last bytes are tried
)

// NginxLogs are the nginx access logs an operator named and how their
// formats are to be chosen (pqwatch's flags of the same names).
type NginxLogs struct {
	Conf      string   // -nginx-conf: the nginx.conf whose log_format lines describe the logs
	LogFormat string   // -nginx-log-format: a definition, or the name of a conf format
	As        []string // -nginx-log-as: NAME=PATH
	Paths     []string // -nginx-log: the format is chosen for each
	// SymlinkDirs: where a link in a path may lead (OpenLog).
	SymlinkDirs []string
	// FromEnd samples a log's last lines, not its first (a live agent
	// starts reading at the end).
	FromEnd bool
}

// ChosenLog is an access log and the format it is read in.
type ChosenLog struct {
	Path   string
	Format *Format
	How    string // how the format was chosen: HowPerFile, ...
}

// ChooseFormats resolves the format of every nginx access log n names, in
// this order: -nginx-log-as NAME=PATH; -nginx-log-format (a conf format
// name, or a definition); the format -nginx-conf's access_log line names
// for that path; the conf format (combined included) under which most of
// the log's own lines parse (its first lines; with FromEnd, the last
// ones); combined.
func ChooseFormats(n NginxLogs) ([]ChosenLog, error) {
	var conf *NginxConfig
	if n.Conf != "" {
		text, err := readConfined(n.Conf, n.SymlinkDirs)
		if err != nil {
			return nil, fmt.Errorf("-nginx-conf: %w", err)
		}
		conf, err = ParseNginxConfig(text)
		if conf == nil {
			return nil, fmt.Errorf("-nginx-conf %s: %w", n.Conf, err)
		}
	}
	byName := func(name string) *Format {
		if conf != nil {
			return conf.Formats[name]
		}
		if name == "combined" {
			return Combined
		}
		return nil
	}
	var explicit *Format
	if def := n.LogFormat; def != "" {
		if !strings.Contains(def, "$") {
			// A value with no variable is the name of a conf format.
			if explicit = byName(strings.TrimSpace(def)); explicit == nil {
				return nil, fmt.Errorf("-nginx-log-format %q: no log_format of that name%s (pass a format definition, or the name of one defined in -nginx-conf)", def, confNames(conf))
			}
		} else {
			f, err := ParseLogFormat(def)
			if err != nil {
				return nil, fmt.Errorf("-nginx-log-format: %w", err)
			}
			explicit = f
		}
	}
	var out []ChosenLog
	for _, v := range n.As {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("-nginx-log-as %q: want NAME=PATH (NAME a log_format of -nginx-conf, or combined)", v)
		}
		f := byName(name)
		if f == nil {
			return nil, fmt.Errorf("-nginx-log-as %q: no log_format %q%s", v, name, confNames(conf))
		}
		out = append(out, ChosenLog{Path: path, Format: f, How: HowPerFile})
	}
	for _, path := range n.Paths {
		l := ChosenLog{Path: path, Format: Combined, How: HowDefault}
		var fromConf *Format
		if conf != nil {
			fromConf = confFormat(conf, path)
		}
		switch {
		case explicit != nil:
			l.Format, l.How = explicit, HowFlag
		case fromConf != nil:
			l.Format, l.How = fromConf, HowConfPath
		default:
			cands := []*Format{Combined}
			if conf != nil {
				cands = conf.Candidates()
			}
			if sample := sampleOf(path, n.SymlinkDirs, n.FromEnd); len(sample) > 0 {
				if f, n := DiscoverFormat(sample, cands); f != nil && n > 0 {
					l.Format, l.How = f, HowFound
				}
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// confFormat is the format the conf's access_log line for path names.
func confFormat(conf *NginxConfig, path string) *Format {
	for _, al := range conf.AccessLogs {
		if al.Path == path && al.Format != nil {
			return al.Format
		}
	}
	return nil
}

// confNames lists the conf's format names for an error message.
func confNames(conf *NginxConfig) string {
	if conf == nil {
		return " (no -nginx-conf given; only combined is known)"
	}
	return " in -nginx-conf (it has " + strings.Join(conf.Order, ", ") + ")"
}

// sampleOf reads up to sampleLines lines of path: its first ones, or with
// fromEnd the whole lines of its last sampleTailKB. A file that cannot be
// read gives none (the reader reports it later).
func sampleOf(path string, dirs []string, fromEnd bool) [][]byte {
	lines, _ := SampleLines(path, dirs, fromEnd, sampleLines, sampleTailKB)
	return lines
}

// readConfined reads the file at path opened as a log is
// (OpenLog: a symbolic link only into dirs).
func readConfined(path string, dirs []string) ([]byte, error) {
	f, err := OpenLog(path, dirs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
