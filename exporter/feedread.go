package exporter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// ErrNoTopic is wrapped by ReadFeed when the topic does not exist.
var ErrNoTopic = errors.New("exporter: kafka topic does not exist")

// FeedReadConfig says what ReadFeed reads.
type FeedReadConfig struct {
	Brokers []string // host:port, required
	Topic   string   // required
	// Since: read from the first message whose timestamp is at or after
	// it (Kafka's ListOffsets by time); zero: from the earliest offset.
	Since time.Time
	TLS   *tls.Config // nil: plaintext
	SASL  *SASLConfig // nil: no authentication
	// IdleTimeout: a partition that yields no message for this long while
	// short of its end offset makes ReadFeed stop with an error (default
	// 10s): the read is bounded even when the brokers stall.
	IdleTimeout time.Duration
	ClientID    string // default "pqwatch-plan"
}

// FeedPartition is one partition's part of a read: the offsets [Start,
// End) it covers, End being the partition's end offset when the read began,
// and how many messages were read (fewer than End-Start where compaction
// or transaction markers left gaps).
type FeedPartition struct {
	Partition int   `json:"partition"`
	Start     int64 `json:"start_offset"`
	End       int64 `json:"end_offset"`
	Read      int64 `json:"messages_read"`
}

// FeedStats is what ReadFeed covered.
type FeedStats struct {
	Topic      string          `json:"topic"`
	Since      time.Time       `json:"since,omitzero"`
	Partitions []FeedPartition `json:"partitions"`
	Messages   int64           `json:"messages_read"`
}

// ReadFeed reads cfg.Topic from cfg.Since to the end offsets of the moment
// it starts, calling fn for every message in partition order. It joins no
// consumer group and commits nothing, so the topic's other consumers are
// not disturbed: per partition, the offset at Since comes from ListOffsets
// and a kafka-go Reader bound to that partition reads up to the end offset.
// Messages produced after the start are not read. An error from fn stops
// the read and is returned.
func ReadFeed(ctx context.Context, cfg FeedReadConfig, fn func(kafka.Message) error) (FeedStats, error) {
	st := FeedStats{Topic: cfg.Topic, Since: cfg.Since}
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return st, fmt.Errorf("%w: ReadFeed needs brokers and a topic", ErrConfig)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "pqwatch-plan"
	}
	mech, err := cfg.SASL.mechanism()
	if err != nil {
		return st, err
	}
	dialer := &kafka.Dialer{ClientID: cfg.ClientID, Timeout: 5 * time.Second, DualStack: true, TLS: cfg.TLS, SASLMechanism: mech}
	if err := checkLogin(ctx, dialer, cfg); err != nil {
		return st, err
	}
	tr := &kafka.Transport{ClientID: cfg.ClientID, TLS: cfg.TLS, SASL: mech, DialTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: tr, Timeout: 30 * time.Second}

	// Metadata without auto-creation: reading never creates a topic.
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Topic}})
	if err != nil {
		return st, fmt.Errorf("exporter: kafka metadata: %w", err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != cfg.Topic {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				return st, fmt.Errorf("%w: %q", ErrNoTopic, cfg.Topic)
			}
			return st, fmt.Errorf("exporter: kafka topic %q: %w", cfg.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	if len(parts) == 0 {
		return st, fmt.Errorf("%w: %q", ErrNoTopic, cfg.Topic)
	}
	slices.Sort(parts)

	// Two requests: a broker refuses two offsets of one partition in one.
	startReq := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	endReq := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range parts {
		start := kafka.FirstOffsetOf(p)
		if !cfg.Since.IsZero() {
			start = kafka.TimeOffsetOf(p, cfg.Since)
		}
		startReq.Topics[cfg.Topic] = append(startReq.Topics[cfg.Topic], start)
		endReq.Topics[cfg.Topic] = append(endReq.Topics[cfg.Topic], kafka.LastOffsetOf(p))
	}
	starts, err := listOffsets(ctx, cl, cfg.Topic, startReq)
	if err != nil {
		return st, err
	}
	ends, err := listOffsets(ctx, cl, cfg.Topic, endReq)
	if err != nil {
		return st, err
	}
	for _, p := range parts {
		s, ok1 := starts[p]
		e, ok2 := ends[p]
		if !ok1 || !ok2 {
			return st, fmt.Errorf("exporter: kafka list offsets: no answer for %s/%d", cfg.Topic, p)
		}
		fp := FeedPartition{Partition: p, Start: s.FirstOffset, End: e.LastOffset}
		if !cfg.Since.IsZero() {
			// The answer is the offset of the first message at or after
			// Since, -1 when there is none: nothing to read.
			fp.Start = fp.End
			for off := range s.Offsets {
				if off >= 0 && off < fp.End {
					fp.Start = off
				}
			}
		}
		st.Partitions = append(st.Partitions, fp)
	}

	for i := range st.Partitions {
		fp := &st.Partitions[i]
		if fp.Start >= fp.End {
			continue
		}
		err := readPartition(ctx, cfg, dialer, fp, fn)
		st.Messages += fp.Read
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// readPartition reads fp's offsets [Start, End) with a Reader bound to the
// partition (no group: SetOffset, nothing committed).
func readPartition(ctx context.Context, cfg FeedReadConfig, dialer *kafka.Dialer, fp *FeedPartition, fn func(kafka.Message) error) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, Partition: fp.Partition, Dialer: dialer,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(fp.Start); err != nil {
		return fmt.Errorf("exporter: kafka %s/%d: set offset %d: %w", cfg.Topic, fp.Partition, fp.Start, err)
	}
	next := fp.Start
	for next < fp.End {
		rctx, cancel := context.WithTimeout(ctx, cfg.IdleTimeout)
		m, err := r.ReadMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("exporter: kafka %s/%d: stopped at offset %d of [%d, %d) (%d read): %w", cfg.Topic, fp.Partition, next, fp.Start, fp.End, fp.Read, err)
		}
		next = m.Offset + 1
		if m.Offset >= fp.End {
			break // produced after the start
		}
		fp.Read++
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// listOffsets sends req and returns its answers by partition.
func listOffsets(ctx context.Context, cl *kafka.Client, topic string, req *kafka.ListOffsetsRequest) (map[int]kafka.PartitionOffsets, error) {
	offs, err := cl.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("exporter: kafka list offsets: %w", err)
	}
	out := map[int]kafka.PartitionOffsets{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("exporter: kafka list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po
	}
	return out, nil
}

// checkLogin connects to the first broker that answers, TLS and SASL
// included, so that a refused login is reported as one (a KafkaError with
// the fix), not as the connection a client library later finds closed.
func checkLogin(ctx context.Context, dialer *kafka.Dialer, cfg FeedReadConfig) error {
	var first error
	for _, b := range cfg.Brokers {
		conn, err := dialer.DialContext(ctx, "tcp", b)
		if err == nil {
			conn.Close()
			return nil
		}
		if first == nil {
			first = err
		}
	}
	e := &KafkaError{Reason: kafkaReason(first), Topic: cfg.Topic, Brokers: strings.Join(cfg.Brokers, ","), Err: first}
	switch e.Reason {
	case KafkaErrAuthentication:
		e.Fix = "check the SASL mechanism (-kafka-sasl-mechanism), the username (-kafka-sasl-username) and the password (-kafka-sasl-password-file or $PQWATCH_KAFKA_SASL_PASSWORD)"
	case KafkaErrTLS:
		e.Fix = "check that the brokers speak TLS on this port, the CA that signed their certificates (-kafka-tls-ca-file), the name they are verified against (-kafka-tls-server-name), and the client certificate if they require one (-kafka-tls-cert-file, -kafka-tls-key-file)"
	case KafkaErrNetwork:
		if cfg.SASL != nil {
			e.Fix = "check -kafka-brokers; brokers that close the connection during a SASL login also refuse the credentials this way (-kafka-sasl-mechanism, -kafka-sasl-username, the password)"
		} else {
			e.Fix = "check -kafka-brokers and that the brokers are up (and whether they need -kafka-tls)"
		}
	}
	return e
}
