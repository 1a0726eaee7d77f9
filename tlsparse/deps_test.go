package tlsparse

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoInternalDeps proves the layering rule: tlsparse imports nothing else
// of pqwatch.
func TestNoInternalDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/pqwatch/pqwatch/") && p != "github.com/pqwatch/pqwatch/tlsparse" {
			t.Errorf("tlsparse depends on %s", p)
		}
	}
}
