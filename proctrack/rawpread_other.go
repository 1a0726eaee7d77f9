//go:build !linux

package proctrack

import (
	"os"
	"syscall"
)

// rawPread is pread(2); only Linux has the /proc this reads.
func rawPread(fd int, p []byte, off int64) (int, error) { return syscall.Pread(fd, p, off) }

// rawExists says whether path exists.
func rawExists(path string) bool { _, err := os.Stat(path); return err == nil }
