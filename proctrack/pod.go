package proctrack

import (
	"github.com/pqwatch/pqwatch/kubepod"
	"github.com/pqwatch/pqwatch/record"
)

// podOf is the Kubernetes pod of process pid, from its cgroup path
// (kubepod.FromCgroup), named from Config.PodLogs as far as it can be; nil
// for a process of no pod, or whose cgroup cannot be read. Read once per
// generation, with its identity.
func (r *procReader) podOf(pid int) *record.Pod {
	b, err := r.readFile(r.path(pid, "cgroup"))
	if err != nil {
		return nil
	}
	uid, cid, ok := kubepod.FromCgroup(b)
	if !ok {
		return nil
	}
	return r.pods.Pod(uid, cid)
}
