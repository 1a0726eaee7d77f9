// Command podrun is deploy/pod_test.go's container runtime in miniature: it
// starts one process as containerd and runc start a container's, from a
// JSON spec the test writes (see spec below). It is built by the test only
// (cgo, libseccomp) and must be started in a mount namespace of its own
// (the test clones it with CLONE_NEWNS, and CLONE_NEWPID without hostPID):
// it refuses to run in its parent's mount namespace, so no mount it makes
// ever reaches the host's.
//
// In order, as runc: mount propagation private; the network namespace
// (hostNetwork: the node's); the rootfs bound on itself, its mount points
// created, the volumes mounted (tmpfs, binds, read-only where asked), /proc
// (of the process's PID namespace), a minimal /dev and a read-only /sys;
// the rootfs remounted read-only (readOnlyRootFilesystem); chroot; the
// bounding set cut to the container's capabilities; groups, gid, uid
// (PR_SET_KEEPCAPS); permitted and effective set to the capabilities,
// inheritable and ambient empty (what containerd and runc give every
// container since CVE-2022-24769); no_new_privs (allowPrivilegeEscalation:
// false); the seccomp profile (moby's default.json, conditions on
// capabilities, architecture and kernel evaluated as moby does); execve.
// The kernel's exec rules then do the rest: uid 0 keeps the bounding set
// as permitted and effective, any other uid keeps nothing.
package main

/*
#cgo LDFLAGS: -lseccomp
#include <seccomp.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() { runtime.LockOSThread() } // every step below is per thread

type mount struct {
	Type     string // "bind", "tmpfs", "proc", "sysfs", "dev"
	Source   string // bind: the host's path
	Target   string // in the rootfs
	ReadOnly bool
	Options  string // tmpfs: data, e.g. "size=16m"
}

type spec struct {
	NetNS        string // a /run/netns path, "" = the caller's
	Root         string // the rootfs; "" = no chroot (a process of the node, mounts at host paths in its own namespace)
	Mounts       []mount
	ReadOnlyRoot bool
	// Host: a process of the node: no credential, capability or seccomp
	// change (the fixture's servers).
	Host       bool
	UID, GID   int
	Groups     []int
	Caps       []string // "CAP_NET_RAW", ...: the container's set (bounding; permitted and effective before exec)
	NoNewPrivs bool
	Seccomp    string // a moby-format profile; "" = Unconfined
	Env        []string
	Argv       []string
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: podrun SPEC.json")
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var s spec
	if err := json.Unmarshal(b, &s); err != nil {
		fail("spec: %v", err)
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	parent, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if self == "" || self == parent {
		fail("not in a mount namespace of its own (%s, parent %s): refusing to mount", self, parent)
	}
	must(unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""), "make / private")
	if s.NetNS != "" {
		fd, err := unix.Open(s.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		must(err, "open "+s.NetNS)
		must(unix.Setns(fd, unix.CLONE_NEWNET), "setns "+s.NetNS)
		unix.Close(fd)
	}
	var prof *profile // read before the chroot hides it
	if s.Seccomp != "" && !s.Host {
		prof = loadProfile(s.Seccomp, s.Caps)
	}
	root := s.Root
	if root != "" {
		must(unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""), "bind the rootfs")
	}
	for _, m := range s.Mounts {
		doMount(root, m)
	}
	if root != "" {
		if s.ReadOnlyRoot {
			must(unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""), "remount the rootfs read-only")
		}
		must(unix.Chdir(root), "chdir rootfs")
		must(unix.Chroot("."), "chroot")
		must(unix.Chdir("/"), "chdir /")
	}
	if !s.Host {
		if prof != nil && !s.NoNewPrivs {
			prof.load() // with CAP_SYS_ADMIN still held, as runc without no_new_privs
		}
		setCreds(s)
		if s.NoNewPrivs {
			must(unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
		}
		if prof != nil && s.NoNewPrivs {
			prof.load()
		}
	}
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0) // after the credential change reset it
	err = syscall.Exec(s.Argv[0], s.Argv, s.Env)
	fail("exec %s: %v", s.Argv[0], err)
}

func doMount(root string, m mount) {
	target := filepath.Join("/", root, m.Target)
	if m.Type == "bind" {
		if st, err := os.Stat(m.Source); err == nil && !st.IsDir() {
			os.MkdirAll(filepath.Dir(target), 0o755)
			if f, err := os.OpenFile(target, os.O_CREATE, 0o644); err == nil {
				f.Close()
			}
		} else {
			must(os.MkdirAll(target, 0o755), "mount point "+target)
		}
	} else {
		must(os.MkdirAll(target, 0o755), "mount point "+target)
	}
	const base = unix.MS_NOSUID | unix.MS_NODEV
	switch m.Type {
	case "bind":
		must(unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""), "bind "+m.Source)
		if m.ReadOnly {
			must(unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""), "read-only "+target)
		}
	case "tmpfs":
		must(unix.Mount("tmpfs", target, "tmpfs", base, m.Options), "tmpfs "+target)
	case "proc":
		must(unix.Mount("proc", target, "proc", base|unix.MS_NOEXEC, ""), "proc "+target)
	case "sysfs":
		must(unix.Mount("sysfs", target, "sysfs", base|unix.MS_NOEXEC|unix.MS_RDONLY, ""), "sysfs "+target)
	case "dev":
		must(unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID, "mode=755,size=65536k"), "tmpfs "+target)
		for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
			p := filepath.Join(target, d)
			f, err := os.Create(p)
			must(err, "dev "+p)
			f.Close()
			must(unix.Mount("/dev/"+d, p, "", unix.MS_BIND, ""), "bind /dev/"+d)
		}
		os.Mkdir(filepath.Join(target, "shm"), 0o1777)
		must(unix.Mount("shm", filepath.Join(target, "shm"), "tmpfs", base|unix.MS_NOEXEC, "mode=1777,size=65536k"), "shm")
	default:
		fail("mount type %q", m.Type)
	}
}

// setCreds: bounding set, then groups, gid and uid keeping capabilities,
// then permitted = effective = the container's, inheritable and ambient
// empty. Raw syscalls: this thread only, the one that execs.
func setCreds(s spec) {
	keep := map[int]bool{}
	for _, c := range s.Caps {
		n, ok := capNum(c)
		if !ok {
			fail("unknown capability %s", c)
		}
		keep[n] = true
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if !keep[c] {
			must(unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0), "drop "+strconv.Itoa(c)+" from the bounding set")
		}
	}
	must(unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
	groups := make([]uint32, len(s.Groups))
	for i, g := range s.Groups {
		groups[i] = uint32(g)
	}
	var gp unsafe.Pointer
	if len(groups) > 0 {
		gp = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(gp), 0); e != 0 {
		fail("setgroups: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(s.GID), uintptr(s.GID), uintptr(s.GID)); e != 0 {
		fail("setresgid: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(s.UID), uintptr(s.UID), uintptr(s.UID)); e != 0 {
		fail("setresuid: %v", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for c := range keep {
		data[c/32].Permitted |= 1 << (uint(c) % 32)
		data[c/32].Effective |= 1 << (uint(c) % 32)
	}
	must(unix.Capset(&hdr, &data[0]), "capset")
	must(unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient")
	must(unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0), "keepcaps off")
}

var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"}

func capNum(name string) (int, bool) {
	i := slices.Index(capNames, strings.TrimPrefix(strings.ToUpper(name), "CAP_"))
	return i, i >= 0
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return len(capNames) - 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return len(capNames) - 1
	}
	return n
}

// The moby profile format (github.com/moby/profiles seccomp/default.json).
type mobyProfile struct {
	DefaultAction   string `json:"defaultAction"`
	DefaultErrnoRet *uint  `json:"defaultErrnoRet"`
	ArchMap         []struct {
		Architecture     string   `json:"architecture"`
		SubArchitectures []string `json:"subArchitectures"`
	} `json:"archMap"`
	Syscalls []struct {
		Names    []string `json:"names"`
		Action   string   `json:"action"`
		ErrnoRet *uint    `json:"errnoRet"`
		Args     []struct {
			Index    uint   `json:"index"`
			Value    uint64 `json:"value"`
			ValueTwo uint64 `json:"valueTwo"`
			Op       string `json:"op"`
		} `json:"args"`
		Includes struct {
			Caps      []string `json:"caps"`
			Arches    []string `json:"arches"`
			MinKernel string   `json:"minKernel"`
		} `json:"includes"`
		Excludes struct {
			Caps   []string `json:"caps"`
			Arches []string `json:"arches"`
		} `json:"excludes"`
	} `json:"syscalls"`
}

type profile struct{ ctx C.scmp_filter_ctx }

func action(name string, errno *uint, def uint) C.uint32_t {
	e := def
	if errno != nil {
		e = *errno
	}
	switch name {
	case "SCMP_ACT_ALLOW":
		return C.SCMP_ACT_ALLOW
	case "SCMP_ACT_ERRNO":
		return C.uint32_t(0x00050000 | (e & 0xffff))
	case "SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD":
		return C.SCMP_ACT_KILL
	case "SCMP_ACT_KILL_PROCESS":
		return C.SCMP_ACT_KILL_PROCESS
	case "SCMP_ACT_LOG":
		return C.SCMP_ACT_LOG
	}
	fail("seccomp action %s", name)
	return 0
}

var ops = map[string]C.enum_scmp_compare{
	"SCMP_CMP_NE": C.SCMP_CMP_NE, "SCMP_CMP_LT": C.SCMP_CMP_LT, "SCMP_CMP_LE": C.SCMP_CMP_LE, "SCMP_CMP_EQ": C.SCMP_CMP_EQ,
	"SCMP_CMP_GE": C.SCMP_CMP_GE, "SCMP_CMP_GT": C.SCMP_CMP_GT, "SCMP_CMP_MASKED_EQ": C.SCMP_CMP_MASKED_EQ,
}

var goArch = map[string]string{"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}
var arches = map[string]C.uint32_t{"SCMP_ARCH_X86": C.SCMP_ARCH_X86, "SCMP_ARCH_X32": C.SCMP_ARCH_X32, "SCMP_ARCH_ARM": C.SCMP_ARCH_ARM}

// kernelAtLeast compares the running kernel's release with "major.minor".
func kernelAtLeast(v string) bool {
	var u unix.Utsname
	unix.Uname(&u)
	rel := unix.ByteSliceToString(u.Release[:])
	var a, b, x, y int
	fmt.Sscanf(rel, "%d.%d", &a, &b)
	fmt.Sscanf(v, "%d.%d", &x, &y)
	return a > x || a == x && b >= y
}

// loadProfile builds the filter moby builds from the profile for a
// container with caps: a rule is kept when all its includes.caps are the
// container's, its arches name this one and the kernel is new enough, and
// none of its excludes apply.
func loadProfile(path string, caps []string) *profile {
	b, err := os.ReadFile(path)
	must(err, "seccomp profile")
	var p mobyProfile
	must(json.Unmarshal(b, &p), "seccomp profile "+path)
	def := uint(1)
	if p.DefaultErrnoRet != nil {
		def = *p.DefaultErrnoRet
	}
	defAct := action(p.DefaultAction, p.DefaultErrnoRet, def)
	ctx := C.seccomp_init(defAct)
	if ctx == nil {
		fail("seccomp_init")
	}
	// Not libseccomp's default: no_new_privs is the manifest's to set.
	C.seccomp_attr_set(ctx, C.SCMP_FLTATR_CTL_NNP, 0)
	for _, am := range p.ArchMap {
		if am.Architecture != goArch[runtime.GOARCH] {
			continue
		}
		for _, sub := range am.SubArchitectures {
			if a, ok := arches[sub]; ok {
				C.seccomp_arch_add(ctx, a) // -EEXIST when present
			}
		}
	}
	has := func(c string) bool {
		return slices.ContainsFunc(caps, func(x string) bool { return strings.EqualFold(x, c) || strings.EqualFold("CAP_"+x, c) })
	}
	for _, sc := range p.Syscalls {
		skip := false
		for _, c := range sc.Includes.Caps {
			if !has(c) {
				skip = true
			}
		}
		if len(sc.Includes.Arches) > 0 && !slices.Contains(sc.Includes.Arches, runtime.GOARCH) {
			skip = true
		}
		if sc.Includes.MinKernel != "" && !kernelAtLeast(sc.Includes.MinKernel) {
			skip = true
		}
		if slices.ContainsFunc(sc.Excludes.Caps, has) || slices.Contains(sc.Excludes.Arches, runtime.GOARCH) {
			skip = true
		}
		if skip {
			continue
		}
		act := action(sc.Action, sc.ErrnoRet, def)
		if act == defAct {
			continue
		}
		args := make([]C.struct_scmp_arg_cmp, len(sc.Args))
		for i, a := range sc.Args {
			op, ok := ops[a.Op]
			if !ok {
				fail("seccomp op %s", a.Op)
			}
			args[i] = C.struct_scmp_arg_cmp{arg: C.uint(a.Index), op: op, datum_a: C.scmp_datum_t(a.Value), datum_b: C.scmp_datum_t(a.ValueTwo)}
		}
		for _, name := range sc.Names {
			cn := C.CString(name)
			nr := C.seccomp_syscall_resolve_name(cn)
			C.free(unsafe.Pointer(cn))
			if nr == C.__NR_SCMP_ERROR {
				continue // not a syscall of this architecture or libseccomp
			}
			var ap *C.struct_scmp_arg_cmp
			if len(args) > 0 {
				ap = &args[0]
			}
			if rc := C.seccomp_rule_add_array(ctx, act, nr, C.uint(len(args)), ap); rc < 0 {
				fail("seccomp rule %s: %d", name, rc)
			}
		}
	}
	return &profile{ctx: ctx}
}

func (p *profile) load() {
	if rc := C.seccomp_load(p.ctx); rc < 0 {
		fail("seccomp_load: %d", rc)
	}
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "podrun: "+format+"\n", a...)
	os.Exit(125)
}
