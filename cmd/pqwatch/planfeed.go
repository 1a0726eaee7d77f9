package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// planKafkaFlags are plan's Kafka flags: the brokers and topic to read, the
// window, and run's TLS and SASL flags.
type planKafkaFlags struct {
	kf    kafkaFlags // brokers, topic and the TLS/SASL flags only
	since time.Duration
	idle  time.Duration
}

func (pk *planKafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&pk.kf.brokers, "kafka-brokers", "", "Kafka `host:port,...` to read records (or rollups) from, instead of or besides FILEs; read by partition without a consumer group, so no other consumer is disturbed")
	fs.StringVar(&pk.kf.topic, "kafka-topic", exporter.DefaultKafkaTopic, "Kafka `topic` to read: run's -kafka-topic (records) or -kafka-rollup-topic (rollups)")
	fs.DurationVar(&pk.since, "since", 24*time.Hour, "with -kafka-brokers, read the messages of this `window` before now (from the offset at its start to the end offsets when the read starts); 0: the whole topic")
	fs.DurationVar(&pk.idle, "kafka-idle-timeout", 10*time.Second, "with -kafka-brokers, give up on a partition that yields no message for this `duration` before its end offset (the plan is then incomplete: exit 1)")
	pk.kf.registerAuth(fs)
}

// enabled reports whether -kafka-brokers was given.
// inputs checks that cmd (plan, inventory) has something to read, files
// (what names them in the message) or the feed, and returns the feed's
// configuration; false after it said why on stderr (a usage error).
func (pk *planKafkaFlags) inputs(cmd, what string, fs *flag.FlagSet, stderr io.Writer) (exporter.FeedReadConfig, bool) {
	if fs.NArg() == 0 && !pk.enabled() {
		fmt.Fprintf(stderr, "pqwatch %s: no %s given (and no -kafka-brokers)\n", cmd, what)
		fs.Usage()
		return exporter.FeedReadConfig{}, false
	}
	if !pk.enabled() {
		return exporter.FeedReadConfig{}, true
	}
	feed, err := pk.config(time.Now(), os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "pqwatch %s: %v\n", cmd, err)
		return feed, false
	}
	return feed, true
}

func (pk *planKafkaFlags) enabled() bool { return strings.TrimSpace(pk.kf.brokers) != "" }

// config builds the read's configuration; getenv reads the environment
// (the SASL password).
func (pk *planKafkaFlags) config(now time.Time, getenv func(string) string) (exporter.FeedReadConfig, error) {
	cfg := exporter.FeedReadConfig{Brokers: pk.kf.brokerList(), Topic: pk.kf.topic, IdleTimeout: pk.idle}
	if pk.since < 0 {
		return cfg, fmt.Errorf("-since %v: must not be negative", pk.since)
	}
	if pk.since > 0 {
		cfg.Since = now.Add(-pk.since)
	}
	var err error
	if cfg.TLS, err = pk.kf.tlsConfig(); err != nil {
		return cfg, err
	}
	if cfg.SASL, err = pk.kf.saslConfig(getenv); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readPlanKafka adds every message of the feed to plan (records or rollup
// rows, as addPlanLine tells them apart) and says on stderr what it read.
func readPlanKafka(ctx context.Context, cfg exporter.FeedReadConfig, plan *report.Plan, kinds *planKinds, stderr io.Writer) error {
	defer func() { plan.Stream = 0 }()
	return readFeed(ctx, "plan", cfg, func(partition int, value []byte) {
		plan.Stream = partition + 1 // ids are checked per partition, each read in order
		kinds.add(plan, value)
	}, stderr)
}

// readFeed calls fn with the partition and value of every message of the
// feed and says on stderr what it read (plan's and inventory's reader; cmd names the
// command in the messages).
func readFeed(ctx context.Context, cmd string, cfg exporter.FeedReadConfig, fn func(partition int, value []byte), stderr io.Writer) error {
	st, err := exporter.ReadFeed(ctx, cfg, func(m kafka.Message) error {
		fn(m.Partition, m.Value)
		return nil
	})
	var parts []string
	for _, p := range st.Partitions {
		parts = append(parts, fmt.Sprintf("%d: offsets %d to %d, %d read", p.Partition, p.Start, p.End, p.Read))
	}
	since := "the earliest offset"
	if !cfg.Since.IsZero() {
		since = cfg.Since.UTC().Format(time.RFC3339)
	}
	switch {
	case errors.Is(err, exporter.ErrNoTopic):
		return fmt.Errorf("kafka topic %q does not exist on %s", cfg.Topic, strings.Join(cfg.Brokers, ","))
	case err != nil:
		return err
	case st.Messages == 0:
		return fmt.Errorf("kafka topic %q: no messages since %s (partitions %s); widen -since or check -kafka-topic", cfg.Topic, since, strings.Join(parts, "; "))
	}
	noun := "messages"
	if st.Messages == 1 {
		noun = "message"
	}
	fmt.Fprintf(stderr, "pqwatch %s: kafka topic %q since %s: %d %s (partitions %s)\n", cmd, cfg.Topic, since, st.Messages, noun, strings.Join(parts, "; "))
	return nil
}

// planKinds counts which kinds of input a plan was given: records and
// rollup rows must not be mixed (the same handshakes would count twice).
// Records are read by a report.PlanDecoder, and by encoding/json (the
// reference) when it declines a line or when reference is set (the
// benchmark's comparison).
type planKinds struct {
	records, rollups int
	reference        bool
	dec              *report.PlanDecoder
	h                record.Handshake
}

// add adds one JSON value to plan: a record (it has an outcome), else a
// rollup row (a server and a window), else a malformed line.
func (k *planKinds) add(plan *report.Plan, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if exporter.IsECS(line) { // -format ecs-jsonl, -kafka-format ecs
		if h, err := exporter.ParseECS(line); err == nil {
			k.records++
			h.FillIDs()
			plan.Add(h)
		} else {
			plan.Malformed++
		}
		return
	}
	if k.rollups > 0 && k.records == 0 && k.rollupRow(plan, line) {
		return // rollups so far: a row is read once, not tried as a record first
	}
	if !k.reference {
		if k.dec == nil {
			k.dec = report.NewPlanDecoder()
			k.dec.Client = plan.PolicyCheck != nil // its listed violations name the client
		}
		if k.dec.Decode(line, &k.h) {
			if k.h.Outcome != "" {
				k.records++
				if class, ok := k.dec.Class(); ok {
					plan.AddClass(&k.h, class)
				} else {
					plan.Add(&k.h)
				}
				return
			}
			k.addRollup(plan, line) // valid JSON, not a record
			return
		}
	}
	var h record.Handshake
	if err := json.Unmarshal(line, &h); err == nil && h.Outcome != "" {
		k.records++
		h.FillIDs()
		plan.Add(&h)
		return
	}
	k.addRollup(plan, line)
}

// addRollup adds line as a rollup row, else counts it malformed.
func (k *planKinds) addRollup(plan *report.Plan, line []byte) {
	if !k.rollupRow(plan, line) {
		plan.Malformed++
	}
}

// rollupRow adds line as a rollup row when it is one.
func (k *planKinds) rollupRow(plan *report.Plan, line []byte) bool {
	var row report.RollupRow
	if err := json.Unmarshal(line, &row); err == nil && row.Server != "" && !row.Start.IsZero() && !row.End.IsZero() {
		k.rollups++
		plan.AddRollup(&row)
		return true
	}
	return false
}

// mixed is the error when both kinds were read.
func (k *planKinds) mixed() error {
	if k.records > 0 && k.rollups > 0 {
		return fmt.Errorf("the input holds both handshake records (%d) and rollup rows (%d): they describe the same handshakes, so a plan reads one kind; give the record files or topic, or the rollup ones", k.records, k.rollups)
	}
	return nil
}
