package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pqwatch/pqwatch/"

// allowed lists, for every package, the packages of ours it may import
// (non-test code). Dependencies point down: the pure parsers import nothing
// of ours, the record only the group registry (tlsparse); the pipeline
// imports the stages and sinks but nothing that runs it; only cmd wires
// everything. A new package must be added here, with its place in
// CONTRIBUTING.md.
var allowed = map[string][]string{
	"record":            {"tlsparse"},
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
	"logjoin":           {"record", "tlsparse", "logparse", "kubepod"},
	"proctrack":         {"record", "internal/procfs", "internal/pollfd", "kubepod"},
	"exporter":          {"record", "tlsparse", "forecast", "report"},
	"loadgen":           {"tlsparse", "internal/procfs"},
	"merge":             {"record"},
	"kubepod":           {"record"},
	"pipeline":          {"record", "report", "sniffer", "logjoin", "merge", "capture"},
	"agent":             {"internal/memlimit", "record", "report", "kubepod", "capture", "sniffer", "forecast", "logparse", "logjoin", "proctrack", "exporter", "merge", "pipeline"},
	"demo":              {"record", "sniffer", "forecast", "report", "pcapgen", "merge", "pipeline", "agent"},
	// cmd wires: flags -> each package's option types -> pipeline. It
	// never reaches into proctrack or the capture rings' internals.
	"cmd/pqwatch": {"agent", "capture", "demo", "exporter", "forecast", "internal/memlimit", "loadgen", "logjoin", "logparse", "merge", "pipeline", "record", "report", "sniffer", "tlsparse"},
	// Test and tool packages.
	"internal/testenv":   {"pcapgen"},
	"internal/benchcmp":  {"pcapgen"},
	"internal/benchlive": {"*"},
	"internal/gencap":    {"pcapgen"},
	"internal/genchart":  {"loadgen"},
	"internal/layering":  nil,
	"internal/typesize":  nil,
	"conformance":        {"*"},
	"e2e":                {"*"},
	"deploy":             {"*"},
}

func TestLayering(t *testing.T) {
	// go test runs with the go tool that built the test on PATH; a test
	// that cannot read the module must fail, not pass unchecked.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: the layering cannot be checked: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	if n := strings.Count(string(out), "\n"); n < 20 {
		t.Fatalf("go list found %d packages: the module was not read", n)
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
