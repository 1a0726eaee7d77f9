package sniffer

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGrowPipe: a capture read from a pipe gets the largest pipe buffer
// allowed, so the writer runs ahead and each read returns up to that much.
func TestGrowPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	before, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Skip("F_GETPIPE_SZ:", err)
	}
	growPipe(r)
	after, _ := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if after < 1<<20 || after <= before {
		t.Errorf("pipe buffer %d bytes before, %d after growPipe: want at least 1 MiB", before, after)
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	growPipe(f) // not a pipe: nothing to do, no error
	f.Close()
}
