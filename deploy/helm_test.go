package deploy

// The chart is loaded, rendered and linted by Helm's own packages (the
// chart loader, engine.Render in strict mode, and the linter `helm lint`
// runs), at the version of helm.sh/helm/v3 in go.mod. The output goes
// through the same strict schema decoding and checks as the kustomize base,
// and for each option of the chart the DaemonSet must match, field for field,
// the kustomize base with the component that offers the same option.

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
)

const chartDir = "helm/pqwatch"

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("helm: load %s: %v", chartDir, err)
	}
	return c
}

// renderChartErr renders the chart as `helm template --namespace namespace
// release` with values (merged over values.yaml, as -f would) and returns the
// manifests in file order, NOTES and partials left out.
func renderChartErr(t *testing.T, release, namespace string, values map[string]any) ([]byte, error) {
	t.Helper()
	c := loadChart(t)
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		out.WriteString("---\n# Source: " + name + "\n" + files[name] + "\n")
	}
	return []byte(out.String()), nil
}

func renderChart(t *testing.T, release, namespace string, values map[string]any) []byte {
	t.Helper()
	out, err := renderChartErr(t, release, namespace, values)
	if err != nil {
		t.Fatalf("helm: render with %v: %v", values, err)
	}
	return out
}

// helmLint runs Helm's linter (`helm lint --namespace namespace` with these
// values) and fails on any warning or error; information is logged.
func helmLint(t *testing.T, namespace string, values map[string]any) {
	t.Helper()
	l := lint.AllWithKubeVersion(chartDir, values, namespace, nil)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint with %v: %s", values, m)
		} else {
			t.Logf("helm lint: %s", m)
		}
	}
}

// The chart's options, each with the kustomize components that give the
// same objects.
var chartOptions = []struct {
	name       string
	values     map[string]any
	components []string
}{
	{"defaults", nil, nil},
	{"metrics on the pod IP", map[string]any{"metrics": map[string]any{"bind": "podIP"}}, []string{"metrics-pod-ip"}},
	{"metrics on localhost", map[string]any{"metrics": map[string]any{"bind": "localhost"}}, []string{"metrics-localhost"}},
	{"no process tracking", map[string]any{"processTracking": false}, []string{"no-process-tracking"}},
	{"accept events", map[string]any{"acceptEvents": true}, []string{"accept-events"}},
	{"prometheus-operator", map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}, []string{"prometheus-operator"}},
	{"prometheus-operator with a PodMonitor", map[string]any{
		"podMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}, []string{"prometheus-operator", "podmonitor"}},
	{"kafka TLS with a client certificate", map[string]any{"kafka": map[string]any{"tls": map[string]any{
		"enabled": true, "secretName": "pqwatch-kafka-tls", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key",
	}}}, []string{"kafka-tls"}},
	{"kafka SASL", map[string]any{"kafka": map[string]any{"sasl": map[string]any{
		"mechanism": "scram-sha-512", "username": "pqwatch", "passwordSecretName": "pqwatch-kafka-sasl",
	}}}, []string{"kafka-sasl"}},
	{"web config", map[string]any{"metrics": map[string]any{"webConfig": map[string]any{"enabled": true}}}, []string{"web-config"}},
	{"web config with prometheus-operator", map[string]any{
		"metrics":        map[string]any{"webConfig": map[string]any{"enabled": true}},
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}, []string{"prometheus-operator", "web-config"}},
	{"web config with a PodMonitor", map[string]any{
		"metrics":    map[string]any{"webConfig": map[string]any{"enabled": true}},
		"podMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	}, []string{"prometheus-operator", "podmonitor", "web-config"}},
}

func TestHelmLint(t *testing.T) {
	for _, o := range chartOptions {
		t.Run(o.name, func(t *testing.T) { helmLint(t, "pqwatch", o.values) })
	}
}

// TestHelmChartMatchesKustomize renders the chart with each option and the
// kustomize base with the matching components, and compares them.
func TestHelmChartMatchesKustomize(t *testing.T) {
	for _, opt := range chartOptions {
		t.Run(opt.name, func(t *testing.T) {
			o := decodeAll(t, renderChart(t, "pqwatch", "pqwatch", opt.values))
			checkObjects(t, o)
			if len(o.namespaces) != 0 {
				t.Error("the chart renders a Namespace: helm --create-namespace makes it")
			}
			base := decodeAll(t, renderKustomize(t, opt.components...))
			compareDaemonSets(t, base, o)
			if len(base.serviceMonitors) != len(o.serviceMonitors) || len(base.podMonitors) != len(o.podMonitors) || len(base.rules) != len(o.rules) {
				t.Errorf("monitors and rules: base %d/%d/%d, chart %d/%d/%d (ServiceMonitor/PodMonitor/PrometheusRule)",
					len(base.serviceMonitors), len(base.podMonitors), len(base.rules), len(o.serviceMonitors), len(o.podMonitors), len(o.rules))
			}
			for i := range min(len(base.serviceMonitors), len(o.serviceMonitors)) {
				same(t, "ServiceMonitor endpoints", base.serviceMonitors[i].Spec.Endpoints, o.serviceMonitors[i].Spec.Endpoints)
			}
			for i := range min(len(base.podMonitors), len(o.podMonitors)) {
				same(t, "PodMonitor endpoints", base.podMonitors[i].Spec.PodMetricsEndpoints, o.podMonitors[i].Spec.PodMetricsEndpoints)
			}
			checkRulesAreRulesFile(t, o)
		})
	}
}

func same(t *testing.T, what string, a, b any) {
	t.Helper()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("chart and kustomize base differ in %s:\nbase:  %+v\nchart: %+v", what, a, b)
	}
}

// compareDaemonSets: the chart's DaemonSet and ConfigMap are the kustomize
// base's in everything but names and labels.
func compareDaemonSets(t *testing.T, base, chart *objects) {
	t.Helper()
	bp, cp := base.daemonSets[0].Spec.Template.Spec, chart.daemonSets[0].Spec.Template.Spec
	bc, cc := bp.Containers[0], cp.Containers[0]
	same(t, "hostNetwork/hostPID/dnsPolicy", []any{bp.HostNetwork, bp.HostPID, bp.DNSPolicy}, []any{cp.HostNetwork, cp.HostPID, cp.DNSPolicy})
	same(t, "terminationGracePeriodSeconds", bp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds)
	same(t, "pod securityContext", bp.SecurityContext, cp.SecurityContext)
	same(t, "tolerations", bp.Tolerations, cp.Tolerations)
	same(t, "nodeSelector", bp.NodeSelector, cp.NodeSelector)
	same(t, "volumes", bp.Volumes, cp.Volumes)
	same(t, "container securityContext", bc.SecurityContext, cc.SecurityContext)
	same(t, "image", bc.Image, cc.Image)
	same(t, "args", bc.Args, cc.Args)
	same(t, "env", bc.Env, cc.Env)
	same(t, "ports", bc.Ports, cc.Ports)
	same(t, "probes", []*corev1.Probe{bc.LivenessProbe, bc.ReadinessProbe}, []*corev1.Probe{cc.LivenessProbe, cc.ReadinessProbe})
	same(t, "resources", bc.Resources, cc.Resources)
	same(t, "volumeMounts", bc.VolumeMounts, cc.VolumeMounts)
	same(t, "ConfigMap data", base.configMaps[0].Data, chart.configMaps[0].Data)
}

// TestHelmChartValues: release name, namespace and values reach the objects.
func TestHelmChartValues(t *testing.T) {
	values := map[string]any{
		"image":          map[string]any{"repository": "registry.example/pqwatch", "tag": "v1.2.3"},
		"kafka":          map[string]any{"brokers": "k1:9092,k2:9092", "topic": "pq.test"},
		"logs":           map[string]any{"nginx": map[string]any{"dir": "/srv/nginx/logs", "confDir": "/srv/nginx/conf", "logAs": "main=/srv/nginx/logs/other.log", "logFormat": "main"}},
		"extraArgs":      []any{"-max-flows=1000"},
		"resources":      map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}, "limits": map[string]any{"cpu": "2", "memory": "1Gi"}},
		"podMonitor":     map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
	}
	helmLint(t, "observability", values)
	o := decodeAll(t, renderChart(t, "edge", "observability", values))
	checkObjects(t, o)
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
	want := map[string]string{
		"KAFKA_BROKERS": "k1:9092,k2:9092", "KAFKA_TOPIC": "pq.test", "NGINX_LOG": "/srv/nginx/logs/access.log",
		"NGINX_CONF": "/srv/nginx/conf/nginx.conf", "NGINX_LOG_AS": "main=/srv/nginx/logs/other.log", "NGINX_LOG_FORMAT": "main",
	}
	for k, v := range want {
		if cm[k] != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, cm[k], v)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	if hostPaths["nginx-logs"] != "/srv/nginx/logs" || hostPaths["nginx-conf"] != "/srv/nginx/conf" {
		t.Errorf("hostPaths %v", hostPaths)
	}
	if len(o.serviceMonitors) != 0 || len(o.podMonitors) != 1 || len(o.rules) != 1 {
		t.Fatalf("%d ServiceMonitors, %d PodMonitors, %d PrometheusRules; want 0, 1, 1", len(o.serviceMonitors), len(o.podMonitors), len(o.rules))
	}
	if o.podMonitors[0].Labels["release"] != "kube-prometheus-stack" || o.rules[0].Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("selection labels: PodMonitor %v, PrometheusRule %v", o.podMonitors[0].Labels, o.rules[0].Labels)
	}
}

// TestHelmChartDefaults: what the chart installs when nothing is set.
func TestHelmChartDefaults(t *testing.T) {
	o := decodeAll(t, renderChart(t, "pqwatch", "pqwatch", nil))
	// The image is pinned to the chart's appVersion, in the chart and in
	// the kustomize base alike (compareDaemonSets compares them).
	chart, err := os.ReadFile("helm/pqwatch/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	if img := o.daemonSets[0].Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/pqwatch/pqwatch:"+string(m[1]) {
		t.Errorf("image %q, want the chart's appVersion %s (never latest)", img, m[1])
	}
	if n := len(o.serviceMonitors) + len(o.podMonitors) + len(o.rules); n != 0 {
		t.Errorf("defaults render %d prometheus-operator objects: a cluster without the operator's CRDs would reject the release", n)
	}
	if b := o.configMaps[0].Data["KAFKA_BROKERS"]; b != "" {
		t.Errorf("KAFKA_BROKERS = %q by default: Kafka must be off until brokers are given", b)
	}
}

// TestHelmChartRefuses: values that cannot work fail the render with a
// reason, as `helm install` would.
func TestHelmChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		reason string
	}{
		{map[string]any{"metrics": map[string]any{"bind": "public"}}, "metrics.bind must be all, podIP or localhost"},
		{map[string]any{"metrics": map[string]any{"bind": "localhost"}, "serviceMonitor": map[string]any{"enabled": true}}, "cannot reach 127.0.0.1"},
		{map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "podMonitor": map[string]any{"enabled": true}}, "choose one"},
		{map[string]any{"acceptEvents": true, "processTracking": false}, "acceptEvents needs processTracking"},
		{map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "scram-sha-512", "username": "u"}}}, "needs kafka.sasl.username and kafka.sasl.passwordSecretName"},
		{map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "gssapi", "username": "u", "passwordSecretName": "s"}}}, "kafka.sasl.mechanism must be"},
		{map[string]any{"kafka": map[string]any{"sasl": map[string]any{"username": "u"}}}, "need kafka.sasl.mechanism"},
		{map[string]any{"kafka": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "s", "certKey": "tls.crt"}}}, "certKey and kafka.tls.keyKey go together"},
		{map[string]any{"kafka": map[string]any{"tls": map[string]any{"secretName": "s"}}}, "without kafka.tls.enabled"},
		{map[string]any{"metrics": map[string]any{"webConfig": map[string]any{"enabled": true, "basicAuth": true}}}, "set metrics.webConfig.probeHTTPHeaders"},
	} {
		_, err := renderChartErr(t, "pqwatch", "pqwatch", tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("values %v: error %v, want one saying %q", tc.values, err, tc.reason)
		}
	}
}

// TestHelmChartFiles: the chart carries nothing Helm would package by
// mistake, and its rules copy is the one the PrometheusRule reads.
func TestHelmChartFiles(t *testing.T) {
	c := loadChart(t)
	var files []string
	for _, f := range c.Files {
		files = append(files, f.Name)
	}
	if !slices.Equal(files, []string{"rules/pqwatch.rules.yml"}) {
		t.Errorf("chart files %v, want only rules/pqwatch.rules.yml", files)
	}
	if c.Metadata.Version == "" || c.Metadata.AppVersion == "" {
		t.Errorf("Chart.yaml version %q appVersion %q", c.Metadata.Version, c.Metadata.AppVersion)
	}
}
