package exporter

import (
	"bufio"
	"fmt"
	"io"
	"sync"

	"github.com/pqwatch/pqwatch/record"
)

// jsonlBufferSize is the bufio size of a JSONL sink: a few dozen records.
const jsonlBufferSize = 64 << 10

// JSONL writes one handshake record per line (JSON Lines) through a buffered
// writer. It is safe for concurrent use; lines are never interleaved. Call
// Flush before the underlying writer is closed.
type JSONL struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	buf []byte
	err error // sticky write error
}

// NewJSONL returns a JSONL sink writing to w.
func NewJSONL(w io.Writer) *JSONL {
	return &JSONL{bw: bufio.NewWriterSize(w, jsonlBufferSize), buf: make([]byte, 0, 1024)}
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
	if _, err := j.bw.Write(j.buf); err != nil {
		j.err = fmt.Errorf("exporter: jsonl write: %w", err)
		return j.err
	}
	return nil
}

// Flush writes any buffered lines to the underlying writer.
func (j *JSONL) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	if err := j.bw.Flush(); err != nil {
		j.err = fmt.Errorf("exporter: jsonl flush: %w", err)
		return j.err
	}
	return nil
}

var _ record.Sink = (*JSONL)(nil)
