package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// TestPlanFromKafkaFeed: `pqwatch run` captures a client mix on loopback
// (hybrid, x25519 only, P-256 only, P-256 first with hybrid listed: an
// HRR, hybrid only) and writes both the JSONL stream and its Kafka sink
// (records and rollups) to a kfake broker of 3 partitions a topic. Then:
// `plan -kafka-brokers -kafka-topic RECORDS -since 1h` prints exactly the
// JSON of `plan` over the JSONL file, under two policies; `plan` over the
// rollup topic gives the same figures but those that need records or the
// window's length (comparePlans); the records and rollup rows read back
// validate against docs/schema; an empty window and a missing topic are
// errors (exit 1) that say so.
func TestPlanFromKafkaFeed(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "pq.records", "pq.rollups", "pq.empty"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	out := filepath.Join(t.TempDir(), "records.jsonl")
	var stderr testenv.Buffer
	stop := runAgent(t, &stderr, "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-format", "jsonl", "-o", out, "-kafka-brokers", brokers, "-kafka-topic", "pq.records", "-kafka-rollup-topic", "pq.rollups",
		"-node", "edge-a", "-log-level", "warn")
	time.Sleep(500 * time.Millisecond)
	mix := [][]tls.CurveID{nil, {tls.X25519}, {tls.CurveP256}, {tls.CurveP256, tls.X25519MLKEM768}, {tls.X25519MLKEM768}}
	const rounds = 4
	ok := 0
	for range rounds {
		for _, curves := range mix {
			if handshake(t, addr, curves) != "" {
				ok++
			}
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if code := stop(); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr.String())
	}
	if ok != rounds*len(mix) {
		t.Fatalf("%d of %d handshakes completed", ok, rounds*len(mix))
	}

	for _, policy := range []string{"X25519MLKEM768,x25519,secp256r1", "x25519,secp256r1"} {
		code, fileOut, errOut := run(t, "plan", "-format", "json", "-forecast-groups", policy, out)
		if code != exitOK {
			t.Fatalf("plan over the JSONL: exit %d: %s", code, errOut)
		}
		code, kafkaOut, kafkaErr := run(t, "plan", "-format", "json", "-forecast-groups", policy, "-kafka-brokers", brokers, "-kafka-topic", "pq.records", "-since", "1h")
		if code != exitOK {
			t.Fatalf("plan -kafka-brokers: exit %d: %s", code, kafkaErr)
		}
		if fileOut != kafkaOut {
			t.Errorf("%s: plan from Kafka differs from plan from the JSONL:\n--- JSONL\n%s\n--- Kafka\n%s", policy, fileOut, kafkaOut)
		}
		if !strings.Contains(kafkaErr, `kafka topic "pq.records" since`) || !strings.Contains(kafkaErr, "20 messages") {
			t.Errorf("stderr does not say what was read: %s", kafkaErr)
		}
		var rec, roll map[string]any
		json.Unmarshal([]byte(fileOut), &rec)
		code, rollOut, rollErr := run(t, "plan", "-format", "json", "-forecast-groups", policy, "-kafka-brokers", brokers, "-kafka-topic", "pq.rollups", "-since", "1h")
		if code != exitOK {
			t.Fatalf("plan over the rollup topic: exit %d: %s", code, rollErr)
		}
		json.Unmarshal([]byte(rollOut), &roll)
		n := comparePlans(t, policy, rec, roll, "")
		f, rf := rec["forecast"].(map[string]any), roll["forecast"].(map[string]any)
		t.Logf("%s: Kafka plan = JSONL plan (%d bytes of JSON); rollup plan equal in %d figures: handshakes %v, forecast pq %v/%v hrr %v/%v classical %v/%v loses_pq %v/%v growth %v/%v bytes; rollup stderr: %s",
			policy, len(fileOut), n, roll["handshakes"], f["pq"], rf["pq"], f["hrr"], rf["hrr"], f["classical"], rf["classical"], f["loses_pq"], rf["loses_pq"],
			f["total_server_hello_growth_bytes"], rf["total_server_hello_growth_bytes"], strings.TrimSpace(rollErr))
		if roll["handshakes"] != float64(ok) || n < 100 {
			t.Errorf("rollup plan: %v handshakes, %d figures compared", roll["handshakes"], n)
		}
	}

	// What the agent wrote validates against the schemas.
	recSchema, _ := compileSchema(t, "record.schema.json")
	rollSchema, _ := compileSchema(t, "rollup.schema.json")
	data, _ := os.ReadFile(out)
	for l := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		validate(t, recSchema, "run's record", l)
	}
	recs := feedValues(t, c.ListenAddrs(), "pq.records")
	for _, v := range recs {
		validate(t, recSchema, "run's Kafka record", v)
	}
	if len(recs) != ok {
		t.Errorf("%d records on the topic, want %d", len(recs), ok)
	}
	rows := feedValues(t, c.ListenAddrs(), "pq.rollups")
	for _, v := range rows {
		validate(t, rollSchema, "run's rollup row", v)
	}
	if len(rows) == 0 {
		t.Error("no rollup rows on the rollup topic")
	}

	for _, tc := range []struct{ topic, want string }{
		{"pq.empty", `kafka topic "pq.empty": no messages since`},
		{"pq.missing", `kafka topic "pq.missing" does not exist`},
	} {
		code, _, errOut := run(t, "plan", "-kafka-brokers", brokers, "-kafka-topic", tc.topic)
		if code != exitFailure || !strings.Contains(errOut, tc.want) {
			t.Errorf("plan -kafka-topic %s: exit %d, stderr %q; want exit 1 and %q", tc.topic, code, errOut, tc.want)
		}
		t.Logf("plan -kafka-topic %s: exit %d: %s", tc.topic, code, strings.TrimSpace(errOut))
	}
	// A window that ends before the records: nothing in it.
	time.Sleep(1100 * time.Millisecond)
	if code, _, errOut := run(t, "plan", "-kafka-brokers", brokers, "-kafka-topic", "pq.records", "-since", "1s"); code != exitFailure || !strings.Contains(errOut, "no messages since") {
		t.Errorf("plan -since 1s after the records: exit %d, %q", code, errOut)
	}
}

// feedValues are the values of every message of topic.
func feedValues(t *testing.T, brokers []string, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	if _, err := exporter.ReadFeed(ctx, exporter.FeedReadConfig{Brokers: brokers, Topic: topic}, func(m kafka.Message) error {
		out = append(out, string(m.Value))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlanKafkaTLSSASL: plan's TLS and SASL flags are run's and reach the
// brokers: records written by the sink over mutual TLS and SCRAM-SHA-512
// are read back by `plan -kafka-brokers` with the same flags (the password
// from a file); a wrong password is exit 1 saying why.
func TestPlanKafkaTLSSASL(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	pw, bad := filepath.Join(dir, "password"), filepath.Join(dir, "wrong")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	os.WriteFile(bad, []byte("nope\n"), 0o600)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "pq.sec"), kfake.TLS(serverTLS),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "pqwatch", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	auth := []string{"-kafka-tls-ca-file", pki.caFile, "-kafka-tls-cert-file", pki.certFile, "-kafka-tls-key-file", pki.keyFile,
		"-kafka-tls-server-name", "kafka.test", "-kafka-sasl-mechanism", "scram-sha-512", "-kafka-sasl-username", "pqwatch"}
	rf, err := parseRunFlags(t, append([]string{"-kafka-brokers", brokers, "-kafka-topic", "pq.sec", "-kafka-sasl-password-file", pw}, auth...)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rf.kafka.config(envOf(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := exporter.NewKafka(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := captureJSONL(t)
	for _, l := range lines {
		var h record.Handshake
		json.Unmarshal([]byte(l), &h)
		h.Node = "edge-s"
		if err := k.Write(&h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pl := planJSON(t, append([]string{"-kafka-brokers", brokers, "-kafka-topic", "pq.sec", "-since", "0", "-kafka-sasl-password-file", pw}, auth...)...)
	if n := num(t, pl, "handshakes"); n != float64(len(lines)) {
		t.Errorf("plan over TLS and SCRAM read %v handshakes, want %d", n, len(lines))
	}
	code, _, errOut := run(t, append([]string{"plan", "-kafka-brokers", brokers, "-kafka-topic", "pq.sec", "-kafka-sasl-password-file", bad}, auth...)...)
	if code != exitFailure || !strings.Contains(strings.ToLower(errOut), "sasl") {
		t.Errorf("wrong password: exit %d, %s", code, errOut)
	}
	t.Logf("wrong password: exit %d: %s", code, strings.TrimSpace(errOut))
}
