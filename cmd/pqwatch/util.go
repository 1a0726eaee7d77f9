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
// synopsis, a blank line, the flags) to stderr. A stderr that keeps flag
// sets (`pqwatch help flags`) is handed it.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if c, ok := stderr.(flagSetCatcher); ok {
		c.CatchFlagSet(fs, synopsis)
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// flagSetCatcher is a stderr that keeps the flag set of the command that
// writes to it (flagCatcher).
type flagSetCatcher interface {
	CatchFlagSet(fs *flag.FlagSet, synopsis string)
}

// byteSize is a flag value of bytes: a number with an optional unit, B,
// KiB, MiB, GiB (powers of 1024) or kB, MB, GB (powers of 1000).
type byteSize int64

func (b *byteSize) String() string {
	switch n := int64(*b); {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	default:
		return strconv.FormatInt(n, 10)
	}
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// parseByteSize reads "64MiB", "1GB", "65536" or "65536B".
func parseByteSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: want bytes, or a number with KiB, MiB, GiB, kB, MB or GB", s)
	}
	return n * mult, nil
}
