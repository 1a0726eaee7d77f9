package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/sniffer"
)

// parsePorts reads "443,8443" into ports.
func parsePorts(s string) ([]uint16, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("-ports: bad port %q", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// progress prints a progress line on stderr for long files, only when
// stderr is a terminal.
type progress struct {
	w       io.Writer
	tty     bool
	printed bool
	start   time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) fn(path string) sniffer.Progress {
	if !p.tty {
		return nil
	}
	p.start = time.Now()
	return func(read, total int64) {
		if time.Since(p.start) < time.Second {
			return
		}
		p.printed = true
		pct := 0.0
		if total > 0 {
			pct = 100 * float64(read) / float64(total)
		}
		fmt.Fprintf(p.w, "\r%s: %5.1f%% %d/%d MB", path, pct, read>>20, total>>20)
	}
}

func (p *progress) done() {
	if p.printed {
		fmt.Fprint(p.w, "\r\033[K")
		p.printed = false
	}
}

// newFlagSet returns a command's flag set writing errors and usage (the
// synopsis, a blank line, the flags) to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}
