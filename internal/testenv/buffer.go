package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines (a child process's output
// copier, a timer, a logger) write while the test reads it. The zero
// value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Len returns how many bytes were written so far.
func (s *Buffer) Len() int { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Len() }
