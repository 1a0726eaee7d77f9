package pollfd

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDup: the duplicate is non-blocking, close-on-exec and in the poller
// (a read deadline works on it), and closing it leaves the original open.
func TestDup(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := Dup(int(r.Fd()), "pipe")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("close-on-exec not set: flags %#x, %v", fl, err)
	}
	if err := f.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatalf("not in the poller: %v", err)
	}
	if _, err := f.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("read of an empty pipe: %v, want a timeout", err)
	}
	f.Close()
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := r.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("original after the dup was closed: %q, %v", b, err)
	}
}
