package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pqwatch/pqwatch/"

// allowed lists, for every package, the packages of ours it may import
// (non-test code). Dependencies point down: the pure parsers and the record
// import nothing of ours; the pipeline imports the stages and sinks but
// nothing that runs it; only cmd wires everything. A new package must be
// added here, with its place in CONTRIBUTING.md.
var allowed = map[string][]string{
	"record":            nil,
	"tlsparse":          nil,
	"logparse":          nil,
	"capture":           {"internal/pollfd"},
	"pcapgen":           nil,
	"internal/procfs":   nil,
	"internal/memlimit": nil,
	"internal/pollfd":   nil,
	"sniffer/quic":      {"internal/memlist"},
	"internal/memlist":  nil,
	"sniffer":           {"record", "tlsparse", "sniffer/quic", "internal/memlist", "internal/memlimit"},
	"forecast":          {"record", "tlsparse"},
	"report":            {"record", "tlsparse", "forecast"},
	"logjoin":           {"record", "tlsparse", "logparse"},
	"proctrack":         {"record", "internal/procfs", "internal/pollfd"},
	"exporter":          {"record", "tlsparse", "forecast", "report"},
	"loadgen":           {"tlsparse", "internal/procfs"},
	"pipeline":          {"record", "report", "sniffer", "logjoin"},
	"agent":             {"internal/memlimit", "record", "capture", "sniffer", "forecast", "logparse", "logjoin", "proctrack", "exporter", "pipeline"},
	"demo":              {"record", "sniffer", "forecast", "report", "pcapgen", "pipeline", "agent"},
	"cmd/pqwatch":       {"*"},
	// Test and tool packages.
	"internal/testenv":   {"pcapgen"},
	"internal/benchcmp":  {"pcapgen"},
	"internal/benchlive": {"*"},
	"internal/gencap":    {"pcapgen"},
	"internal/layering":  nil,
	"conformance":        {"*"},
	"e2e":                {"*"},
	"deploy":             {"*"},
}

func TestLayering(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		ok, known := allowed[pkg]
		if !known {
			t.Errorf("package %s is not in the layering table (internal/layering): give it its place", pkg)
			continue
		}
		for _, imp := range f[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || slices.Contains(ok, "*") {
				continue
			}
			if !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s, against the layering (allowed: %v)", pkg, dep, ok)
			}
		}
	}
}
