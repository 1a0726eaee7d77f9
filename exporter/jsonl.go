package exporter

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// jsonlBufferSize is what a JSONL sink holds before it writes: a few dozen
// records, and while the output fails, the records waiting for it.
const jsonlBufferSize = 64 << 10

// jsonlProbe is how often a failing output is tried again.
const jsonlProbe = time.Second

// JSONL writes one handshake record per line (JSON Lines). It is safe for
// concurrent use; lines are never interleaved. Call Flush before the
// underlying writer is closed.
//
// With a FlushAfter, no line waits in the buffer longer than that: a line
// written into an empty buffer arms a timer that flushes it, so a killed
// agent loses at most that much (and an idle one wakes for nothing). With
// EachLine, every line is written through at once (a pipe to another
// program, or -line-buffered).
//
// A failed write (a full disk) is a state, not an end: the output never
// keeps a partial line (a regular file is cut back to its last whole line;
// any other writer gets the rest of the line first when it writes again),
// the lines that fit in the buffer wait, the rest are dropped and counted
// (Options.Health), the output is tried again every second, and writing
// resumes by itself when it succeeds. Each episode is logged once when it
// begins and once when it ends.
type JSONL struct {
	mu      sync.Mutex
	w       io.Writer
	f       *os.File // w, when it is a regular file: cut back on a partial write
	off     int64    // f's size after the last whole line written
	pending []byte   // whole lines not yet written; with a non-file w, the rest of a partial one first
	line    []byte
	opts    JSONLOptions
	timer   *time.Timer // armed while lines wait in the buffer, or while failing
	failing error
	lost    int // records dropped in this episode
}

// JSONLOptions say when buffered lines are written through, and where a
// failing output is reported.
type JSONLOptions struct {
	FlushAfter time.Duration // 0: only when the buffer fills and at Flush
	EachLine   bool
	// Health receives the failing state and counts what was dropped; nil:
	// none (Write still keeps going).
	Health *SinkHealth
	// Name is the output's name in log lines (a path; default "output").
	Name   string
	Logger *slog.Logger
	// Encode writes one record (no newline); nil: AppendJSON, the
	// record. AppendECS writes its ECS view.
	Encode func(dst []byte, h *record.Handshake) []byte
}

// NewJSONL returns a JSONL sink writing to w, flushed when its buffer fills
// and at Flush.
func NewJSONL(w io.Writer) *JSONL { return NewJSONLWith(w, JSONLOptions{}) }

// NewJSONLWith returns a JSONL sink writing to w with opts.
func NewJSONLWith(w io.Writer, opts JSONLOptions) *JSONL {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Name == "" {
		opts.Name = "output"
	}
	if opts.Encode == nil {
		opts.Encode = AppendJSON
	}
	j := &JSONL{w: w, pending: make([]byte, 0, jsonlBufferSize), line: make([]byte, 0, 1024), opts: opts}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil {
				j.f = f
				j.off = max(off, st.Size()) // O_APPEND writes at the end
				j.cutPartial()
			}
		}
	}
	return j
}

// cutPartial cuts a partial last line off a file that is appended to (a
// killed agent's last write may have been cut by the kernel or a full
// disk), so the next record starts a line of its own. A file whose last
// 64 KiB hold no newline gets one instead.
func (j *JSONL) cutPartial() {
	if j.off == 0 {
		return
	}
	tail := make([]byte, min(j.off, jsonlBufferSize))
	if _, err := j.f.ReadAt(tail, j.off-int64(len(tail))); err != nil {
		return
	}
	if tail[len(tail)-1] == '\n' {
		return
	}
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 || int64(len(tail)) == j.off {
		cut := j.off - int64(len(tail)) + int64(i+1)
		if j.f.Truncate(cut) == nil {
			if _, err := j.f.Seek(cut, io.SeekStart); err == nil {
				j.opts.Logger.Warn("JSONL output ended in a partial line (the last agent was killed while writing it): cut off", "output", j.opts.Name, "bytes", j.off-cut)
				j.off = cut
			}
		}
		return
	}
	j.pending = append(j.pending, '\n')
}

// Write implements record.Sink. It does not allocate in steady state and
// never fails: what cannot be written is counted.
func (j *JSONL) Write(h *record.Handshake) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.line = j.opts.Encode(j.line[:0], h)
	j.line = append(j.line, '\n')
	if j.failing != nil {
		if len(j.pending)+len(j.line) > jsonlBufferSize {
			j.lost++
			j.opts.Health.Lost(1, len(j.line))
		} else {
			j.pending = append(j.pending, j.line...)
		}
		return nil
	}
	if len(j.pending)+len(j.line) > jsonlBufferSize {
		j.flushLocked()
		if j.failing != nil {
			// The line does not fit beside what waits.
			j.lost++
			j.opts.Health.Lost(1, len(j.line))
			return nil
		}
	}
	empty := len(j.pending) == 0
	j.pending = append(j.pending, j.line...)
	switch {
	case j.opts.EachLine:
		j.flushLocked()
	case j.opts.FlushAfter > 0 && empty:
		j.arm(j.opts.FlushAfter)
	}
	return nil
}

func (j *JSONL) arm(d time.Duration) {
	if j.timer == nil {
		j.timer = time.AfterFunc(d, j.timedFlush)
	} else {
		j.timer.Reset(d)
	}
}

// timedFlush runs when the oldest buffered line has waited FlushAfter, and
// every jsonlProbe while the output fails.
func (j *JSONL) timedFlush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushLocked()
}

// flushLocked writes what waits. A failed write keeps the whole lines that
// were not written (and, on a non-file output, the rest of a partial one)
// and arms the probe.
func (j *JSONL) flushLocked() {
	if len(j.pending) == 0 {
		j.recovered()
		return
	}
	n, err := j.w.Write(j.pending)
	if err == nil && n < len(j.pending) {
		err = io.ErrShortWrite
	}
	if err == nil {
		j.off += int64(n)
		j.pending = j.pending[:0]
		j.recovered()
		return
	}
	keep := n
	if j.f != nil {
		// Cut the file back to the last whole line written.
		whole := bytes.LastIndexByte(j.pending[:n], '\n') + 1
		if whole < n {
			if terr := j.f.Truncate(j.off + int64(whole)); terr == nil {
				_, terr = j.f.Seek(j.off+int64(whole), io.SeekStart)
				if terr == nil {
					keep = whole
				}
			}
		}
		j.off += int64(keep)
	}
	j.pending = j.pending[:copy(j.pending, j.pending[keep:])]
	j.fail(err)
}

func (j *JSONL) fail(err error) {
	first := j.failing == nil
	j.failing = err
	if j.opts.Health.Fail(err.Error()) || first {
		j.opts.Logger.Error("JSONL output cannot be written: records wait in a 64 KiB buffer, the rest are counted (pqwatch_sink_lost_records_total{sink=\"jsonl\"}) and dropped; writing resumes by itself, tried every second",
			"output", j.opts.Name, "err", err)
	}
	j.arm(jsonlProbe)
}

func (j *JSONL) recovered() {
	if j.failing == nil {
		return
	}
	j.opts.Health.OK()
	j.opts.Logger.Info("JSONL output written again", "output", j.opts.Name, "records_lost", j.lost, "after", j.failing)
	j.failing, j.lost = nil, 0
}

// Flush writes any buffered lines to the underlying writer and stops the
// flush timer. Lines that still cannot be written are counted lost and
// returned as an error: nothing will write them later.
func (j *JSONL) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.timer != nil {
		j.timer.Stop()
	}
	j.flushLocked()
	if j.failing == nil {
		return nil
	}
	n := bytes.Count(j.pending, []byte{'\n'})
	j.opts.Health.Lost(n, len(j.pending))
	err := fmt.Errorf("exporter: jsonl %s: %d records not written: %w", j.opts.Name, n+j.lost, j.failing)
	j.pending = j.pending[:0]
	return err
}

var _ record.Sink = (*JSONL)(nil)
