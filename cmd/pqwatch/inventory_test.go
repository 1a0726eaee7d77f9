package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// cycloneDXSchema compiles the CycloneDX 1.7 JSON schema and the schemas
// it references (testdata/cyclonedx, from @cyclonedx/cyclonedx-library),
// formats asserted.
func cycloneDXSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, name := range []string{"bom-1.7.SNAPSHOT.schema.json", "cryptography-defs.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json", "spdx.SNAPSHOT.schema.json"} {
		f, err := os.Open(filepath.Join("testdata", "cyclonedx", name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource("http://cyclonedx.org/schema/"+name, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	s, err := c.Compile("http://cyclonedx.org/schema/bom-1.7.SNAPSHOT.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// inventoryOf runs pqwatch inventory -format cyclonedx on args, checks it
// against the 1.7 schema and returns the document.
func inventoryOf(t *testing.T, schema *jsonschema.Schema, args ...string) (string, report.BOM) {
	t.Helper()
	code, stdout, stderr := run(t, append([]string{"inventory", "-format", "cyclonedx"}, args...)...)
	if code != exitOK {
		t.Fatalf("pqwatch inventory %v exits %d:\n%s", args, code, stderr)
	}
	validate(t, schema, "the inventory of "+strings.Join(args, " "), stdout)
	var bom report.BOM
	if err := json.Unmarshal([]byte(stdout), &bom); err != nil {
		t.Fatal(err)
	}
	return stdout, bom
}

// propInt is the value of the first property name of ps as an int (-1
// when absent).
func propInt(ps []report.Property, name string) int {
	for _, p := range ps {
		if p.Name == name {
			n, err := strconv.Atoi(p.Value)
			if err != nil {
				return -2
			}
			return n
		}
	}
	return -1
}

// endpointFigures are what an endpoint's records add up to, counted here
// from the records themselves.
type endpointFigures struct{ handshakes, completed, hybrid, offeredClassical int }

// checkCounts: every count of the BOM is the records' own: per endpoint
// (node, transport, server) the handshakes, completed, hybrid and
// offered-hybrid-got-classical records, and the totals.
func checkCounts(t *testing.T, what string, bom report.BOM, jsonl string) {
	t.Helper()
	want := map[string]*endpointFigures{}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		var h record.Handshake
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%s: %v: %s", what, err, l)
		}
		n++
		node := h.Node
		if node == "" {
			node = report.InventoryNoNode
		}
		ref := "pqwatch:endpoint:" + node + "/" + h.Transport + "/" + h.Server
		f := want[ref]
		if f == nil {
			f = &endpointFigures{}
			want[ref] = f
		}
		f.handshakes++
		if h.Outcome == record.OutcomeOK {
			f.completed++
			if h.PQ {
				f.hybrid++
			} else if h.PQOffered {
				f.offeredClassical++
			}
		}
	}
	if got := propInt(bom.Metadata.Properties, "pqwatch:handshakes"); got != n {
		t.Errorf("%s: pqwatch:handshakes %d, the records %d", what, got, n)
	}
	if len(bom.Components) != len(want) {
		t.Errorf("%s: %d components, the records have %d endpoints", what, len(bom.Components), len(want))
	}
	sum := 0
	for _, c := range bom.Components {
		f := want[c.BOMRef]
		if f == nil {
			t.Errorf("%s: component %s is no endpoint of the records", what, c.BOMRef)
			continue
		}
		got := endpointFigures{propInt(c.Properties, "pqwatch:handshakes"), propInt(c.Properties, "pqwatch:completed"),
			propInt(c.Properties, "pqwatch:hybrid"), propInt(c.Properties, "pqwatch:pq_offered_negotiated_classical")}
		if got != *f {
			t.Errorf("%s: %s has %+v, its records %+v", what, c.BOMRef, got, *f)
		}
		sum += got.handshakes
		if c.CryptoProperties == nil || c.CryptoProperties.AssetType != "protocol" || c.CryptoProperties.ProtocolProperties.Type != "tls" {
			t.Errorf("%s: %s is not a TLS protocol asset: %+v", what, c.BOMRef, c.CryptoProperties)
		}
		// The versions' handshakes add up to the completed ones that have a
		// version.
		versions := 0
		for _, p := range c.Properties {
			if v, ok := strings.CutPrefix(p.Name, "pqwatch:version:"); ok && v != "unknown" {
				n, _ := strconv.Atoi(p.Value)
				versions += n
			}
		}
		if versions > f.completed {
			t.Errorf("%s: %s: versions count %d handshakes, %d completed", what, c.BOMRef, versions, f.completed)
		}
	}
	if sum != n {
		t.Errorf("%s: the components' handshakes add up to %d, the records are %d", what, sum, n)
	}
}

// TestInventoryCapture: the inventory of testdata/handshakes.pcap is valid
// CycloneDX 1.7, counts what the capture's records say, is the same bytes
// on a second run and from the records (JSONL, plain and gzip, and stdin)
// as from the capture, and names the cipher suites with their codepoints
// and the groups negotiated with them.
func TestInventoryCapture(t *testing.T) {
	schema := cycloneDXSchema(t)
	pcap := filepath.Join(repoRoot, "testdata", "handshakes.pcap")
	doc, bom := inventoryOf(t, schema, pcap)
	_, jsonl, _ := run(t, "analyze", "-format", "jsonl", pcap)
	checkCounts(t, "testdata/handshakes.pcap", bom, jsonl)

	again, _ := inventoryOf(t, schema, pcap)
	if again != doc {
		t.Error("two inventories of the same capture differ")
	}
	dir := t.TempDir()
	recs := filepath.Join(dir, "records.jsonl")
	if err := os.WriteFile(recs, []byte(jsonl), 0o644); err != nil {
		t.Fatal(err)
	}
	if fromRecords, _ := inventoryOf(t, schema, recs); fromRecords != doc {
		t.Errorf("the inventory of the capture's records differs from the capture's:\n%s", fromRecords)
	}
	if !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || bom.SerialNumber[23] != '5' {
		t.Errorf("serial number %q is not a UUIDv5", bom.SerialNumber)
	}
	var last string
	for _, l := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		var h record.Handshake
		json.Unmarshal([]byte(l), &h)
		if s := h.TS.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"); s > last {
			last = s
		}
	}
	if bom.Metadata.Timestamp != last {
		t.Errorf("timestamp %s, the last record's ts %s", bom.Metadata.Timestamp, last)
	}
	c := bom.Components[0]
	pp := c.CryptoProperties.ProtocolProperties
	if pp.Version != "1.3" || len(pp.CipherSuites) == 0 || pp.CipherSuites[0].Name != "TLS_AES_128_GCM_SHA256" ||
		!reflect.DeepEqual(pp.CipherSuites[0].Identifiers, []string{"0x13", "0x01"}) || !strings.Contains(strings.Join(pp.CipherSuites[0].TLSGroups, ","), "X25519MLKEM768") {
		t.Errorf("protocolProperties: %+v", pp)
	}
	if len(c.Components) != 1 || c.Components[0].CryptoProperties.ProtocolProperties.Version != "1.2" {
		t.Errorf("the TLS 1.2 handshakes are not a nested 1.2 component: %+v", c.Components)
	}

	// The text summary says the same endpoint negotiates hybrid.
	code, text, stderr := run(t, "inventory", pcap)
	if code != exitOK || !strings.Contains(text, "negotiating hybrid: 1; still classical: 0") {
		t.Errorf("inventory text exits %d:\n%s%s", code, text, stderr)
	}
}

// TestInventoryRecords: records from many nodes with every field set (a
// generation, a frontend), duplicates by
// id, and a cap on endpoints: valid, the duplicates dropped, the frontend
// the endpoint's key, the generation's binary and library named, the
// endpoints past the cap counted.
func TestInventoryRecords(t *testing.T) {
	schema := cycloneDXSchema(t)
	var full record.Handshake
	fill(reflect.ValueOf(&full).Elem())
	full.Outcome, full.Version, full.Cipher, full.Group, full.PQ, full.PQOffered = "ok", "TLS1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "x25519", false, true
	full.OfferedGroups = []string{"X25519MLKEM768", "x25519"}
	full.Server, full.Transport = "10.1.0.1:8443", "tcp"
	var buf bytes.Buffer
	for i, node := range []string{"node-a", "node-b", "node-a"} {
		h := full
		h.Node, h.ID, h.Frontend = node, "00000000000000aa-00000000000000"+strconv.Itoa(10+i), ""
		if i == 0 { // a record merged across the node's NAT
			h.Frontend = "203.0.113.10:443"
		}
		line := exporter.AppendJSON(nil, &h)
		buf.Write(line)
		buf.WriteByte('\n')
		if i == 2 { // delivered twice
			buf.Write(line)
			buf.WriteByte('\n')
		}
	}
	path := filepath.Join(t.TempDir(), "r.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, bom := inventoryOf(t, schema, path)
	if got := propInt(bom.Metadata.Properties, "pqwatch:duplicates_dropped"); got != 1 {
		t.Errorf("duplicates dropped %d, want 1", got)
	}
	refs := map[string]report.Component{}
	for _, c := range bom.Components {
		refs[c.BOMRef] = c
	}
	fe, ok := refs["pqwatch:endpoint:node-a/tcp/203.0.113.10:443"]
	if !ok || len(refs) != 3 {
		t.Fatalf("endpoints %v: want node-a's frontend, node-a's server and node-b's server", refs)
	}
	var names []string
	for _, p := range fe.Properties {
		names = append(names, p.Name+"="+p.Value)
	}
	all := strings.Join(names, "\n")
	for _, want := range []string{"pqwatch:frontend=203.0.113.10:443", "pqwatch:server=10.1.0.1:8443", "pqwatch:server_binary=x x", "pqwatch:tls_library=x",
		"pqwatch:pq_offered_negotiated_classical=1", "pqwatch:offered_group:X25519MLKEM768=1", "pqwatch:negotiated_group:x25519=1"} {
		if !strings.Contains(all, want) {
			t.Errorf("the frontend's component lacks %s:\n%s", want, all)
		}
	}
	if v := fe.CryptoProperties.ProtocolProperties; v.Version != "1.2" || v.CipherSuites[0].Identifiers[0] != "0xC0" {
		t.Errorf("protocolProperties %+v", v)
	}

	// The cap: one endpoint kept, the other records counted.
	code, stdout, stderr := run(t, "inventory", "-format", "cyclonedx", "-max-endpoints", "1", path)
	if code != exitOK || !strings.Contains(stderr, "2 handshakes of endpoints past -max-endpoints 1") {
		t.Errorf("-max-endpoints 1 exits %d: %s", code, stderr)
	}
	validate(t, schema, "the capped inventory", stdout)
}

// TestInventoryUsage: bad flags and inputs.
func TestInventoryUsage(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		code int
	}{
		"no input":   {[]string{"inventory"}, exitUsage},
		"bad format": {[]string{"inventory", "-format", "xml", "x.jsonl"}, exitUsage},
		"bad cap":    {[]string{"inventory", "-max-endpoints", "0", "x.jsonl"}, exitUsage},
		"missing":    {[]string{"inventory", filepath.Join(t.TempDir(), "none.jsonl")}, exitFailure},
	} {
		if code, _, stderr := run(t, c.args...); code != c.code {
			t.Errorf("%s: exit %d, want %d: %s", name, code, c.code, stderr)
		}
	}
	empty := filepath.Join(t.TempDir(), "e.jsonl")
	os.WriteFile(empty, []byte("not a record\n"), 0o644)
	if code, _, stderr := run(t, "inventory", empty); code != exitFailure || !strings.Contains(stderr, "no handshake records") {
		t.Errorf("no records: exit %d: %s", code, stderr)
	}
}

// TestInventoryCorpus: the inventories of public corpus captures (hybrid
// over TCP and QUIC, TLS 1.2 and 1.3), when ../shared/corpus is next to
// the repository: valid CycloneDX 1.7, counts equal the records'.
func TestInventoryCorpus(t *testing.T) {
	root := filepath.Join(repoRoot, "..", "shared", "corpus")
	if _, err := os.Stat(filepath.Join(root, "INDEX.md")); err != nil {
		t.Skipf("public capture corpus not found at %s: %v", root, err)
	}
	schema := cycloneDXSchema(t)
	for _, rel := range []string{
		"jiep_pqc-demos/demo-oqs-wireshark/handshake_tls13_x25519mlkem768.pcapng",
		"zeek_zeek/testing/btest/Traces/tls/chrome-1250-tls-x25519-kyber.pcap",
		"OISF_suricata-verify/tests/quic-frag/input.pcap",
		"syncsynchalt_illustrated-tls12/captures/capture.pcap",
		"FoxIO-LLC_ja4/pcap/tls-handshake.pcapng",
		"arkime_arkime/tests/pcap/arkime_synthetic.pcap",
	} {
		path := filepath.Join(root, rel)
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: not in this corpus: %v", rel, err)
			continue
		}
		_, bom := inventoryOf(t, schema, path)
		_, jsonl, _ := run(t, "analyze", "-format", "jsonl", path)
		checkCounts(t, rel, bom, jsonl)
		t.Logf("%s: %d endpoints, %d handshakes", rel, len(bom.Components), propInt(bom.Metadata.Properties, "pqwatch:handshakes"))
	}
}

// TestInventoryLive: the records of a live run (pqwatch run on loopback,
// real Go clients of three curve preferences, node and id filled) make an
// inventory valid against CycloneDX 1.7 whose counts equal the records'.
func TestInventoryLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	schema := cycloneDXSchema(t)
	addr, port := goTLSServer(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	var stderr testenv.Buffer
	cmd := pqwatchProcess(t, &stderr, "run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-format", "jsonl", "-o", out,
		"-metrics-addr", "", "-no-process-tracking", "-line-buffered", "-node", "edge-test")
	for end := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "capture starting") && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	const n = 9
	for i := range n {
		curves := [][]tls.CurveID{nil, {tls.X25519}, {tls.CurveP256}}[i%3]
		if handshake(t, addr, curves) == "" {
			t.Fatalf("handshake %d failed", i)
		}
	}
	for end := time.Now().Add(10 * time.Second); lines(out) < n && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	b, err := os.ReadFile(out)
	if err != nil || lines(out) != n {
		t.Fatalf("%d records of %d handshakes (%v)\n%s", lines(out), n, err, stderr.String())
	}
	_, bom := inventoryOf(t, schema, out)
	checkCounts(t, "a live run's records", bom, string(b))
	if !strings.Contains(string(b), `"node":"edge-test"`) {
		t.Errorf("the live records lack their node")
	}
}
