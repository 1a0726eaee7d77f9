//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package proctrack

// OpenAccepts returns ErrAcceptsUnsupported: the accept program runs on
// Linux only, and its object is built little-endian.
func OpenAccepts(AcceptConfig) (*Accepts, error) { return nil, ErrAcceptsUnsupported }
