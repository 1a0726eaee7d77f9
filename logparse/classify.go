package logparse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// UpstreamInfoText is ingress-nginx's default log_format, "upstreaminfo":
// the client's address without its port, $time_local, $request_time.
const UpstreamInfoText = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id`

// RecommendedQuotedText is RecommendedText as the documentation writes
// it, $ssl_curves quoted.
const RecommendedQuotedText = `$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher $ssl_curve "$ssl_curves" $pid $connection "$request" $status "$http_user_agent" "$host"`

// The built-in formats an access log's lines are tried in when nothing
// names its format (a container log found under -pod-logs).
var (
	UpstreamInfo      = mustCompile("upstreaminfo", EscapeDefault, UpstreamInfoText)
	RecommendedQuoted = mustCompile("pqwatch", EscapeDefault, RecommendedQuotedText)
	Recommended       = mustCompile("pqwatch", EscapeDefault, RecommendedText)
)

// BuiltinFormats are the formats a log's lines are tried in, most
// specific first (DiscoverFormat takes the earlier on a tie): pqwatch's
// recommended one (both spellings), ingress-nginx's upstreaminfo, and
// combined.
func BuiltinFormats() []*Format {
	return []*Format{RecommendedQuoted, Recommended, UpstreamInfo, Combined}
}

// SampleLines reads up to maxLines lines of path opened as a log is
// (OpenLog: a symbolic link only into dirs): its first ones, or with
// fromEnd the whole lines of its last tailBytes. A file that cannot be
// read gives none and the error.
func SampleLines(path string, dirs []string, fromEnd bool, maxLines int, tailBytes int64) ([][]byte, error) {
	f, err := OpenLog(path, dirs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := io.LimitReader(f, 4<<20)
	first := false // skip a partial line where the tail began
	if fromEnd {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > tailBytes {
			if _, err := f.Seek(st.Size()-tailBytes, io.SeekStart); err != nil {
				return nil, err
			}
			first = true
		}
		r = io.LimitReader(f, tailBytes)
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
	if len(lines) > maxLines {
		if fromEnd {
			lines = lines[len(lines)-maxLines:]
		} else {
			lines = lines[:maxLines]
		}
	}
	return lines, nil
}

// Access-log kinds ClassifyAccessLog tells.
const (
	KindNginx = "nginx"
	KindCaddy = "caddy"
)

// Classified is what ClassifyAccessLog found in a log's sample.
type Classified struct {
	Kind   string  // KindNginx, KindCaddy, or "" when neither
	Format *Format // KindNginx: the format most lines parse in
	Lines  int     // the sample's access-log candidates: non-empty lines (a container log's complete stdout lines)
	Parsed int     // how many parse as Kind (in Format)
	// Why says, when Kind is "", why the log is none: no lines yet
	// (Lines 0), or how few parsed.
	Why string
}

// ClassifyAccessLog says whether a log's sample lines (a container log's
// unwrapped first: its stderr and partial lines left out) are an nginx
// access log in one of candidates, or Caddy's JSON access log: the kind
// under which most lines parse, when at least half do.
func ClassifyAccessLog(sample [][]byte, candidates []*Format) Classified {
	lines := UnwrapSample(sample)
	var c Classified
	for _, l := range lines {
		if len(l) > 0 {
			c.Lines++
		}
	}
	if c.Lines == 0 {
		c.Why = "no access-log lines yet (no stdout lines)"
		return c
	}
	f, nginx := DiscoverFormat(lines, candidates)
	var cl CaddyLine
	caddy := 0
	for _, l := range lines {
		if len(l) > 0 && ParseCaddyLine(l, &cl) == nil {
			caddy++
		}
	}
	switch {
	case caddy > nginx && caddy*2 >= c.Lines:
		c.Kind, c.Parsed = KindCaddy, caddy
	case nginx >= caddy && nginx*2 >= c.Lines && f != nil:
		c.Kind, c.Format, c.Parsed = KindNginx, f, nginx
	default:
		name := "none"
		if f != nil {
			name = f.Name
		}
		c.Parsed = max(nginx, caddy)
		c.Why = fmt.Sprintf("%d of %d lines parse as an nginx access log (best format: %s), %d as Caddy's JSON access log; half are needed", nginx, c.Lines, name, caddy)
	}
	return c
}
