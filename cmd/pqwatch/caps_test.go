package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// daemonSetCaps is what deploy/kubernetes/daemonset.yaml grants the agent's
// container (capabilities.drop ALL, add NET_RAW and SYS_PTRACE, uid 0,
// allowPrivilegeEscalation: false): the bounding set setpriv gives it, and
// the permitted and effective sets uid 0 gets from it at exec.
// deploy/manifests_test.go checks the manifest still says so.
var daemonSetCaps = []string{"net_raw", "sys_ptrace"}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// pqwatchBinary builds the command once per test run.
func pqwatchBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pqwatch-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "pqwatch")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// capsRun starts `pqwatch run args...` in namespace ns with only caps in
// its bounding set (so in its permitted and effective sets as uid 0) and
// no_new_privs, as the container runtime starts the DaemonSet's container.
func capsRun(t *testing.T, ns string, caps []string, stderr *testenv.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	bset := "-all"
	for _, c := range caps {
		bset += ",+" + c
	}
	full := append([]string{"netns", "exec", ns, "setpriv", "--bounding-set=" + bset, "--inh-caps=-all", "--no-new-privs", pqwatchBinary(t), "run"}, args...)
	cmd := exec.Command("ip", full...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestRunUnderDaemonSetCapabilities: the agent starts and captures with
// exactly the DaemonSet's capabilities, with -iface any (the DaemonSet's
// setting), the default interfaces and a named one: capturing its own
// network namespace enters none (setns would need CAP_SYS_ADMIN). Without
// NET_RAW it exits 1 naming it.
func TestRunUnderDaemonSetCapabilities(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary in namespaces; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "setpriv")
	testenv.NeedBin(t, "ip")
	p := testenv.NewPair(t, 1500)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := fmt.Sprintf("%s:%d", p.SAddr, port)
	testenv.GoServer(t, p.S, srv, nil)

	for _, tc := range []struct{ name, iface string }{{"any", "any"}, {"default", ""}, {"named", p.SIf}} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "records.jsonl")
			args := []string{"-ports", fmt.Sprint(port), "-format", "jsonl", "-o", out, "-metrics-addr", "", "-line-buffered"}
			if tc.iface != "" {
				args = append(args, "-iface", tc.iface)
			}
			var stderr testenv.Buffer
			cmd := capsRun(t, p.S, daemonSetCaps, &stderr, args...)
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(stderr.String(), "capture starting") && time.Now().Before(deadline) {
				if cmd.ProcessState != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(stderr.String(), "capture starting") {
				t.Fatalf("the agent did not start under %v:\n%s", daemonSetCaps, stderr.String())
			}
			time.Sleep(300 * time.Millisecond) // links found, rings bound
			const n = 3
			for range n {
				c, err := testenv.Dial(p.C, srv, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				tc.Close()
			}
			deadline = time.Now().Add(10 * time.Second)
			for lines(out) < n && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
			if got := lines(out); got != n {
				t.Errorf("%d records for %d handshakes\n%s", got, n, stderr.String())
			}
			// The eBPF accept events are refused (no CAP_BPF, no tracefs)
			// and say so; nothing of the capture may be.
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, "operation not permitted") && !strings.Contains(l, "accept events") {
					t.Errorf("a step was refused a capability: %s", l)
				}
			}
		})
	}

	// The ConfigMap's defaults on a node with neither nginx nor Caddy: the
	// logs and nginx.conf do not exist (hostPath DirectoryOrCreate makes
	// empty directories), and nothing creates -state-dir.
	t.Run("configmap defaults, no nginx", func(t *testing.T) {
		dir := t.TempDir()
		for _, d := range []string{"nginx", "caddy", "etc-nginx", "spool"} {
			os.Mkdir(filepath.Join(dir, d), 0o755)
		}
		state := filepath.Join(dir, "spool", "state")
		var stderr testenv.Buffer
		cmd := capsRun(t, p.S, daemonSetCaps, &stderr, "-iface", "any", "-ports", fmt.Sprint(port), "-metrics-addr", "",
			"-nginx-log", filepath.Join(dir, "nginx", "access.log"), "-nginx-conf", filepath.Join(dir, "etc-nginx", "nginx.conf"),
			"-caddy-log", filepath.Join(dir, "caddy", "access.log"), "-nginx-error-log", filepath.Join(dir, "nginx", "error.log"),
			"-state-dir", state)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			t.Fatalf("the agent exited (%v):\n%s", err, stderr.String())
		case <-time.After(3 * time.Second):
		}
		if st, err := os.Stat(state); err != nil || !st.IsDir() {
			t.Errorf("-state-dir %s not created: %v", state, err)
		}
		if !strings.Contains(stderr.String(), "-nginx-conf does not exist") {
			t.Errorf("no word of the missing nginx.conf:\n%s", stderr.String())
		}
		cmd.Process.Signal(syscall.SIGINT)
		<-exited
	})

	t.Run("without NET_RAW", func(t *testing.T) {
		var stderr testenv.Buffer
		cmd := capsRun(t, p.S, []string{"sys_ptrace"}, &stderr, "-iface", "any", "-metrics-addr", "")
		err := cmd.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1:\n%s", err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "CAP_NET_RAW") {
			t.Errorf("the error does not name CAP_NET_RAW:\n%s", stderr.String())
		}
	})
}

// lines counts the complete lines of a file.
func lines(path string) int {
	b, _ := os.ReadFile(path)
	n := 0
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		n++
	}
	return n
}
