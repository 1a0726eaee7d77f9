package deploy

// Schema check of the Kubernetes manifests as they are applied: the
// kustomize base and each of its components are built with kustomize's own
// library (sigs.k8s.io/kustomize/api/krusty, what `kubectl apply -k` runs),
// and every object that comes out is decoded strictly (unknown or duplicate
// fields are errors, and so are wrong types) into the k8s.io/api Go types the
// API server itself is generated from. The prometheus-operator CRDs
// (ServiceMonitor, PodMonitor, PrometheusRule) get local structs with the
// fields we use, decoded just as strictly, plus checks of their required
// fields. Then the objects are checked against each other (selectors, named
// ports, volumes, ConfigMap keys, the metrics address and the probes, the
// spool and its volume) and against what docs/deploy.md says of them.

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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

// secretKeySelector is the operator's (core v1's) reference to one key of
// a Secret in the monitor's namespace.
type secretKeySelector struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional,omitempty"`
}

// secretOrConfigMap is the operator's SecretOrConfigMap.
type secretOrConfigMap struct {
	Secret    *secretKeySelector `json:"secret,omitempty"`
	ConfigMap *secretKeySelector `json:"configMap,omitempty"`
}

type tlsConfig struct {
	CA                 *secretOrConfigMap `json:"ca,omitempty"`
	Cert               *secretOrConfigMap `json:"cert,omitempty"`
	KeySecret          *secretKeySelector `json:"keySecret,omitempty"`
	ServerName         string             `json:"serverName,omitempty"`
	InsecureSkipVerify bool               `json:"insecureSkipVerify,omitempty"`
}

type basicAuth struct {
	Username *secretKeySelector `json:"username,omitempty"`
	Password *secretKeySelector `json:"password,omitempty"`
}

type scrapeEndpoint struct {
	Port          string          `json:"port,omitempty"`
	Path          string          `json:"path,omitempty"`
	Scheme        string          `json:"scheme,omitempty"`
	Interval      string          `json:"interval,omitempty"`
	ScrapeTimeout string          `json:"scrapeTimeout,omitempty"`
	HonorLabels   bool            `json:"honorLabels,omitempty"`
	TLSConfig     *tlsConfig      `json:"tlsConfig,omitempty"`
	BasicAuth     *basicAuth      `json:"basicAuth,omitempty"`
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

// renderKustomize builds the kustomize base with the named components of
// kubernetes/components, as an overlay that lists them would
// (`kubectl apply -k`), and returns the YAML stream.
func renderKustomize(t *testing.T, components ...string) []byte {
	t.Helper()
	base, err := filepath.Abs("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	dir := base
	if len(components) > 0 {
		dir = t.TempDir()
		rel := func(p string) string {
			r, err := filepath.Rel(dir, p)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(base) + "\ncomponents:\n"
		for _, c := range components {
			k += "  - " + rel(filepath.Join(base, "components", c)) + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build with components %v: %v", components, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeAll strictly decodes every document of a YAML stream.
func decodeAll(t *testing.T, stream []byte) *objects {
	t.Helper()
	o := &objects{}
	for i, doc := range splitDocs(stream) {
		if err := o.decodeDoc(doc); err != nil {
			t.Errorf("rendered doc %d: %v\n%s", i, err, doc)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o
}

// TestKustomizeBase: the base holds only core kinds, so it applies to a
// cluster without prometheus-operator, and it is complete and consistent.
func TestKustomizeBase(t *testing.T) {
	o := decodeAll(t, renderKustomize(t))
	checkObjects(t, o)
	if n := len(o.serviceMonitors) + len(o.podMonitors) + len(o.rules); n != 0 {
		t.Errorf("the base has %d prometheus-operator objects: it would not apply without the operator's CRDs", n)
	}
	if len(o.namespaces) != 1 || o.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Error("the base needs its Namespace, labelled pod-security.kubernetes.io/enforce: privileged")
	}
	ds := o.daemonSets[0]
	if ds.Labels["app.kubernetes.io/part-of"] != "pqwatch" {
		t.Errorf("kustomization labels not applied: %v", ds.Labels)
	}
	cm := o.configMaps[0].Data
	if cm["NGINX_CONF"] != "/etc/nginx/nginx.conf" {
		t.Errorf("NGINX_CONF = %q, want the conf of the mounted /etc/nginx", cm["NGINX_CONF"])
	}
}

// TestKustomizeComponents builds the base with each component (and the
// documented combination) and checks what each one promises.
func TestKustomizeComponents(t *testing.T) {
	for _, tc := range []struct {
		components []string
		check      func(t *testing.T, o *objects)
	}{
		{[]string{"prometheus-operator"}, func(t *testing.T, o *objects) {
			if len(o.serviceMonitors) != 1 || len(o.podMonitors) != 0 || len(o.rules) != 1 {
				t.Errorf("%d ServiceMonitors, %d PodMonitors, %d PrometheusRules; want 1, 0, 1", len(o.serviceMonitors), len(o.podMonitors), len(o.rules))
			}
			checkRulesAreRulesFile(t, o)
		}},
		{[]string{"prometheus-operator", "podmonitor"}, func(t *testing.T, o *objects) {
			if len(o.serviceMonitors) != 0 || len(o.podMonitors) != 1 || len(o.rules) != 1 {
				t.Errorf("%d ServiceMonitors, %d PodMonitors, %d PrometheusRules; want 0, 1, 1", len(o.serviceMonitors), len(o.podMonitors), len(o.rules))
			}
		}},
		{[]string{"metrics-pod-ip"}, func(t *testing.T, o *objects) {
			if got := metricsAddr(t, o); got != "$(POD_IP):9810" {
				t.Errorf("metrics address %q, want $(POD_IP):9810", got)
			}
		}},
		{[]string{"metrics-localhost"}, func(t *testing.T, o *objects) {
			if got := metricsAddr(t, o); got != "127.0.0.1:9810" {
				t.Errorf("metrics address %q, want 127.0.0.1:9810", got)
			}
		}},
		{[]string{"no-process-tracking"}, func(t *testing.T, o *objects) {
			if o.daemonSets[0].Spec.Template.Spec.HostPID {
				t.Error("hostPID still on")
			}
		}},
		{[]string{"accept-events"}, func(t *testing.T, o *objects) {
			caps := o.daemonSets[0].Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add
			if !slices.Contains(caps, "BPF") || !slices.Contains(caps, "PERFMON") {
				t.Errorf("capabilities.add %v lack BPF and PERFMON", caps)
			}
		}},
		{[]string{"prometheus-operator", "metrics-pod-ip", "no-process-tracking"}, func(t *testing.T, o *objects) {}},
	} {
		t.Run(strings.Join(tc.components, "+"), func(t *testing.T) {
			o := decodeAll(t, renderKustomize(t, tc.components...))
			checkObjects(t, o)
			tc.check(t, o)
		})
	}
}

// TestKustomizationFiles: every manifest in the base and in each component
// directory is one of its resources (a file left out is never applied).
func TestKustomizationFiles(t *testing.T) {
	dirs, _ := filepath.Glob("kubernetes/components/*")
	dirs = append(dirs, "kubernetes")
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Errorf("%s/kustomization.yaml: %v", dir, err)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
				t.Errorf("%s is not in %s/kustomization.yaml resources", b, dir)
			}
		}
	}
}

// checkObjects checks a full set of pqwatch manifests: the kustomize base
// (with or without components) or the Helm chart's output.
func checkObjects(t *testing.T, o *objects) {
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
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	// Process tracking needs hostPID, SYS_PTRACE and the host's /proc; without
	// it (-no-process-tracking) the pod has none of the three.
	tracking := !slices.Contains(c.Args, "-no-process-tracking")
	if !pod.HostNetwork {
		t.Error("pod needs hostNetwork")
	}
	if pod.HostPID != tracking {
		t.Errorf("hostPID %v with process tracking %v", pod.HostPID, tracking)
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
	// Accept events (eBPF) come with the host's tracefs, and need tracking.
	acceptEvents := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tracefs" })
	if acceptEvents && !tracking {
		t.Error("accept events (tracefs, BPF, PERFMON) without process tracking")
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	wantCaps := []corev1.Capability{"NET_RAW"}
	if tracking {
		wantCaps = append(wantCaps, "SYS_PTRACE")
	}
	if acceptEvents {
		wantCaps = append(wantCaps, "BPF", "PERFMON")
	}
	slices.Sort(wantCaps)
	if !slices.Equal(add, wantCaps) {
		t.Errorf("capabilities.add = %v, want exactly %v (process tracking %v, accept events %v)", sc.Capabilities.Add, wantCaps, tracking, acceptEvents)
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
	checkMetricsAddr(t, o)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
		c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("container needs cpu and memory requests and limits")
	}
	if c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory()) < 0 {
		t.Error("memory limit below request")
	}
	// pqwatch sets its own soft limit at 90% of the cgroup's; GOMEMLIMIT
	// would override it (copied from limits.memory: no headroom at all).
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			t.Errorf("env GOMEMLIMIT %+v: leave it unset, pqwatch sets 90%% of the cgroup limit itself", e)
		}
	}

	// Volumes: every mount has a volume; host paths are read-only; the
	// required host paths are there.
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
	// Log and conf directories appear at their host paths (the flags name
	// the same files inside and outside the pod); /proc at /host/proc.
	hostVols := []string{"nginx-logs", "caddy-logs", "nginx-conf", "pod-logs", "container-logs"}
	if tracking {
		hostVols = append(hostVols, "host-proc")
	} else if _, ok := vols["host-proc"]; ok {
		t.Error("host-proc volume without process tracking")
	}
	if acceptEvents {
		hostVols = append(hostVols, "tracefs")
	}
	for _, name := range hostVols {
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
	if !slices.Contains(c.Args, "-pod-logs=/var/log/pods") {
		t.Errorf("args %v: no -pod-logs=/var/log/pods", c.Args)
	}
	if tracking && !slices.Contains(c.Args, "-proc-root=/host/proc") {
		t.Errorf("args %v: process tracking without -proc-root=/host/proc", c.Args)
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
	// The log join is wired: the nginx conf and the log formats reach the
	// agent, and the conf lies in a read-only mount.
	for _, want := range []string{"-nginx-conf=$(NGINX_CONF)", "-nginx-log-as=$(NGINX_LOG_AS)", "-nginx-log-format=$(NGINX_LOG_FORMAT)"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if cm := findConfigMap(o, envFromName(c), ns); cm != nil {
		if conf := cm.Data["NGINX_CONF"]; conf != "" && !underReadOnlyMount(c, conf) {
			t.Errorf("NGINX_CONF %s is in no read-only mount", conf)
		}
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

	if len(o.serviceMonitors) > 0 && len(o.podMonitors) > 0 {
		t.Error("both a ServiceMonitor and a PodMonitor: every target would be scraped twice")
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
	checkSecrets(t, o)
}

func envFromName(c corev1.Container) string {
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			return ef.ConfigMapRef.Name
		}
	}
	return ""
}

func underReadOnlyMount(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.ReadOnly && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

// metricsAddr is the -metrics-addr the agent gets: an env entry of the
// container (it overrides envFrom), else the ConfigMap's METRICS_ADDR.
func metricsAddr(t *testing.T, o *objects) string {
	t.Helper()
	ds := o.daemonSets[0]
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "-metrics-addr=$(METRICS_ADDR)") {
		t.Fatalf("args %v: want -metrics-addr=$(METRICS_ADDR)", c.Args)
	}
	for _, e := range c.Env {
		if e.Name == "METRICS_ADDR" {
			return e.Value
		}
	}
	cm := findConfigMap(o, envFromName(c), ds.Namespace)
	if cm == nil {
		t.Fatal("no ConfigMap in envFrom")
	}
	return cm.Data["METRICS_ADDR"]
}

// checkMetricsAddr: the address's port is the container's metrics port (the
// probes, the Service and the monitors use that one); the probes can reach
// the address; a monitor is never pointed at an agent on 127.0.0.1.
func checkMetricsAddr(t *testing.T, o *objects) {
	t.Helper()
	c := o.daemonSets[0].Spec.Template.Spec.Containers[0]
	addr := metricsAddr(t, o)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("metrics address %q: %v", addr, err)
		return
	}
	if port != "9810" {
		t.Errorf("metrics address %q: port is not the container's 9810", addr)
	}
	var envIndex, podIPIndex = -1, -1
	for i, e := range c.Env {
		switch {
		case e.Name == "METRICS_ADDR":
			envIndex = i
		case e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			podIPIndex = i
		}
	}
	probeHost := ""
	if p := c.LivenessProbe; p != nil && p.HTTPGet != nil {
		probeHost = p.HTTPGet.Host
		if r := c.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Host != probeHost {
			t.Error("liveness and readiness probes go to different hosts")
		}
	}
	switch host {
	case "":
		// Every address of the node: the probes' default (the pod IP) works.
	case "$(POD_IP)":
		// $(POD_IP) expands only to an env entry defined before this one.
		if envIndex < 0 || podIPIndex < 0 || podIPIndex > envIndex {
			t.Errorf("metrics address %q needs env POD_IP (status.podIP) before METRICS_ADDR", addr)
		}
	case "127.0.0.1":
		if probeHost != "127.0.0.1" {
			t.Errorf("metrics on %s but probes sent to %q: the kubelet would restart the pod forever", addr, probeHost)
		}
		if len(o.serviceMonitors)+len(o.podMonitors) > 0 {
			t.Errorf("metrics on %s: a ServiceMonitor or PodMonitor cannot scrape it", addr)
		}
		return
	default:
		t.Errorf("metrics address %q: want :9810, $(POD_IP):9810 or 127.0.0.1:9810", addr)
	}
	if probeHost != "" {
		t.Errorf("probes sent to %q, the agent listens on %q", probeHost, addr)
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

// checkRulesAreRulesFile: the PrometheusRule carries prometheus/rules.yml,
// rule for rule.
func checkRulesAreRulesFile(t *testing.T, o *objects) {
	t.Helper()
	want := rulesFileGroups(t)
	for _, r := range o.rules {
		got, _ := yaml.Marshal(r.Spec.Groups)
		if !bytes.Equal(got, want) {
			t.Errorf("PrometheusRule %s differs from prometheus/rules.yml: run go test ./deploy -run PrometheusRuleMatches -update", r.Name)
		}
	}
}

func rulesFileGroups(t *testing.T) []byte {
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
	out, err := yaml.Marshal(rf.Groups)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSpoolFitsItsVolume: the Kafka spool's cap stays below the sizeLimit of
// the emptyDir it is written to, in the base and in the chart. At the
// sizeLimit the kubelet evicts the pod and deletes the volume, spool and
// tail offsets with it: a full spool must be refused by pqwatch (counted as
// dropped), never found by the kubelet.
func TestSpoolFitsItsVolume(t *testing.T) {
	const headroom = 64 << 20 // tail offsets, the spool's .ack files, block rounding
	for name, stream := range map[string][]byte{
		"kustomize base": renderKustomize(t),
		"helm chart":     renderChart(t, "pqwatch", "pqwatch", nil),
	} {
		o := decodeAll(t, stream)
		pod := o.daemonSets[0].Spec.Template.Spec
		c := pod.Containers[0]
		capBytes, capFrom := int64(0), ""
		dir := ""
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "-kafka-spool-dir="); ok {
				dir = v
			}
			if v, ok := strings.CutPrefix(a, "-kafka-spool-max-bytes="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %s: %v", name, a, err)
				}
				capBytes, capFrom = n, a
			}
		}
		if dir == "" {
			t.Errorf("%s: no -kafka-spool-dir", name)
			continue
		}
		if capFrom == "" {
			capBytes, capFrom = spoolBytesDefault(t), "exporter.KafkaConfig.SpoolBytes default"
		}
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if strings.HasPrefix(dir+"/", strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil {
			t.Errorf("%s: spool dir %s is in no volume (the root filesystem is read-only)", name, dir)
			continue
		}
		var limit *resource.Quantity
		for _, v := range pod.Volumes {
			if v.Name == mount.Name && v.EmptyDir != nil {
				limit = v.EmptyDir.SizeLimit
			}
		}
		if limit == nil {
			t.Errorf("%s: spool volume %s is not an emptyDir with a sizeLimit", name, mount.Name)
			continue
		}
		if limit.Value() < capBytes+headroom {
			t.Errorf("%s: spool volume sizeLimit %s (%d bytes) is not above the spool cap %d (%s) + %d MiB: a full spool gets the pod evicted and the spool deleted",
				name, limit, limit.Value(), capBytes, capFrom, headroom>>20)
		}
		t.Logf("%s: spool cap %d bytes (%s), volume sizeLimit %s", name, capBytes, capFrom, limit)
	}
}

// spoolBytesDefault is the spool cap exporter.NewKafka sets when
// KafkaConfig.SpoolBytes is zero, as `pqwatch run` leaves it: the value of
// the setDefault(&cfg.SpoolBytes, ...) call in package exporter, evaluated
// with the package's constants, so that a new default is seen here.
func spoolBytesDefault(t *testing.T) int64 {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "exporter", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no exporter sources: %v", err)
	}
	var arg ast.Expr
	consts := map[string]ast.Expr{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok == token.CONST {
					for _, spec := range n.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, id := range vs.Names {
							if i < len(vs.Values) {
								consts[id.Name] = vs.Values[i]
							}
						}
					}
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "setDefault" && len(n.Args) == 2 {
					if u, ok := n.Args[0].(*ast.UnaryExpr); ok {
						if sel, ok := u.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "SpoolBytes" {
							arg = n.Args[1]
						}
					}
				}
			}
			return true
		})
	}
	if arg == nil {
		t.Fatal("package exporter has no setDefault(&cfg.SpoolBytes, ...): find where the spool cap is set now and read it from there")
	}
	// The package's constants, in as many passes as their references need.
	pkg := types.NewPackage("exporter", "exporter")
	for progress := true; progress; {
		progress = false
		for name, e := range consts {
			if tv, err := types.Eval(fset, pkg, token.NoPos, types.ExprString(e)); err == nil && tv.Value != nil {
				pkg.Scope().Insert(types.NewConst(token.NoPos, pkg, name, tv.Type, tv.Value))
				delete(consts, name)
				progress = true
			}
		}
	}
	tv, err := types.Eval(fset, pkg, token.NoPos, types.ExprString(arg))
	if err != nil || tv.Value == nil {
		t.Fatalf("exporter: spool default %s is not a constant expression: %v", types.ExprString(arg), err)
	}
	n, ok := constant.Int64Val(tv.Value)
	if !ok || n <= 0 {
		t.Fatalf("exporter: spool default %s", tv.Value)
	}
	return n
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

// The files generated from prometheus/rules.yml: the PrometheusRule of the
// kustomize component and the chart's copy of the rules file.
const (
	promRulePath  = "kubernetes/components/prometheus-operator/prometheusrule.yaml"
	chartRulePath = "helm/pqwatch/rules/pqwatch.rules.yml"
)

// TestPrometheusRuleMatchesRulesFile keeps the PrometheusRule objects equal to
// prometheus/rules.yml (the file promtool tests).
// go test ./deploy -run PrometheusRuleMatches -update rewrites them.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		promRulePath:  prometheusRuleFromRules(t),
		chartRulePath: append([]byte("# Copied from deploy/prometheus/rules.yml by deploy/manifests_test.go\n# (go test ./deploy -run PrometheusRuleMatches -update). Do not edit.\n"), rules...),
	} {
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
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
		"metadata": map[string]any{"name": "pqwatch", "namespace": "pqwatch", "labels": map[string]string{
			"app.kubernetes.io/name": "pqwatch", "app.kubernetes.io/part-of": "pqwatch",
		}},
		"spec": map[string]any{"groups": rf.Groups},
	})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# Generated from ../../../prometheus/rules.yml by deploy/manifests_test.go\n# (go test ./deploy -run PrometheusRuleMatches -update). Do not edit.\n"), out...)
}
