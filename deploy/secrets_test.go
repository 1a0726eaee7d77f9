package deploy

// Kafka TLS and SASL and the metrics endpoint's web config, as the
// manifests wire them: secrets come from Secret volumes as files and never
// reach the command line (a hostPID pod's command line is readable by
// every process on the node), the files the flags name exist in those
// volumes, the probes and the monitors speak what the endpoint serves, and
// every flag the manifests pass is one `pqwatch run` has (the real binary
// parses the rendered arguments).

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

// fileFlags are the flags of `pqwatch run` that name a file holding a
// secret or a key, and so must be read from a Secret volume.
var fileFlags = []string{"-kafka-tls-ca-file", "-kafka-tls-cert-file", "-kafka-tls-key-file", "-kafka-sasl-password-file", "-web.config.file"}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs returns the container's args as the kubelet passes them:
// $(VAR) replaced by env values and the envFrom ConfigMap's keys (env wins).
func expandArgs(o *objects, c corev1.Container, ns string) []string {
	vars := map[string]string{}
	if cm := findConfigMap(o, envFromName(c), ns); cm != nil {
		for k, v := range cm.Data {
			vars[k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vars[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(m string) string {
				if v, ok := vars[m[2:len(m)-1]]; ok {
					return v
				}
				return m
			})
		} else {
			vars[e.Name] = "$(" + e.Name + ")" // known at run time only
		}
	}
	var out []string
	for _, a := range c.Args {
		out = append(out, varRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := vars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		}))
	}
	return out
}

func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkSecrets: no secret on the command line, every file flag's file in a
// read-only Secret volume that holds it, probes and monitors agreeing with
// the endpoint.
func checkSecrets(t *testing.T, o *objects) {
	t.Helper()
	ds := o.daemonSets[0]
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	// An env entry from a Secret expanded into an argument puts the secret
	// on the command line.
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if strings.Contains(a, "$("+e.Name+")") {
				t.Errorf("arg %q expands env %s from Secret %s: a secret on the command line", a, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	// Nothing secret-looking is a value of the ConfigMap or the env, or a
	// flag other than a file's.
	secretish := regexp.MustCompile(`(?i)password|secret|token|passwd`)
	if cm := findConfigMap(o, envFromName(c), ds.Namespace); cm != nil {
		for k := range cm.Data {
			if secretish.MatchString(k) && !strings.HasSuffix(k, "_FILE") {
				t.Errorf("ConfigMap key %s: a secret in a ConfigMap (every reader of the namespace sees it)", k)
			}
		}
	}
	for _, e := range c.Env {
		if secretish.MatchString(e.Name) && e.ValueFrom == nil && !strings.HasSuffix(e.Name, "_FILE") {
			t.Errorf("env %s has a literal value in the pod spec", e.Name)
		}
	}
	args := expandArgs(o, c, ds.Namespace)
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if secretish.MatchString(name) && !slices.Contains(fileFlags, name) {
			t.Errorf("flag %s carries a secret on the command line", a)
		}
	}

	secretVols := map[string]*corev1.SecretVolumeSource{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretVols[v.Name] = v.Secret
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
				t.Errorf("Secret volume %s: defaultMode %v, want 0400 (nothing but the agent reads it)", v.Name, v.Secret.DefaultMode)
			}
		}
	}
	for _, name := range fileFlags {
		file, ok := flagValue(args, name)
		if !ok {
			t.Errorf("args %v lack %s", c.Args, name)
			continue
		}
		if file == "" {
			continue
		}
		found := false
		for _, m := range c.VolumeMounts {
			sv := secretVols[m.Name]
			dir := strings.TrimSuffix(m.MountPath, "/") + "/"
			rel, in := strings.CutPrefix(path.Clean(file), dir)
			if sv == nil || !in {
				continue
			}
			found = true
			if !m.ReadOnly {
				t.Errorf("%s=%s: Secret volume %s mounted read-write", name, file, m.Name)
			}
			if len(sv.Items) > 0 && !slices.ContainsFunc(sv.Items, func(k corev1.KeyToPath) bool { return k.Path == rel }) {
				t.Errorf("%s=%s: Secret %s projects %v, not %s", name, file, sv.SecretName, sv.Items, rel)
			}
		}
		if !found {
			t.Errorf("%s=%s is in no Secret volume", name, file)
		}
	}
	cert, _ := flagValue(args, "-kafka-tls-cert-file")
	key, _ := flagValue(args, "-kafka-tls-key-file")
	if (cert == "") != (key == "") {
		t.Errorf("-kafka-tls-cert-file %q and -kafka-tls-key-file %q go together", cert, key)
	}
	mech, _ := flagValue(args, "-kafka-sasl-mechanism")
	user, _ := flagValue(args, "-kafka-sasl-username")
	pw, _ := flagValue(args, "-kafka-sasl-password-file")
	if mech != "" && (user == "" || pw == "") || mech == "" && (user != "" || pw != "") {
		t.Errorf("SASL mechanism %q, user %q, password file %q: all three or none", mech, user, pw)
	}

	// The probes and the monitors speak what the endpoint serves.
	web, _ := flagValue(args, "-web.config.file")
	var schemes []string
	probeAuth := false
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		s := strings.ToLower(string(p.HTTPGet.Scheme))
		if s == "" {
			s = "http"
		}
		schemes = append(schemes, s)
		for _, h := range p.HTTPGet.HTTPHeaders {
			if strings.EqualFold(h.Name, "Authorization") {
				probeAuth = true
			}
		}
	}
	if web == "" && slices.Contains(schemes, "https") {
		t.Error("probes use HTTPS without -web.config.file")
	}
	if len(schemes) == 2 && schemes[0] != schemes[1] {
		t.Errorf("probe schemes %v differ", schemes)
	}
	var eps []scrapeEndpoint
	for _, sm := range o.serviceMonitors {
		eps = append(eps, sm.Spec.Endpoints...)
	}
	for _, pm := range o.podMonitors {
		eps = append(eps, pm.Spec.PodMetricsEndpoints...)
	}
	for _, ep := range eps {
		s := ep.Scheme
		if s == "" {
			s = "http"
		}
		if len(schemes) > 0 && s != schemes[0] {
			t.Errorf("monitor scrapes %s, the probes %s", s, schemes[0])
		}
		if s == "https" && (ep.TLSConfig == nil || (ep.TLSConfig.CA == nil && !ep.TLSConfig.InsecureSkipVerify)) {
			t.Errorf("https monitor endpoint without a CA: %+v", ep.TLSConfig)
		}
		if ep.BasicAuth != nil && !probeAuth {
			t.Error("the monitor sends basic auth but the probes send no Authorization header: with basic auth /healthz answers 401")
		}
		if ep.BasicAuth != nil && (ep.BasicAuth.Username == nil || ep.BasicAuth.Password == nil || ep.BasicAuth.Password.Name == "" || ep.BasicAuth.Password.Key == "") {
			t.Errorf("monitor basicAuth %+v: username and password from a Secret", ep.BasicAuth)
		}
		if web == "" && (s == "https" || ep.BasicAuth != nil) {
			t.Error("monitor uses https or basic auth without -web.config.file")
		}
		// Prometheus reads the monitor's Secrets: never the agent's key.
		var refs []string
		if tc := ep.TLSConfig; tc != nil && tc.CA != nil && tc.CA.Secret != nil {
			refs = append(refs, tc.CA.Secret.Name)
		}
		if ba := ep.BasicAuth; ba != nil {
			for _, r := range []*secretKeySelector{ba.Username, ba.Password} {
				if r != nil {
					refs = append(refs, r.Name)
				}
			}
		}
		for _, r := range refs {
			for _, v := range secretVols {
				if v.SecretName == r {
					t.Errorf("monitor reads Secret %s, which the agent mounts (its keys would go to Prometheus)", r)
				}
			}
		}
	}
}

var (
	pqwatchBinOnce sync.Once
	pqwatchBin     string
	pqwatchBinErr  error
)

// buildPqwatch builds cmd/pqwatch once per test binary.
func buildPqwatch(t *testing.T) string {
	t.Helper()
	pqwatchBinOnce.Do(func() {
		dir, err := exec.Command("mktemp", "-d").Output()
		if err != nil {
			pqwatchBinErr = err
			return
		}
		pqwatchBin = filepath.Join(strings.TrimSpace(string(dir)), "pqwatch")
		out, err := exec.Command("go", "build", "-o", pqwatchBin, "../cmd/pqwatch").CombinedOutput()
		if err != nil {
			pqwatchBinErr = err
			pqwatchBin = string(out)
		}
	})
	if pqwatchBinErr != nil {
		t.Fatalf("go build ../cmd/pqwatch: %v\n%s", pqwatchBinErr, pqwatchBin)
	}
	return pqwatchBin
}

// TestManifestFlagsParse: the rendered arguments, $(VAR) expanded from the
// ConfigMap and env, are parsed by the real `pqwatch run` (with -h last, so
// it stops after parsing): an unknown flag or a bad value (an empty bool)
// fails here instead of in a crash-looping pod.
func TestManifestFlagsParse(t *testing.T) {
	bin := buildPqwatch(t)
	for name, stream := range map[string][]byte{
		"kustomize base":            renderKustomize(t),
		"kustomize, all components": renderKustomize(t, "prometheus-operator", "kafka-tls", "kafka-sasl", "web-config", "metrics-pod-ip", "accept-events"),
		"kustomize, no tracking":    renderKustomize(t, "no-process-tracking", "metrics-localhost"),
		"helm defaults":             renderChart(t, "pqwatch", "pqwatch", nil),
		"helm, everything":          renderChart(t, "pqwatch", "pqwatch", allChartValues()),
	} {
		o := decodeAll(t, stream)
		c := o.daemonSets[0].Spec.Template.Spec.Containers[0]
		args := expandArgs(o, c, o.daemonSets[0].Namespace)
		cmd := exec.Command(bin, append(args, "-h")...)
		out, _ := cmd.CombinedOutput()
		if !strings.HasPrefix(string(out), "usage: pqwatch run") {
			first, _, _ := strings.Cut(string(out), "\n")
			t.Errorf("%s: %s\n  pqwatch %s", name, first, strings.Join(args, " "))
		}
	}
}

// allChartValues turns on every option of the chart that can go together.
func allChartValues() map[string]any {
	return map[string]any{
		"kafka": map[string]any{
			"brokers": "kafka-0.kafka:9093", "createTopic": false,
			"tls":  map[string]any{"enabled": true, "secretName": "pqwatch-kafka-tls", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key", "serverName": "kafka.internal"},
			"sasl": map[string]any{"mechanism": "scram-sha-256", "username": "edge", "passwordSecretName": "kafka-creds", "passwordKey": "pw"},
		},
		"metrics": map[string]any{"bind": "podIP", "webConfig": map[string]any{
			"enabled": true, "basicAuth": true,
			"probeHTTPHeaders": []any{map[string]any{"name": "Authorization", "value": "Basic cHJvYmU6cHJvYmU="}},
		}},
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
		"acceptEvents":   true,
	}
}

// TestHelmChartKafkaAndWebConfig: the chart's Kafka TLS/SASL, topic
// creation and web config values reach the flags, the volumes, the probes
// and the ServiceMonitor, and no value of the chart is a secret.
func TestHelmChartKafkaAndWebConfig(t *testing.T) {
	values := allChartValues()
	helmLint(t, "pqwatch", values)
	o := decodeAll(t, renderChart(t, "pqwatch", "pqwatch", values))
	checkObjects(t, o)
	ds := o.daemonSets[0]
	c := ds.Spec.Template.Spec.Containers[0]
	args := expandArgs(o, c, ds.Namespace)
	for flag, want := range map[string]string{
		"-kafka-brokers": "kafka-0.kafka:9093", "-kafka-create-topic": "false", "-kafka-tls": "true",
		"-kafka-tls-ca-file": "/etc/pqwatch/kafka-tls/ca.crt", "-kafka-tls-cert-file": "/etc/pqwatch/kafka-tls/tls.crt",
		"-kafka-tls-key-file": "/etc/pqwatch/kafka-tls/tls.key", "-kafka-tls-server-name": "kafka.internal",
		"-kafka-sasl-mechanism": "scram-sha-256", "-kafka-sasl-username": "edge",
		"-kafka-sasl-password-file": "/etc/pqwatch/kafka-sasl/password", "-web.config.file": "/etc/pqwatch/web/web-config.yml",
	} {
		if got, _ := flagValue(args, flag); got != want {
			t.Errorf("%s=%q, want %q", flag, got, want)
		}
	}
	vols := map[string]*corev1.SecretVolumeSource{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			vols[v.Name] = v.Secret
		}
	}
	if v := vols["kafka-sasl"]; v == nil || v.SecretName != "kafka-creds" || len(v.Items) != 1 || v.Items[0].Key != "pw" || v.Items[0].Path != "password" {
		t.Errorf("kafka-sasl volume %+v: want key pw of kafka-creds as the file password", v)
	}
	if v := vols["kafka-tls"]; v == nil || v.SecretName != "pqwatch-kafka-tls" || len(v.Items) != 3 {
		t.Errorf("kafka-tls volume %+v", v)
	}
	if v := vols["web-config"]; v == nil || v.SecretName != "pqwatch-web-config" {
		t.Errorf("web-config volume %+v", v)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS || len(p.HTTPGet.HTTPHeaders) != 1 || p.HTTPGet.HTTPHeaders[0].Name != "Authorization" {
			t.Errorf("probe %+v: want HTTPS with the Authorization header", p.HTTPGet)
		}
	}
	ep := o.serviceMonitors[0].Spec.Endpoints[0]
	if ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.ServerName != "pqwatch" || ep.TLSConfig.CA.Secret.Name != "pqwatch-scrape" ||
		ep.BasicAuth == nil || ep.BasicAuth.Password.Name != "pqwatch-scrape" || ep.BasicAuth.Password.Key != "password" {
		t.Errorf("ServiceMonitor endpoint %+v tls %+v auth %+v", ep, ep.TLSConfig, ep.BasicAuth)
	}
	// The password's Secret name and key are all the chart knows of it.
	for _, a := range c.Args {
		if strings.Contains(a, "kafka-creds") || strings.Contains(strings.ToLower(a), "basic ") {
			t.Errorf("arg %q names a Secret or a credential", a)
		}
	}
	// Topic creation on by default.
	def := decodeAll(t, renderChart(t, "pqwatch", "pqwatch", nil))
	if got, _ := flagValue(expandArgs(def, def.daemonSets[0].Spec.Template.Spec.Containers[0], "pqwatch"), "-kafka-create-topic"); got != "true" {
		t.Errorf("default -kafka-create-topic=%q, want true (pqwatch's default)", got)
	}
}

// TestKustomizeKafkaAndWebConfig: the components wire the same flags.
func TestKustomizeKafkaAndWebConfig(t *testing.T) {
	o := decodeAll(t, renderKustomize(t, "prometheus-operator", "podmonitor", "kafka-tls", "kafka-sasl", "web-config"))
	checkObjects(t, o)
	c := o.daemonSets[0].Spec.Template.Spec.Containers[0]
	args := expandArgs(o, c, "pqwatch")
	for flag, want := range map[string]string{
		"-kafka-tls": "true", "-kafka-tls-ca-file": "/etc/pqwatch/kafka-tls/ca.crt", "-kafka-tls-cert-file": "/etc/pqwatch/kafka-tls/tls.crt",
		"-kafka-sasl-mechanism": "scram-sha-512", "-kafka-sasl-password-file": "/etc/pqwatch/kafka-sasl/password",
		"-web.config.file": "/etc/pqwatch/web/web-config.yml", "-kafka-create-topic": "true",
	} {
		if got, _ := flagValue(args, flag); got != want {
			t.Errorf("%s=%q, want %q", flag, got, want)
		}
	}
	if ep := o.podMonitors[0].Spec.PodMetricsEndpoints[0]; ep.Scheme != "https" || ep.TLSConfig == nil {
		t.Errorf("PodMonitor endpoint %+v: web-config after podmonitor makes it https", ep)
	}
}

// TestWebConfigProbesAnswer: the chart's probes and ServiceMonitor, as
// rendered with TLS and basic auth, sent to pqwatch's real metrics endpoint
// (exporter.StartServer) with such a web config: the probes get 200 on
// /healthz with their header, the monitor's credentials 200 on /metrics, and
// a probe without the header 401 (why the chart requires it).
func TestWebConfigProbesAnswer(t *testing.T) {
	const probeHeader = "Basic cHJvYmU6cHJvYmUtcGFzcw==" // probe:probe-pass
	values := map[string]any{
		"metrics": map[string]any{"webConfig": map[string]any{
			"enabled": true, "basicAuth": true,
			"probeHTTPHeaders": []any{map[string]any{"name": "Authorization", "value": probeHeader}},
		}},
		"serviceMonitor": map[string]any{"enabled": true},
	}
	o := decodeAll(t, renderChart(t, "pqwatch", "pqwatch", values))
	checkObjects(t, o)
	c := o.daemonSets[0].Spec.Template.Spec.Containers[0]
	ep := o.serviceMonitors[0].Spec.Endpoints[0]

	dir := t.TempDir()
	certFile, keyFile, _, err := testenv.CertE(dir)
	if err != nil {
		t.Fatal(err)
	}
	users := ""
	for user, pass := range map[string]string{"prometheus": "scrape-pass", "probe": "probe-pass"} {
		h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		users += "  " + user + ": " + string(h) + "\n"
	}
	webCfg := filepath.Join(dir, "web-config.yml")
	if err := os.WriteFile(webCfg, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+"\nbasic_auth_users:\n"+users), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	exporter.NewMetrics(reg)
	srv, err := exporter.StartServer(exporter.ServerConfig{Listener: ln, Handler: exporter.Handler(reg, nil), WebConfigFile: webCfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })

	// The kubelet does not verify a probe's certificate.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(scheme, path string, hdr http.Header) int {
		req, _ := http.NewRequest("GET", strings.ToLower(scheme)+"://"+ln.Addr().String()+path, nil)
		req.Header = hdr
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", scheme, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		hdr := http.Header{}
		for _, h := range p.HTTPGet.HTTPHeaders {
			hdr.Set(h.Name, h.Value)
		}
		if code := get(string(p.HTTPGet.Scheme), p.HTTPGet.Path, hdr); code != 200 {
			t.Errorf("%s probe %s %s with its header: %d, want 200", name, p.HTTPGet.Scheme, p.HTTPGet.Path, code)
		}
		if code := get(string(p.HTTPGet.Scheme), p.HTTPGet.Path, http.Header{}); code != http.StatusUnauthorized {
			t.Errorf("%s probe without its header: %d, want 401", name, code)
		}
	}
	// The monitor: its scheme and path, the username and password of the
	// scrape Secret (here, as Prometheus would read them).
	if ep.BasicAuth == nil || ep.BasicAuth.Username.Key != "username" || ep.BasicAuth.Password.Key != "password" {
		t.Fatalf("ServiceMonitor basicAuth %+v", ep.BasicAuth)
	}
	hdr := http.Header{}
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth("prometheus", "scrape-pass")
	hdr.Set("Authorization", req.Header.Get("Authorization"))
	if code := get(ep.Scheme, ep.Path, hdr); code != 200 {
		t.Errorf("ServiceMonitor scrape %s %s: %d, want 200", ep.Scheme, ep.Path, code)
	}
}
