//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package capture

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// ebpfFilter is the loaded socket filter: one program per loopback mode
// and link type (the ports, the mode and where the network header starts
// are constants of the program), sharing one flow map and one set of
// counters.
type ebpfFilter struct {
	spec  *ebpf.CollectionSpec
	ports []uint16

	mu    sync.Mutex
	progs map[int]*ebpf.Program // by loop<<8 | link type
	flows *ebpf.Map
	cnt   *ebpf.Map
}

// loadEBPF loads the filter for ports (empty: every port) for LinkRaw
// sockets without loopback check; other kinds load on first use.
func loadEBPF(ports []uint16) (*ebpfFilter, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("memlock: %w", err)
	}
	spec, err := loadFilter()
	if err != nil {
		return nil, err
	}
	ports = slices.Clone(ports)
	f := &ebpfFilter{spec: spec, ports: ports, progs: map[int]*ebpf.Program{}}
	if _, err := f.prog(loopNone, LinkRaw); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// prog returns the program for loopback mode loop and link type link
// (LinkEthernet: the socket's data starts at an Ethernet header), loading
// it once.
func (f *ebpfFilter) prog(loop, link int) (*ebpf.Program, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := loop<<8 | link
	if p := f.progs[key]; p != nil {
		return p, nil
	}
	netOff := uint32(0)
	if link == LinkEthernet {
		netOff = etherHdr
	}
	spec := f.spec.Copy()
	var set [1024]uint64
	for _, p := range f.ports {
		set[p>>6] |= 1 << (p & 63)
	}
	anyPort := uint8(0)
	if len(f.ports) == 0 {
		anyPort = 1
	}
	for name, v := range map[string]any{"ports": set, "any_port": anyPort, "loop_mode": uint8(loop), "net_off": netOff} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	opts := &ebpf.CollectionOptions{}
	if f.flows != nil {
		opts.MapReplacements = map[string]*ebpf.Map{"flows": f.flows, "counters": f.cnt}
	}
	var objs filterObjects
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("load: needs CAP_BPF (or CAP_SYS_ADMIN): %w", err)
		}
		return nil, fmt.Errorf("load: %w", err)
	}
	if f.flows == nil {
		f.flows, f.cnt = objs.Flows, objs.Counters
	}
	f.progs[key] = objs.CaptureFilter
	return objs.CaptureFilter, nil
}

// attach puts the program for loopback mode loop and link type link on
// socket fd (replacing any classic filter).
func (f *ebpfFilter) attach(fd, loop, link int) error {
	p, err := f.prog(loop, link)
	if err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_BPF, p.FD())
}

// stats sums the counters over CPUs.
func (f *ebpfFilter) stats() EBPFStats {
	var s EBPFStats
	out := []*uint64{&s.DecidedTLS13, &s.DecidedTLS12, &s.DecidedAlert, &s.Await, &s.Dropped}
	for i, p := range out {
		var per []uint64
		if err := f.cnt.Lookup(uint32(i), &per); err == nil {
			for _, v := range per {
				*p += v
			}
		}
	}
	return s
}

func (f *ebpfFilter) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.progs {
		p.Close()
	}
	f.progs = map[int]*ebpf.Program{}
	if f.flows != nil {
		f.flows.Close()
		f.cnt.Close()
	}
}
