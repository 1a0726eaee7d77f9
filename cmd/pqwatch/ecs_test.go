package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/record"
)

// ecsField is a field of ECS's own definitions (testdata/ecs).
type ecsField struct {
	Type  string `json:"type"`
	Array bool   `json:"array"`
}

func ecsFields(t *testing.T) map[string]ecsField {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ecs", "ecs_flat_types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]ecsField
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) < 1000 || m["@timestamp"].Type != "date" {
		t.Fatalf("testdata/ecs/ecs_flat_types.json has %d fields: not ECS's table", len(m))
	}
	return m
}

// flatten turns a decoded JSON object into dotted leaf names and values;
// an array of objects is flattened into its objects' names.
func flatten(prefix string, v any, out map[string][]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, v := range x {
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			flatten(name, v, out)
		}
	case []any:
		for _, e := range x {
			if _, obj := e.(map[string]any); obj {
				flatten(prefix, e, out)
			} else {
				out[prefix] = append(out[prefix], e)
			}
		}
	default:
		out[prefix] = append(out[prefix], v)
	}
}

// typeOK says whether a JSON value is one Elasticsearch indexes as the
// ECS type typ without coercion.
func typeOK(typ string, v any) bool {
	switch typ {
	case "keyword", "wildcard", "match_only_text", "text", "constant_keyword":
		_, ok := v.(string)
		return ok
	case "long", "integer", "short", "byte", "unsigned_long":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "float", "double", "scaled_float":
		_, ok := v.(float64)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "ip":
		s, ok := v.(string)
		if !ok {
			return false
		}
		_, err := netip.ParseAddr(s)
		return err == nil
	case "date":
		s, ok := v.(string)
		if !ok {
			return false
		}
		_, err := time.Parse(time.RFC3339Nano, s)
		return err == nil
	}
	return false
}

// checkECSLine: every name of an ECS line is either an ECS 9.4.0 field of
// the right type or under pqwatch.; ecs.version is ECS's. It returns the
// leaf names.
func checkECSLine(t *testing.T, ecs map[string]ecsField, line string) []string {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(line))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	leaves := map[string][]any{}
	flatten("", doc, leaves)
	var names []string
	for name, vals := range leaves {
		names = append(names, name)
		if strings.HasPrefix(name, "pqwatch.") {
			if _, clash := ecs[name]; clash {
				t.Errorf("%s is an ECS field: it must not be under pqwatch.", name)
			}
			continue
		}
		f, ok := ecs[name]
		if !ok {
			t.Errorf("%s is not an ECS 9.4.0 field (pqwatch's own facts go under pqwatch.): %s", name, line)
			continue
		}
		if len(vals) > 1 && !f.Array {
			t.Errorf("%s: %d values, ECS has one", name, len(vals))
		}
		for _, v := range vals {
			if !typeOK(f.Type, v) {
				t.Errorf("%s = %#v is not ECS type %s", name, v, f.Type)
			}
		}
	}
	if v := leaves["ecs.version"]; len(v) != 1 || v[0] != exporter.ECSVersion {
		t.Errorf("ecs.version %v, want %s", v, exporter.ECSVersion)
	}
	sort.Strings(names)
	return names
}

// fullRecord is a record with every field set.
func fullRecord() record.Handshake {
	var h record.Handshake
	fill(reflect.ValueOf(&h).Elem())
	h.TS = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	h.Client, h.Server, h.Transport, h.Version, h.Outcome = "192.0.2.7:51234", "[2001:db8::1]:443", "quic", "TLS1.3", "ok"
	h.ID, h.IDSeq = "9f3c2a1b0d4e5f60-000000000000002a", 0
	return h
}

// TestECSRoundTrip: the ECS view of the testdata capture's records (with
// and without joined logs) and of a record with every field set reads
// back to the same record, field for field: every pqwatch field is
// there; every ECS name is an ECS 9.4.0 field of its type.
func TestECSRoundTrip(t *testing.T) {
	ecs := ecsFields(t)
	capture := filepath.Join(repoRoot, "testdata", "handshakes.pcap")
	g := func(name string) string { return filepath.Join("testdata", "golden", name) }
	edge := `$remote_addr $remote_port $msec "$request" $status "$http_user_agent" $ssl_curve $pid`
	logs := []string{"-nginx-log", g("access.log"), "-nginx-log-format", edge, "-caddy-log", g("caddy.log")}
	seen := map[string]bool{}
	for _, extra := range [][]string{nil, logs} {
		_, jsonl, _ := run(t, append(append([]string{"analyze", "-format", "jsonl"}, extra...), capture)...)
		code, ecsl, stderr := run(t, append(append([]string{"analyze", "-format", "ecs-jsonl"}, extra...), capture)...)
		if code != exitOK {
			t.Fatalf("analyze -format ecs-jsonl exits %d: %s", code, stderr)
		}
		want, got := strings.Split(strings.TrimSpace(jsonl), "\n"), strings.Split(strings.TrimSpace(ecsl), "\n")
		if len(want) != len(got) {
			t.Fatalf("%d records, %d ECS lines", len(want), len(got))
		}
		for i, l := range got {
			for _, n := range checkECSLine(t, ecs, l) {
				seen[n] = true
			}
			h, err := exporter.ParseECS([]byte(l))
			if err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if back := string(exporter.AppendJSON(nil, h)); back != want[i] {
				t.Errorf("ECS line %d reads back as\n%s\nthe record is\n%s", i, back, want[i])
			}
		}
	}
	h := fullRecord()
	line := exporter.AppendECS(nil, &h)
	for _, n := range checkECSLine(t, ecs, string(line)) {
		seen[n] = true
	}
	back, err := exporter.ParseECS(line)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := exporter.AppendJSON(nil, back), exporter.AppendJSON(nil, &h); !bytes.Equal(a, b) {
		t.Errorf("a full record reads back as\n%s\nnot\n%s", a, b)
	}
	if seen["tls.client.supported_ciphers"] {
		t.Error("tls.client.supported_ciphers is written: the record has no offered suites")
	}
	// A version ECS cannot spell, and addresses that are no ip:port.
	h.Version, h.Client, h.Server = "0x7f1c", "[fe80::1%eth0]:5", "host:443"
	line = exporter.AppendECS(nil, &h)
	for _, n := range checkECSLine(t, ecs, string(line)) {
		seen[n] = true
	}
	if back, _ := exporter.ParseECS(line); back == nil || back.Version != h.Version || back.Client != h.Client || back.Server != h.Server {
		t.Errorf("unusual values read back as %+v", back)
	}

	// docs/contract.md's ECS table names exactly the names written.
	var all []string
	for n := range seen {
		all = append(all, n)
	}
	var doc []string
	for _, r := range tableRows(section(t, readRepo(t, "docs/contract.md"), "The record in ECS names (`-format ecs-jsonl`)")) {
		if n := ticked(r[0]); n != "" && !strings.Contains(r[3], "not written") {
			doc = append(doc, n)
		}
	}
	if extra, missing := setDiff(doc, all); len(extra)+len(missing) > 0 {
		t.Errorf("docs/contract.md's ECS table lists %v, which no ECS line has; and lacks %v", extra, missing)
	}
}

// TestECSIndexTemplate: deploy/elasticsearch's index template maps every
// name the ECS view writes, ECS names with ECS 9.4.0's own type.
func TestECSIndexTemplate(t *testing.T) {
	ecs := ecsFields(t)
	var tmpl struct {
		Template struct {
			Mappings struct {
				Properties map[string]any `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "elasticsearch", "pqwatch-index-template.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tmpl); err != nil {
		t.Fatal(err)
	}
	mapped := map[string]string{}
	var walk func(prefix string, props map[string]any)
	walk = func(prefix string, props map[string]any) {
		for k, v := range props {
			m := v.(map[string]any)
			name := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := m["properties"].(map[string]any); ok {
				walk(name, sub)
				continue
			}
			mapped[name], _ = m["type"].(string)
		}
	}
	walk("", tmpl.Template.Mappings.Properties)
	h := fullRecord()
	var doc map[string]any
	json.Unmarshal(exporter.AppendECS(nil, &h), &doc)
	leaves := map[string][]any{}
	flatten("", doc, leaves)
	h.Client, h.Server = "[fe80::1%eth0]:5", "host:443" // client.address, server.address
	json.Unmarshal(exporter.AppendECS(nil, &h), &doc)
	flatten("", doc, leaves)
	h.Version = "0x7f1c" // pqwatch.version
	doc = nil
	json.Unmarshal(exporter.AppendECS(nil, &h), &doc)
	flatten("", doc, leaves)
	for name, vals := range leaves {
		typ, ok := mapped[name]
		if !ok {
			t.Errorf("the index template does not map %s", name)
			continue
		}
		if f, isECS := ecs[name]; isECS && f.Type != typ {
			t.Errorf("the index template maps %s as %s; ECS says %s", name, typ, f.Type)
		}
		for _, v := range vals {
			if !typeOK(typ, v) {
				t.Errorf("%s = %#v does not fit the template's %s", name, v, typ)
			}
		}
	}
	for name := range mapped {
		if _, ok := leaves[name]; !ok {
			t.Errorf("the index template maps %s, which the ECS view never writes", name)
		}
	}
}

// TestECSReaders: plan and inventory read the ECS view as they read the
// record: the same plan, the same inventory bytes.
func TestECSReaders(t *testing.T) {
	capture := filepath.Join(repoRoot, "testdata", "handshakes.pcap")
	dir := t.TempDir()
	_, jsonl, _ := run(t, "analyze", "-format", "jsonl", capture)
	_, ecsl, _ := run(t, "analyze", "-format", "ecs-jsonl", capture)
	rec, ecsf := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "e.jsonl")
	os.WriteFile(rec, []byte(jsonl), 0o644)
	os.WriteFile(ecsf, []byte(ecsl), 0o644)
	for _, args := range [][]string{{"plan", "-format", "json"}, {"inventory", "-format", "cyclonedx"}} {
		c1, a, e1 := run(t, append(slices.Clone(args), rec)...)
		c2, b, e2 := run(t, append(slices.Clone(args), ecsf)...)
		if c1 != exitOK || c2 != exitOK || a != b {
			t.Errorf("%v: the records (exit %d) and their ECS view (exit %d) give different output:\n%s%s\n---\n%s%s", args, c1, c2, a, e1, b, e2)
		}
	}
}
