package deploy

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The metric names of SPEC.md and the exporter (the contract the rules and
// dashboards are written against).
var knownMetrics = []string{
	"pqwatch_handshakes_total",
	"pqwatch_client_hello_bytes",
	"pqwatch_server_hello_bytes",
	"pqwatch_client_hello_segments",
	"pqwatch_handshake_rtt_seconds",
	"pqwatch_pq_offered_total",
	"pqwatch_forecast_handshakes_total",
	"pqwatch_parse_errors_total",
	"pqwatch_log_lines_total",
	"pqwatch_log_joins_total",
	"pqwatch_kafka_messages_total",
	"pqwatch_kafka_up",
	"pqwatch_kafka_errors_total",
	"pqwatch_port_handshakes_total",
	"pqwatch_capture_packets_total",
	"pqwatch_capture_drops_total",
	"pqwatch_flows_evicted_total",
	"pqwatch_flows_active",
	"pqwatch_generation_info",
	"pqwatch_generation_handshakes_total",
	"pqwatch_generation_cpu_seconds_total",
	"pqwatch_generation_resident_bytes",
	"pqwatch_generation_workers",
	"pqwatch_swap_events_total",
	"pqwatch_swap_failed_total",
	"pqwatch_attributions_total",
	"pqwatch_build_info",
}

// alertOnlyMetrics are read by alert rules and on no dashboard:
// pqwatch_policy_violations_total exists with -expect-policy only.
var alertOnlyMetrics = []string{"pqwatch_policy_violations_total"}

type promExpr struct {
	from string // file and place, for messages
	expr string // as Prometheus will see it (Grafana variables replaced)
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string         `json:"name"`
			Expr       string         `json:"expr"`
			Datasource map[string]any `json:"datasource"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Datasource  map[string]any           `json:"datasource"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// grafanaVars replaces the dashboard's variables by values Prometheus accepts.
var grafanaVars = strings.NewReplacer(
	"${datasource}", "prometheus",
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"${instance}", ".*",
	"$instance", ".*",
	"${generation}", ".*",
	"$generation", ".*",
)

// allPromQL returns every PromQL expression of rules.yml and the dashboards.
func allPromQL(t *testing.T) []promExpr {
	t.Helper()
	var out []promExpr
	data, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			out = append(out, promExpr{"rules.yml " + r.Record + r.Alert, r.Expr})
		}
	}
	for f, d := range loadDashboards(t) {
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				out = append(out, promExpr{f + " annotation " + a.Name, grafanaVars.Replace(a.Expr)})
			}
		}
		for _, p := range flatPanels(d.Panels) {
			for _, tg := range p.Targets {
				out = append(out, promExpr{f + " panel " + p.Title + " " + tg.RefID, grafanaVars.Replace(tg.Expr)})
			}
		}
	}
	return out
}

func flatPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatPanels(p.Panels)...)
	}
	return out
}

func TestDashboards(t *testing.T) {
	recorded := recordedNames(t)
	metricRef := regexp.MustCompile(`\b(pqwatch_[a-z0-9_]+|[a-z_]+:pqwatch_[a-z0-9_]+:[a-z0-9_]+|pqwatch:[a-z0-9_]+:[a-z0-9_]+)\b`)
	used := map[string]bool{}
	for f, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: needs uid and title", f)
		}
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
		}
		for _, want := range []string{"datasource", "instance", "generation"} {
			if !slices.Contains(vars, want) {
				t.Errorf("%s: no $%s variable", f, want)
			}
		}
		// Swap events are annotations.
		swapAnn := false
		for _, a := range d.Annotations.List {
			if strings.Contains(a.Expr, "pqwatch_swap_events_total") {
				swapAnn = true
			}
			if a.Expr != "" && a.Datasource["uid"] != "${datasource}" {
				t.Errorf("%s: annotation %s does not use ${datasource}", f, a.Name)
			}
		}
		if !swapAnn {
			t.Errorf("%s: no annotation of pqwatch_swap_events_total", f)
		}
		ids := map[int]bool{}
		var titles []string
		for _, p := range flatPanels(d.Panels) {
			if ids[p.ID] {
				t.Errorf("%s: duplicate panel id %d", f, p.ID)
			}
			ids[p.ID] = true
			titles = append(titles, p.Title)
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
				t.Errorf("%s: panel %q gridPos %+v outside the 24-column grid", f, p.Title, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			if p.Datasource["uid"] != "${datasource}" {
				t.Errorf("%s: panel %q datasource %v, want ${datasource}", f, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q target %s has no expr", f, p.Title, tg.RefID)
				}
				for _, m := range metricRef.FindAllString(tg.Expr, -1) {
					used[m] = true
					base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count"), "")
					if !slices.Contains(knownMetrics, base) && !recorded[m] {
						t.Errorf("%s: panel %q uses %s, neither a pqwatch metric nor a recording rule", f, p.Title, m)
					}
				}
			}
		}
		// One panel for each question of a rollout (RUNBOOK.md names them).
		for _, want := range []string{
			"PQ share of completed handshakes, by node", "PQ share by server generation",
			"PQ share of completed handshakes, by listening port",
			"Forecast outcomes of ClientHellos (handshakes/s)",
			"Mean ServerHello bytes by group", "Hello size growth, PQ over classical (fleet)", "ClientHello segments",
			"HelloRetryRequest share of attempts, by node", "Handshake failure share of attempts, by node",
			"Handshakes not completed, by outcome (handshakes/s)",
			"Handshakes by generation (handshakes/s)", "Server CPU per handshake by generation", "Swap events (per interval)",
			"Capture drops (ring full)", "Flows evicted, table full (flows/s)", "Parse errors by reason (errors/s)",
			"Log joins by result (records/s)", "Kafka messages by result (messages/s)", "Agents up",
			"Kafka feed up, by node (1 up, 0 down)", "Kafka errors by reason (errors/s)",
		} {
			if !slices.Contains(titles, want) {
				t.Errorf("%s: no panel %q", f, want)
			}
		}
	}
	// Every agent-health and migration metric is on a dashboard.
	for _, m := range knownMetrics {
		found := false
		for u := range used {
			if strings.HasPrefix(u, m) {
				found = true
			}
		}
		if !found && m != "pqwatch_handshakes_total" {
			t.Errorf("metric %s is on no dashboard", m)
		}
	}
}

// perSecond are the Grafana units of a rate.
var perSecond = []string{"cps", "pps", "reqps", "ops", "Bps", "binBps"}

// TestDashboardUnits: a panel's unit fits every query on it, so that no axis
// mixes a rate and a ratio or shows a count in bytes; and every PQ share
// divides PQ completed handshakes by completed ones, the definition of the
// recording rules.
func TestDashboardUnits(t *testing.T) {
	ratioRule := regexp.MustCompile(`[a-z_]+:pqwatch_[a-z0-9_]+:ratio_rate5m`)
	for f, d := range loadDashboards(t) {
		for _, p := range flatPanels(d.Panels) {
			if p.Type == "row" || p.Type == "table" || p.Type == "heatmap" {
				continue
			}
			unit := p.FieldConfig.Defaults.Unit
			for _, tg := range p.Targets {
				e := tg.Expr
				// A share: a ratio recording rule, or (num or 0 * den) / den.
				isShare := ratioRule.MatchString(e) || e == "pqwatch:pq_share:ratio_rate5m" || strings.Contains(e, " or 0 * ")
				// A rate or an increase, summed, not divided or turned into a quantile.
				isRate := (strings.Contains(e, "rate(") || strings.Contains(e, "increase(")) && !strings.Contains(e, "/") && !strings.Contains(e, "histogram_quantile")
				switch {
				case unit == "percentunit" && !isShare:
					t.Errorf("%s: panel %q is in percent, but %s is not a share", f, p.Title, e)
				case slices.Contains(perSecond, unit) && !(isRate && strings.Contains(e, "rate(")):
					t.Errorf("%s: panel %q is per second, but %s is not a rate", f, p.Title, e)
				case unit == "bytes" && !strings.Contains(e, "_bytes"):
					t.Errorf("%s: panel %q is in bytes, but %s reads no _bytes metric", f, p.Title, e)
				case isShare && unit != "percentunit":
					t.Errorf("%s: panel %q shows the share %s in %q, not percentunit", f, p.Title, e, unit)
				case isRate && strings.Contains(e, "rate(") && !slices.Contains(perSecond, unit):
					t.Errorf("%s: panel %q shows the rate %s in %q, not a per-second unit", f, p.Title, e, unit)
				}
				if strings.Contains(e, `pq="true"`) && strings.Count(e, `outcome="ok"`) < 2 {
					t.Errorf("%s: panel %q: a PQ share is PQ completed / completed (outcome=\"ok\" above and below): %s", f, p.Title, e)
				}
			}
			if strings.HasSuffix(p.Title, "/s)") && !slices.Contains(perSecond, unit) {
				t.Errorf("%s: panel %q says per second, its unit is %q", f, p.Title, unit)
			}
		}
	}
}

// recordedNames returns the names rules.yml records.
func recordedNames(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = true
			}
		}
	}
	return out
}

// TestRulesUseKnownMetrics: every series a rule reads is a pqwatch metric, a
// recorded series, or `up`.
func TestRulesUseKnownMetrics(t *testing.T) {
	recorded := recordedNames(t)
	ref := regexp.MustCompile(`\b(pqwatch_[a-z0-9_]+|[a-z_]+:pqwatch_[a-z0-9_]+:[a-z0-9_]+|pqwatch:[a-z0-9_]+:[a-z0-9_]+)\b`)
	for _, e := range allPromQL(t) {
		if !strings.HasPrefix(e.from, "rules.yml") {
			continue
		}
		for _, m := range ref.FindAllString(e.expr, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			if !slices.Contains(knownMetrics, base) && !slices.Contains(alertOnlyMetrics, base) && !recorded[m] {
				t.Errorf("%s reads %s, neither a pqwatch metric nor a recording rule", e.from, m)
			}
		}
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string         `json:"name"`
			UID       string         `json:"uid"`
			Type      string         `json:"type"`
			Access    string         `json:"access"`
			URL       string         `json:"url"`
			IsDefault bool           `json:"isDefault"`
			Editable  bool           `json:"editable"`
			JSONData  map[string]any `json:"jsonData"`
		} `json:"datasources"`
	}
	strictFile(t, "grafana/provisioning/datasources/pqwatch-prometheus.yaml", &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL == "" {
		t.Errorf("datasource provisioning: %+v", ds)
	}
	var dp struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name                  string `json:"name"`
			OrgID                 int    `json:"orgId"`
			Folder                string `json:"folder"`
			Type                  string `json:"type"`
			DisableDeletion       bool   `json:"disableDeletion"`
			AllowUIUpdates        bool   `json:"allowUiUpdates"`
			UpdateIntervalSeconds int    `json:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `json:"path"`
				FoldersFromFilesStructure bool   `json:"foldersFromFilesStructure"`
			} `json:"options"`
		} `json:"providers"`
	}
	strictFile(t, "grafana/provisioning/dashboards/pqwatch.yaml", &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path == "" {
		t.Errorf("dashboard provisioning: %+v", dp)
	}
}

func strictFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestUnitProblems: the check the live test runs on every panel a real
// Prometheus evaluated, on cases it must catch and pass.
func TestUnitProblems(t *testing.T) {
	types := map[string]string{
		"pqwatch_handshakes_total": "counter", "pqwatch_port_handshakes": "counter", "pqwatch_flows_active": "gauge",
		"pqwatch_server_hello_bytes": "histogram", "pqwatch_generation_resident_bytes": "gauge",
		"pqwatch_generation_workers": "gauge", "pqwatch_handshake_rtt_seconds": "histogram",
	}
	for _, tc := range []struct {
		e      Expr
		values []float64
		bad    bool
	}{
		{Expr{Query: `sum(rate(pqwatch_handshakes_total[5m]))`, Unit: "cps"}, []float64{3}, false},
		{Expr{Query: `sum(pqwatch_port_handshakes_total)`, Unit: "none"}, []float64{3}, true},    // OpenMetrics family pqwatch_port_handshakes
		{Expr{Query: `sum(pqwatch_handshakes_total)`, Unit: "none"}, []float64{3}, true},         // a raw counter
		{Expr{Query: `rate(pqwatch_flows_active[5m])`, Unit: "cps"}, []float64{1}, true},         // a gauge under rate
		{Expr{Query: `sum(pqwatch_flows_active)`, Unit: "cps"}, []float64{1}, true},              // per second without a rate
		{Expr{Query: `pqwatch_generation_workers`, Unit: "bytes"}, []float64{4}, true},           // workers in bytes
		{Expr{Query: `pqwatch_generation_resident_bytes`, Unit: "bytes"}, []float64{4e6}, false}, // resident memory
		{Expr{Query: `rate(pqwatch_server_hello_bytes_sum[5m]) / rate(pqwatch_server_hello_bytes_count[5m])`, Unit: "bytes"}, []float64{1210}, false},
		{Expr{Query: `histogram_quantile(0.95, sum by (le) (rate(pqwatch_handshake_rtt_seconds_bucket[5m])))`, Unit: "s"}, []float64{0.001}, false},
		{Expr{Query: `sum(rate(pqwatch_handshakes_total{pq="true"}[5m])) / sum(rate(pqwatch_handshakes_total[5m]))`, Unit: "percentunit"}, []float64{0.5, math.NaN()}, false},
		{Expr{Query: `sum(rate(pqwatch_handshakes_total[5m]))`, Unit: "percentunit"}, []float64{12}, true}, // a rate as a share
		{Expr{Query: `instance:pqwatch_pq_forecast_gap:ratio_rate5m`, Unit: "percentunit"}, []float64{-0.03}, false},
		{Expr{Query: `instance:pqwatch_pq_share:ratio_rate5m`, Unit: "percentunit"}, []float64{-0.03}, true},
	} {
		if got := UnitProblems(tc.e, tc.values, types); (len(got) > 0) != tc.bad {
			t.Errorf("%s (unit %s, values %v): problems %q, want bad=%v", tc.e.Query, tc.e.Unit, tc.values, got, tc.bad)
		}
	}
}
