// Package deploy holds pqwatch's deployment files (Kubernetes, Helm, Grafana,
// Prometheus rules, Dockerfile) and the tests that keep them true: there is
// no Go code here to import.
package deploy

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite files generated from prometheus/rules.yml (the PrometheusRule component, the chart's rules copy)")

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus): skipping")
	}
	return p
}

// TestRulesCheck runs `promtool check rules` on the shipped rules file.
func TestRulesCheck(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/rules.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestRulesUnit runs the promtool unit tests: synthetic series prove that the
// recording rules compute the PQ share (and the other ratios) and that every
// alert fires when it should and stays quiet when it should.
func TestRulesUnit(t *testing.T) {
	cmd := exec.Command(promtool(t), "test", "rules", "rules_test.yml")
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS\n%s", out)
	}
}

// TestPromQLParses collects every PromQL expression of the rules and the
// Grafana dashboards and has promtool parse them all, as one rules file.
// Grafana's variables are replaced by values Prometheus would see.
func TestPromQLParses(t *testing.T) {
	pt := promtool(t)
	exprs := allPromQL(t)
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		rules = append(rules, rule{Record: "pqwatch_check:expr_" + strconv.Itoa(i), Expr: e.expr})
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "all-promql", "rules": rules}}}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "all.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(pt, "check", "rules", path).CombinedOutput()
	if err != nil {
		// Find the culprit(s) one by one for a readable failure.
		for i, e := range exprs {
			one := map[string]any{"groups": []any{map[string]any{"name": "one", "rules": []rule{{Record: "pqwatch_check:one", Expr: e.expr}}}}}
			d, _ := yaml.Marshal(one)
			p := filepath.Join(t.TempDir(), "one.yml")
			os.WriteFile(p, d, 0o644)
			if o, err := exec.Command(pt, "check", "rules", p).CombinedOutput(); err != nil {
				t.Errorf("expression %d from %s does not parse:\n%s\n%s", i, e.from, e.expr, o)
			}
		}
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%d PromQL expressions parse", len(exprs))
}
