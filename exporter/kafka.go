package exporter

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

// SchemaVersion is the value of the schema_version header on every message.
const SchemaVersion = "1"

// SchemaHeader is the header that carries SchemaVersion.
const SchemaHeader = "schema_version"

// FormatHeader names the encoding of an ECS record message: "ecs" (the
// record itself has no such header).
const FormatHeader = "format"

// DefaultKafkaTopic is the handshake topic of SPEC.md.
const DefaultKafkaTopic = "pqwatch.handshakes"

// KafkaKey chooses the message key, and so the partition and the unit of
// ordering.
type KafkaKey string

// Message keys.
const (
	KeyServer        KafkaKey = "server"         // server ip:port
	KeySNI           KafkaKey = "sni"            // server_name (empty when absent)
	KeyClientNetwork KafkaKey = "client_network" // client /24 (IPv4) or /64 (IPv6)
	KeyNone          KafkaKey = "none"           // no key: round-robin, no ordering
)

// Acks is the producer acknowledgement level.
type Acks string

// Acknowledgement levels.
const (
	AcksAll    Acks = "all"    // every in-sync replica (default)
	AcksLeader Acks = "leader" // the partition leader only
	AcksNone   Acks = "none"   // fire and forget: delivery is not confirmed
)

// SASLConfig selects SASL authentication.
type SASLConfig struct {
	Mechanism string // "plain", "scram-sha-256" or "scram-sha-512"
	Username  string
	Password  string
}

// mechanism is s as kafka-go's SASL mechanism; nil for a nil s.
func (s *SASLConfig) mechanism() (sasl.Mechanism, error) {
	if s == nil {
		return nil, nil
	}
	var (
		mech sasl.Mechanism
		err  error
	)
	switch s.Mechanism {
	case "plain":
		mech = plain.Mechanism{Username: s.Username, Password: s.Password}
	case "scram-sha-256":
		mech, err = scram.Mechanism(scram.SHA256, s.Username, s.Password)
	case "scram-sha-512":
		mech, err = scram.Mechanism(scram.SHA512, s.Username, s.Password)
	default:
		return nil, fmt.Errorf("%w: kafka sasl mechanism %q", ErrConfig, s.Mechanism)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: kafka sasl: %w", ErrConfig, err)
	}
	return mech, nil
}

// KafkaConfig configures the Kafka sink. Zero values take the defaults noted.
type KafkaConfig struct {
	Brokers  []string // host:port, required
	Topic    string   // default DefaultKafkaTopic
	Key      KafkaKey // default KeyServer
	Acks     Acks     // default AcksAll
	ClientID string   // default "pqwatch"

	BatchSize    int           // messages per produce batch, default 1000
	BatchBytes   int64         // bytes per produce batch, default 1 MiB
	BatchTimeout time.Duration // longest wait to fill a batch, default 50ms
	WriteTimeout time.Duration // per produce request, default 10s
	Compression  string        // "none", "gzip", "snappy", "lz4", "zstd"; default "snappy"

	TLS  *tls.Config // nil: plaintext
	SASL *SASLConfig // nil: no authentication

	// ECS writes each record's ECS view (AppendECS) instead of the record,
	// with a FormatHeader "ecs" header beside schema_version (rollups are
	// unchanged).
	ECS bool

	// DisableTopicCreation makes a missing topic an error (reason
	// unknown_topic). By default the sink asks the brokers to create it
	// (a metadata request that allows auto-creation, as librdkafka and
	// Beats producers send); the brokers' auto.create.topics.enable and
	// ACLs still decide, and the topic gets their default partition count
	// and replication factor.
	DisableTopicCreation bool
	// StartTimeout, when positive, makes NewKafka check the cluster first
	// (the topics exist or are created, the brokers accept the login) for
	// at most this long. An answer that no retry can fix is NewKafka's
	// error (a *KafkaError); an unreachable cluster is only logged and
	// delivery starts anyway. Zero: NewKafka does not contact the brokers,
	// the delivery goroutine checks first.
	StartTimeout time.Duration
	// RecheckInterval is how often the cluster is checked again after an
	// error that needs a change on the brokers (a missing topic, denied
	// access), default 30s: records stay queued meanwhile.
	RecheckInterval time.Duration

	// MemoryBytes caps the in-memory queue of undelivered messages, default
	// 64 MiB.
	MemoryBytes int64
	// SpoolDir, when set, enables the disk spool: messages that do not fit
	// in memory are appended to segment files there, up to SpoolBytes
	// (default 1 GiB) in segments of SpoolSegmentBytes (default 4 MiB),
	// and messages in memory that are not acknowledged within SpoolAfter
	// (default 500ms) are written there too, so that a killed process
	// loses only about the last second. Acknowledged messages are marked
	// in the spool; the rest is delivered after a restart.
	SpoolDir          string
	SpoolBytes        int64
	SpoolSegmentBytes int64
	SpoolAfter        time.Duration

	RetryBackoffMin time.Duration // default 100ms
	RetryBackoffMax time.Duration // default 5s
	// MetadataTTL is how often kafka-go refreshes cluster metadata, default
	// 5s. kafka-go caches a failed refresh until the next one (at a random
	// point within the TTL), so this bounds how long delivery stays stalled
	// after the cluster becomes reachable again.
	MetadataTTL time.Duration

	// RollupTopic, when set, enables per-window rollups per server and
	// group (RollupRow) on that topic, every RollupInterval (default 1m,
	// aligned to the wall clock), for at most RollupMaxServers servers
	// (default 1024).
	RollupTopic      string
	RollupInterval   time.Duration
	RollupMaxServers int

	Metrics *Metrics     // optional: pqwatch_kafka_messages_total (Collector has the sink's health)
	Logger  *slog.Logger // optional: default slog.Default()
}

// KafkaStats are the sink's cumulative message counts.
type KafkaStats struct {
	Enqueued  uint64 // accepted by Write (memory or spool), rollups included
	Delivered uint64 // acknowledged by the broker
	Failed    uint64 // delivery attempts that failed (messages were retried)
	Spooled   uint64 // written to the disk spool
	Dropped   uint64 // lost: no room, too large, or undeliverable at Close
	Queued    int    // in memory now
	SpoolSize int64  // unread spool bytes now
	// WrittenAhead counts messages written to the spool while also in
	// memory, because they waited longer than SpoolAfter.
	WrittenAhead uint64
	Up           bool // the last produce or cluster check succeeded
}

// Kafka is a record.Sink that produces each record as a JSON message.
//
// Design: Write encodes the record and appends it to a bounded queue (memory,
// then the optional disk spool) and never touches the network. One delivery
// goroutine takes batches from the head of the queue and writes them with a
// synchronous kafka.Writer.WriteMessages; a message leaves the queue only
// when the broker acknowledged it. A failed batch stays at the head and is
// retried with exponential backoff, so nothing is lost to an outage while
// the bound holds, and messages of one key (one partition) are delivered in
// order. This replaces kafka-go's Async mode, whose Completion callback
// would hand failed batches back out of order with newer ones already in
// flight.
//
// Delivery is at least once: when a broker dies after appending a batch but
// before its acknowledgement arrives, the retry duplicates that batch
// (kafka-go has no idempotent producer).
//
// Before the first batch, and after a failed one, the delivery goroutine
// checks the cluster (a metadata request for the topics, which asks the
// brokers to create a missing one unless DisableTopicCreation). Failures
// are classified (KafkaErrorReasons), counted and logged once per episode;
// those that need a change on the brokers (a missing topic, denied access,
// a refused login or certificate) are rechecked every RecheckInterval
// rather than retried, and Close does not wait for them.
type Kafka struct {
	cfg    KafkaConfig
	w      *kafka.Writer
	tr     *kafka.Transport
	q      *queue
	log    *slog.Logger
	m      *Metrics
	rollup *report.Rollup
	topics []string // checked at start and after failures

	health kafkaHealth
	st     deliveryState // the delivery goroutine's

	closed  atomic.Bool
	closing chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	dwg     sync.WaitGroup // the delivery goroutine
	wg      sync.WaitGroup // rollups and the write-ahead
	once    sync.Once

	enqueued, delivered, failed, spooled, dropped atomic.Uint64

	scratch sync.Pool
}

// NewKafka validates cfg, opens the spool if configured and starts delivery.
// Unless cfg.StartTimeout is set it does not contact the brokers: an
// unreachable cluster only delays delivery.
func NewKafka(cfg KafkaConfig) (*Kafka, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("%w: no kafka brokers", ErrConfig)
	}
	setDefault(&cfg.Topic, DefaultKafkaTopic)
	setDefault(&cfg.Key, KeyServer)
	setDefault(&cfg.Acks, AcksAll)
	setDefault(&cfg.ClientID, "pqwatch")
	setDefault(&cfg.Compression, "snappy")
	setDefault(&cfg.BatchSize, 1000)
	setDefault(&cfg.BatchBytes, 1<<20)
	setDefault(&cfg.BatchTimeout, 50*time.Millisecond)
	setDefault(&cfg.WriteTimeout, 10*time.Second)
	setDefault(&cfg.MemoryBytes, 64<<20)
	setDefault(&cfg.SpoolBytes, 1<<30)
	setDefault(&cfg.SpoolSegmentBytes, 4<<20)
	setDefault(&cfg.RetryBackoffMin, 100*time.Millisecond)
	setDefault(&cfg.RetryBackoffMax, 5*time.Second)
	setDefault(&cfg.MetadataTTL, 5*time.Second)
	setDefault(&cfg.RecheckInterval, 30*time.Second)
	setDefault(&cfg.SpoolAfter, 500*time.Millisecond)
	setDefault(&cfg.RollupInterval, time.Minute)
	setDefault(&cfg.RollupMaxServers, 1024)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}

	var acks kafka.RequiredAcks
	switch cfg.Acks {
	case AcksAll:
		acks = kafka.RequireAll
	case AcksLeader:
		acks = kafka.RequireOne
	case AcksNone:
		acks = kafka.RequireNone
	default:
		return nil, fmt.Errorf("%w: kafka acks %q", ErrConfig, cfg.Acks)
	}
	switch cfg.Key {
	case KeyServer, KeySNI, KeyClientNetwork, KeyNone:
	default:
		return nil, fmt.Errorf("%w: kafka key %q", ErrConfig, cfg.Key)
	}
	var codec kafka.Compression
	switch cfg.Compression {
	case "none":
	case "gzip":
		codec = kafka.Gzip
	case "snappy":
		codec = kafka.Snappy
	case "lz4":
		codec = kafka.Lz4
	case "zstd":
		codec = kafka.Zstd
	default:
		return nil, fmt.Errorf("%w: kafka compression %q", ErrConfig, cfg.Compression)
	}
	mech, err := cfg.SASL.mechanism()
	if err != nil {
		return nil, err
	}

	var sp *spool
	if cfg.SpoolDir != "" {
		var err error
		if sp, err = openSpool(cfg.SpoolDir, cfg.SpoolBytes, cfg.SpoolSegmentBytes); err != nil {
			return nil, err
		}
	}

	var balancer kafka.Balancer = &kafka.Hash{}
	if cfg.Key == KeyNone {
		balancer = &kafka.RoundRobin{}
	}
	tr := &kafka.Transport{
		ClientID:    cfg.ClientID,
		TLS:         cfg.TLS,
		SASL:        mech,
		DialTimeout: 5 * time.Second,
		MetadataTTL: cfg.MetadataTTL,
	}
	k := &Kafka{
		cfg: cfg,
		tr:  tr,
		w: &kafka.Writer{
			Addr:                   kafka.TCP(cfg.Brokers...),
			Balancer:               balancer,
			MaxAttempts:            3,
			BatchSize:              cfg.BatchSize,
			BatchBytes:             cfg.BatchBytes,
			BatchTimeout:           cfg.BatchTimeout,
			WriteTimeout:           cfg.WriteTimeout,
			ReadTimeout:            cfg.WriteTimeout,
			RequiredAcks:           acks,
			Compression:            codec,
			AllowAutoTopicCreation: !cfg.DisableTopicCreation,
			Transport:              tr,
		},
		q:       newQueue(cfg.MemoryBytes, sp),
		log:     cfg.Logger,
		m:       cfg.Metrics,
		topics:  []string{cfg.Topic},
		closing: make(chan struct{}),
	}
	if cfg.RollupTopic != "" && cfg.RollupTopic != cfg.Topic {
		k.topics = append(k.topics, cfg.RollupTopic)
	}
	k.scratch.New = func() any { b := make([]byte, 0, 2048); return &b }
	k.ctx, k.cancel = context.WithCancel(context.Background())
	checked := false
	if cfg.StartTimeout > 0 {
		ctx, cancel := context.WithTimeout(k.ctx, cfg.StartTimeout)
		err := k.check(ctx)
		cancel()
		if err != nil {
			e := k.classify(err, "", true)
			if e.Permanent {
				k.cancel()
				tr.CloseIdleConnections()
				if sp != nil {
					_ = sp.close()
				}
				return nil, e
			}
			k.failure(e, true)
		} else {
			checked = true
			k.success(true)
		}
	}
	if cfg.RollupTopic != "" {
		now := time.Now()
		k.rollup = report.NewRollup(now.Truncate(cfg.RollupInterval), cfg.RollupMaxServers)
		k.wg.Add(1)
		go k.rollupLoop()
	}
	if sp != nil {
		k.wg.Add(1)
		go k.writeAheadLoop()
	}
	k.dwg.Add(1)
	go k.deliver(checked)
	return k, nil
}

// check asks the cluster for the topics' metadata, which creates missing
// ones when allowed. A topic that does not exist afterwards is an error.
func (k *Kafka) check(ctx context.Context) error {
	r, err := k.tr.RoundTrip(ctx, k.w.Addr, &metadataAPI.Request{
		TopicNames:             k.topics,
		AllowAutoTopicCreation: !k.cfg.DisableTopicCreation,
	})
	if err != nil {
		return err
	}
	resp, ok := r.(*metadataAPI.Response)
	if !ok {
		return fmt.Errorf("exporter: kafka: metadata response %T", r)
	}
	for _, name := range k.topics {
		var err error = kafka.UnknownTopicOrPartition
		for _, t := range resp.Topics {
			if t.Name == name {
				if t.ErrorCode != 0 {
					err = kafka.Error(t.ErrorCode)
				} else if len(t.Partitions) > 0 {
					err = nil
				}
				break
			}
		}
		if err != nil {
			return k.classify(err, name, true)
		}
	}
	return nil
}

// writeAheadLoop writes messages that have waited longer than SpoolAfter
// to the spool, every half SpoolAfter, until delivery has stopped.
func (k *Kafka) writeAheadLoop() {
	defer k.wg.Done()
	t := time.NewTicker(k.cfg.SpoolAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			k.q.writeAhead(k.q.now()-k.cfg.SpoolAfter, 1<<20)
		case <-k.ctx.Done():
			return
		}
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Write implements record.Sink: it encodes h and queues it for delivery. It
// never blocks on the network. It returns ErrClosed after Close and
// ErrDropped when the record did not fit in the bounded buffer (counted).
func (k *Kafka) Write(h *record.Handshake) error {
	if k.closed.Load() {
		return ErrClosed
	}
	if k.rollup != nil {
		_ = k.rollup.Write(h)
	}
	bp := k.scratch.Get().(*[]byte)
	buf := appendKey((*bp)[:0], k.cfg.Key, h)
	klen := len(buf)
	if k.cfg.ECS {
		buf = AppendECS(buf, h)
	} else {
		buf = AppendJSON(buf, h)
	}
	// One allocation per message holds its key and value.
	kv := make([]byte, len(buf))
	copy(kv, buf)
	*bp = buf
	k.scratch.Put(bp)
	m := qmsg{topic: k.cfg.Topic, value: kv[klen:len(kv):len(kv)]}
	if klen > 0 {
		m.key = kv[:klen:klen]
	}
	if int64(len(kv)+len(m.topic)+64) > k.cfg.BatchBytes {
		// kafka-go refuses a message larger than a batch: never deliverable.
		k.dropped.Add(1)
		k.m.KafkaMessages(KafkaDropped, 1)
		return ErrDropped
	}
	return k.enqueue(m)
}

func (k *Kafka) enqueue(m qmsg) error {
	switch k.q.push(m) {
	case pushSpooled:
		k.enqueued.Add(1)
		k.spooled.Add(1)
		k.m.KafkaMessages(KafkaSpooled, 1)
	case pushDropped:
		k.dropped.Add(1)
		k.m.KafkaMessages(KafkaDropped, 1)
		return ErrDropped
	case pushClosed:
		return ErrClosed
	default:
		k.enqueued.Add(1)
	}
	return nil
}

// appendKey appends the message key of h chosen by key.
func appendKey(dst []byte, key KafkaKey, h *record.Handshake) []byte {
	switch key {
	case KeyServer:
		return append(dst, h.Server...)
	case KeySNI:
		return append(dst, h.SNI...)
	case KeyClientNetwork:
		return appendClientNetwork(dst, h)
	}
	return dst
}

// appendClientNetwork appends the client's /24 (IPv4) or /64 (IPv6) in
// prefix notation, from ClientAddr when set, else from the Client string.
func appendClientNetwork(dst []byte, h *record.Handshake) []byte {
	var addr netip.Addr
	if h.ClientAddr != ([16]byte{}) {
		addr = netip.AddrFrom16(h.ClientAddr).Unmap()
	} else if ap, err := netip.ParseAddrPort(h.Client); err == nil {
		addr = ap.Addr().Unmap()
	} else if a, err := netip.ParseAddr(h.Client); err == nil {
		addr = a.Unmap()
	} else {
		return dst
	}
	bits := 64
	if addr.Is4() {
		bits = 24
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return dst
	}
	b, err := p.AppendText(dst)
	if err != nil {
		return dst
	}
	return b
}

// deliver is the single delivery goroutine. checked: NewKafka's check
// passed.
func (k *Kafka) deliver(checked bool) {
	defer k.dwg.Done()
	backoff := k.cfg.RetryBackoffMin
	batch := make([]qmsg, 0, k.cfg.BatchSize)
	msgs := make([]kafka.Message, 0, k.cfg.BatchSize)
	header := []kafka.Header{{Key: SchemaHeader, Value: []byte(SchemaVersion)}}
	recordHeader := header
	if k.cfg.ECS {
		recordHeader = []kafka.Header{{Key: SchemaHeader, Value: []byte(SchemaVersion)}, {Key: FormatHeader, Value: []byte("ecs")}}
	}
	needCheck := !checked
	oneByOne := 0 // after a batch too large for the topic: messages to send one at a time
	// wait sleeps d; false: stop delivering (Close's deadline, or Close
	// while delivery is stopped by an error that needs a change on the
	// brokers).
	wait := func(d time.Duration, permanent bool) bool {
		closing := k.closing
		if k.closed.Load() {
			if permanent {
				return false
			}
			closing = nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-closing:
			return !permanent
		case <-k.ctx.Done():
			return false
		}
	}
	for {
		if err := k.q.takeSpoolErr(); err != nil {
			k.log.Warn("kafka spool", "err", err)
		}
		if n := k.q.takeCorrupt(); n > 0 {
			k.dropped.Add(uint64(n))
			k.m.KafkaMessages(KafkaDropped, n)
		}
		if needCheck {
			ctx, cancel := context.WithTimeout(k.ctx, k.cfg.WriteTimeout)
			err := k.check(ctx)
			cancel()
			if k.ctx.Err() != nil {
				return
			}
			if err != nil {
				e := k.classify(err, "", true)
				k.failure(e, true)
				d := backoff
				if e.Permanent {
					d = k.cfg.RecheckInterval
				}
				if !wait(d, e.Permanent) {
					return
				}
				backoff = min(backoff*2, k.cfg.RetryBackoffMax)
				continue
			}
			needCheck = false
			k.success(true)
		}
		// A batch never exceeds what kafka-go sends as one produce batch per
		// partition, so each partition's share succeeds or fails as a whole
		// and a retry cannot reorder messages of one key.
		n := k.cfg.BatchSize
		if oneByOne > 0 {
			n = 1
			oneByOne--
		}
		batch = k.q.peek(batch[:0], n, k.cfg.BatchBytes/2)
		if len(batch) == 0 {
			select {
			case <-k.q.notify:
				continue
			case <-k.closing:
				if k.q.empty() {
					return
				}
				continue
			case <-k.ctx.Done():
				return
			}
		}
		msgs = msgs[:0]
		for i := range batch {
			h := header
			if batch[i].topic == k.cfg.Topic {
				h = recordHeader
			}
			msgs = append(msgs, kafka.Message{Topic: batch[i].topic, Key: batch[i].key, Value: batch[i].value, Headers: h})
		}
		err := k.w.WriteMessages(k.ctx, msgs...)
		if err == nil {
			k.q.ack(len(batch), nil)
			k.delivered.Add(uint64(len(batch)))
			k.m.KafkaMessages(KafkaDelivered, len(batch))
			k.success(false)
			backoff = k.cfg.RetryBackoffMin
			continue
		}
		if k.ctx.Err() != nil {
			return
		}
		errs := make([]error, len(batch))
		var werr kafka.WriteErrors
		if errors.As(err, &werr) && len(werr) == len(batch) {
			copy(errs, werr)
		} else {
			for i := range errs {
				errs[i] = err
			}
		}
		failed := make([]bool, len(batch))
		var first *KafkaError
		ok, nFailed, tooLarge := 0, 0, 0
		for i, e := range errs {
			if e == nil {
				ok++
				continue
			}
			ke := k.classify(e, batch[i].topic, false)
			if ke.Reason == KafkaErrMessageTooLarge {
				if len(batch) == 1 {
					tooLarge++ // removed from the queue below, as dropped
					if !k.st.tooLarge {
						k.st.tooLarge = true
						k.log.Error("kafka: "+ke.what(), "reason", ke.Reason, "bytes", len(batch[i].value), "err", ke.Err, "fix", ke.Fix,
							"note", "further ones are counted in pqwatch_kafka_errors_total{reason=\"message_too_large\"} only")
					}
					continue
				}
				// The batch was too large: send its messages one by one.
				oneByOne = max(oneByOne, len(batch))
				failed[i] = true
				nFailed++
				continue
			}
			failed[i] = true
			nFailed++
			if first == nil {
				first = ke
			}
		}
		if ok > 0 {
			k.delivered.Add(uint64(ok))
			k.m.KafkaMessages(KafkaDelivered, ok)
		}
		if tooLarge > 0 {
			k.health.errs[kafkaReasonIndex(KafkaErrMessageTooLarge)].Add(uint64(tooLarge))
			k.dropped.Add(uint64(tooLarge))
			k.m.KafkaMessages(KafkaDropped, tooLarge)
		}
		k.q.ack(len(batch), failed)
		if first == nil {
			// Only records too large: dropped, or to be sent one by one.
			if ok > 0 {
				k.success(false)
			}
			continue
		}
		k.failed.Add(uint64(nFailed))
		k.m.KafkaMessages(KafkaFailed, nFailed)
		k.failure(first, false)
		needCheck = true
		d := backoff
		if first.Permanent {
			d = k.cfg.RecheckInterval
		}
		if !wait(d, first.Permanent) {
			return
		}
		backoff = min(backoff*2, k.cfg.RetryBackoffMax)
	}
}

// rollupLoop emits the rollup rows at every interval boundary.
func (k *Kafka) rollupLoop() {
	defer k.wg.Done()
	iv := k.cfg.RollupInterval
	for {
		next := time.Now().Truncate(iv).Add(iv)
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
			k.emitRollups(next)
		case <-k.closing:
			t.Stop()
			return
		}
	}
}

func (k *Kafka) emitRollups(end time.Time) {
	for _, row := range k.rollup.Flush(end) {
		v, err := json.Marshal(row)
		if err != nil { // cannot happen: plain types only
			k.log.Error("kafka rollup encode", "err", err)
			continue
		}
		_ = k.enqueue(qmsg{topic: k.cfg.RollupTopic, key: []byte(row.Server), value: v})
	}
}

// Stats returns the sink's counters.
func (k *Kafka) Stats() KafkaStats {
	n, sb := k.q.depth()
	return KafkaStats{
		Enqueued:  k.enqueued.Load(),
		Delivered: k.delivered.Load(),
		Failed:    k.failed.Load(),
		Spooled:   k.spooled.Load(),
		Dropped:   k.dropped.Load(),
		Queued:    n,
		SpoolSize: sb,

		WrittenAhead: k.q.writtenAheadCount(),
		Up:           k.health.up.Load(),
	}
}

// Close stops accepting records, emits the last partial rollup window and
// delivers what is queued until ctx is done, or at once when delivery is
// stopped by an error that needs a change on the brokers. It logs what it
// waits for and how long. Then, whatever is still in memory goes to the
// spool when one is configured (and is delivered after a restart) or is
// counted as dropped. Closing the kafka.Writer, which can hang while
// brokers are down, is also bounded by ctx. Close returns an error wrapping
// ctx's cause (or the delivery error) when messages were left undelivered,
// and ErrClosed when called again.
func (k *Kafka) Close(ctx context.Context) error {
	first := false
	k.once.Do(func() { first = true })
	if !first {
		return ErrClosed
	}
	if k.rollup != nil {
		k.emitRollups(time.Now())
	}
	k.closed.Store(true)
	close(k.closing)
	k.q.signal()

	queued, unread := k.q.depth()
	before := k.delivered.Load()
	then := "dropped"
	if k.cfg.SpoolDir != "" {
		then = "kept in the spool for the next start"
	}
	if queued > 0 || unread > 0 {
		attrs := []any{"queued", queued, "spool_unread_bytes", unread, "then", then}
		if dl, ok := ctx.Deadline(); ok {
			attrs = append(attrs, "deadline", time.Until(dl).Round(100*time.Millisecond).String())
		}
		if e := k.health.permanent.Load(); e != nil {
			k.log.Warn("kafka: not waiting to deliver: "+e.what(), append(attrs, "reason", e.Reason)...)
		} else {
			k.log.Info("kafka: delivering queued records before stopping", attrs...)
		}
	}

	done := make(chan struct{})
	go func() {
		k.dwg.Wait()
		close(done)
	}()
	var errs []error
	cause := error(nil)
	select {
	case <-done:
	case <-ctx.Done():
		k.cancel() // aborts the in-flight WriteMessages
		<-done
		cause = context.Cause(ctx)
	}
	if cause == nil {
		if e := k.health.permanent.Load(); e != nil {
			cause = e
		}
	}
	k.cancel()
	k.wg.Wait()

	lost, kept, unread, err := k.q.close()
	if err != nil {
		errs = append(errs, err)
	}
	if lost > 0 {
		k.dropped.Add(uint64(lost))
		k.m.KafkaMessages(KafkaDropped, lost)
		if cause == nil {
			cause = ErrDropped
		}
		errs = append(errs, fmt.Errorf("exporter: kafka close: %d messages undelivered: %w", lost, cause))
	}
	if queued > 0 || unread > 0 || lost > 0 {
		lvl := slog.LevelInfo
		if lost > 0 {
			lvl = slog.LevelWarn
		}
		k.log.Log(context.Background(), lvl, "kafka: stopped", "delivered_while_stopping", k.delivered.Load()-before,
			"kept_in_spool", kept, "spool_unread_bytes", unread, "lost", lost)
	}

	wclosed := make(chan error, 1)
	go func() { wclosed <- k.w.Close() }()
	select {
	case err := <-wclosed:
		if err != nil {
			errs = append(errs, fmt.Errorf("exporter: kafka close: %w", err))
		}
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("exporter: kafka close writer: %w", context.Cause(ctx)))
	}
	k.tr.CloseIdleConnections()
	return errors.Join(errs...)
}

var _ record.Sink = (*Kafka)(nil)
