// Package kubepod names the Kubernetes pod of a process or of a container
// log from what a node's files say, without the Kubernetes API: a
// process's cgroup path (kubelet's systemd and cgroupfs layouts, cgroup v1
// and v2, containerd, CRI-O and Docker) names its pod's UID and its
// container's ID; kubelet's log directories,
// /var/log/pods/NAMESPACE_NAME_UID/CONTAINER/N.log, name the rest, and its
// links /var/log/containers/NAME_NAMESPACE_CONTAINER-ID.log tie a
// container's ID to its name.
package kubepod

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// FromCgroup reads the content of /proc/PID/cgroup: the pod UID and the
// container ID of a process kubelet started, ok false for any other
// process. Each line is "ID:CONTROLLERS:PATH" (cgroup v2 has one, "0::"); a
// path of another cgroup namespace starts with "/.." and is read the same.
// The layouts:
//
//	systemd: .../kubepods-burstable.slice/kubepods-burstable-pod<UID, _ for ->.slice/cri-containerd-<ID>.scope
//	         (crio-<ID>.scope, docker-<ID>.scope; a Guaranteed pod has kubepods-pod<UID>.slice)
//	cgroupfs: .../kubepods/burstable/pod<UID>/<ID> (crio-<ID>, docker-<ID>)
//
// The container ID is empty when the process is in the pod's cgroup but
// in no container's (CRI-O's conmon, a pod-level process).
func FromCgroup(b []byte) (uid, containerID string, ok bool) {
	for len(b) > 0 {
		var line []byte
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		// ID:CONTROLLERS:PATH; the path may hold colons.
		s := string(line)
		i := strings.IndexByte(s, ':')
		if i < 0 {
			continue
		}
		j := strings.IndexByte(s[i+1:], ':')
		if j < 0 {
			continue
		}
		if uid, containerID, ok = fromPath(s[i+1+j+1:]); ok {
			return uid, containerID, true
		}
	}
	return "", "", false
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// fromPath reads one cgroup path.
func fromPath(p string) (uid, containerID string, ok bool) {
	if !strings.Contains(p, "kubepods") {
		return "", "", false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		// containerd's systemd cgroup path as one segment:
		// kubepods-besteffort-pod<UID>.slice:cri-containerd:<ID>.
		if parts := strings.Split(seg, ":"); len(parts) == 3 {
			if u, ok := podSegment(parts[0]); ok {
				return u, containerSegment(parts[2]), true
			}
		}
		u, ok := podSegment(seg)
		if !ok {
			continue
		}
		if i+1 < len(segs) {
			containerID = containerSegment(segs[i+1])
		}
		return u, containerID, true
	}
	return "", "", false
}

// podSegment reads a pod's cgroup: kubepods-<qos>-pod<UID>.slice (systemd,
// the UID's dashes written as underscores; kind's kubelet-kubepods-...
// too) or pod<UID> (cgroupfs).
func podSegment(seg string) (string, bool) {
	var u string
	if s, ok := strings.CutSuffix(seg, ".slice"); ok {
		i := strings.LastIndex(s, "-pod")
		if i < 0 || !strings.Contains(s[:i], "kubepods") {
			return "", false
		}
		u = strings.ReplaceAll(s[i+len("-pod"):], "_", "-")
	} else if s, ok := strings.CutPrefix(seg, "pod"); ok {
		u = s
	} else {
		return "", false
	}
	if !ValidUID(u) {
		return "", false
	}
	return u, true
}

// containerSegment reads a container's cgroup: <runtime>-<ID>.scope
// (systemd) or [<runtime>-]<ID> (cgroupfs); "" when it is none (conmon's,
// or no ID of 64 hex digits).
func containerSegment(seg string) string {
	s := strings.TrimSuffix(seg, ".scope")
	if strings.Contains(s, "conmon") {
		return ""
	}
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) != 64 || !isHex(s) {
		return ""
	}
	return s
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// ValidUID says whether s is a pod UID as kubelet writes them: a UUID
// (8-4-4-4-12 lower-case hex digits), or a static pod's 32 hex digits
// (the hash of its manifest).
func ValidUID(s string) bool {
	switch len(s) {
	case 32:
		return isHex(s)
	case 36:
		for i := 0; i < 36; i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return false
				}
			} else if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	return false
}

// FromDirName reads a pod's log directory name, NAMESPACE_NAME_UID
// (neither a namespace nor a pod name can hold an underscore).
func FromDirName(name string) (namespace, pod, uid string, ok bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !ValidUID(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// FromLogPath names the pod and container of a container log kubelet
// keeps: .../NAMESPACE_NAME_UID/CONTAINER/N.log, or one of its rotated
// files (N.log.<time>, N.log.<time>.gz). ok is false for any other path.
func FromLogPath(path string) (*record.Pod, bool) {
	dir, file := filepath.Split(filepath.Clean(path))
	if !isLogName(file) {
		return nil, false
	}
	dir = filepath.Clean(dir)
	container := filepath.Base(dir)
	ns, name, uid, ok := FromDirName(filepath.Base(filepath.Dir(dir)))
	if !ok || container == "" || container == "." || container == "/" || strings.ContainsAny(container, "_") {
		return nil, false
	}
	return &record.Pod{Namespace: ns, Name: name, UID: uid, Container: container}, true
}

// isLogName: N.log, or a rotation of it (N.log.<suffix>).
func isLogName(f string) bool {
	i := strings.Index(f, ".log")
	if i <= 0 || (len(f) > i+4 && f[i+4] != '.') {
		return false
	}
	for _, c := range f[:i] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Resolver completes a pod known by its UID and container ID (a cgroup's)
// from kubelet's log directories: PodsDir (/var/log/pods) names its
// namespace and name, the containers directory beside it
// (/var/log/containers) its container. A directory that cannot be read
// leaves those fields empty. Safe for concurrent use.
type Resolver struct {
	PodsDir string // "" = no directory: UID and container ID only

	mu     sync.Mutex
	byUID  map[string][2]string // uid -> namespace, name
	byCID  map[string]string    // container ID -> name
	listed time.Time            // last listing
}

// relist bounds how often a miss lists the directories again.
const relist = 2 * time.Second

// maxEntries bounds each cache; past it the cache is dropped and listed
// again.
const maxEntries = 16384

// Pod returns the pod of uid and containerID, named as far as the
// directories say.
func (r *Resolver) Pod(uid, containerID string) *record.Pod {
	p := &record.Pod{UID: uid, ContainerID: containerID}
	if r == nil || r.PodsDir == "" {
		return p
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	nn, ok := r.byUID[uid]
	cn, cok := r.byCID[containerID]
	if (!ok || (containerID != "" && !cok)) && time.Since(r.listed) >= relist {
		r.list()
		nn, ok = r.byUID[uid]
		cn, cok = r.byCID[containerID]
	}
	if ok {
		p.Namespace, p.Name = nn[0], nn[1]
	}
	if cok && containerID != "" {
		p.Container = cn
	}
	return p
}

// list reads the pods directory and the containers directory beside it.
func (r *Resolver) list() {
	r.listed = time.Now()
	if len(r.byUID) > maxEntries || r.byUID == nil {
		r.byUID = map[string][2]string{}
	}
	if len(r.byCID) > maxEntries || r.byCID == nil {
		r.byCID = map[string]string{}
	}
	if ents, err := os.ReadDir(r.PodsDir); err == nil {
		for _, e := range ents {
			if ns, name, uid, ok := FromDirName(e.Name()); ok {
				r.byUID[uid] = [2]string{ns, name}
			}
		}
	}
	// NAME_NAMESPACE_CONTAINER-ID.log (links into the pods directory).
	if ents, err := os.ReadDir(filepath.Join(filepath.Dir(filepath.Clean(r.PodsDir)), "containers")); err == nil {
		for _, e := range ents {
			n, ok := strings.CutSuffix(e.Name(), ".log")
			if !ok || len(n) < 66 || n[len(n)-65] != '-' || !isHex(n[len(n)-64:]) {
				continue
			}
			parts := strings.Split(n[:len(n)-65], "_")
			if len(parts) != 3 || parts[2] == "" {
				continue
			}
			r.byCID[n[len(n)-64:]] = parts[2]
		}
	}
}
