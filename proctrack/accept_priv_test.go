package proctrack

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAcceptsWithoutPrivilege: a process without CAP_BPF and CAP_PERFMON
// (this test binary re-run as nobody) gets an error naming them, the
// reason the agent logs when it falls back.
func TestAcceptsWithoutPrivilege(t *testing.T) {
	if os.Getenv("PQWATCH_ACCEPT_CHILD") == "1" {
		_, err := OpenAccepts(AcceptConfig{})
		if err == nil {
			t.Fatal("OpenAccepts succeeded without privileges")
		}
		t.Log("REASON:", err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to re-run itself as nobody")
	}
	if testing.Short() {
		t.Skip("re-runs the test binary: skipped in -short mode")
	}
	// A copy nobody may run: the build directory is root's alone.
	dir, err := os.MkdirTemp("", "pqwatch-accept-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "proctrack.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		dst.Close()
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestAcceptsWithoutPrivilege$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PQWATCH_ACCEPT_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "REASON:") || !strings.Contains(string(out), "CAP_BPF") {
		t.Fatalf("the reason does not name the capabilities:\n%s", out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "REASON:") {
			t.Log("as nobody:", strings.TrimSpace(l))
		}
	}
}
