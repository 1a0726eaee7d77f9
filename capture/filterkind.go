package capture

import (
	"fmt"
	"os"
)

// Kernel filter kinds (Config.Filter, Capture.Filter).
const (
	FilterAuto    = ""        // the classic filter (FilterEnv may ask for eBPF)
	FilterEBPF    = "ebpf"    // the eBPF socket filter, or New fails
	FilterClassic = "classic" // the classic BPF filter of FilterWith
)

// FilterEnv, when Config.Filter is empty, names the filter kind
// ("classic" or "ebpf"): PQWATCH_CAPTURE_FILTER=ebpf turns the eBPF
// socket filter on (falling back to the classic one, saying why, where the
// kernel refuses it).
//
// The classic filter is the default because it is the cheaper one: the
// eBPF filter runs for every packet of the interface, other ports
// included, and costs more kernel time than the user-space work of the
// few packets per handshake it keeps out of the rings (make bench
// measures both; docs/performance.md).
const FilterEnv = "PQWATCH_CAPTURE_FILTER"

// EBPFStats are the eBPF filter's counters (bpf/filter.c), summed over CPUs.
type EBPFStats struct {
	DecidedTLS13 uint64 // flows decided at a whole TLS 1.3 ServerHello
	DecidedTLS12 uint64 // TLS 1.0-1.2 flows decided at the client's data after the server's flight
	DecidedAlert uint64 // flows decided at a plaintext alert
	Await        uint64 // TLS 1.0-1.2 ServerHellos seen (waiting for the client)
	Dropped      uint64 // packets of decided flows kept out of the rings
}

// filterKind resolves Config.Filter (and FilterEnv) into the kind to try.
func filterKind(cfg Config) (string, error) {
	k := cfg.Filter
	if k == FilterAuto {
		k = os.Getenv(FilterEnv)
	}
	switch k {
	case FilterAuto, FilterEBPF, FilterClassic:
		return k, nil
	}
	return "", fmt.Errorf("capture: filter %q: want %q or %q", k, FilterEBPF, FilterClassic)
}
