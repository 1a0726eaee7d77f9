package proctrack

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawPread is pread(2) as a raw system call (see procReader.pread).
func rawPread(fd int, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(off), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawExists says whether path exists, with a raw faccessat(2) (see
// procReader.pread): the probe asks every second for a pid file's .oldbin
// (on a local /run).
func rawExists(path string) bool {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return false
	}
	cwd := unix.AT_FDCWD
	_, _, e := unix.RawSyscall(unix.SYS_FACCESSAT, uintptr(cwd), uintptr(unsafe.Pointer(p)), unix.F_OK)
	return e == 0
}
