package proctrack

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors returned (wrapped) by proctrack. A malformed /proc/stat
// is reported with package procfs's ErrNoBtime.
var (
	// ErrNotSocket reports an fd link that is not "socket:[INODE]".
	ErrNotSocket = errors.New("proctrack: not a socket link")
	// ErrNoConnection reports that no TCP connection matches the addresses.
	ErrNoConnection = errors.New("proctrack: no such connection")
	// ErrNetlink reports a failed sock_diag query.
	ErrNetlink = errors.New("proctrack: sock_diag")
)

// parseSocketLink returns INODE from an fd link "socket:[INODE]".
func parseSocketLink(s string) (uint64, error) {
	v, ok := strings.CutPrefix(s, "socket:[")
	if !ok {
		return 0, ErrNotSocket
	}
	v, ok = strings.CutSuffix(v, "]")
	if !ok {
		return 0, ErrNotSocket
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotSocket, err)
	}
	return n, nil
}

// nginxRole is what an nginx process title says it is.
type nginxRole uint8

const (
	roleNone   nginxRole = iota // not an nginx title (or not rewritten yet)
	roleMaster                  // "nginx: master process ..."
	roleWorker                  // "nginx: worker process"
	roleDrain                   // "nginx: worker process is shutting down"
	roleHelper                  // cache manager/loader, privileged agent
)

// nginxTitle classifies a process title and, for a master, returns the
// command line that follows "master process".
func nginxTitle(cmd []byte) (nginxRole, string) {
	s := string(bytes.TrimRight(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '}), " "))
	rest, ok := strings.CutPrefix(s, "nginx: ")
	if !ok {
		return roleNone, ""
	}
	switch {
	case strings.HasPrefix(rest, "master process"):
		return roleMaster, strings.TrimSpace(strings.TrimPrefix(rest, "master process"))
	case strings.HasPrefix(rest, "worker process is shutting down"):
		return roleDrain, ""
	case strings.HasPrefix(rest, "worker process"):
		return roleWorker, ""
	case strings.HasPrefix(rest, "cache "), strings.HasPrefix(rest, "privileged agent"):
		return roleHelper, ""
	}
	return roleNone, ""
}

// masterArgs extracts the binary path, -c config and -p prefix from the
// rewritten master title "/usr/sbin/nginx -c /etc/nginx/nginx.conf -g ...".
func masterArgs(args string) (bin, conf, prefix string) {
	f := strings.Fields(args)
	if len(f) == 0 {
		return "", "", ""
	}
	bin = f[0]
	for i := 1; i < len(f); i++ {
		switch {
		case f[i] == "-c" && i+1 < len(f):
			conf = f[i+1]
			i++
		case f[i] == "-p" && i+1 < len(f):
			prefix = f[i+1]
			i++
		case strings.HasPrefix(f[i], "-c") && len(f[i]) > 2:
			conf = f[i][2:]
		case strings.HasPrefix(f[i], "-p") && len(f[i]) > 2:
			prefix = f[i][2:]
		}
	}
	return bin, conf, prefix
}

// masterErrorLog extracts the -e error log from a master's title ("" when
// it has none): where nginx writes what it logs before its configuration
// is read, a new binary's configuration errors among it.
func masterErrorLog(args string) string {
	f := strings.Fields(args)
	e := ""
	for i := 1; i < len(f); i++ {
		switch {
		case (f[i] == "-c" || f[i] == "-p" || f[i] == "-g") && i+1 < len(f):
			i++
		case f[i] == "-e" && i+1 < len(f):
			e = f[i+1]
			i++
		case strings.HasPrefix(f[i], "-e") && len(f[i]) > 2:
			e = f[i][2:]
		}
	}
	return e
}

// mappedTLSLibs returns the paths of the first libssl and libcrypto shared
// objects found in /proc/PID/maps. NSS's libssl3.so is not OpenSSL and is
// ignored.
func mappedTLSLibs(maps []byte) (libssl, libcrypto string) {
	for line := range bytes.Lines(maps) {
		line = bytes.TrimRight(line, "\n")
		// address perms offset dev inode pathname
		rest := line
		for range 5 {
			rest = bytes.TrimLeft(rest, " ")
			sp := bytes.IndexByte(rest, ' ')
			if sp < 0 {
				rest = nil
				break
			}
			rest = rest[sp:]
		}
		path := bytes.TrimLeft(rest, " ")
		if len(path) == 0 || path[0] != '/' {
			continue
		}
		p := strings.TrimSuffix(string(path), " (deleted)")
		base := p[strings.LastIndexByte(p, '/')+1:]
		switch {
		case libssl == "" && isSoname(base, "libssl"):
			libssl = p
		case libcrypto == "" && isSoname(base, "libcrypto"):
			libcrypto = p
		}
		if libssl != "" && libcrypto != "" {
			break
		}
	}
	return libssl, libcrypto
}

// isSoname reports whether base is name.so or name.so.VERSION, e.g.
// libssl.so.3 or libssl.so.1.1 (but not libssl3.so).
func isSoname(base, name string) bool {
	rest, ok := strings.CutPrefix(base, name+".so")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	if rest[0] != '.' || len(rest) == 1 {
		return false
	}
	for _, c := range rest[1:] {
		if c != '.' && (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// sonameVersion returns "3" for ".../libssl.so.3".
func sonameVersion(path string) string {
	base := path[strings.LastIndexByte(path, '/')+1:]
	if i := strings.Index(base, ".so."); i >= 0 {
		return base[i+4:]
	}
	return ""
}

// findTLSVersion returns the first "OpenSSL 3.0.19", "LibreSSL 3.8.2" or
// "BoringSSL ..." style version string in b, or "".
func findTLSVersion(b []byte) string {
	for _, lib := range [...]string{"OpenSSL ", "LibreSSL "} {
		pat := []byte(lib)
		off := 0
		for {
			i := bytes.Index(b[off:], pat)
			if i < 0 {
				break
			}
			start := off + i
			v := b[start+len(pat):]
			n := versionLen(v)
			if n > 0 {
				return lib + string(v[:n])
			}
			off = start + len(pat)
		}
	}
	return ""
}

// versionLen returns the length of a leading "D+.D+.D+[a-z]*" in v, or 0.
func versionLen(v []byte) int {
	i, dots := 0, 0
	for i < len(v) && i < 24 {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && i > 0 && v[i-1] != '.':
			dots++
		default:
			goto end
		}
		i++
	}
end:
	if dots < 2 || i == 0 || v[i-1] == '.' {
		return 0
	}
	// A release letter or two ("1.1.1w"), not the start of a word.
	j := i
	for j < len(v) && j-i < 3 && v[j] >= 'a' && v[j] <= 'z' {
		j++
	}
	if j-i <= 2 && (j == len(v) || !isAlnum(v[j])) {
		return j
	}
	return i
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// nginxPidDirective returns the value of a top-level "pid" directive in an
// nginx configuration, or "" when there is none. It understands comments,
// quotes and blocks well enough to skip "pid" inside them.
func nginxPidDirective(conf []byte) string {
	depth := 0
	var toks []string
	var cur strings.Builder
	inTok := false
	flush := func() {
		if inTok {
			toks = append(toks, cur.String())
			cur.Reset()
			inTok = false
		}
	}
	for i := 0; i < len(conf); i++ {
		c := conf[i]
		switch {
		case c == '#':
			flush()
			for i < len(conf) && conf[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'':
			flush()
			j := bytes.IndexByte(conf[i+1:], c)
			if j < 0 {
				return ""
			}
			toks = append(toks, string(conf[i+1:i+1+j]))
			i += j + 1
		case c == '{':
			flush()
			depth++
			toks = toks[:0]
		case c == '}':
			flush()
			depth--
			toks = toks[:0]
		case c == ';':
			flush()
			if depth == 0 && len(toks) == 2 && toks[0] == "pid" {
				return toks[1]
			}
			toks = toks[:0]
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			flush()
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	return ""
}
