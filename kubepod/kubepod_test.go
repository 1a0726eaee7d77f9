package kubepod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

const (
	uid = "3f8a2c1e-5b7d-4e9a-8c6f-0123456789ab"
	cid = "4b825dc642cb6eb9a060e54bf8d69288fbee4904a3f1c0b2d5e6f7a8b9c0d1e2"
)

// sysUID is uid as the systemd driver spells it in a slice name.
var sysUID = strings.ReplaceAll(uid, "-", "_")

// TestFromCgroup: /proc/PID/cgroup as each layout writes it, from a
// node's processes; the ones of no pod are refused.
func TestFromCgroup(t *testing.T) {
	static := "6d9f0a3b8c1e4f5a9b7c2d1e0f3a4b5c"
	for _, tc := range []struct {
		name, cgroup string
		uid, cid     string
		ok           bool
	}{
		{"v2 systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + sysUID + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid, true},
		{"v2 systemd CRI-O guaranteed", "0::/kubepods.slice/kubepods-pod" + sysUID + ".slice/crio-" + cid + ".scope\n", uid, cid, true},
		{"v2 systemd CRI-O conmon", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + sysUID + ".slice/crio-conmon-" + cid + ".scope\n", uid, "", true},
		{"v2 cgroupfs containerd", "0::/kubepods/burstable/pod" + uid + "/" + cid + "\n", uid, cid, true},
		{"v2 cgroupfs guaranteed, nested cgroup", "0::/kubepods/pod" + uid + "/" + cid + "/init\n", uid, cid, true},
		{"v2 another cgroup namespace", "0::/../../../kubepods-burstable.slice/kubepods-burstable-pod" + sysUID + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid, true},
		{"v2 kind (kubelet.slice)", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + sysUID + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid, true},
		{"v2 static pod", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + static + ".slice/cri-containerd-" + cid + ".scope\n", static, cid, true},
		{"v1 cgroupfs docker", "12:pids:/kubepods/besteffort/pod" + uid + "/" + cid + "\n11:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + cid + "\n0::/\n", uid, cid, true},
		{"v1 systemd docker", "13:rdma:/\n11:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + sysUID + ".slice/docker-" + cid + ".scope\n1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + sysUID + ".slice/docker-" + cid + ".scope\n", uid, cid, true},
		{"v1 cgroupfs CRI-O", "5:cpuset:/kubepods/burstable/pod" + uid + "/crio-" + cid + "\n", uid, cid, true},
		{"v1 containerd systemd path as one segment", "4:devices:/system.slice/containerd.service/kubepods-besteffort-pod" + sysUID + ".slice:cri-containerd:" + cid + "\n", uid, cid, true},
		{"host nginx", "0::/system.slice/nginx.service\n", "", "", false},
		{"docker outside Kubernetes", "0::/system.slice/docker-" + cid + ".scope\n", "", "", false},
		{"user session", "0::/user.slice/user-0.slice/session-3.scope\n", "", "", false},
		{"kubepods, no pod", "0::/kubepods.slice/kubepods-burstable.slice\n", "", "", false},
		{"a pod segment with a bad UID", "0::/kubepods/burstable/podnot-a-uid/" + cid + "\n", "", "", false},
		{"empty", "", "", "", false},
		{"garbage", "kubepods\n::\n:::kubepods/pod\n", "", "", false},
	} {
		u, c, ok := FromCgroup([]byte(tc.cgroup))
		if u != tc.uid || c != tc.cid || ok != tc.ok {
			t.Errorf("%s: %q, %q, %v; want %q, %q, %v", tc.name, u, c, ok, tc.uid, tc.cid, tc.ok)
		}
	}
}

// TestFromLogPath: kubelet's container log paths, rotated ones too.
func TestFromLogPath(t *testing.T) {
	want := &record.Pod{Namespace: "ingress-nginx", Name: "ingress-nginx-controller-7d9f-x2b4q", UID: uid, Container: "controller"}
	dir := "/var/log/pods/ingress-nginx_ingress-nginx-controller-7d9f-x2b4q_" + uid + "/controller/"
	for _, f := range []string{"0.log", "3.log", "0.log.20261205-085845", "0.log.20261205-085845.gz"} {
		p, ok := FromLogPath(dir + f)
		if !ok || *p != *want {
			t.Errorf("%s: %+v %v, want %+v", f, p, ok, want)
		}
	}
	for _, path := range []string{
		"/var/log/nginx/access.log",
		"/var/log/pods/ingress-nginx_x_" + uid + "/0.log",             // no container directory
		"/var/log/pods/ingress-nginx_x_notauid/controller/0.log",      // no UID
		"/var/log/pods/a_b_c_" + uid + "/controller/0.log",            // four parts
		"/var/log/pods/ingress-nginx_x_" + uid + "/controller/x.log",  // not N.log
		"/var/log/pods/ingress-nginx_x_" + uid + "/controller/0.logx", // not N.log
		"/var/log/containers/x_ingress-nginx_controller-" + cid + ".log",
	} {
		if p, ok := FromLogPath(path); ok {
			t.Errorf("%s: %+v, want none", path, p)
		}
	}
}

// TestResolver: a cgroup's UID and container ID named from a fixture's
// var/log/pods and var/log/containers.
func TestResolver(t *testing.T) {
	root := t.TempDir()
	pods := filepath.Join(root, "var", "log", "pods")
	podDir := filepath.Join(pods, "web_web-0_"+uid)
	os.MkdirAll(filepath.Join(podDir, "nginx"), 0o755)
	os.MkdirAll(filepath.Join(pods, "other_x_"+strings.Repeat("a", 32)), 0o755)
	os.MkdirAll(filepath.Join(pods, "not-a-pod"), 0o755)
	containers := filepath.Join(root, "var", "log", "containers")
	os.MkdirAll(containers, 0o755)
	os.WriteFile(filepath.Join(podDir, "nginx", "0.log"), nil, 0o644)
	if err := os.Symlink(filepath.Join(podDir, "nginx", "0.log"), filepath.Join(containers, "web-0_web_nginx-"+cid+".log")); err != nil {
		t.Fatal(err)
	}
	r := &Resolver{PodsDir: pods}
	if got, want := *r.Pod(uid, cid), (record.Pod{Namespace: "web", Name: "web-0", UID: uid, Container: "nginx", ContainerID: cid}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	other := strings.Repeat("b", 64)
	if got, want := *r.Pod(uid, other), (record.Pod{Namespace: "web", Name: "web-0", UID: uid, ContainerID: other}); got != want {
		t.Errorf("another container: got %+v, want %+v", got, want)
	}
	unknown := "00000000-0000-0000-0000-000000000000"
	if got, want := *r.Pod(unknown, ""), (record.Pod{UID: unknown}); got != want {
		t.Errorf("unknown pod: got %+v, want %+v", got, want)
	}
	if got, want := *(&Resolver{}).Pod(uid, cid), (record.Pod{UID: uid, ContainerID: cid}); got != want {
		t.Errorf("no directory: got %+v, want %+v", got, want)
	}
}

func FuzzFromCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + sysUID + ".slice/cri-containerd-" + cid + ".scope\n"))
	f.Add([]byte("4:devices:/kubepods-besteffort-pod" + sysUID + ".slice:cri-containerd:" + cid))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, c, ok := FromCgroup(b)
		if ok && !ValidUID(u) || c != "" && len(c) != 64 {
			t.Fatalf("%q: %q %q %v", b, u, c, ok)
		}
	})
}
