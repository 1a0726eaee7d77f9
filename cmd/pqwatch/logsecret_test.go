package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// secretMarker stands for what a file that is not an access log holds
// (/etc/shadow's root entry, a token): it must never reach pqwatch's own
// stderr, which kubectl logs shows to whoever may read the pod's logs.
const secretMarker = "SECRET-7f3a9c-root:$6$salt$hash:19000:0:99999:7:::"

func secretLog(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "access.log")
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, "%s-%d\n", secretMarker, i)
	}
	// A line whose fields fail one by one: a port, a status, a time.
	b.WriteString(`127.0.0.1 - - [SECRET-7f3a9c] "GET / HTTP/1.1" SECRET-7f3a9c 0 "-" "-"` + "\n")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNoLogContentInStderr: a log that is not an access log is described
// (line number, length, a hash, which field failed) and never echoed, by
// analyze and by run at the default log level; run shows the line under
// -log-level debug only.
func TestNoLogContentInStderr(t *testing.T) {
	log := secretLog(t)
	code, _, stderr := run(t, "analyze", "-format", "json", "-nginx-log", log, "-nginx-log-format", "combined", filepath.Join(repoRoot, "testdata", "handshakes.pcap"))
	if code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "SECRET-7f3a9c") {
		t.Errorf("analyze echoed the log's content:\n%s", stderr)
	}
	if !strings.Contains(stderr, "first failing line 1 (") || !strings.Contains(stderr, "sha256") {
		t.Errorf("analyze does not describe the failing line:\n%s", stderr)
	}

	if testing.Short() {
		return
	}
	testenv.NeedRoot(t)
	_, port := goTLSServer(t)
	for _, level := range []string{"info", "debug"} {
		var errb testenv.Buffer
		cmd := pqwatchProcess(t, &errb, "run", "-iface", "lo", "-ports", fmt.Sprint(port), "-metrics-addr", "", "-no-process-tracking",
			"-nginx-log", log, "-nginx-log-format", "combined", "-state-dir", t.TempDir(), "-log-level", level)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(errb.String(), "capture starting") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the tailer reads the file
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		got := errb.String()
		if !strings.Contains(got, "access log matches badly") {
			t.Errorf("%s: no warning about the log:\n%s", level, got)
		}
		if leaked := strings.Contains(got, "SECRET-7f3a9c"); leaked != (level == "debug") {
			t.Errorf("-log-level %s: the log's content in stderr: %v, want %v:\n%s", level, leaked, level == "debug", got)
		}
	}
}
