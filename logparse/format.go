package logparse

import (
	"fmt"
	"strings"
)

// Escape is the value escaping that nginx applies to variables of a
// log_format (the escape= parameter).
type Escape uint8

// Escape modes.
const (
	// EscapeDefault: '"', '\' and bytes < 0x20 or >= 0x7f are written as \xHH;
	// empty and missing values are written as "-".
	EscapeDefault Escape = iota
	// EscapeJSON: JSON string escaping; empty and missing values are empty.
	EscapeJSON
	// EscapeNone: nothing is escaped.
	EscapeNone
)

// String returns the escape= spelling.
func (e Escape) String() string {
	switch e {
	case EscapeJSON:
		return "json"
	case EscapeNone:
		return "none"
	default:
		return "default"
	}
}

// Var identifies an nginx variable that pqwatch understands. Variables it does
// not understand are matched and ignored (VarOther).
type Var uint8

// Understood variables.
const (
	VarOther Var = iota
	VarRemoteAddr
	VarRemotePort
	VarMsec
	VarTimeLocal
	VarTimeISO8601
	VarRequest
	VarRequestMethod
	VarRequestURI
	VarStatus
	VarHTTPHost
	VarHost
	VarServerName
	VarHTTPUserAgent
	VarSSLProtocol
	VarSSLCipher
	VarSSLCurve
	VarSSLCurves
	VarPID
	VarConnection
	VarRequestTime
	VarConnectionRequests
	numVars
)

var varNames = map[string]Var{
	"remote_addr":         VarRemoteAddr,
	"remote_port":         VarRemotePort,
	"msec":                VarMsec,
	"time_local":          VarTimeLocal,
	"time_iso8601":        VarTimeISO8601,
	"request":             VarRequest,
	"request_method":      VarRequestMethod,
	"request_uri":         VarRequestURI,
	"status":              VarStatus,
	"http_host":           VarHTTPHost,
	"host":                VarHost,
	"server_name":         VarServerName,
	"http_user_agent":     VarHTTPUserAgent,
	"ssl_protocol":        VarSSLProtocol,
	"ssl_cipher":          VarSSLCipher,
	"ssl_curve":           VarSSLCurve,
	"ssl_curves":          VarSSLCurves,
	"pid":                 VarPID,
	"connection":          VarConnection,
	"request_time":        VarRequestTime,
	"connection_requests": VarConnectionRequests,
}

// segment is one step of a compiled format: a variable followed by the
// literal text up to the next variable. The first segment may have no
// variable (a leading literal).
type segment struct {
	v      Var
	hasVar bool
	name   string // variable name, for String and errors
	lit    []byte // literal that follows the variable (or leads the line)
}

// Format is a compiled nginx log_format. It is immutable and safe for
// concurrent use.
type Format struct {
	Name   string
	Escape Escape
	Text   string // the format string after nginx.conf unquoting

	lead []byte // literal before the first variable
	segs []segment
	has  [numVars]bool
}

// Has reports whether the format logs variable v.
func (f *Format) Has(v Var) bool { return v < numVars && f.has[v] }

// HasPort reports whether the format logs the client port ($remote_port),
// which makes an exact join with captured handshakes possible.
func (f *Format) HasPort() bool { return f.has[VarRemotePort] }

// String returns the log_format directive that defines f.
func (f *Format) String() string {
	var b strings.Builder
	b.WriteString("log_format ")
	if bareName(f.Name) {
		b.WriteString(f.Name)
	} else {
		b.WriteString(quoteConf(f.Name))
	}
	if f.Escape != EscapeDefault || strings.HasPrefix(f.Text, "escape=") {
		b.WriteString(" escape=")
		b.WriteString(f.Escape.String())
	}
	b.WriteByte(' ')
	b.WriteString(quoteConf(f.Text))
	b.WriteByte(';')
	return b.String()
}

// quoteConf quotes s as one nginx.conf word that tokenize reads back as s.
func quoteConf(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `\'`) + "'"
}

// bareName reports whether a log_format name can be written unquoted: it is
// not empty and has only letters, digits, '_', '-' and '.'.
func bareName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isVarChar(s[i]) && s[i] != '-' && s[i] != '.' {
			return false
		}
	}
	return s != ""
}

// CombinedText is nginx's built-in "combined" format.
const CombinedText = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`

// RecommendedText is the format the pqwatch README recommends: it carries the
// client port (exact joins), the worker pid and the TLS parameters.
const RecommendedText = `$remote_addr $remote_port $msec $ssl_protocol $ssl_cipher $ssl_curve $ssl_curves $pid $connection "$request" $status "$http_user_agent" "$host"`

// Combined is the compiled built-in "combined" format.
var Combined = mustCompile("combined", EscapeDefault, CombinedText)

func mustCompile(name string, esc Escape, text string) *Format {
	f, err := CompileFormat(name, esc, text)
	if err != nil {
		panic(err) // only for the package's own constant formats
	}
	return f
}

// ParseEscape parses the value of an escape= parameter.
func ParseEscape(s string) (Escape, error) {
	switch s {
	case "default":
		return EscapeDefault, nil
	case "json":
		return EscapeJSON, nil
	case "none":
		return EscapeNone, nil
	}
	return 0, fmt.Errorf("%w: unknown escape=%q", ErrFormat, s)
}

func isVarChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// CompileFormat compiles a log_format string (as nginx sees it after config
// unquoting and concatenation). Variables are $name or ${name}. Two variables
// with no literal between them cannot be split reliably and are rejected.
func CompileFormat(name string, esc Escape, text string) (*Format, error) {
	f := &Format{Name: name, Escape: esc, Text: text}
	var lit []byte
	cur := -1 // index into f.segs of the segment that collects literal text
	flush := func() {
		if cur < 0 {
			f.lead = append(f.lead, lit...)
		} else {
			f.segs[cur].lit = append(f.segs[cur].lit, lit...)
		}
		lit = lit[:0]
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c != '$' {
			lit = append(lit, c)
			i++
			continue
		}
		i++
		var vn string
		if i < len(text) && text[i] == '{' {
			end := strings.IndexByte(text[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%w %q: unterminated ${", ErrFormat, name)
			}
			vn = text[i+1 : i+end]
			i += end + 1
			for j := 0; j < len(vn); j++ {
				if !isVarChar(vn[j]) {
					return nil, fmt.Errorf("%w %q: invalid variable name %q", ErrFormat, name, vn)
				}
			}
		} else {
			j := i
			for j < len(text) && isVarChar(text[j]) {
				j++
			}
			vn = text[i:j]
			i = j
		}
		if vn == "" {
			return nil, fmt.Errorf("%w %q: invalid variable name at offset %d", ErrFormat, name, i)
		}
		flush()
		if cur >= 0 && len(f.segs[cur].lit) == 0 {
			return nil, fmt.Errorf("%w %q: variables $%s and $%s have no separator", ErrFormat, name, f.segs[cur].name, vn)
		}
		v := varNames[strings.ToLower(vn)]
		f.segs = append(f.segs, segment{v: v, hasVar: true, name: vn})
		cur = len(f.segs) - 1
		f.has[v] = true
	}
	flush()
	f.has[VarOther] = false
	return f, nil
}

// ParseLogFormat compiles the format given on the command line
// (-nginx-log-format). It accepts either a bare format string
// ('$remote_addr - ...', escape=default, name "custom") or a complete
// directive as written in nginx.conf
// ("log_format name [escape=json] '...' '...';").
func ParseLogFormat(def string) (*Format, error) {
	t := strings.TrimSpace(def)
	if strings.HasPrefix(t, "log_format") && len(t) > len("log_format") &&
		(t[len("log_format")] == ' ' || t[len("log_format")] == '\t' || t[len("log_format")] == '\n') {
		if !strings.HasSuffix(t, ";") {
			t += ";"
		}
		conf, err := ParseNginxConfig([]byte(t))
		if err != nil {
			return nil, err
		}
		if len(conf.Order) > 1 {
			return conf.Formats[conf.Order[len(conf.Order)-1]], nil
		}
		return nil, fmt.Errorf("%w: no log_format in %q", ErrFormat, def)
	}
	return CompileFormat("custom", EscapeDefault, def)
}
