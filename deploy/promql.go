// Package deploy holds pqwatch's deployment artefacts (Kubernetes, Helm,
// Grafana, Prometheus rules) and the code that reads their PromQL, so tests
// elsewhere can evaluate every expression against a real Prometheus.
package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Expr is one PromQL expression and where it comes from.
type Expr struct {
	Kind  string // "record", "alert", "panel" or "annotation"
	Where string
	Query string
	Unit  string // a panel's Grafana unit (fieldConfig.defaults.unit)
	Panel string // a panel's type (timeseries, stat, table, heatmap)
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
	Title       string `json:"title"`
	Type        string `json:"type"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
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
			out = append(out, Expr{Kind: kind, Where: "rules.yml " + r.Record + r.Alert, Query: r.Expr})
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
				out = append(out, Expr{Kind: "annotation", Where: name + " annotation " + a.Name, Query: GrafanaVars.Replace(a.Expr)})
			}
		}
		var walk func([]exprPanel)
		walk = func(ps []exprPanel) {
			for _, p := range ps {
				for _, t := range p.Targets {
					if t.Expr != "" {
						out = append(out, Expr{Kind: "panel", Where: name + " panel " + p.Title + " " + t.RefID, Query: GrafanaVars.Replace(t.Expr),
							Unit: p.FieldConfig.Defaults.Unit, Panel: p.Type})
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
	}
	return out, nil
}

// PerSecondUnits are the Grafana units of a rate.
var PerSecondUnits = []string{"cps", "pps", "reqps", "ops", "Bps", "binBps"}

var (
	metricName = regexp.MustCompile(`\b(pqwatch_[a-z0-9_]+|up)\b`)
	underRate  = regexp.MustCompile(`\b(?:rate|irate|increase)\(\s*(pqwatch_[a-z0-9_]+)`)
)

// family is the metric family of a series name: a histogram's _bucket,
// _sum and _count belong to it, and a counter's name without _total is its
// family's in OpenMetrics (as Prometheus scrapes client_golang).
func family(name string, types map[string]string) string {
	if _, ok := types[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count", "_total"} {
		if f, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := types[f]; ok {
				return f
			}
		}
	}
	return name
}

// UnitProblems checks one evaluated panel query against its panel's unit and
// the metrics it reads. types maps metric family names to their type as a
// Prometheus that scraped them reports it (/api/v1/metadata); values are the
// query's result. A counter or histogram is read under rate() or
// increase() only, a gauge never; a per-second panel shows rates of
// counters; a bytes panel reads _bytes metrics, a seconds panel _seconds
// ones; a share (percentunit) lies in [0, 1] ([-1, 1] for a difference of
// shares); nothing on a rate or size panel is negative. NaN (0/0 before
// traffic) is not judged.
func UnitProblems(e Expr, values []float64, types map[string]string) []string {
	var out []string
	rated := map[string]bool{}
	for _, m := range underRate.FindAllStringSubmatch(e.Query, -1) {
		rated[m[1]] = true
	}
	var fams []string
	for _, m := range metricName.FindAllString(e.Query, -1) {
		if m == "up" {
			fams = append(fams, m)
			continue
		}
		f := family(m, types)
		typ, ok := types[f]
		if !ok {
			continue // not scraped (the part of the query that read it had no data)
		}
		fams = append(fams, f)
		switch {
		case rated[m] && typ != "counter" && typ != "histogram":
			out = append(out, fmt.Sprintf("%s: %s is a %s, read under rate()/increase()", e.Where, m, typ))
		case !rated[m] && (typ == "counter" || typ == "histogram"):
			out = append(out, fmt.Sprintf("%s: the %s %s is shown without rate()/increase()", e.Where, typ, m))
		}
	}
	perSecond := false
	for _, u := range PerSecondUnits {
		if e.Unit == u {
			perSecond = true
		}
	}
	any := func(pred func(string) bool) bool {
		for _, f := range fams {
			if pred(f) {
				return true
			}
		}
		return false
	}
	switch {
	case perSecond:
		if len(rated) == 0 || !strings.Contains(e.Query, "rate(") {
			out = append(out, fmt.Sprintf("%s: unit %s, but no rate() of a counter", e.Where, e.Unit))
		}
	case e.Unit == "bytes":
		if !any(func(f string) bool { return strings.HasSuffix(f, "_bytes") }) {
			out = append(out, fmt.Sprintf("%s: unit bytes, but it reads no _bytes metric", e.Where))
		}
	case e.Unit == "s":
		if !any(func(f string) bool { return strings.HasSuffix(f, "_seconds") || strings.HasSuffix(f, "_seconds_total") }) {
			out = append(out, fmt.Sprintf("%s: unit s, but it reads no _seconds metric", e.Where))
		}
	}
	difference := strings.Contains(e.Query, "gap") || strings.Contains(e.Query, " - ")
	for _, v := range values {
		if math.IsNaN(v) {
			continue
		}
		switch {
		case e.Unit == "percentunit" && (v > 1 || v < -1 || (v < 0 && !difference)):
			out = append(out, fmt.Sprintf("%s: share %v outside [0, 1]", e.Where, v))
		case (perSecond || e.Unit == "bytes" || e.Unit == "s") && v < 0:
			out = append(out, fmt.Sprintf("%s: %v is negative for unit %s", e.Where, v, e.Unit))
		}
	}
	return out
}
