package main

import (
	"fmt"
	"os"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
)

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

// logFiles are the logs the flags name, each nginx log with its format.
func (c *commonFlags) logFiles() (logjoin.Files, error) {
	f := logjoin.Files{Caddy: c.caddyLogs, ErrorLog: c.nginxErrorLog}
	if f.Empty() && len(c.nginxLogs) == 0 {
		return f, nil
	}
	formatFor, err := nginxFormats(c)
	if err != nil {
		return f, err
	}
	for _, p := range c.nginxLogs {
		f.Nginx = append(f.Nginx, logjoin.NginxLog{Path: p, Format: formatFor(p)})
	}
	return f, nil
}
