package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

// TestRunKafkaECS: `pqwatch run -kafka-format ecs` puts each record's ECS
// view on the topic, byte for byte the line `-format ecs-jsonl` writes for
// it, with the header format=ecs, and `pqwatch inventory` reads the topic
// back as ECS.
func TestRunKafkaECS(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")

	var stderr testenv.Buffer
	out := filepath.Join(t.TempDir(), "records.ecs.jsonl")
	stop := runAgent(t, &stderr, "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-format", "ecs-jsonl", "-o", out, "-kafka-brokers", brokers, "-kafka-format", "ecs", "-node", "edge-ecs", "-log-level", "warn")
	time.Sleep(500 * time.Millisecond)
	const n = 8
	ok := 0
	for range n {
		if handshake(t, addr, nil) != "" {
			ok++
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if code := stop(); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr.String())
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.ListenAddrs(), Topic: exporter.DefaultKafkaTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var values []string
	for len(values) < ok {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			break
		}
		format := ""
		for _, h := range m.Headers {
			if h.Key == "format" {
				format = string(h.Value)
			}
		}
		if format != "ecs" || !exporter.IsECS(m.Value) {
			t.Errorf("offset %d: header format %q, value %.120s: want ECS", m.Offset, format, m.Value)
		}
		values = append(values, string(m.Value))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	slices.Sort(values)
	slices.Sort(lines)
	if ok != n || len(values) != n || !slices.Equal(values, lines) {
		t.Errorf("clients completed %d of %d; Kafka has %d ECS values, the ecs-jsonl file %d lines; equal: %v\n%s", ok, n, len(values), len(lines), slices.Equal(values, lines), stderr.String())
	}
	if len(values) > 0 && !strings.Contains(values[0], `"edge-ecs"`) {
		t.Errorf("ECS value lacks the node: %s", values[0])
	}

	// inventory reads the topic back.
	code, stdout, errOut := run(t, "inventory", "-kafka-brokers", brokers, "-kafka-idle-timeout", "5s")
	if code != 0 || !strings.Contains(stdout, "inventory: "+strconv.Itoa(n)+" handshakes, 1 endpoints") || !strings.Contains(stdout, "edge-ecs") {
		t.Errorf("inventory from the ECS topic: exit %d\n%s\n%s", code, stdout, errOut)
	}
}
