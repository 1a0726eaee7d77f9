package deploy

// There is no helm binary here, so the chart is rendered with text/template
// and the few Helm/sprig functions its templates use (toYaml, nindent,
// indent, quote, default), implemented as Helm defines them. The chart keeps
// to those, so this rendering is the chart's. The output then goes through
// the same strict schema decoding and checks as the kustomize base, and the
// DaemonSet must match the base's field for field where it matters.

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func helmFuncs() template.FuncMap {
	return template.FuncMap{
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"indent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string {
			if v == nil {
				return `""`
			}
			return fmt.Sprintf("%q", fmt.Sprint(v))
		},
		"default": func(def, v any) any {
			if v == nil || reflect.ValueOf(v).IsZero() {
				return def
			}
			return v
		},
	}
}

// mergeValues deep-merges over into base (Helm's --set / -f semantics).
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func renderChart(t *testing.T, dir, release, namespace string, overrides map[string]any) []byte {
	t.Helper()
	var chart map[string]any
	strictFileAny(t, filepath.Join(dir, "Chart.yaml"), &chart)
	var values map[string]any
	strictFileAny(t, filepath.Join(dir, "values.yaml"), &values)
	values = mergeValues(values, overrides)
	ctx := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": release, "Namespace": namespace, "Service": "Helm"},
		"Chart": map[string]any{
			"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"],
		},
	}
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates: %v", err)
	}
	var out bytes.Buffer
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := template.New(filepath.Base(f)).Option("missingkey=error").Funcs(helmFuncs()).Parse(string(src))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n", filepath.Base(f))
		if err := tpl.Execute(&out, ctx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func strictFileAny(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func decodeAll(t *testing.T, stream []byte) *objects {
	t.Helper()
	o := &objects{}
	for i, doc := range splitDocs(stream) {
		if err := o.decodeDoc(doc); err != nil {
			t.Errorf("rendered doc %d: %v\n%s", i, err, doc)
		}
	}
	return o
}

func TestHelmChartRenders(t *testing.T) {
	out := renderChart(t, "helm/pqwatch", "pqwatch", "pqwatch", nil)
	o := decodeAll(t, out)
	if t.Failed() {
		t.FailNow()
	}
	checkObjects(t, o, true)
	if len(o.serviceMonitors) != 1 || len(o.podMonitors) != 0 {
		t.Errorf("defaults: %d ServiceMonitors, %d PodMonitors; want 1 and 0", len(o.serviceMonitors), len(o.podMonitors))
	}

	// The chart's DaemonSet is the kustomize base's.
	base, _ := loadDir(t, "kubernetes")
	if len(base.daemonSets) != 1 || len(o.daemonSets) != 1 {
		t.Fatal("need one DaemonSet on each side")
	}
	bp, cp := base.daemonSets[0].Spec.Template.Spec, o.daemonSets[0].Spec.Template.Spec
	bc, cc := bp.Containers[0], cp.Containers[0]
	same := func(what string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			t.Errorf("chart and kustomize base differ in %s:\nbase:  %+v\nchart: %+v", what, a, b)
		}
	}
	same("hostNetwork/hostPID/dnsPolicy", []any{bp.HostNetwork, bp.HostPID, bp.DNSPolicy}, []any{cp.HostNetwork, cp.HostPID, cp.DNSPolicy})
	same("terminationGracePeriodSeconds", bp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds)
	same("pod securityContext", bp.SecurityContext, cp.SecurityContext)
	same("tolerations", bp.Tolerations, cp.Tolerations)
	same("nodeSelector", bp.NodeSelector, cp.NodeSelector)
	same("volumes", bp.Volumes, cp.Volumes)
	same("container securityContext", bc.SecurityContext, cc.SecurityContext)
	same("args", bc.Args, cc.Args)
	same("env", bc.Env, cc.Env)
	same("ports", bc.Ports, cc.Ports)
	same("probes", []*corev1.Probe{bc.LivenessProbe, bc.ReadinessProbe}, []*corev1.Probe{cc.LivenessProbe, cc.ReadinessProbe})
	same("resources", bc.Resources, cc.Resources)
	same("volumeMounts", bc.VolumeMounts, cc.VolumeMounts)
	same("ConfigMap data", base.configMaps[0].Data, o.configMaps[0].Data)
}

func TestHelmChartValues(t *testing.T) {
	out := renderChart(t, "helm/pqwatch", "edge", "observability", map[string]any{
		"image":          map[string]any{"repository": "registry.example/pqwatch", "tag": "v1.2.3"},
		"kafka":          map[string]any{"brokers": "k1:9092,k2:9092", "topic": "pq.test"},
		"logs":           map[string]any{"nginx": map[string]any{"dir": "/srv/nginx/logs"}},
		"extraArgs":      []any{"-max-flows=1000"},
		"resources":      map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}, "limits": map[string]any{"cpu": "2", "memory": "1Gi"}},
		"serviceMonitor": map[string]any{"enabled": false},
		"podMonitor":     map[string]any{"enabled": true},
	})
	o := decodeAll(t, out)
	if t.Failed() {
		t.FailNow()
	}
	checkObjects(t, o, true)
	ds := o.daemonSets[0]
	c := ds.Spec.Template.Spec.Containers[0]
	if ds.Namespace != "observability" || ds.Name != "edge" {
		t.Errorf("DaemonSet %s/%s", ds.Namespace, ds.Name)
	}
	if c.Image != "registry.example/pqwatch:v1.2.3" {
		t.Errorf("image %q", c.Image)
	}
	if c.Args[len(c.Args)-1] != "-max-flows=1000" {
		t.Errorf("extraArgs not appended: %v", c.Args)
	}
	if got := c.Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("memory limit %s", got)
	}
	cm := o.configMaps[0].Data
	if cm["KAFKA_BROKERS"] != "k1:9092,k2:9092" || cm["KAFKA_TOPIC"] != "pq.test" || cm["NGINX_LOG"] != "/srv/nginx/logs/access.log" {
		t.Errorf("ConfigMap %v", cm)
	}
	var nginxHost string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "nginx-logs" {
			nginxHost = v.HostPath.Path
		}
	}
	if nginxHost != "/srv/nginx/logs" {
		t.Errorf("nginx hostPath %q", nginxHost)
	}
	if len(o.serviceMonitors) != 0 || len(o.podMonitors) != 1 {
		t.Errorf("%d ServiceMonitors, %d PodMonitors; want 0 and 1", len(o.serviceMonitors), len(o.podMonitors))
	}
}
