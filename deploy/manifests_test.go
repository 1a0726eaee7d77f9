package deploy

// Offline schema check of the Kubernetes manifests: kubeconform needs its
// JSON schemas from the network, so instead every document is decoded
// strictly (unknown or duplicate fields are errors, and so are wrong types)
// into the k8s.io/api Go types the API server itself is generated from. The
// prometheus-operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) get
// local structs with the fields we use, decoded just as strictly, plus checks
// of their required fields. Then the objects are checked against each other
// (selectors, named ports, volumes, ConfigMap keys) and against what
// SPEC.md and the issue ask of the DaemonSet.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Structs for the monitoring.coreos.com/v1 kinds, limited to fields the
// operator's CRDs define (strict decoding rejects anything else).
type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

type scrapeEndpoint struct {
	Port          string          `json:"port,omitempty"`
	Path          string          `json:"path,omitempty"`
	Scheme        string          `json:"scheme,omitempty"`
	Interval      string          `json:"interval,omitempty"`
	ScrapeTimeout string          `json:"scrapeTimeout,omitempty"`
	HonorLabels   bool            `json:"honorLabels,omitempty"`
	Relabelings   []relabelConfig `json:"relabelings,omitempty"`
}

type namespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector namespaceSelector    `json:"namespaceSelector,omitempty"`
		Endpoints         []scrapeEndpoint     `json:"endpoints"`
	} `json:"spec"`
}

type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel            string               `json:"jobLabel,omitempty"`
		Selector            metav1.LabelSelector `json:"selector"`
		NamespaceSelector   namespaceSelector    `json:"namespaceSelector,omitempty"`
		PodMetricsEndpoints []scrapeEndpoint     `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Record      string            `json:"record,omitempty"`
		Alert       string            `json:"alert,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// objects is one decoded set of manifests.
type objects struct {
	namespaces      []*corev1.Namespace
	serviceAccounts []*corev1.ServiceAccount
	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	daemonSets      []*appsv1.DaemonSet
	clusterRoles    []*rbacv1.ClusterRole
	bindings        []*rbacv1.ClusterRoleBinding
	serviceMonitors []*serviceMonitor
	podMonitors     []*podMonitor
	rules           []*prometheusRule
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a YAML stream into its non-empty documents.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) == "" {
			continue
		}
		docs = append(docs, []byte(d))
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// decodeDoc strictly decodes one manifest into its API type and adds it to o.
func (o *objects) decodeDoc(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	want := map[string]string{
		"Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Service": "v1",
		"DaemonSet":          "apps/v1",
		"ClusterRole":        "rbac.authorization.k8s.io/v1",
		"ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
		"ServiceMonitor":     "monitoring.coreos.com/v1",
		"PodMonitor":         "monitoring.coreos.com/v1",
		"PrometheusRule":     "monitoring.coreos.com/v1",
	}
	api, ok := want[tm.Kind]
	if !ok {
		return fmt.Errorf("unexpected kind %q", tm.Kind)
	}
	if tm.APIVersion != api {
		return fmt.Errorf("%s: apiVersion %q, want %q", tm.Kind, tm.APIVersion, api)
	}
	var err error
	switch tm.Kind {
	case "Namespace":
		o.namespaces, err = appendStrict(o.namespaces, doc)
	case "ServiceAccount":
		o.serviceAccounts, err = appendStrict(o.serviceAccounts, doc)
	case "ConfigMap":
		o.configMaps, err = appendStrict(o.configMaps, doc)
	case "Service":
		o.services, err = appendStrict(o.services, doc)
	case "DaemonSet":
		o.daemonSets, err = appendStrict(o.daemonSets, doc)
	case "ClusterRole":
		o.clusterRoles, err = appendStrict(o.clusterRoles, doc)
	case "ClusterRoleBinding":
		o.bindings, err = appendStrict(o.bindings, doc)
	case "ServiceMonitor":
		o.serviceMonitors, err = appendStrict(o.serviceMonitors, doc)
	case "PodMonitor":
		o.podMonitors, err = appendStrict(o.podMonitors, doc)
	case "PrometheusRule":
		o.rules, err = appendStrict(o.rules, doc)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return nil
}

func appendStrict[T any](list []*T, doc []byte) ([]*T, error) {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return list, err
	}
	return append(list, v), nil
}

func loadDir(t *testing.T, dir string) (*objects, map[string]*objects) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	all := &objects{}
	perFile := map[string]*objects{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		one := &objects{}
		for i, doc := range splitDocs(data) {
			if err := all.decodeDoc(doc); err != nil {
				t.Errorf("%s doc %d: %v", f, i, err)
			}
			_ = one.decodeDoc(doc)
		}
		perFile[filepath.Base(f)] = one
	}
	return all, perFile
}

func TestKustomizeBaseSchema(t *testing.T) {
	all, _ := loadDir(t, "kubernetes")
	checkObjects(t, all, true)
}

func TestKustomization(t *testing.T) {
	data, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	var onDisk []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			onDisk = append(onDisk, b)
		}
	}
	for _, r := range k.Resources {
		if !slices.Contains(onDisk, r) {
			t.Errorf("kustomization.yaml lists %s, which does not exist", r)
		}
	}
	// Every file is a resource, except the PodMonitor: it is the documented
	// alternative to the ServiceMonitor (both would scrape every pod twice).
	for _, f := range onDisk {
		if !slices.Contains(k.Resources, f) && f != "podmonitor.yaml" {
			t.Errorf("%s is not in kustomization.yaml resources", f)
		}
	}
	if slices.Contains(k.Resources, "podmonitor.yaml") && slices.Contains(k.Resources, "servicemonitor.yaml") {
		t.Error("both PodMonitor and ServiceMonitor in resources: every target would be scraped twice")
	}
}

// checkObjects checks a full set of pqwatch manifests: the kustomize base or
// the Helm chart's output. withMonitor says a ServiceMonitor must be there.
func checkObjects(t *testing.T, o *objects, withMonitor bool) {
	t.Helper()
	if len(o.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(o.daemonSets))
	}
	ds := o.daemonSets[0]
	ns := ds.Namespace
	if ns == "" {
		t.Error("DaemonSet has no namespace")
	}

	// Selector selects the pod template.
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatalf("DaemonSet selector: %v", err)
	}
	podLabels := ds.Spec.Template.Labels
	if sel.Empty() || !sel.Matches(labelSet(podLabels)) {
		t.Errorf("DaemonSet selector %v does not match its pod labels %v", ds.Spec.Selector, podLabels)
	}

	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID {
		t.Error("pod needs hostNetwork and hostPID")
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q, want ClusterFirstWithHostNet", pod.DNSPolicy)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Error("terminationGracePeriodSeconds must exceed the 30s Kafka flush deadline")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod must not mount a ServiceAccount token: pqwatch uses no API")
	}
	if len(pod.Tolerations) == 0 {
		t.Error("no tolerations: edge nodes are tainted")
	}
	if psc := pod.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile must be RuntimeDefault")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image == "" || c.Name == "" {
		t.Error("container needs a name and an image")
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext.capabilities")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("container must not be privileged")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if !slices.Equal(add, []corev1.Capability{"NET_RAW", "SYS_PTRACE"}) {
		t.Errorf("capabilities.add = %v, want exactly NET_RAW and SYS_PTRACE", sc.Capabilities.Add)
	}

	// Ports and probes.
	var metricsPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "metrics" {
			metricsPort = &c.Ports[i]
		}
	}
	if metricsPort == nil || metricsPort.ContainerPort != 9810 {
		t.Fatal("container needs port metrics = 9810")
	}
	if metricsPort.HostPort != 0 && metricsPort.HostPort != metricsPort.ContainerPort {
		t.Error("with hostNetwork, hostPort must equal containerPort")
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe missing or not HTTP", name)
			continue
		}
		if p.HTTPGet.Path != "/healthz" || (p.HTTPGet.Port.String() != "metrics" && p.HTTPGet.Port.IntValue() != 9810) {
			t.Errorf("%s probe %s on %s, want /healthz on 9810", name, p.HTTPGet.Path, p.HTTPGet.Port.String())
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
		c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("container needs cpu and memory requests and limits")
	}
	if c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory()) < 0 {
		t.Error("memory limit below request")
	}

	// Volumes: every mount has a volume; host paths are read-only, except
	// none; the required host paths are there.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	hostMounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("volumeMount %s has no volume", m.Name)
			continue
		}
		if v.HostPath != nil {
			if !m.ReadOnly {
				t.Errorf("hostPath %s mounted read-write", v.HostPath.Path)
			}
			hostMounts[v.HostPath.Path] = m.MountPath
		}
	}
	// Log directories appear at their host paths (the flags name the same
	// files inside and outside the pod); /proc at /host/proc.
	for _, name := range []string{"nginx-logs", "caddy-logs", "host-proc"} {
		v, ok := vols[name]
		if !ok || v.HostPath == nil {
			t.Errorf("no hostPath volume %s", name)
			continue
		}
		want := v.HostPath.Path
		if name == "host-proc" {
			if want != "/proc" {
				t.Errorf("host-proc is %s, want /proc", want)
			}
			want = "/host/proc"
		}
		if got := hostMounts[v.HostPath.Path]; got != want {
			t.Errorf("hostPath %s mounted at %q, want %s read-only", v.HostPath.Path, got, want)
		}
	}
	for _, v := range pod.Volumes {
		used := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name })
		if !used {
			t.Errorf("volume %s is not mounted", v.Name)
		}
	}

	// $(VAR) in args resolve to env or to keys of a ConfigMap in envFrom.
	vars := map[string]bool{}
	for _, e := range c.Env {
		vars[e.Name] = true
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm := findConfigMap(o, ef.ConfigMapRef.Name, ns)
		if cm == nil {
			t.Errorf("envFrom ConfigMap %s not among the manifests", ef.ConfigMapRef.Name)
			continue
		}
		for k := range cm.Data {
			vars[k] = true
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			if !vars[m[1]] {
				t.Errorf("arg %q refers to $(%s), which no env or ConfigMap key defines", a, m[1])
			}
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("args %v: want `run` first", c.Args)
	}

	// ServiceAccount, RBAC.
	if len(o.serviceAccounts) != 1 || o.serviceAccounts[0].Name != pod.ServiceAccountName || o.serviceAccounts[0].Namespace != ns {
		t.Errorf("ServiceAccount %q in %s not among the manifests", pod.ServiceAccountName, ns)
	}
	if len(o.clusterRoles) != 1 || len(o.bindings) != 1 {
		t.Fatalf("%d ClusterRoles and %d bindings, want 1 and 1", len(o.clusterRoles), len(o.bindings))
	}
	if n := len(o.clusterRoles[0].Rules); n != 0 {
		t.Errorf("ClusterRole grants %d rules: pqwatch uses no API, keep it empty unless a need is documented", n)
	}
	b := o.bindings[0]
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != o.clusterRoles[0].Name || b.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("ClusterRoleBinding roleRef %+v", b.RoleRef)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != pod.ServiceAccountName || b.Subjects[0].Namespace != ns {
		t.Errorf("ClusterRoleBinding subjects %+v", b.Subjects)
	}

	// Service: headless, selects the pods, names the metrics port.
	if len(o.services) != 1 {
		t.Fatalf("%d Services, want 1", len(o.services))
	}
	svc := o.services[0]
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("Service must be headless (clusterIP: None)")
	}
	if len(svc.Spec.Selector) == 0 || !labelSet(svc.Spec.Selector).subsetOf(podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9810 || svc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("Service ports %+v, want metrics 9810", svc.Spec.Ports)
	}
	if tp := svc.Spec.Ports[0].TargetPort; tp.String() != "metrics" && tp.IntValue() != 9810 {
		t.Errorf("Service targetPort %s", tp.String())
	}

	// Namespaced objects live with the DaemonSet.
	for _, m := range namespaced(o) {
		if m.Namespace != ns {
			t.Errorf("%s is in namespace %q, the DaemonSet in %q", m.Name, m.Namespace, ns)
		}
	}

	if withMonitor && len(o.serviceMonitors) == 0 && len(o.podMonitors) == 0 {
		t.Error("no ServiceMonitor or PodMonitor")
	}
	for _, sm := range o.serviceMonitors {
		checkMonitor(t, "ServiceMonitor", sm.Spec.Selector, sm.Spec.NamespaceSelector, sm.Spec.Endpoints, svc.Labels, ns)
	}
	for _, pm := range o.podMonitors {
		checkMonitor(t, "PodMonitor", pm.Spec.Selector, pm.Spec.NamespaceSelector, pm.Spec.PodMetricsEndpoints, podLabels, ns)
	}
	for _, r := range o.rules {
		checkPrometheusRule(t, r)
	}
}

func checkMonitor(t *testing.T, kind string, selector metav1.LabelSelector, nsSel namespaceSelector, eps []scrapeEndpoint, targetLabels map[string]string, ns string) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&selector)
	if err != nil || sel.Empty() || !sel.Matches(labelSet(targetLabels)) {
		t.Errorf("%s selector %v does not select %v (%v)", kind, selector, targetLabels, err)
	}
	if !nsSel.Any && !slices.Contains(nsSel.MatchNames, ns) {
		t.Errorf("%s namespaceSelector %+v misses %s (the default is the monitor's own namespace; say it)", kind, nsSel, ns)
	}
	if len(eps) == 0 {
		t.Errorf("%s has no endpoints", kind)
	}
	for _, ep := range eps {
		if ep.Port != "metrics" {
			t.Errorf("%s endpoint port %q, want metrics", kind, ep.Port)
		}
		if ep.Path != "" && ep.Path != "/metrics" {
			t.Errorf("%s endpoint path %q", kind, ep.Path)
		}
		var targets []string
		for _, r := range ep.Relabelings {
			if r.Action != "" && r.Action != "replace" && r.Action != "keep" && r.Action != "drop" && r.Action != "labeldrop" && r.Action != "labelmap" {
				t.Errorf("%s relabel action %q", kind, r.Action)
			}
			targets = append(targets, r.TargetLabel)
		}
		for _, want := range []string{"instance", "node"} {
			if !slices.Contains(targets, want) {
				t.Errorf("%s does not set the %s label (rules and dashboards group by it)", kind, want)
			}
		}
	}
}

func checkPrometheusRule(t *testing.T, r *prometheusRule) {
	t.Helper()
	if len(r.Spec.Groups) == 0 {
		t.Error("PrometheusRule has no groups")
	}
	for _, g := range r.Spec.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("PrometheusRule group %q empty", g.Name)
		}
		for _, rule := range g.Rules {
			if (rule.Record == "") == (rule.Alert == "") || rule.Expr == "" {
				t.Errorf("PrometheusRule rule %+v needs exactly one of record/alert and an expr", rule)
			}
		}
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }
func (l labelSet) subsetOf(m map[string]string) bool {
	for k, v := range l {
		if m[k] != v {
			return false
		}
	}
	return true
}

func findConfigMap(o *objects, name, ns string) *corev1.ConfigMap {
	for _, cm := range o.configMaps {
		if cm.Name == name && cm.Namespace == ns {
			return cm
		}
	}
	return nil
}

func namespaced(o *objects) []metav1.ObjectMeta {
	var out []metav1.ObjectMeta
	for _, x := range o.serviceAccounts {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.configMaps {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.services {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.serviceMonitors {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.podMonitors {
		out = append(out, x.ObjectMeta)
	}
	for _, x := range o.rules {
		out = append(out, x.ObjectMeta)
	}
	return out
}

// TestPrometheusRuleMatchesRulesFile keeps the PrometheusRule object in the
// kustomize base equal to prometheus/rules.yml (the file promtool tests).
// go test ./deploy -run PrometheusRuleMatches -update rewrites it.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	want := prometheusRuleFromRules(t)
	path := "kubernetes/prometheusrule.yaml"
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date with prometheus/rules.yml: run go test ./deploy -run PrometheusRuleMatches -update", path)
	}
}

func prometheusRuleFromRules(t *testing.T) []byte {
	t.Helper()
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
	var pr prometheusRule
	pr.APIVersion = "monitoring.coreos.com/v1"
	pr.Kind = "PrometheusRule"
	pr.Name = "pqwatch"
	pr.Namespace = "pqwatch"
	pr.Labels = map[string]string{"app.kubernetes.io/name": "pqwatch"}
	pr.Spec.Groups = rf.Groups
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": pr.APIVersion, "kind": pr.Kind,
		"metadata": map[string]any{"name": pr.Name, "namespace": pr.Namespace, "labels": pr.Labels},
		"spec":     pr.Spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# Generated from ../prometheus/rules.yml by deploy/manifests_test.go\n# (go test ./deploy -run PrometheusRuleMatches -update). Do not edit.\n"), out...)
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
