package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// compileSchema compiles docs/schema/NAME with formats asserted.
func compileSchema(t *testing.T, name string) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "schema", name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(name, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s, doc.(map[string]any)
}

// validate checks one JSON text against s.
func validate(t *testing.T, s *jsonschema.Schema, what, text string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s does not validate: %v\n%s", what, err, text)
	}
}

// jsonFields are the JSON names of t's fields (tag names; "-" left out).
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// props are the property names of a schema object (at path in doc).
func props(t *testing.T, doc map[string]any, path ...string) []string {
	t.Helper()
	var v any = doc
	for _, p := range path {
		v = v.(map[string]any)[p]
	}
	var out []string
	for k := range v.(map[string]any)["properties"].(map[string]any) {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSchemaFields: each schema lists exactly the fields the Go types
// write (every one, and nothing else), object by object; with
// additionalProperties false everywhere, a field added to the encoder and
// not to the schema fails TestSchemaValidates too.
func TestSchemaFields(t *testing.T) {
	_, rec := compileSchema(t, "record.schema.json")
	_, roll := compileSchema(t, "rollup.schema.json")
	for _, tc := range []struct {
		name string
		doc  map[string]any
		path []string
		typ  reflect.Type
	}{
		{"record", rec, nil, reflect.TypeFor[record.Handshake]()},
		{"record key_shares", rec, []string{"properties", "key_shares", "items"}, reflect.TypeFor[record.KeyShare]()},
		{"record log", rec, []string{"properties", "log"}, reflect.TypeFor[record.Log]()},
		{"record generation", rec, []string{"properties", "generation"}, reflect.TypeFor[record.Generation]()},
		{"record pod", rec, []string{"properties", "pod"}, reflect.TypeFor[record.Pod]()},
		{"rollup", roll, nil, reflect.TypeFor[report.RollupRow]()},
		{"rollup groups", roll, []string{"properties", "groups", "additionalProperties"}, reflect.TypeFor[report.RollupGroup]()},
		{"rollup percentiles", roll, []string{"$defs", "percentiles"}, reflect.TypeFor[report.Percentiles]()},
		{"rollup offer class", roll, []string{"$defs", "offer_class"}, reflect.TypeFor[report.OfferClass]()},
	} {
		if got, want := props(t, tc.doc, tc.path...), jsonFields(tc.typ); !slices.Equal(got, want) {
			t.Errorf("%s: schema lists %v, %s writes %v", tc.name, got, tc.typ, want)
		}
	}
}

// TestSchemaValidates: the encoders' output validates: exporter.AppendJSON
// (the JSONL and Kafka encoder) of every record analyze makes of the test
// capture with its access logs joined, and of a live agent's fields (node,
// id, generation) on one of them; and the rollup rows report.Rollup (the
// agent's rollup writer) makes of the same records.
func TestSchemaValidates(t *testing.T) {
	recSchema, _ := compileSchema(t, "record.schema.json")
	rollSchema, _ := compileSchema(t, "rollup.schema.json")
	g := func(name string) string { return filepath.Join("testdata", "golden", name) }
	edge := `$remote_addr $remote_port $msec "$request" $status "$http_user_agent" $ssl_curve $pid`
	code, out, stderr := run(t, "analyze", "-format", "jsonl", "-nginx-log", g("access.log"), "-nginx-log-format", edge,
		"-caddy-log", g("caddy.log"), "-nginx-error-log", g("error.log"), filepath.Join("..", "..", "testdata", "handshakes.pcap"))
	if code != exitOK {
		t.Fatalf("analyze exits %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ru := report.NewRollup(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), 1024)
	joined := 0
	for i, l := range lines {
		var h record.Handshake
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatal(err)
		}
		if h.Log != nil {
			joined++
		}
		if i == 0 {
			h.Node, h.ID = "edge-1", "9f3c2a1b0d4e5f60-000000000000002a"
			h.Generation = &record.Generation{ID: "g1", MasterPID: 10, WorkerPID: 11, Exe: "/usr/sbin/nginx",
				ExeSHA256: strings.Repeat("ab", 32), OpenSSL: "OpenSSL 3.0.17"}
			h.Pod = &record.Pod{Namespace: "web", Name: "web-0", UID: "0f4c8a52-3c1e-4a8e-9d52-1b2c3d4e5f60", Container: "nginx"}
		}
		validate(t, recSchema, "record "+h.ClientText(), string(exporter.AppendJSON(nil, &h)))
		ru.Write(&h)
	}
	rows := ru.Flush(time.Date(2026, 1, 1, 12, 1, 0, 0, time.UTC))
	classes := 0
	for _, row := range rows {
		b, _ := json.Marshal(row)
		validate(t, rollSchema, "rollup row "+row.Server, string(b))
		classes += len(row.OfferClasses)
	}
	if joined == 0 || len(rows) == 0 || classes == 0 {
		t.Errorf("%d records (%d joined), %d rollup rows, %d classes: the test covers too little", len(lines), joined, len(rows), classes)
	}
	t.Logf("%d records (%d with a log line) and %d rollup rows (%d offer classes) validate", len(lines), joined, len(rows), classes)

	// A field the schema does not know fails, as does a wrong type.
	validateFails := func(s *jsonschema.Schema, what, text string) {
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if s.Validate(v) == nil {
			t.Errorf("%s validates", what)
		}
	}
	validateFails(recSchema, "a record with an unknown field", `{"ts":"2026-01-01T12:00:00.000000000Z","transport":"tcp","client":"a:1","server":"b:2","pq_offered":false,"pq":false,"hrr":false,"outcome":"ok","new_field":1}`)
	validateFails(recSchema, "a record without outcome", `{"ts":"2026-01-01T12:00:00.000000000Z","transport":"tcp","client":"a:1","server":"b:2","pq_offered":false,"pq":false,"hrr":false}`)
	validateFails(rollSchema, "a rollup row with a string count", `{"start":"2026-01-01T12:00:00Z","end":"2026-01-01T12:01:00Z","server":"b:2","handshakes":"1","completed":1,"pq":0,"pq_share":0,"pq_offered":0,"hrr":0}`)
}
