//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package capture

import "errors"

// ebpfFilter is not built for big-endian architectures (the committed
// object is bpfel): the classic filter runs there.
type ebpfFilter struct{}

func loadEBPF([]uint16) (*ebpfFilter, error) {
	return nil, errors.New("no eBPF socket filter built for this architecture (big-endian)")
}

func (*ebpfFilter) attach(fd, loop, link int) error { return errors.ErrUnsupported }
func (*ebpfFilter) stats() EBPFStats                { return EBPFStats{} }
func (*ebpfFilter) close()                          {}
