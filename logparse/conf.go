package logparse

import (
	"errors"
	"fmt"
	"strings"
)

// NginxConfig is what ParseNginxConfig finds in an nginx.conf text.
type NginxConfig struct {
	// Formats by log_format name; "combined" is always present.
	Formats map[string]*Format
	// Order lists the log_format names in the order they were defined
	// ("combined" first unless redefined).
	Order []string
	// AccessLogs lists the access_log directives in order, "off" left out.
	AccessLogs []AccessLog
}

// AccessLog is one access_log directive.
type AccessLog struct {
	Path   string  // as written (relative paths are relative to nginx's prefix)
	Format *Format // nil when the named format is not defined in the text
	Name   string  // the format name as written ("combined" when omitted)
}

// ParseNginxConf extracts the log formats of an nginx.conf text. The map holds
// every log_format by name ("combined" always) and, in addition, every
// access_log path mapped to the format it uses, so both a -nginx-log FILE and a
// format name can be looked up. include directives are not followed (no I/O
// here); pass the concatenated text to include them.
func ParseNginxConf(confText []byte) (map[string]*Format, error) {
	c, err := ParseNginxConfig(confText)
	if c == nil {
		return nil, err
	}
	m := make(map[string]*Format, len(c.Formats)+len(c.AccessLogs))
	for k, v := range c.Formats {
		m[k] = v
	}
	for _, a := range c.AccessLogs {
		if a.Format != nil {
			if _, clash := c.Formats[a.Path]; !clash {
				m[a.Path] = a.Format
			}
		}
	}
	return m, err
}

// ParseNginxConfig parses the log_format and access_log directives of an
// nginx.conf text. A log_format that cannot be compiled is reported in the
// returned error (errors.Join of all of them) while the others are still
// returned; a text that cannot be tokenized returns a nil config.
func ParseNginxConfig(confText []byte) (*NginxConfig, error) {
	c := &NginxConfig{Formats: map[string]*Format{"combined": Combined}, Order: []string{"combined"}}
	var errs []error
	var refs []int // indexes into AccessLogs to resolve at the end
	err := tokenize(confText, func(args []string) {
		if len(args) == 0 {
			return
		}
		switch args[0] {
		case "log_format":
			if len(args) < 3 {
				errs = append(errs, fmt.Errorf("%w: log_format needs a name and a format", ErrFormat))
				return
			}
			name, rest := args[1], args[2:]
			esc := EscapeDefault
			if strings.HasPrefix(rest[0], "escape=") {
				e, err := ParseEscape(strings.TrimPrefix(rest[0], "escape="))
				if err != nil {
					errs = append(errs, err)
					return
				}
				esc, rest = e, rest[1:]
			}
			f, err := CompileFormat(name, esc, strings.Join(rest, ""))
			if err != nil {
				errs = append(errs, err)
				return
			}
			if _, ok := c.Formats[name]; !ok {
				c.Order = append(c.Order, name)
			}
			c.Formats[name] = f
		case "access_log":
			if len(args) < 2 || args[1] == "off" {
				return
			}
			a := AccessLog{Path: args[1], Name: "combined"}
			if len(args) >= 3 && !strings.Contains(args[2], "=") {
				a.Name = args[2]
			}
			c.AccessLogs = append(c.AccessLogs, a)
			refs = append(refs, len(c.AccessLogs)-1)
		}
	})
	if err != nil {
		return nil, err
	}
	for _, i := range refs {
		c.AccessLogs[i].Format = c.Formats[c.AccessLogs[i].Name]
	}
	return c, errors.Join(errs...)
}

// tokenize splits an nginx.conf text into directives the way
// ngx_conf_read_token does (quotes, backslash escapes, # comments, ${var}
// in bare words) and calls fn with each simple or block directive's words.
func tokenize(text []byte, fn func(args []string)) error {
	var args []string
	var word []byte
	inWord := false
	depth := 0
	endWord := func() {
		if inWord {
			args = append(args, string(word))
			word = word[:0]
			inWord = false
		}
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '#' && !inWord:
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			endWord()
		case c == ';':
			endWord()
			fn(args)
			args = args[:0]
		case c == '{' && !(inWord && len(word) > 0 && word[len(word)-1] == '$'):
			endWord()
			fn(args)
			args = args[:0]
			depth++
		case c == '}' && !inWord:
			if len(args) > 0 {
				return fmt.Errorf("%w: unexpected } after a directive %s", ErrConf, shape([]byte(args[0])))
			}
			if depth == 0 {
				return fmt.Errorf("%w: unbalanced }", ErrConf)
			}
			depth--
		case (c == '"' || c == '\'') && !inWord:
			q := c
			inWord = true
			closed := false
			for i++; i < len(text); i++ {
				c = text[i]
				if c == '\\' && i+1 < len(text) {
					switch n := text[i+1]; n {
					case '"', '\'', '\\':
						word = append(word, n)
						i++
						continue
					case 't':
						word = append(word, '\t')
						i++
						continue
					case 'r':
						word = append(word, '\r')
						i++
						continue
					case 'n':
						word = append(word, '\n')
						i++
						continue
					}
				}
				if c == q {
					closed = true
					break
				}
				word = append(word, c)
			}
			if !closed {
				return fmt.Errorf("%w: unterminated quoted string", ErrConf)
			}
			endWord() // nginx requires a separator after a quoted string; be lenient
		case c == '\\' && i+1 < len(text):
			inWord = true
			i++
			word = append(word, text[i])
		case c == '$' && i+1 < len(text) && text[i+1] == '{':
			inWord = true
			end := i + 2
			for end < len(text) && text[end] != '}' {
				end++
			}
			if end == len(text) {
				return fmt.Errorf("%w: unterminated ${", ErrConf)
			}
			word = append(word, text[i:end+1]...)
			i = end
		default:
			inWord = true
			word = append(word, c)
		}
	}
	endWord()
	if len(args) > 0 {
		return fmt.Errorf("%w: a directive %s not terminated by ;", ErrConf, shape([]byte(args[0])))
	}
	if depth != 0 {
		return fmt.Errorf("%w: unbalanced {", ErrConf)
	}
	return nil
}
