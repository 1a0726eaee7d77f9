package memlimit

import (
	"testing"
	"testing/fstest"
)

func TestCgroup(t *testing.T) {
	for name, c := range map[string]struct {
		files map[string]string
		want  int64
		src   Source
	}{
		"v2": {map[string]string{
			"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "536870912\n",
		}, 512 << 20, FromCgroupV2},
		"v2 max": {map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
		}, 0, None},
		"v2 namespaced": {map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "268435456",
		}, 256 << 20, FromCgroupV2},
		"v1": {map[string]string{
			"proc/self/cgroup": "9:pids:/\n4:memory:/kubepods/p\n0::/\n",
			"sys/fs/cgroup/memory/kubepods/p/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20, FromCgroupV1},
		"v1 unlimited": {map[string]string{
			"proc/self/cgroup": "4:memory:/x\n",
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, None},
		"v1 path hidden": {map[string]string{
			"proc/self/cgroup":                           "4:cpu,memory:/outside/ns\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n",
		}, 1 << 30, FromCgroupV1},
		"no proc": {map[string]string{}, 0, None},
	} {
		root := fstest.MapFS{}
		for k, v := range c.files {
			root[k] = &fstest.MapFile{Data: []byte(v)}
		}
		if got, src := Cgroup(root); got != c.want || src != c.src {
			t.Errorf("%s: %d %s, want %d %s", name, got, src, c.want, c.src)
		}
	}
}

// TestReadLimit: the values a limit file may hold (the cases of the
// sniffer's former parser).
func TestReadLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"max\n":                 0, // v2, no limit
		"9223372036854771712\n": 0, // v1, no limit
		"536870912\n":           512 << 20,
		"":                      0,
		"garbage":               0,
		"-1":                    0,
		"268435456":             256 << 20,
		"1152921504606846976\n": 0, // 2^60: treated as no limit
	} {
		root := fstest.MapFS{"memory.max": &fstest.MapFile{Data: []byte(in)}}
		if got, _ := readLimit(root, "memory.max"); got != want {
			t.Errorf("readLimit(%q) = %d, want %d", in, got, want)
		}
	}
}
