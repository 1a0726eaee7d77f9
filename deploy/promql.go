// Package deploy holds pqwatch's deployment artefacts (Kubernetes, Helm,
// Grafana, Prometheus rules) and the code that reads their PromQL, so tests
// elsewhere can evaluate every expression against a real Prometheus.
package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Expr is one PromQL expression and where it comes from.
type Expr struct {
	Kind  string // "record", "alert", "panel" or "annotation"
	Where string
	Query string
}

// GrafanaVars replaces the dashboards' variables by values Prometheus
// accepts.
var GrafanaVars = strings.NewReplacer(
	"${datasource}", "prometheus",
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"${instance}", ".*",
	"$instance", ".*",
	"${generation}", ".*",
	"$generation", ".*",
)

type exprPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []exprPanel `json:"panels"`
}

// PromQL returns every expression of prometheus/rules.yml and of the
// dashboards under grafana/dashboards, with dashboard variables replaced.
// dir is the deploy directory.
func PromQL(dir string) ([]Expr, error) {
	data, err := os.ReadFile(filepath.Join(dir, "prometheus", "rules.yml"))
	if err != nil {
		return nil, err
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Record string `json:"record"`
				Alert  string `json:"alert"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rf); err != nil {
		return nil, fmt.Errorf("deploy: rules.yml: %w", err)
	}
	var out []Expr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			kind := "record"
			if r.Alert != "" {
				kind = "alert"
			}
			out = append(out, Expr{kind, "rules.yml " + r.Record + r.Alert, r.Expr})
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "grafana", "dashboards", "*.json"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var d struct {
			Annotations struct {
				List []struct {
					Name string `json:"name"`
					Expr string `json:"expr"`
				} `json:"list"`
			} `json:"annotations"`
			Panels []exprPanel `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			return nil, fmt.Errorf("deploy: %s: %w", f, err)
		}
		name := filepath.Base(f)
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				out = append(out, Expr{"annotation", name + " annotation " + a.Name, GrafanaVars.Replace(a.Expr)})
			}
		}
		var walk func([]exprPanel)
		walk = func(ps []exprPanel) {
			for _, p := range ps {
				for _, t := range p.Targets {
					if t.Expr != "" {
						out = append(out, Expr{"panel", name + " panel " + p.Title + " " + t.RefID, GrafanaVars.Replace(t.Expr)})
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
	}
	return out, nil
}
