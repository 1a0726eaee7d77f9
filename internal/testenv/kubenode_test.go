package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// accessLines returns the stdout lines of a container log as the runtime
// wrote them, unwrapped (CRI or json-file), and the number of stderr lines.
func accessLines(t *testing.T, path, wrap string) (out []string, stderr int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		var stream, line string
		if wrap == WrapJSONFile {
			var j struct{ Log, Stream, Time string }
			if err := json.Unmarshal([]byte(l), &j); err != nil {
				t.Fatalf("not a json-file line: %q: %v", l, err)
			}
			if _, err := time.Parse(time.RFC3339Nano, j.Time); err != nil || !strings.HasSuffix(j.Log, "\n") {
				t.Fatalf("json-file line %q: time %v, log without its newline", l, err)
			}
			stream, line = j.Stream, strings.TrimSuffix(j.Log, "\n")
		} else {
			f := strings.SplitN(l, " ", 4)
			if len(f) != 4 || f[2] != "F" {
				t.Fatalf("not a full CRI line: %q", l)
			}
			if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
				t.Fatalf("CRI line %q: %v", l, err)
			}
			stream, line = f[1], f[3]
		}
		switch stream {
		case "stdout":
			out = append(out, line)
		case "stderr":
			stderr++
		default:
			t.Fatalf("stream %q in %q", stream, l)
		}
	}
	return out, stderr
}

// The fixture does what a node does: kube-proxy's DNAT to the pod, the
// client's address kept (externalTrafficPolicy Local) or masqueraded to
// the bridge's (Cluster), a pod reaching the ClusterIP through the node;
// nginx in the pod is PID 1 of its own PID namespace, and its access lines
// reach 0.log wrapped as the runtime wraps them. Close leaves no namespace.
func TestKubeNode(t *testing.T) {
	if testing.Short() {
		t.Skip("namespaces, iptables and nginx; skipped with -short")
	}
	NeedRoot(t)
	NeedBin(t, "ip", "iptables-restore", "nginx", "unshare")
	k, err := NewKubeNodeE(t.TempDir())
	if err != nil {
		check(t, err)
	}
	closed := false
	defer func() {
		if !closed {
			k.Close()
		}
	}()

	for _, wrap := range []string{WrapCRI, WrapJSONFile} {
		t.Run(wrap, func(t *testing.T) {
			pod := StartPod(t, k, PodOptions{Name: "web-" + wrap, Server: "nginx", Wrap: wrap})
			// nginx is PID 1 in the pod: its pid file says so, and PID is
			// its pid here.
			// nginx writes it after it starts serving: wait for it a while.
			var b []byte
			var err error
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if b, err = os.ReadFile(pod.Dir + "/nginx.pid"); err == nil && strings.TrimSpace(string(b)) != "" {
					break
				}
			}
			if err != nil || strings.TrimSpace(string(b)) != "1" {
				t.Errorf("pid file in the pod: %q, %v; want 1", b, err)
			}
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pod.PID)); strings.TrimSpace(string(comm)) != "nginx" {
				t.Errorf("PID %d is %q, not nginx", pod.PID, comm)
			}
			name := "default/web-" + wrap + ":https"
			Expose(t, k, KubeService{Name: name, ExternalIP: KubeNodeAddr, ClusterIP: KubeClusterIP, Port: 443, Endpoint: fmt.Sprintf("%s:%d", pod.Addr, pod.Port), Local: true})
			defer func() {
				// The next subtest exposes the same addresses: this
				// Service's rules go.
				if err := k.UnexposeE(name); err != nil {
					t.Error(err)
				}
			}()

			var want []string
			for _, local := range []bool{true, false} {
				if err := k.SetExternalTrafficPolicyE(name, local); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					cl, _, err := TLSGet(k.Client, KubeNodeAddr+":443", 5*time.Second)
					if err != nil {
						t.Fatalf("local=%v: %v\n%s", local, err, k.NAT())
					}
					if cl.Addr().String() != KubeClientAddr {
						t.Fatalf("client address %v", cl)
					}
					if local {
						want = append(want, fmt.Sprintf("%s %d ", KubeClientAddr, cl.Port()))
					} else {
						want = append(want, KubeBridgeAddr+" ")
					}
				}
			}
			// A pod on the bridge reaching the ClusterIP: DNAT on the node,
			// the reply bridged back and un-NATed (bridge-nf-call-iptables).
			cp := StartPod(t, k, PodOptions{Name: "client-" + wrap})
			cl, _, err := TLSGet(cp.NS, KubeClusterIP+":443", 5*time.Second)
			if err != nil {
				t.Fatalf("client pod to the ClusterIP: %v\n%s", err, k.NAT())
			}
			want = append(want, fmt.Sprintf("%s %d ", cp.Addr, cl.Port()))

			deadline := time.Now().Add(3 * time.Second)
			var got []string
			for {
				got, _ = accessLines(t, pod.LogPath, wrap)
				if len(got) >= len(want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if len(got) != len(want) {
				t.Fatalf("%d access lines, want %d:\n%s", len(got), len(want), readFile(pod.LogPath))
			}
			for i := range want {
				if !strings.HasPrefix(got[i], want[i]) {
					t.Errorf("line %d: %q, want it to start %q", i, got[i], want[i])
				}
			}
			if err := pod.Close(); err != nil {
				t.Fatal(err)
			}
			// nginx's notices on stopping went to stderr, wrapped too.
			if _, stderr := accessLines(t, pod.LogPath, wrap); stderr == 0 {
				t.Errorf("no stderr line in %s:\n%s", pod.LogPath, readFile(pod.LogPath))
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pod.PID)); err == nil {
				t.Errorf("nginx (pid %d) still runs after Close", pod.PID)
			}
		})
	}

	t.Run("caddy", func(t *testing.T) {
		NeedBin(t, "caddy")
		pod := StartPod(t, k, PodOptions{Name: "caddy-0", Server: "caddy"})
		Expose(t, k, KubeService{Name: "default/caddy:https", ExternalIP: KubeNodeAddr, Port: 443, Endpoint: fmt.Sprintf("%s:%d", pod.Addr, pod.Port)})
		defer func() {
			if err := k.UnexposeE("default/caddy:https"); err != nil {
				t.Error(err)
			}
		}()
		cl, _, err := TLSGet(k.Client, KubeNodeAddr+":443", 5*time.Second)
		if err != nil {
			t.Fatalf("%v\n%s", err, k.NAT())
		}
		_ = cl
		deadline := time.Now().Add(3 * time.Second)
		var got []string
		for len(got) == 0 && time.Now().Before(deadline) {
			got, _ = accessLines(t, pod.LogPath, WrapCRI)
			time.Sleep(20 * time.Millisecond)
		}
		if len(got) != 1 {
			t.Fatalf("%d access lines, want 1:\n%s", len(got), readFile(pod.LogPath))
		}
		var j struct {
			Request struct {
				RemoteIP string `json:"remote_ip"`
			}
		}
		if err := json.Unmarshal([]byte(got[0]), &j); err != nil || j.Request.RemoteIP != KubeBridgeAddr {
			t.Errorf("Caddy's line %q (%v): want remote_ip %s (Cluster policy)", got[0], err, KubeBridgeAddr)
		}
	})

	t.Run("ipvs", func(t *testing.T) {
		if err := k.IPVS(); err != nil {
			t.Skip(err)
		}
	})

	names := []string{k.Client, k.Node}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for _, ns := range names {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left after Close", ns)
		}
	}
	if strings.Contains(string(out), k.id) {
		t.Errorf("a pod's namespace left after Close:\n%s", out)
	}
}
