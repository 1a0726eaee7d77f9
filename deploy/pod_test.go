package deploy

// The manifests, executed: the DaemonSet of the kustomize base and of the
// Helm chart's default rendering (as manifests_test.go and helm_test.go
// render them) is turned into the process a kubelet and containerd would
// start for it on a node, and that process is run on a node of network
// namespaces (testenv.KubeNode) with a TLS server and a client:
//
//   - the image's ENTRYPOINT (deploy/Dockerfile) and the container's args,
//     $(VAR)-expanded as the kubelet does from envFrom (the ConfigMap) and
//     env (fieldRef spec.nodeName, status.podIP);
//   - capabilities: drop ALL + add (or containerd's default set minus drop
//     plus add) as the bounding set, permitted and effective before exec,
//     inheritable and ambient empty; the kernel's exec rules then give uid 0
//     the bounding set and any other uid nothing (no ambient, no file caps);
//   - runAsUser, runAsGroup, supplementalGroups (pod, container overrides);
//   - allowPrivilegeEscalation: false as no_new_privs;
//   - seccompProfile RuntimeDefault as moby's default profile
//     (testdata/podrun/seccomp-default.json, loaded with libseccomp);
//   - readOnlyRootFilesystem: a rootfs of the image's files (/pqwatch,
//     distroless's /etc/passwd, /etc/group, /tmp), remounted read-only in a
//     private mount namespace, with only the declared volumes mounted:
//     emptyDir as a fresh directory (medium Memory: a tmpfs of sizeLimit),
//     hostPath bound from the test's fixture directory for that host path
//     (the real /proc for /proc), read-only where the mount says;
//     DirectoryOrCreate makes the fixture directory, Directory needs it;
//     /proc, a minimal /dev and a read-only /sys as runc mounts them;
//   - hostNetwork: the node's network namespace; hostPID: the host's PID
//     namespace, else one of its own.
//
// testdata/podrun is the runtime in miniature (see its comment). The node's
// own servers (nginx, Caddy) run in mount namespaces of their own too, with
// the fixture's /etc/nginx, /var/log/nginx and /var/log/caddy bound at the
// real paths for them alone: the host's are never touched.
//
// Not enforced: cgroups (resources.limits: no cgroup is made, so the
// agent's memory limit is not set), AppArmor (the node's LSM), the masked
// and read-only /proc paths runc adds (/proc/kcore, /proc/sys, ...),
// /etc/hosts, /etc/resolv.conf and the service account (automount is off),
// the user namespace (none: hostUsers is unset), pivot_root (chroot
// instead), probes and the hostPort.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	corev1 "k8s.io/api/core/v1"
)

// containerdDefaultCaps is what containerd (and Docker) give a container
// that drops nothing (oci.DefaultCapabilities / moby's defaults).
var containerdDefaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// podProc is the process a kubelet and containerd start for the
// DaemonSet's one container, as podrun takes it.
type podProc struct {
	source     string // "kustomize" or "helm"
	caps       []string
	uid, gid   int64
	groups     []int64
	nnp        bool
	roRoot     bool
	seccomp    string // "RuntimeDefault", "Unconfined", "Localhost"
	hostNet    bool
	hostPID    bool
	volumes    map[string]corev1.Volume
	mounts     []corev1.VolumeMount
	env        []string // NAME=value, in the kubelet's order
	argv       []string
	fixtureDir string // the node's filesystem for hostPath volumes
}

// kubeExpand is the kubelet's $(VAR) expansion
// (k8s.io/kubernetes/third_party/forked/golang/expansion): $$ is $, a
// defined $(NAME) its value, anything else left as written.
func kubeExpand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// dockerfileEntrypoint reads the image's ENTRYPOINT (exec form).
func dockerfileEntrypoint(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile: no ENTRYPOINT in exec form")
	}
	var ep []string
	if err := json.Unmarshal(m[1], &ep); err != nil {
		t.Fatal(err)
	}
	return ep
}

// podProcFrom reads the process out of a rendered set of manifests.
func podProcFrom(t *testing.T, source string, o *objects, nodeName, podIP string) *podProc {
	t.Helper()
	if len(o.daemonSets) != 1 {
		t.Fatalf("%s: %d DaemonSets", source, len(o.daemonSets))
	}
	ds := o.daemonSets[0]
	ps := ds.Spec.Template.Spec
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Fatalf("%s: the harness runs one container and no init containers", source)
	}
	c := ps.Containers[0]
	p := &podProc{source: source, hostNet: ps.HostNetwork, hostPID: ps.HostPID, volumes: map[string]corev1.Volume{}, mounts: c.VolumeMounts}
	psc, csc := ps.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if csc.Privileged != nil && *csc.Privileged {
		t.Fatalf("%s: privileged containers are not run by the harness", source)
	}
	p.uid, p.gid = 65532, 65532 // the image's USER
	if psc.RunAsUser != nil {
		p.uid = *psc.RunAsUser
	}
	if csc.RunAsUser != nil {
		p.uid = *csc.RunAsUser
	}
	if psc.RunAsGroup != nil {
		p.gid = *psc.RunAsGroup
	}
	if csc.RunAsGroup != nil {
		p.gid = *csc.RunAsGroup
	}
	p.groups = psc.SupplementalGroups
	p.seccomp = "Unconfined"
	if psc.SeccompProfile != nil {
		p.seccomp = string(psc.SeccompProfile.Type)
	}
	if csc.SeccompProfile != nil {
		p.seccomp = string(csc.SeccompProfile.Type)
	}
	// allowPrivilegeEscalation defaults to true (no no_new_privs).
	p.nnp = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	p.roRoot = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	caps := slices.Clone(containerdDefaultCaps)
	if cp := csc.Capabilities; cp != nil {
		for _, d := range cp.Drop {
			if strings.EqualFold(string(d), "ALL") {
				caps = nil
				continue
			}
			caps = slices.DeleteFunc(caps, func(c string) bool { return c == "CAP_"+strings.ToUpper(string(d)) })
		}
		for _, a := range cp.Add {
			n := "CAP_" + strings.ToUpper(string(a))
			if !slices.Contains(caps, n) {
				caps = append(caps, n)
			}
		}
	}
	p.caps = caps
	for _, v := range ps.Volumes {
		p.volumes[v.Name] = v
	}
	// env: envFrom first, then env, later ones winning; env values expand
	// $(VAR) of those before them.
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Fatalf("%s: envFrom other than a ConfigMap", source)
		}
		cm := findConfigMap(o, ef.ConfigMapRef.Name, ds.Namespace)
		if cm == nil {
			t.Fatalf("%s: envFrom ConfigMap %s not rendered", source, ef.ConfigMapRef.Name)
		}
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			set(ef.Prefix+k, cm.Data[k])
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, kubeExpand(e.Value, env))
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "spec.nodeName":
				set(e.Name, nodeName)
			case "status.podIP", "status.hostIP":
				set(e.Name, podIP)
			case "metadata.namespace":
				set(e.Name, ds.Namespace)
			default:
				t.Fatalf("%s: env %s: fieldRef %s", source, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("%s: env %s: valueFrom other than a fieldRef", source, e.Name)
		}
	}
	p.env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOSTNAME=" + nodeName}
	for _, k := range order {
		p.env = append(p.env, k+"="+env[k])
	}
	cmd := c.Command
	if len(cmd) == 0 {
		cmd = dockerfileEntrypoint(t)
	}
	for _, a := range cmd {
		p.argv = append(p.argv, kubeExpand(a, env))
	}
	for _, a := range c.Args {
		p.argv = append(p.argv, kubeExpand(a, env))
	}
	return p
}

func (p *podProc) clone() *podProc {
	q := *p
	q.caps = slices.Clone(p.caps)
	q.mounts = slices.Clone(p.mounts)
	q.env = slices.Clone(p.env)
	q.argv = slices.Clone(p.argv)
	return &q
}

// withoutCap and withoutMount are the removals.
func (p *podProc) withoutCap(c string) *podProc {
	q := p.clone()
	q.caps = slices.DeleteFunc(q.caps, func(x string) bool { return x == c })
	return q
}

func (p *podProc) withoutMount(vol string) *podProc {
	q := p.clone()
	q.mounts = slices.DeleteFunc(q.mounts, func(m corev1.VolumeMount) bool { return m.Name == vol })
	return q
}

// The spec podrun reads (testdata/podrun/main.go).
type podrunMount struct {
	Type, Source, Target string
	ReadOnly             bool
	Options              string
}

type podrunSpec struct {
	ParentMountNS string
	NetNS, Root   string
	Mounts        []podrunMount
	ReadOnlyRoot  bool
	Host          bool
	UID, GID      int
	Groups        []int
	Caps          []string
	NoNewPrivs    bool
	Seccomp       string
	Env, Argv     []string
}

// hostPathFixture is where the node's host path lives for the test: the
// real /proc (read-only in the manifest, and what process tracking
// reads), everything else under the fixture directory.
func (p *podProc) hostPathFixture(path string) string {
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return path
	}
	return filepath.Join(p.fixtureDir, path)
}

// spec turns the process into podrun's spec; rootfs is the image's files.
// emptyDirs receives each disk-backed emptyDir's directory by volume name.
func (p *podProc) spec(t *testing.T, node *testenv.KubeNode, rootfs string, emptyDirs map[string]string) podrunSpec {
	t.Helper()
	mnt, _ := os.Readlink("/proc/self/ns/mnt")
	s := podrunSpec{ParentMountNS: mnt, Root: rootfs, ReadOnlyRoot: p.roRoot, UID: int(p.uid), GID: int(p.gid),
		Caps: p.caps, NoNewPrivs: p.nnp, Env: p.env, Argv: p.argv}
	for _, g := range p.groups {
		s.Groups = append(s.Groups, int(g))
	}
	if p.hostNet {
		s.NetNS = "/run/netns/" + node.Node
	} else {
		t.Fatal("the harness runs hostNetwork pods only (a pod network namespace is not built)")
	}
	switch p.seccomp {
	case "RuntimeDefault":
		abs, err := filepath.Abs("testdata/podrun/seccomp-default.json")
		if err != nil {
			t.Fatal(err)
		}
		s.Seccomp = abs
	case "Unconfined":
	default:
		t.Fatalf("seccomp profile %s not supported by the harness", p.seccomp)
	}
	s.Mounts = append(s.Mounts, podrunMount{Type: "proc", Target: "/proc"}, podrunMount{Type: "dev", Target: "/dev"}, podrunMount{Type: "sysfs", Target: "/sys"})
	for _, m := range p.mounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Fatalf("volumeMount %s: subPath not supported by the harness", m.Name)
		}
		v, ok := p.volumes[m.Name]
		if !ok {
			t.Fatalf("volumeMount %s names no volume", m.Name)
		}
		switch {
		case v.HostPath != nil:
			src := p.hostPathFixture(v.HostPath.Path)
			typ := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				typ = *v.HostPath.Type
			}
			switch typ {
			case corev1.HostPathDirectoryOrCreate:
				if err := os.MkdirAll(src, 0o755); err != nil {
					t.Fatal(err)
				}
			case corev1.HostPathDirectory:
				if st, err := os.Stat(src); err != nil || !st.IsDir() {
					t.Fatalf("hostPath %s (type Directory) is not a directory on the node: the kubelet would not start the pod", v.HostPath.Path)
				}
			case corev1.HostPathUnset:
			default:
				t.Fatalf("hostPath type %s not supported by the harness", typ)
			}
			s.Mounts = append(s.Mounts, podrunMount{Type: "bind", Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly})
		case v.EmptyDir != nil:
			if v.EmptyDir.Medium == corev1.StorageMediumMemory {
				opt := "mode=1777"
				if v.EmptyDir.SizeLimit != nil {
					opt += ",size=" + strconv.FormatInt(v.EmptyDir.SizeLimit.Value(), 10)
				}
				s.Mounts = append(s.Mounts, podrunMount{Type: "tmpfs", Target: m.MountPath, Options: opt})
				continue
			}
			dir := t.TempDir() // the kubelet's pods/UID/volumes/kubernetes.io~empty-dir/NAME, 0777
			os.Chmod(dir, 0o777)
			emptyDirs[m.Name] = dir
			s.Mounts = append(s.Mounts, podrunMount{Type: "bind", Source: dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
		default:
			t.Fatalf("volume %s: only hostPath and emptyDir are run by the harness", m.Name)
		}
	}
	return s
}

// harness is what every run shares: the binaries and the image's rootfs.
type harness struct {
	podrun, rootfs string
	node           *testenv.KubeNode
}

// buildHarness builds pqwatch (as the Dockerfile does, CGO_ENABLED=0) and
// podrun (cgo, libseccomp) into the test's temp dir.
func buildHarness(t *testing.T) (pqwatch, podrun string) {
	t.Helper()
	dir := t.TempDir()
	pqwatch, podrun = filepath.Join(dir, "pqwatch"), filepath.Join(dir, "podrun")
	cmd := exec.Command("go", "build", "-trimpath", "-o", pqwatch, "../cmd/pqwatch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build pqwatch: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("podrun needs cgo: no gcc")
	}
	if _, err := os.Stat("/usr/include/seccomp.h"); err != nil {
		t.Skip("podrun needs libseccomp's header (Debian: libseccomp-dev)")
	}
	cmd = exec.Command("go", "build", "-o", podrun, "./testdata/podrun")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build podrun: %v\n%s", err, out)
	}
	return pqwatch, podrun
}

// imageRootfs writes the image's files: /pqwatch and distroless
// static:nonroot's /etc/passwd, /etc/group and /tmp.
func imageRootfs(t *testing.T, pqwatch string) string {
	t.Helper()
	root := t.TempDir()
	b, err := os.ReadFile(pqwatch)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "tmp", "home/nonroot", "var"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		"etc/group":  "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n",
	}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "pqwatch"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// started is a running podrun: done closes once it was reaped.
type started struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// exited reports the exit code once the process ended within d.
func (p *started) exited(d time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return 0, false
	}
}

// startPodrun starts podrun on spec in a mount namespace of its own (and a
// PID namespace of its own unless hostPID); the process is killed and
// reaped at cleanup, its namespaces going with it.
func startPodrun(t *testing.T, podrun string, s podrunSpec, hostPID bool, out *testenv.Buffer) *started {
	t.Helper()
	f := filepath.Join(t.TempDir(), "spec.json")
	b, _ := json.Marshal(s)
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(podrun, f)
	cmd.Stdout, cmd.Stderr = out, out
	flags := uintptr(syscall.CLONE_NEWNS)
	if !hostPID {
		flags |= syscall.CLONE_NEWPID
	}
	// Pdeathsig fires when the thread that forked exits: the goroutine
	// holds its thread until the process is reaped, so a test binary that
	// dies takes the process (and its namespaces) with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	p := &started{cmd: cmd, done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		errc <- err
		if err == nil {
			cmd.Wait()
		}
		close(p.done)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// procStatus reads the capability sets, no_new_privs, seccomp and ids of a
// running process.
func procStatus(pid int) map[string]string {
	m := map[string]string{}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

// capMask is the /proc/PID/status hex of a set of capabilities.
func capMask(caps []string) string {
	num := map[string]uint{"CAP_NET_RAW": 13, "CAP_SYS_PTRACE": 19, "CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_BPF": 39, "CAP_PERFMON": 38,
		"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
		"CAP_NET_BIND_SERVICE": 10, "CAP_SYS_CHROOT": 18, "CAP_MKNOD": 27, "CAP_AUDIT_WRITE": 29, "CAP_SETFCAP": 31, "CAP_DAC_READ_SEARCH": 2,
		"CAP_IPC_LOCK": 14, "CAP_SYS_RESOURCE": 24}
	var m uint64
	for _, c := range caps {
		n, ok := num[c]
		if !ok {
			panic("capMask: " + c)
		}
		m |= 1 << n
	}
	return fmt.Sprintf("%016x", m)
}

// agentRun is what one run of the agent showed.
type agentRun struct {
	exit       int  // when exited
	exited     bool // before it was stopped
	stderr     string
	status     map[string]string
	handshakes float64  // pqwatch_handshakes_total
	generation float64  // pqwatch_generation_handshakes_total
	attributed float64  // pqwatch_attributions_total, every method
	fromLog    float64  // pqwatch_attributions_from_log_total{result="found"}
	methods    []string // pqwatch_attributions_total by method
	joined     float64  // pqwatch_log_joins_total{result="joined"}
	metrics    bool     // /metrics answered
	emptyDirs  map[string]string
}

// want is what a run waits for before it is stopped.
type want struct {
	handshakes, generation, joined int
}

const podHandshakes = 4

// runAgent runs p on the node, makes podHandshakes TLS handshakes (one GET
// each) from the client to the node's 10.198.0.2:443 once the agent
// captures, waits up to 8 s for w in its metrics, and stops it (SIGTERM,
// as the kubelet).
func (h *harness) runAgent(t *testing.T, p *podProc, w want) *agentRun {
	t.Helper()
	var stderr testenv.Buffer
	r := &agentRun{emptyDirs: map[string]string{}}
	proc := startPodrun(t, h.podrun, p.spec(t, h.node, h.rootfs, r.emptyDirs), p.hostPID, &stderr)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !strings.Contains(stderr.String(), "capture starting"); {
		if _, ok := proc.exited(20 * time.Millisecond); ok {
			break
		}
	}
	if code, ok := proc.exited(300 * time.Millisecond); ok {
		r.exit, r.exited, r.stderr = code, true, stderr.String()
		return r
	}
	cmd := proc.cmd
	r.status = procStatus(cmd.Process.Pid)
	for range podHandshakes {
		if _, _, err := testenv.TLSGet(h.node.Client, testenv.KubeNodeAddr+":443", 5*time.Second); err != nil {
			t.Errorf("handshake: %v", err)
		}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return testenv.Dial(h.node.Client, addr, 2*time.Second)
	}}}
	scrape := func() {
		resp, err := client.Get("http://" + testenv.KubeNodeAddr + ":9810/metrics")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			text.WriteString(sc.Text() + "\n")
		}
		s := text.String()
		r.metrics = true
		r.handshakes = metricSum(s, "pqwatch_handshakes_total", "")
		r.attributed = metricSum(s, "pqwatch_attributions_total", "")
		r.generation = metricSum(s, "pqwatch_generation_handshakes_total", "")
		r.methods = nil
		for _, m := range []string{"accept", "accept_quiet", "quiet", "socket", "listener", "none", "skipped"} {
			if n := metricSum(s, "pqwatch_attributions_total", `method="`+m+`"`); n > 0 {
				r.methods = append(r.methods, fmt.Sprintf("%s=%.0f", m, n))
			}
		}
		r.fromLog = metricSum(s, "pqwatch_attributions_from_log_total", `result="found"`)
		r.joined = metricSum(s, "pqwatch_log_joins_total", `result="joined"`)
	}
	// A joined line decides a record some 5 s after it came (the join waits
	// for every record that could be its connection's), and $pid names the
	// generation then: a loaded host takes longer.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		scrape()
		if _, ok := proc.exited(0); ok {
			break
		}
		if r.handshakes >= float64(w.handshakes) && r.generation >= float64(w.generation) && r.joined >= float64(w.joined) {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // a late attribution or join would show
	scrape()
	if _, ok := proc.exited(0); ok {
		r.exited = true
	} else {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	r.exit, _ = proc.exited(10 * time.Second)
	r.stderr = stderr.String()
	return r
}

// metricSum adds the samples of a metric whose labels contain sel.
func metricSum(text, name, sel string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name) || len(l) <= len(name) || (l[len(name)] != '{' && l[len(name)] != ' ') || !strings.Contains(l, sel) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// warnings are the agent's WARN and ERROR lines, for the report.
func warnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "podrun:") || strings.HasPrefix(l, "pqwatch:") {
			out = append(out, l)
		}
	}
	return out
}

// nodeFS is a node's filesystem for the test: the host paths of the
// hostPath volumes live under dir.
type nodeFS struct{ dir string }

func (n nodeFS) path(p string) string { return filepath.Join(n.dir, p) }

// startNodeServer runs argv as a process of the node (its network
// namespace, every capability) in a mount namespace of its own where the
// fixture's directories are bound at their real paths (binds: real path ->
// fixture path), and returns once 10.198.0.2:443 accepts a connection.
func (h *harness) startNodeServer(t *testing.T, binds map[string]string, env, argv []string) {
	t.Helper()
	mnt, _ := os.Readlink("/proc/self/ns/mnt")
	s := podrunSpec{ParentMountNS: mnt, NetNS: "/run/netns/" + h.node.Node, Host: true, Env: env, Argv: argv}
	for target, src := range binds {
		s.Mounts = append(s.Mounts, podrunMount{Type: "bind", Source: src, Target: target})
	}
	var out testenv.Buffer
	proc := startPodrun(t, h.podrun, s, true, &out)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, ok := proc.exited(0); ok {
			t.Fatalf("%s exited (%v):\n%s", argv[0], proc.cmd.ProcessState, out.String())
		}
		if c, err := testenv.Dial(h.node.Client, testenv.KubeNodeAddr+":443", time.Second); err == nil {
			c.Close()
			t.Cleanup(func() { proc.cmd.Process.Signal(syscall.SIGTERM); proc.exited(3 * time.Second) })
			return
		}
	}
	t.Fatalf("%s does not listen on %s:443:\n%s", argv[0], testenv.KubeNodeAddr, out.String())
}

// nginxNode: Debian's nginx on the node, its conf /etc/nginx/nginx.conf
// (key and certificate beside it), its logs /var/log/nginx/{access,error}.log
// as Debian keeps them (root:adm 0640), workers as www-data.
func (h *harness) nginxNode(t *testing.T) nodeFS {
	t.Helper()
	bin := testenv.NeedBin(t, "nginx")
	n := nodeFS{t.TempDir()}
	etc, logs, tmp := n.path("/etc/nginx"), n.path("/var/log/nginx"), n.path("/var/lib/nginx")
	for _, d := range []string{etc, logs, tmp} {
		os.MkdirAll(d, 0o755)
	}
	os.Chmod(n.dir, 0o755)
	if _, _, _, err := testenv.CertE(etc); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"access.log", "error.log"} {
		p := filepath.Join(logs, f)
		os.WriteFile(p, nil, 0o640)
		os.Chown(p, 0, 4)
	}
	conf := fmt.Sprintf(`user www-data adm;
worker_processes 1;
pid %s/nginx.pid;
error_log /var/log/nginx/error.log;
events { worker_connections 64; }
http {
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  log_format pq %s;
  access_log /var/log/nginx/access.log pq;
  server {
    listen %s:443 ssl;
    ssl_certificate /etc/nginx/cert.pem;
    ssl_certificate_key /etc/nginx/key.pem;
    ssl_session_tickets off;
    keepalive_timeout 0;
    location / { return 200 "ok\n"; }
  }
}
`, tmp, testenv.RecommendedLogFormat, testenv.KubeNodeAddr)
	if err := os.WriteFile(filepath.Join(etc, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	h.startNodeServer(t, map[string]string{"/etc/nginx": etc, "/var/log/nginx": logs}, []string{"PATH=/usr/sbin:/usr/bin"},
		[]string{bin, "-c", "/etc/nginx/nginx.conf", "-e", "/var/log/nginx/error.log", "-g", "daemon off;"})
	return n
}

// caddyNode: Caddy on the node, its access log (JSON) /var/log/caddy/access.log.
func (h *harness) caddyNode(t *testing.T) nodeFS {
	t.Helper()
	bin := testenv.NeedBin(t, "caddy")
	n := nodeFS{t.TempDir()}
	home, logs := n.path("/var/lib/caddy"), n.path("/var/log/caddy")
	os.MkdirAll(home, 0o700)
	os.MkdirAll(logs, 0o755)
	cert, key, _, err := testenv.CertE(home)
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{
  "admin": {"disabled": true},
  "storage": {"module": "file_system", "root": %q},
  "logging": {"logs": {
    "default": {"level": "ERROR", "exclude": ["http.log.access.node"]},
    "node": {"writer": {"output": "file", "filename": "/var/log/caddy/access.log"}, "encoder": {"format": "json"}, "include": ["http.log.access.node"]}
  }},
  "apps": {
    "http": {"servers": {"s": {
      "listen": ["%s:443"],
      "protocols": ["h1"],
      "automatic_https": {"disable": true},
      "tls_connection_policies": [{"protocol_min": "tls1.2"}],
      "logs": {"default_logger_name": "node"},
      "routes": [{"handle": [{"handler": "static_response", "status_code": 200, "body": "ok\n"}]}]
    }}},
    "tls": {"certificates": {"load_files": [{"certificate": %q, "key": %q}]}}
  }
}`, filepath.Join(home, "data"), testenv.KubeNodeAddr, cert, key)
	cf := filepath.Join(home, "caddy.json")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	h.startNodeServer(t, map[string]string{"/var/log/caddy": logs}, []string{"PATH=/usr/bin", "HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CONFIG_HOME=" + home},
		[]string{bin, "run", "--config", cf})
	return n
}

// bareNode: neither nginx nor Caddy, a crypto/tls server on the node, and
// none of the hostPath directories (DirectoryOrCreate makes them).
func (h *harness) bareNode(t *testing.T) nodeFS {
	t.Helper()
	ln, err := testenv.GoServerE(h.node.Node, testenv.KubeNodeAddr+":443", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return nodeFS{t.TempDir()}
}

// row is one line of the measured table.
func row(name string, r *agentRun) string {
	state := "runs"
	if r.exited {
		state = fmt.Sprintf("exit %d", r.exit)
	}
	var ws []string
	for _, w := range warnings(r.stderr) {
		if strings.Contains(w, "accept events (eBPF) unavailable") {
			continue // every run under the DaemonSet's capabilities
		}
		msg := w
		if i := strings.Index(w, "msg="); i >= 0 {
			msg = w[i+4:]
		}
		if len(msg) > 110 {
			msg = msg[:110] + "..."
		}
		ws = append(ws, msg)
	}
	return fmt.Sprintf("%-28s %-7s handshakes %2.0f  generation %2.0f (by $pid %2.0f; scans %s)  joined %2.0f  %s", name, state, r.handshakes, r.generation, r.fromLog, strings.Join(r.methods, ","), r.joined, strings.Join(ws, " | "))
}

// count is how many of the agent's lines contain s.
func count(stderr, s string) int { return strings.Count(stderr, s) }

// TestDaemonSetExecuted runs the agent as the DaemonSet's container on a
// node of namespaces: the kustomize base and the Helm chart's defaults
// with nginx on the node (records, log joins and generations under
// exactly the manifest's privileges), then each capability, mount and
// setting taken away in turn, then the defaults on a Caddy-only node and a
// node with neither.
func TestDaemonSetExecuted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent as the DaemonSet's container; skipped with -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedBin(t, "go", "ip", "iptables-restore")
	pqwatch, podrun := buildHarness(t)
	h := &harness{podrun: podrun, rootfs: imageRootfs(t, pqwatch), node: testenv.NewKubeNode(t)}
	const nodeName = "node-1"
	base := podProcFrom(t, "kustomize", decodeAll(t, renderKustomize(t)), nodeName, testenv.KubeNodeAddr)
	chart := podProcFrom(t, "helm", decodeAll(t, renderChart(t, "pqwatch", "pqwatch", nil)), nodeName, testenv.KubeNodeAddr)
	if !slices.Equal(base.argv, chart.argv) || !slices.Equal(base.env, chart.env) {
		t.Errorf("the chart's process differs from the base's:\nbase  %q %q\nchart %q %q", base.argv, base.env, chart.argv, chart.env)
	}
	t.Logf("the process: uid %d gid %d groups %v caps %v no_new_privs %v seccomp %s readOnlyRoot %v hostPID %v\nargv %q", base.uid, base.gid, base.groups, base.caps, base.nnp, base.seccomp, base.roRoot, base.hostPID, base.argv)

	var table []string
	defer func() { t.Logf("measured (%d handshakes a run):\n%s", podHandshakes, strings.Join(table, "\n")) }()
	full := want{podHandshakes, podHandshakes, podHandshakes}

	// checkStatus: the sets the kernel gave the running agent.
	checkStatus := func(t *testing.T, r *agentRun, p *podProc) {
		t.Helper()
		caps := capMask(p.caps)
		eff := caps
		if p.uid != 0 {
			eff = capMask(nil)
		}
		wantStatus := map[string]string{"CapBnd": caps, "CapPrm": eff, "CapEff": eff, "CapInh": capMask(nil), "CapAmb": capMask(nil),
			"NoNewPrivs": "1", "Seccomp": "2"}
		if p.seccomp == "Unconfined" {
			wantStatus["Seccomp"] = "0"
		}
		for k, v := range wantStatus {
			if r.status[k] != v {
				t.Errorf("%s = %q, want %q", k, r.status[k], v)
			}
		}
		if f := strings.Fields(r.status["Uid"]); len(f) == 0 || f[0] != strconv.FormatInt(p.uid, 10) {
			t.Errorf("Uid %q, want %d", r.status["Uid"], p.uid)
		}
		if f := strings.Fields(r.status["Gid"]); len(f) == 0 || f[0] != strconv.FormatInt(p.gid, 10) {
			t.Errorf("Gid %q, want %d", r.status["Gid"], p.gid)
		}
		var groups []string
		for _, g := range p.groups {
			groups = append(groups, strconv.FormatInt(g, 10))
		}
		if r.status["Groups"] != strings.Join(groups, " ") {
			t.Errorf("Groups %q, want %v", r.status["Groups"], groups)
		}
	}

	t.Run("nginx-node", func(t *testing.T) {
		fs := h.nginxNode(t)
		for _, p := range []*podProc{base, chart} {
			p.fixtureDir = fs.dir
		}
		for _, p := range []*podProc{base, chart} {
			t.Run(p.source, func(t *testing.T) {
				r := h.runAgent(t, p, full)
				table = append(table, row(p.source+" (nginx node)", r))
				if r.exited {
					t.Fatalf("the agent exited %d:\n%s", r.exit, r.stderr)
				}
				checkStatus(t, r, p)
				if st, err := os.Stat(filepath.Join(r.emptyDirs["spool"], "state")); err != nil || !st.IsDir() {
					t.Errorf("-state-dir not created in the spool emptyDir: %v", err)
				}
				if r.handshakes != podHandshakes || r.generation != podHandshakes || r.joined != podHandshakes {
					t.Errorf("handshakes %v, with a generation %v, joined %v; want %d each\n%s", r.handshakes, r.generation, r.joined, podHandshakes, r.stderr)
				}
			})
		}
		// Each removal: the process, what it must still do, and what it
		// must say (once).
		nonRoot := base.clone()
		nonRoot.uid = 65532
		noHostPID := base.clone()
		noHostPID.hostPID = false
		// A reference, not a removal: what more privileges would add.
		wide := base.clone()
		wide.caps = append(slices.Clone(containerdDefaultCaps), "CAP_SYS_PTRACE", "CAP_SYS_ADMIN", "CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH", "CAP_IPC_LOCK")
		wide.seccomp = "Unconfined"
		noGroups := base.clone()
		noGroups.groups = nil
		for _, rm := range []struct {
			name string
			p    *podProc
			exit bool   // exits 1
			say  string // said once
			w    want
		}{
			{name: "-NET_RAW", p: base.withoutCap("CAP_NET_RAW"), exit: true, say: "CAP_NET_RAW"},
			{name: "runAsUser 65532", p: nonRoot, exit: true, say: "CAP_NET_RAW"},
			// The scans still read /proc/PID/stat and cmdline: the log's
			// $pid names the generation; exe and fd are refused, said once.
			{name: "-SYS_PTRACE", p: base.withoutCap("CAP_SYS_PTRACE"), say: "process tracking: a server's /proc/PID/exe and fd are refused", w: full},
			// /host/proc is the host's /proc whatever the pod's PID namespace.
			{name: "-hostPID", p: noHostPID, w: full},
			{name: "-host-proc mount", p: base.withoutMount("host-proc"), say: "process tracking disabled", w: want{podHandshakes, 0, podHandshakes}},
			{name: "-nginx-logs mount", p: base.withoutMount("nginx-logs"), w: want{podHandshakes, 0, 0}},
			{name: "-nginx-conf mount", p: base.withoutMount("nginx-conf"), say: "-nginx-conf does not exist", w: want{podHandshakes, 0, 0}},
			{name: "-caddy-logs mount", p: base.withoutMount("caddy-logs"), w: full},
			// No pod on the harness's node: nothing of the host's nginx
			// changes. (The harness's rootfs keeps an empty directory at
			// the mount point; an image has none, and the agent says so.)
			{name: "-pod-logs mount", p: base.withoutMount("pod-logs"), w: full},
			{name: "-container-logs mount", p: base.withoutMount("container-logs"), w: full},
			{name: "-spool emptyDir", p: base.withoutMount("spool"), say: "-state-dir cannot be created", w: full},
			{name: "-tmp emptyDir", p: base.withoutMount("tmp"), w: full},
			{name: "-supplementalGroups", p: noGroups, w: full},
			{name: "reference: +SYS_ADMIN,BPF,...", p: wide, w: full},
		} {
			t.Run(strings.ReplaceAll(strings.Replace(rm.name, "-", "without ", 1), " ", "_"), func(t *testing.T) {
				r := h.runAgent(t, rm.p, rm.w)
				table = append(table, row(rm.name, r))
				if rm.exit {
					if !r.exited || r.exit != 1 {
						t.Errorf("exit %d (exited %v), want 1:\n%s", r.exit, r.exited, r.stderr)
					}
				} else {
					if r.exited {
						t.Fatalf("the agent exited %d:\n%s", r.exit, r.stderr)
					}
					checkStatus(t, r, rm.p)
					if r.handshakes != float64(rm.w.handshakes) || r.generation != float64(rm.w.generation) || r.joined != float64(rm.w.joined) {
						t.Errorf("handshakes %v, with a generation %v, joined %v; want %+v:\n%s", r.handshakes, r.generation, r.joined, rm.w, r.stderr)
					}
				}
				if rm.say != "" && count(r.stderr, rm.say) != 1 {
					t.Errorf("%q said %d times, want once:\n%s", rm.say, count(r.stderr, rm.say), r.stderr)
				}
			})
		}
	})
	t.Run("caddy-node", func(t *testing.T) {
		fs := h.caddyNode(t)
		p := base.clone()
		p.fixtureDir = fs.dir
		r := h.runAgent(t, p, want{podHandshakes, 0, podHandshakes})
		table = append(table, row("kustomize (Caddy-only node)", r))
		if r.exited {
			t.Fatalf("the agent exited %d:\n%s", r.exit, r.stderr)
		}
		if r.handshakes != podHandshakes || r.joined != podHandshakes {
			t.Errorf("handshakes %v, joined %v; want %d each\n%s", r.handshakes, r.joined, podHandshakes, r.stderr)
		}
		if count(r.stderr, "-nginx-conf does not exist") != 1 {
			t.Errorf("the absent nginx.conf is not said once:\n%s", r.stderr)
		}
	})
	t.Run("bare-node", func(t *testing.T) {
		fs := h.bareNode(t)
		p := base.clone()
		p.fixtureDir = fs.dir
		r := h.runAgent(t, p, want{podHandshakes, 0, 0})
		table = append(table, row("kustomize (neither)", r))
		if r.exited {
			t.Fatalf("the agent exited %d:\n%s", r.exit, r.stderr)
		}
		if r.handshakes != podHandshakes {
			t.Errorf("handshakes %v, want %d\n%s", r.handshakes, podHandshakes, r.stderr)
		}
		// The kubelet's DirectoryOrCreate made the host's directories.
		for _, d := range []string{"/var/log/nginx", "/var/log/caddy", "/etc/nginx"} {
			if st, err := os.Stat(fs.path(d)); err != nil || !st.IsDir() {
				t.Errorf("hostPath %s not created: %v", d, err)
			}
		}
	})
}
