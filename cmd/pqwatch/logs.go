package main

import (
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
)

// nginxLogs resolves the format of every nginx access log the flags name
// (logparse.ChooseFormats; with fromEnd from the logs' last lines, as run
// starts at the end).
func nginxLogs(cf *commonFlags, fromEnd bool) ([]logjoin.NginxLog, error) {
	chosen, err := logparse.ChooseFormats(logparse.NginxLogs{Conf: cf.nginxConf, LogFormat: cf.nginxLogFmt, As: cf.nginxLogsAs,
		Paths: cf.nginxLogs, SymlinkDirs: cf.symlinkDirList(), FromEnd: fromEnd})
	if err != nil {
		return nil, err
	}
	out := make([]logjoin.NginxLog, len(chosen))
	for i, c := range chosen {
		out[i] = logjoin.NginxLog{Path: c.Path, Format: c.Format, How: c.How}
	}
	return out, nil
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
