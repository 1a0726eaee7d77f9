package logjoin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/pqwatch/pqwatch/kubepod"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// LineResult says what became of one access-log line.
type LineResult uint8

const (
	LineOK        LineResult = iota // parsed and joinable
	LineMalformed                   // does not parse in the log's format
	LineUnusable                    // parsed, but has no client address or time to join by
	// LineSkipped: not an access-log line, nothing to count or join. A
	// container log's partial (held until the fragment that ends it, which
	// returns the whole line), an empty container line, or a line of the
	// container's stderr stream: nginx's image sends its error log there,
	// into the same file as the access log on stdout, so those lines are no
	// failed access-log lines (they would make a normal nginx container log
	// "match badly"); they are counted in UnwrapStats().Stderr instead.
	LineSkipped
)

// LineReader turns the lines of one access log into join Lines. The live
// agent (a tailer per log) and offline analysis (whole files) share it. Not
// safe for concurrent use: one per log.
type LineReader struct {
	source string // SourceNginx or SourceCaddy
	format *logparse.Format
	nl     logparse.NginxLine
	cl     logparse.CaddyLine
	uw     logparse.Unwrapper // container log lines (CRI, Docker json-file)
	pod    *record.Pod        // the pod whose container log this is (SetPath)
}

// SetPath says which file the reader reads: a pod's container log under
// kubelet's pod log directory (.../NAMESPACE_NAME_UID/CONTAINER/N.log)
// names its pod, and every line read takes it (Line.Pod). It returns the
// pod, nil for another path.
func (lr *LineReader) SetPath(path string) *record.Pod {
	lr.pod, _ = kubepod.FromLogPath(path)
	return lr.pod
}

// NewNginxReader reads an nginx access log written in format f (nil:
// combined).
func NewNginxReader(f *logparse.Format) *LineReader {
	if f == nil {
		f = logparse.Combined
	}
	return &LineReader{source: SourceNginx, format: f}
}

// NewCaddyReader reads a Caddy JSON access log.
func NewCaddyReader() *LineReader { return &LineReader{source: SourceCaddy} }

// Source is SourceNginx or SourceCaddy.
func (lr *LineReader) Source() string { return lr.source }

// Read parses one line.
func (lr *LineReader) Read(b []byte) (Line, LineResult) {
	l, res, _ := lr.ReadWhy(b)
	return l, res
}

// ErrNoJoinKey: the line parsed but has no client address or time.
var ErrNoJoinKey = errors.New("logjoin: no client address or time to join by")

// ReadWhy parses one line and says why it failed. The lines of a container
// log are unwrapped first (logparse.Unwrapper, detected from the lines): a
// line that is not in the log's wrapping, or a line joined from partials
// past the bound, is LineMalformed; a partial, an empty container line or a
// stderr line is LineSkipped.
func (lr *LineReader) ReadWhy(raw []byte) (Line, LineResult, error) {
	b, stream, complete, err := lr.uw.Unwrap(raw)
	if err != nil {
		return Line{}, LineMalformed, err
	}
	if !complete || stream == logparse.StreamStderr || stream != logparse.StreamNone && len(b) == 0 {
		return Line{}, LineSkipped, nil
	}
	var l Line
	var ok bool
	if lr.source == SourceCaddy {
		if err := logparse.ParseCaddyLine(b, &lr.cl); err != nil {
			return Line{}, LineMalformed, err
		}
		l, ok = FromCaddy(&lr.cl)
	} else {
		if err := lr.format.Parse(b, &lr.nl); err != nil {
			return Line{}, LineMalformed, err
		}
		l, ok = FromNginx(&lr.nl)
	}
	if !ok {
		return Line{}, LineUnusable, ErrNoJoinKey
	}
	l.Pod = lr.pod
	return l, LineOK, nil
}

// Wrapping is the container log format the lines were found in
// (logparse.WrapUndecided until a line decides it).
func (lr *LineReader) Wrapping() logparse.Wrapping { return lr.uw.Wrapping() }

// UnwrapStats counts the container log lines read: stderr lines skipped,
// partials joined, malformed and over-long lines.
func (lr *LineReader) UnwrapStats() logparse.UnwrapStats { return lr.uw.Stats() }

// RuntimeTime is the time the container runtime stamped on the last complete
// line (when it received it); false for a plain log. The join uses the
// access log's own fields, never this.
func (lr *LineReader) RuntimeTime() (time.Time, bool) { return lr.uw.Time() }

// FormatName is the name of the nginx format the reader parses with ("" for
// Caddy).
func (lr *LineReader) FormatName() string {
	if lr.format == nil {
		return ""
	}
	return lr.format.Name
}

// NginxLog is an nginx access log and the format it is written in.
type NginxLog struct {
	Path   string
	Format *logparse.Format // nil: combined
	How    string           // how the format was chosen, for the summary and warnings
}

// Files are the logs of an offline analysis.
type Files struct {
	Nginx    []NginxLog
	Caddy    []string
	ErrorLog string // nginx error log: its severe lines are reported
	// SymlinkDirs: where a symbolic link in a log's path may lead
	// (logparse.OpenLog; -log-symlink-dirs).
	SymlinkDirs []string
}

// Empty reports whether there is nothing to read.
func (f Files) Empty() bool { return len(f.Nginx)+len(f.Caddy) == 0 && f.ErrorLog == "" }

// LogFile is what reading one access log found.
type LogFile struct {
	Path   string
	Source string // SourceNginx or SourceCaddy
	Format string // the nginx log_format name it was read with
	How    string // how that format was chosen
	Lines  int    // non-empty access-log lines (a container log's: complete stdout lines)
	Good   int    // lines that parsed and can be joined
	// Wrapping is the container log format the lines were in: "cri",
	// "docker-json", or "" for the server's own lines.
	Wrapping string
	// Stderr counts a container log's stderr lines, skipped: not access-log
	// lines (nginx's error log when both go to the container's output).
	Stderr int
	// The first line that did not (1-based), and why.
	FirstBad     int
	FirstBadText string // the line described, never its content (logparse.DescribeLine)
	FirstBadErr  error
}

// FileResult is what reading and joining the files found.
type FileResult struct {
	Logs      []LogFile      // one per access log, in the order given
	Lines     map[string]int // source -> non-empty lines read
	Malformed map[string]int // source -> lines that do not parse or cannot be joined
	Unmatched map[string]int // source -> lines no handshake joined
	Joined    bool           // access logs were given and joined
	Stats     Stats
	// ServerErrors are the error log's severe lines (at most 50).
	ServerErrors []string
	ReadErrors   []error // files that could not be read (each named)
	// NotTaken are the logs found (run's -pod-logs) and not read, and why.
	NotTaken []NotTaken
}

// NotTaken is a log found and not read as an access log.
type NotTaken struct {
	Path, Reason string
}

// BatchStage is the offline log join as a pipeline stage: it holds every
// record until Flush, then reads the logs, joins (Batch) and hands the
// records on in the order they came.
type BatchStage struct {
	files  Files
	next   func(*record.Handshake)
	recs   []*record.Handshake
	result FileResult
}

// NewBatchStage returns the stage for files; Result is ready after Flush.
func NewBatchStage(files Files, next func(*record.Handshake)) *BatchStage {
	return &BatchStage{files: files, next: next}
}

// Process holds r for the join.
func (b *BatchStage) Process(r *record.Handshake) { b.recs = append(b.recs, r) }

// Flush reads the logs, joins them with the held records and hands those on.
func (b *BatchStage) Flush() {
	b.result = b.files.Join(b.recs)
	for _, r := range b.recs {
		b.next(r)
	}
	b.recs = nil
}

// Result is what the last Flush found.
func (b *BatchStage) Result() FileResult { return b.result }

// Join reads the files and joins their lines with recs (records gain their
// Log field).
func (f Files) Join(recs []*record.Handshake) FileResult {
	res := FileResult{Lines: map[string]int{}, Malformed: map[string]int{}, Unmatched: map[string]int{}}
	var lines []Line
	read := func(path, how string, lr *LineReader) {
		lr.SetPath(path)
		lf := LogFile{Path: path, Source: lr.source, Format: lr.FormatName(), How: how}
		n := 0
		err := eachLine(path, f.SymlinkDirs, func(b []byte) {
			n++
			if len(b) == 0 {
				return
			}
			l, r, why := lr.ReadWhy(b)
			if r == LineSkipped {
				return
			}
			lf.Lines++
			res.Lines[lr.source]++
			if r != LineOK {
				res.Malformed[lr.source]++
				if lf.FirstBad == 0 {
					lf.FirstBad, lf.FirstBadText, lf.FirstBadErr = n, logparse.DescribeLine(b), why
				}
				return
			}
			lf.Good++
			lines = append(lines, l)
		})
		if err != nil {
			res.ReadErrors = append(res.ReadErrors, fmt.Errorf("%s: %w", path, err))
		}
		if w := lr.Wrapping(); w == logparse.WrapCRI || w == logparse.WrapDocker {
			lf.Wrapping = w.String()
		}
		lf.Stderr = int(lr.UnwrapStats().Stderr)
		res.Logs = append(res.Logs, lf)
	}
	for _, l := range f.Nginx {
		read(l.Path, l.How, NewNginxReader(l.Format))
	}
	for _, p := range f.Caddy {
		read(p, "", NewCaddyReader())
	}
	if f.ErrorLog != "" {
		var el logparse.ErrorLine
		_ = eachLine(f.ErrorLog, f.SymlinkDirs, func(b []byte) {
			if logparse.ParseErrorLine(b, time.Local, &el) == nil && el.Level.Severe() && len(res.ServerErrors) < 50 {
				res.ServerErrors = append(res.ServerErrors, string(b))
			}
		})
	}
	if len(f.Nginx)+len(f.Caddy) == 0 {
		return res
	}
	res.Joined = true
	res.Stats = Batch(recs, lines, Options{})
	for src, ss := range res.Stats.Sources {
		res.Unmatched[src] += int(ss.Unmatched)
	}
	return res
}

// eachLine calls fn for every line of path, without its line ending. The
// file is opened confined (logparse.OpenLog: links only into dirs).
func eachLine(path string, dirs []string, fn func([]byte)) error {
	f, err := logparse.OpenLog(path, dirs)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fn(bytes.TrimRight(sc.Bytes(), "\r"))
	}
	return sc.Err()
}
