package exporter

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// jsonlBufferSize is the bufio size of a JSONL sink: a few dozen records.
const jsonlBufferSize = 64 << 10

// JSONL writes one handshake record per line (JSON Lines) through a buffered
// writer. It is safe for concurrent use; lines are never interleaved. Call
// Flush before the underlying writer is closed.
//
// With a FlushAfter, no line waits in the buffer longer than that: a line
// written into an empty buffer arms a timer that flushes it, so a killed
// agent loses at most that much (and an idle one wakes for nothing). With
// EachLine, every line is written through at once (a pipe to another
// program, or -line-buffered).
type JSONL struct {
	mu    sync.Mutex
	bw    *bufio.Writer
	buf   []byte
	err   error // sticky write error
	opts  JSONLOptions
	timer *time.Timer // armed while lines wait in the buffer
}

// JSONLOptions say when buffered lines are written through.
type JSONLOptions struct {
	FlushAfter time.Duration // 0: only when the buffer fills and at Flush
	EachLine   bool
}

// NewJSONL returns a JSONL sink writing to w, flushed when its buffer fills
// and at Flush.
func NewJSONL(w io.Writer) *JSONL { return NewJSONLWith(w, JSONLOptions{}) }

// NewJSONLWith returns a JSONL sink writing to w with opts.
func NewJSONLWith(w io.Writer, opts JSONLOptions) *JSONL {
	return &JSONL{bw: bufio.NewWriterSize(w, jsonlBufferSize), buf: make([]byte, 0, 1024), opts: opts}
}

// timedFlush runs when the oldest buffered line has waited FlushAfter.
func (j *JSONL) timedFlush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushLocked()
}

func (j *JSONL) flushLocked() error {
	if j.err != nil {
		return j.err
	}
	if err := j.bw.Flush(); err != nil {
		j.err = fmt.Errorf("exporter: jsonl flush: %w", err)
		return j.err
	}
	return nil
}

// Write implements record.Sink. It does not allocate in steady state. After
// the first write error every call returns that error.
func (j *JSONL) Write(h *record.Handshake) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	j.buf = AppendJSON(j.buf[:0], h)
	j.buf = append(j.buf, '\n')
	empty := j.bw.Buffered() == 0
	if _, err := j.bw.Write(j.buf); err != nil {
		j.err = fmt.Errorf("exporter: jsonl write: %w", err)
		return j.err
	}
	switch {
	case j.opts.EachLine:
		return j.flushLocked()
	case j.opts.FlushAfter > 0 && empty && j.bw.Buffered() > 0:
		if j.timer == nil {
			j.timer = time.AfterFunc(j.opts.FlushAfter, j.timedFlush)
		} else {
			j.timer.Reset(j.opts.FlushAfter)
		}
	}
	return nil
}

// Flush writes any buffered lines to the underlying writer and stops the
// flush timer.
func (j *JSONL) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.timer != nil {
		j.timer.Stop()
	}
	return j.flushLocked()
}

var _ record.Sink = (*JSONL)(nil)
