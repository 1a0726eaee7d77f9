// Package pollfd puts a kernel descriptor pqwatch does not own the reads of
// (an AF_PACKET ring's socket, a BPF ring buffer) into Go's network poller,
// so a goroutine waits on its readiness without a thread blocked in a
// system call.
package pollfd

import (
	"os"

	"golang.org/x/sys/unix"
)

// Dup returns a non-blocking, close-on-exec duplicate of fd, registered
// with Go's network poller when the descriptor supports it (os.NewFile
// does that for a non-blocking descriptor). name names the file in errors.
// Closing it leaves fd open.
func Dup(fd int, name string) (*os.File, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, err
	}
	return os.NewFile(uintptr(nfd), name), nil
}
