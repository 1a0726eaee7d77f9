package proctrack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pqwatch/pqwatch/record"
)

// TestPodFixtureTree: over a fixture /proc tree (never a real cgroup) with
// one nginx on the host and one in a pod (its own PID namespace, master 1
// and worker 2 there, a kubelet cgroup path), the pod's generation is named
// from its cgroup and a fixture var/log/pods and var/log/containers, the
// host's has none; the pod's log line's $pid 2 is its worker's host pid,
// never host pid 2; a pod's $pid without a generation to read it in names
// nothing.
func TestPodFixtureTree(t *testing.T) {
	const (
		uid = "3f8a2c1e-5b7d-4e9a-8c6f-0123456789ab"
		cid = "4b825dc642cb6eb9a060e54bf8d69288fbee4904a3f1c0b2d5e6f7a8b9c0d1e2"
	)
	root, host, bins, logs := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "stat"), "cpu 0 0 0 0\nbtime 1800000000\n")
	write(filepath.Join(root, "1/stat"), statLine(1, "init", 0, 0, 1))
	write(filepath.Join(root, "1/task/1/children"), "")
	write(filepath.Join(bins, "nginx"), "binary OpenSSL 3.0.19 1 Jan 2025\x00")
	proc := func(pid, ppid int, title, cgroup string, nspid []int, kids ...int) {
		t.Helper()
		d := filepath.Join(root, fmt.Sprint(pid))
		flags := uint64(0)
		if strings.Contains(title, "worker") {
			flags = 0x40
		}
		write(filepath.Join(d, "stat"), statLine(pid, "nginx", ppid, flags, uint64(pid)))
		write(filepath.Join(d, "cmdline"), strings.ReplaceAll(title, " ", "\x00")+"\x00")
		write(filepath.Join(d, "statm"), "100 25 0 0 0 0 0\n")
		write(filepath.Join(d, "cgroup"), cgroup)
		ns := make([]string, len(nspid))
		for i, n := range nspid {
			ns[i] = fmt.Sprint(n)
		}
		write(filepath.Join(d, "status"), fmt.Sprintf("Name:\tnginx\nPid:\t%d\nPPid:\t%d\nNSpid:\t%s\nVmRSS:\t100 kB\n", pid, ppid, strings.Join(ns, "\t")))
		var ks []string
		for _, k := range kids {
			ks = append(ks, fmt.Sprint(k))
		}
		write(filepath.Join(d, fmt.Sprintf("task/%d/children", pid)), strings.Join(ks, " "))
		for _, l := range []struct{ to, name string }{{filepath.Join(bins, "nginx"), "exe"}, {host, "root"}} {
			if err := os.Symlink(l.to, filepath.Join(d, l.name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const master = "nginx: master process /usr/sbin/nginx -c /etc/nginx/nginx.conf"
	hostCG := "0::/system.slice/nginx.service\n"
	podCG := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + cid + ".scope\n"
	proc(100, 1, master, hostCG, []int{100}, 101)
	proc(101, 100, "nginx: worker process", hostCG, []int{101})
	proc(500, 1, master, podCG, []int{500, 1}, 502)
	proc(502, 500, "nginx: worker process", podCG, []int{502, 2})
	// Host pid 2: another process, no nginx.
	write(filepath.Join(root, "2/comm"), "kthreadd\n")

	pods := filepath.Join(logs, "var", "log", "pods")
	podLog := filepath.Join(pods, "web_web-0_"+uid, "nginx", "0.log")
	write(podLog, "")
	os.MkdirAll(filepath.Join(logs, "var", "log", "containers"), 0o755)
	if err := os.Symlink(podLog, filepath.Join(logs, "var", "log", "containers", "web-0_web_nginx-"+cid+".log")); err != nil {
		t.Fatal(err)
	}

	now := time.Unix(1_800_000_100, 0)
	tr := quietTracker(t, Config{ProcRoot: root, PodLogs: pods, Now: func() time.Time { return now }})
	if err := tr.Scan(); err != nil {
		t.Fatal(err)
	}
	var hostGen, podGen *record.Generation
	for _, pid := range []int{100, 500} {
		g, ok := tr.GenerationOf(pid)
		if !ok {
			t.Fatalf("no generation of %d: %+v", pid, tr.Generations())
		}
		if pid == 100 {
			hostGen = g
		} else {
			podGen = g
		}
	}
	if hostGen.Pod != nil {
		t.Errorf("the host's nginx has pod %+v", *hostGen.Pod)
	}
	want := record.Pod{Namespace: "web", Name: "web-0", UID: uid, Container: "nginx", ContainerID: cid}
	if podGen.Pod == nil || *podGen.Pod != want {
		t.Fatalf("the pod's generation has pod %+v, want %+v", podGen.Pod, want)
	}

	// pqwatch_generation_info names the pod's generation's pod, and no
	// pod for the host's.
	info := map[int]string{}
	ch := make(chan prometheus.Metric, 64)
	tr.Collector().Collect(ch)
	close(ch)
	for m := range ch {
		if !strings.HasPrefix(m.Desc().String(), `Desc{fqName: "pqwatch_generation_info"`) {
			continue
		}
		var pb dto.Metric
		m.Write(&pb)
		l := map[string]string{}
		for _, lp := range pb.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		pid, _ := strconv.Atoi(l["master_pid"])
		info[pid] = l["pod_namespace"] + "/" + l["pod_name"] + "/" + l["pod_container"]
	}
	if info[100] != "//" || info[500] != "web/web-0/nginx" {
		t.Errorf("pqwatch_generation_info pod labels by master: %v", info)
	}

	var out []*record.Handshake
	lp := NewLogPID(tr).Then(func(r *record.Handshake) { out = append(out, r) })
	logPod := &record.Pod{Namespace: "web", Name: "web-0", UID: uid, Container: "nginx"}
	gen := func(g *record.Generation) *record.Generation { c := *g; c.WorkerPID = 0; return &c }
	cases := []struct {
		name   string
		r      *record.Handshake
		worker int // 0: no generation
	}{
		{"pod line, pod generation", &record.Handshake{Transport: record.TransportTCP, Generation: gen(podGen), Pod: logPod, Log: &record.Log{Source: "nginx", PID: 2}}, 502},
		{"pod line, no generation: the pod's by its UID", &record.Handshake{Transport: record.TransportTCP, Pod: logPod, Log: &record.Log{Source: "nginx", PID: 2}}, 502},
		{"host line, host generation", &record.Handshake{Transport: record.TransportTCP, Generation: gen(hostGen), Log: &record.Log{Source: "nginx", PID: 101}}, 101},
		{"pod line, $pid of no process there", &record.Handshake{Transport: record.TransportTCP, Pod: logPod, Log: &record.Log{Source: "nginx", PID: 7}}, 0},
		{"another pod's line, no generation", &record.Handshake{Transport: record.TransportTCP, Pod: &record.Pod{UID: "00000000-0000-0000-0000-000000000000"}, Log: &record.Log{Source: "nginx", PID: 2}}, 0},
	}
	for _, c := range cases {
		out = out[:0]
		lp.Process(c.r)
		lp.Flush()
		if len(out) != 1 {
			t.Fatalf("%s: %d records handed on", c.name, len(out))
		}
		g := out[0].Generation
		switch {
		case c.worker == 0 && g != nil:
			t.Errorf("%s: generation %+v, want none", c.name, *g)
		case c.worker != 0 && (g == nil || g.WorkerPID != c.worker):
			t.Errorf("%s: generation %+v, want worker %d", c.name, g, c.worker)
		}
		if c.worker == 502 && out[0].ServerPod().UID != uid {
			t.Errorf("%s: pod %+v", c.name, out[0].ServerPod())
		}
	}
}

func TestParseNSpid(t *testing.T) {
	for in, want := range map[string]string{
		"Name:\tnginx\nNSpid:\t4242\t7\t1\nNSpgid:\t1\n": "[4242 7 1]",
		"Name:\tnginx\nNSpid:\t4242\n":                   "[4242]",
		"Name:\tnginx\nPid:\t4242\n":                     "[]",
		"Name:\tnginx\nNSpid:\t42x\n":                    "[]",
	} {
		if got := fmt.Sprint(parseNSpid([]byte(in))); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

// BenchmarkHostPID: the per-record cost of reading a line's $pid in its
// generation's PID namespace once the namespace is known (a map lookup
// under a lock): a host's generation and a pod's.
func BenchmarkHostPID(b *testing.B) {
	s := &LogPID{}
	s.ns.gens = map[string]*nsGen{
		"nginx-host": {},
		"nginx-pod":  {nested: true, inner: map[int]int{1: 500, 2: 502}},
	}
	host := &record.Handshake{Generation: &record.Generation{ID: "nginx-host", MasterPID: 100}, Log: &record.Log{PID: 101}}
	pod := &record.Handshake{Generation: &record.Generation{ID: "nginx-pod", MasterPID: 500, Pod: &record.Pod{UID: "u"}}, Pod: &record.Pod{UID: "u"}, Log: &record.Log{PID: 2}}
	b.ReportAllocs()
	for b.Loop() {
		if p, ok := s.hostPID(host, 101); !ok || p != 101 {
			b.Fatal(p, ok)
		}
		if p, ok := s.hostPID(pod, 2); !ok || p != 502 {
			b.Fatal(p, ok)
		}
	}
}
