package exporter

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// logBuffer is a slog destination that tests read.
type logBuffer struct{ testenv.Buffer }

func (l *logBuffer) logger(t *testing.T) *slog.Logger {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sink log:\n%s", l.String())
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// kafkaHealthMetrics renders k's collector as "name{label=value} value"
// lines, after a lint.
func kafkaHealthMetrics(t *testing.T, k *Kafka) string {
	t.Helper()
	if probs, err := testutil.CollectAndLint(k.Collector()); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", err, probs)
	}
	reg := prometheusRegistry()
	reg.MustRegister(k.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			b.WriteString(mf.GetName())
			for _, l := range m.GetLabel() {
				b.WriteString("{" + l.GetName() + "=" + l.GetValue() + "}")
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			b.WriteString(" " + strconv.FormatFloat(v, 'f', -1, 64) + "\n")
		}
	}
	return b.String()
}

// TestKafkaCreatesTopic: a broker that allows topic creation (as a default
// Kafka does) and no topic: the sink has it created, at start or by the
// delivery goroutine, and every record is delivered once, in order.
func TestKafkaCreatesTopic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start time.Duration
	}{{"at start", 5 * time.Second}, {"by delivery", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, kfake.AllowAutoTopicCreation())
			var logs logBuffer
			cfg := fastConfig(c.ListenAddrs()[0])
			cfg.Logger, cfg.StartTimeout = logs.logger(t), tc.start
			k, err := NewKafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const n = 50
			for i := range n {
				if err := k.Write(seqRecord(i)); err != nil {
					t.Fatal(err)
				}
			}
			waitDelivered(t, k, n, 10*time.Second)
			if m := kafkaHealthMetrics(t, k); !strings.Contains(m, "pqwatch_kafka_up 1\n") {
				t.Errorf("metrics:\n%s", m)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := k.Close(ctx); err != nil {
				t.Error(err)
			}
			checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, n, 10*time.Second), n)
			if s := logs.String(); strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
				t.Errorf("warnings for a topic the broker created:\n%s", s)
			}
		})
	}
}

// TestKafkaTopicMissing: with creation off (or refused by the brokers) a
// missing topic is NewKafka's error, naming the topic and the fix. Found by
// the delivery goroutine, it is logged once, counted, pqwatch_kafka_up is 0,
// records stay queued, and delivery resumes when the topic appears.
func TestKafkaTopicMissing(t *testing.T) {
	t.Run("at start, creation off", func(t *testing.T) {
		c := newCluster(t, kfake.AllowAutoTopicCreation())
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.StartTimeout, cfg.DisableTopicCreation = testLogger(t), 5*time.Second, true
		k, err := NewKafka(cfg)
		var ke *KafkaError
		if !errors.As(err, &ke) || ke.Reason != KafkaErrUnknownTopic || !ke.Permanent {
			t.Fatalf("NewKafka: %v (%#v), want a permanent unknown_topic KafkaError", err, k)
		}
		for _, want := range []string{`topic "pqwatch.handshakes" does not exist on 127.0.0.1:`, "kafka-topics.sh --bootstrap-server 127.0.0.1:", "--create --topic pqwatch.handshakes", "-kafka-create-topic"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
		t.Logf("%v", err)
	})
	t.Run("at start, broker refuses creation", func(t *testing.T) {
		c := newCluster(t) // kfake without AllowAutoTopicCreation: auto.create.topics.enable=false
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.StartTimeout = testLogger(t), 5*time.Second
		_, err := NewKafka(cfg)
		var ke *KafkaError
		if !errors.As(err, &ke) || ke.Reason != KafkaErrUnknownTopic || !strings.Contains(err.Error(), "auto.create.topics.enable") {
			t.Fatalf("NewKafka: %v", err)
		}
	})
	t.Run("in delivery", func(t *testing.T) {
		c := newCluster(t)
		var logs logBuffer
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.DisableTopicCreation, cfg.RecheckInterval = logs.logger(t), true, 200*time.Millisecond
		k, err := NewKafka(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 10
		for i := range n {
			if err := k.Write(seqRecord(i)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for k.health.errs[kafkaReasonIndex(KafkaErrUnknownTopic)].Load() < 5 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		m := kafkaHealthMetrics(t, k)
		if !strings.Contains(m, "pqwatch_kafka_up 0\n") || strings.Contains(m, "{reason=unknown_topic} 0\n") || !strings.Contains(m, "{reason=network} 0\n") {
			t.Errorf("metrics with the topic missing:\n%s", m)
		}
		if got := strings.Count(logs.String(), "delivery stopped"); got != 1 {
			t.Errorf("%d log lines about the missing topic after %d checks, want 1:\n%s", got, k.health.errs[kafkaReasonIndex(KafkaErrUnknownTopic)].Load(), logs.String())
		}
		if st := k.Stats(); st.Queued != n || st.Delivered != 0 || st.Dropped != 0 {
			t.Errorf("stats %+v: want the records kept queued", st)
		}
		t.Logf("metrics:\n%s", m)

		// The operator creates it: delivery resumes within a recheck.
		cl := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: testTopic, NumPartitions: 3, ReplicationFactor: 1}}}); err != nil {
			t.Fatal(err)
		}
		waitDelivered(t, k, n, 10*time.Second)
		if !strings.Contains(kafkaHealthMetrics(t, k), "pqwatch_kafka_up 1\n") || !strings.Contains(logs.String(), "delivering again") {
			t.Errorf("after the topic was created: up %v, log:\n%s", k.Stats().Up, logs.String())
		}
		if err := k.Close(ctx); err != nil {
			t.Error(err)
		}
		checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, n, 10*time.Second), n)
	})
	t.Run("close does not wait", func(t *testing.T) {
		c := newCluster(t)
		var logs logBuffer
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.DisableTopicCreation = logs.logger(t), true
		k, err := NewKafka(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			_ = k.Write(seqRecord(i))
		}
		deadline := time.Now().Add(5 * time.Second)
		for k.health.permanent.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t0 := time.Now()
		err = k.Close(ctx)
		var ke *KafkaError
		if took := time.Since(t0); took > 2*time.Second || !errors.As(err, &ke) || k.Stats().Dropped != 5 {
			t.Errorf("Close took %v with a 10s deadline: %v, stats %+v", took, err, k.Stats())
		}
		if !strings.Contains(logs.String(), "not waiting to deliver") {
			t.Errorf("Close did not say why it does not wait:\n%s", logs.String())
		}
	})
}

// TestKafkaAccessDenied: a refused SASL login and a principal without ACLs
// are NewKafka's errors with their reason and fix.
func TestKafkaAccessDenied(t *testing.T) {
	t.Run("authorization", func(t *testing.T) {
		c := newCluster(t, kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
			kfake.User("PLAIN", "pqwatch", "s3cret"), kfake.SeedTopics(3, testTopic))
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.StartTimeout = testLogger(t), 5*time.Second
		cfg.SASL = &SASLConfig{Mechanism: "plain", Username: "pqwatch", Password: "s3cret"}
		_, err := NewKafka(cfg)
		var ke *KafkaError
		if !errors.As(err, &ke) || ke.Reason != KafkaErrAuthorization || !strings.Contains(err.Error(), "kafka-acls.sh") || !strings.Contains(err.Error(), "User:pqwatch") {
			t.Fatalf("NewKafka: %v", err)
		}
		t.Logf("%v", err)
	})
	t.Run("authentication", func(t *testing.T) {
		c := newCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "pqwatch", "s3cret"), kfake.SeedTopics(3, testTopic))
		// A real broker answers a failed login with SASL_AUTHENTICATION_FAILED
		// before it closes the connection (kfake only closes it).
		c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			resp := req.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
			resp.ErrorCode = 58
			msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
			resp.ErrorMessage = &msg
			return resp, nil, true
		})
		cfg := fastConfig(c.ListenAddrs()[0])
		cfg.Logger, cfg.StartTimeout = testLogger(t), 5*time.Second
		cfg.SASL = &SASLConfig{Mechanism: "scram-sha-256", Username: "pqwatch", Password: "wrong"}
		_, err := NewKafka(cfg)
		var ke *KafkaError
		if !errors.As(err, &ke) || ke.Reason != KafkaErrAuthentication || !strings.Contains(err.Error(), "password") {
			t.Fatalf("NewKafka: %v", err)
		}
		t.Logf("%v", err)
	})
}

// TestKafkaMessageTooLarge: a record larger than the topic accepts is
// dropped, counted and logged once; the records around it are delivered.
func TestKafkaMessageTooLarge(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, testTopic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4000"}))
	var logs logBuffer
	cfg := fastConfig(c.ListenAddrs()[0])
	cfg.Logger, cfg.Compression, cfg.Key = logs.logger(t), "none", KeyNone
	cfg.BatchTimeout = 50 * time.Millisecond
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		h := seqRecord(i)
		if i == 7 || i == 13 {
			h.Log.UserAgent = strings.Repeat("x", 6000)
		}
		if err := k.Write(h); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := k.Stats(); st.Delivered+st.Dropped < n && time.Now().Before(deadline); st = k.Stats() {
		time.Sleep(20 * time.Millisecond)
	}
	st := k.Stats()
	if st.Delivered != n-2 || st.Dropped != 2 {
		t.Errorf("stats %+v, want %d delivered and 2 dropped", st, n-2)
	}
	if m := kafkaHealthMetrics(t, k); !strings.Contains(m, "{reason=message_too_large} 2\n") {
		t.Errorf("metrics:\n%s", m)
	}
	if got := strings.Count(logs.String(), "it is dropped"); got != 1 {
		t.Errorf("%d log lines about the large records, want 1:\n%s", got, logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Error(err)
	}
}

// crash stops k as a SIGKILL would: no Close, nothing flushed.
func crash(k *Kafka) {
	k.closed.Store(true)
	k.cancel()
	k.dwg.Wait()
	k.wg.Wait()
	k.tr.CloseIdleConnections()
}

// waitWrittenAhead waits until n records are written ahead: within
// SpoolAfter and a tick, and a second more for a loaded machine.
func waitWrittenAhead(t *testing.T, k *Kafka, n uint64, after time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for k.Stats().WrittenAhead < n {
		if time.Since(t0) > after+after/2+time.Second {
			t.Fatalf("after %v: %+v, want all %d written ahead", time.Since(t0), k.Stats(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0)
}

// TestKafkaSpoolWriteAhead: with the broker down, records that wait longer
// than SpoolAfter are in the spool; a crash (no Close) loses none of them,
// and the next run delivers each once, in order.
func TestKafkaSpoolWriteAhead(t *testing.T) {
	addr, start := deadBroker(t, testTopic)
	cfg := fastConfig(addr)
	cfg.Logger, cfg.SpoolDir, cfg.SpoolAfter = testLogger(t), t.TempDir(), 500*time.Millisecond
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		if err := k.Write(seqRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	took := waitWrittenAhead(t, k, n, cfg.SpoolAfter)
	if st := k.Stats(); st.WrittenAhead != n || st.Spooled != 0 || st.Queued != n {
		t.Fatalf("stats %+v, want all %d written ahead and in memory", st, n)
	}
	t.Logf("all %d records in the spool %v after they were written", n, took.Round(time.Millisecond))
	crash(k)
	c := start()
	k2, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, k2, n, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k2.Close(ctx); err != nil {
		t.Error(err)
	}
	checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, n, 10*time.Second), n)
	if left, _ := filepath.Glob(filepath.Join(cfg.SpoolDir, "*")); len(left) != 0 {
		t.Errorf("spool files left after delivery: %v", left)
	}
}

// TestKafkaSpoolAckedNotRedelivered: records written ahead and then
// delivered are marked in the spool: after a crash the next run delivers
// none of them again.
func TestKafkaSpoolAckedNotRedelivered(t *testing.T) {
	addr, start := deadBroker(t, testTopic)
	cfg := fastConfig(addr)
	cfg.Logger, cfg.SpoolDir, cfg.SpoolAfter = testLogger(t), t.TempDir(), 500*time.Millisecond
	cfg.SpoolSegmentBytes = 8 << 10 // several segments
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if err := k.Write(seqRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitWrittenAhead(t, k, n, cfg.SpoolAfter)
	c := start()
	waitDelivered(t, k, n, 10*time.Second)
	crash(k)
	segs, _ := filepath.Glob(filepath.Join(cfg.SpoolDir, "*"+segSuffix))
	k2, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k2.Close(ctx); err != nil {
		t.Error(err)
	}
	if st := k2.Stats(); st.Delivered != 0 {
		t.Errorf("the run after the crash delivered %d records again (%d segments were left)", st.Delivered, len(segs))
	}
	checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, n, 10*time.Second), n)
	if left, _ := filepath.Glob(filepath.Join(cfg.SpoolDir, "*")); len(left) != 0 {
		t.Errorf("spool files left after delivery: %v", left)
	}
	_ = os.RemoveAll(cfg.SpoolDir)
}

// TestKafkaHealthCollector: the sink's collector exports pqwatch_kafka_up
// and every reason of pqwatch_kafka_errors_total, from the start, next to
// the other metrics in one registry, and lints clean.
func TestKafkaHealthCollector(t *testing.T) {
	reg := prometheusRegistry()
	m := NewMetrics(reg)
	addr, _ := deadBroker(t, testTopic)
	cfg := fastConfig(addr)
	cfg.Logger, cfg.Metrics = testLogger(t), m
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(k.Collector())
	deadline := time.Now().Add(5 * time.Second)
	for k.health.errs[kafkaReasonIndex(KafkaErrNetwork)].Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pqwatch_kafka_up 1 when the last Kafka produce or cluster check succeeded, 0 while delivery fails (pqwatch_kafka_errors_total says why). Only with a Kafka feed.
# TYPE pqwatch_kafka_up gauge
pqwatch_kafka_up 0
`), "pqwatch_kafka_up"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(k.Collector(), "pqwatch_kafka_errors_total"); n != len(KafkaErrorReasons) {
		t.Errorf("%d pqwatch_kafka_errors_total series, want %d", n, len(KafkaErrorReasons))
	}
	if probs, err := testutil.GatherAndLint(reg, "pqwatch_kafka_up", "pqwatch_kafka_errors_total"); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", err, probs)
	}
	_ = closeShort(t, k)
}
