package exporter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Kafka error reasons: the reason label of pqwatch_kafka_errors_total and
// KafkaError.Reason.
const (
	KafkaErrNetwork         = "network"           // brokers unreachable, connection lost, timed out
	KafkaErrBroker          = "broker"            // a broker error a retry may fix (leader election, not enough replicas)
	KafkaErrUnknownTopic    = "unknown_topic"     // the topic does not exist and was not created
	KafkaErrAuthorization   = "authorization"     // the brokers' ACLs deny the producer
	KafkaErrAuthentication  = "authentication"    // SASL login refused
	KafkaErrTLS             = "tls"               // the TLS handshake with a broker failed
	KafkaErrMessageTooLarge = "message_too_large" // a record is larger than the topic accepts: dropped
	KafkaErrOther           = "other"
)

var kafkaReasons = [...]string{
	KafkaErrNetwork, KafkaErrBroker, KafkaErrUnknownTopic, KafkaErrAuthorization,
	KafkaErrAuthentication, KafkaErrTLS, KafkaErrMessageTooLarge, KafkaErrOther,
}

// KafkaErrorReasons is the fixed label set of pqwatch_kafka_errors_total.
var KafkaErrorReasons = kafkaReasons[:]

func kafkaReasonIndex(reason string) int {
	for i, r := range kafkaReasons {
		if r == reason {
			return i
		}
	}
	return len(KafkaErrorReasons) - 1
}

// KafkaError is a classified Kafka delivery problem. NewKafka returns one
// (with StartTimeout set) when the cluster answers that delivery cannot
// work: Permanent errors are not fixed by retrying, only by a change on the
// brokers (create the topic, grant access) or in pqwatch's configuration.
type KafkaError struct {
	Reason    string // one of KafkaErrorReasons
	Topic     string // the topic concerned, when there is one
	Brokers   string // the bootstrap brokers, comma-separated
	Permanent bool
	Fix       string // what to do about it
	Err       error
}

func (e *KafkaError) Error() string {
	var b strings.Builder
	b.WriteString("exporter: kafka: ")
	b.WriteString(e.what())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

func (e *KafkaError) Unwrap() error { return e.Err }

// what says what went wrong, in words.
func (e *KafkaError) what() string {
	switch e.Reason {
	case KafkaErrUnknownTopic:
		return fmt.Sprintf("topic %q does not exist on %s", e.Topic, e.Brokers)
	case KafkaErrAuthorization:
		if e.Topic != "" {
			return fmt.Sprintf("not authorized to produce to topic %q on %s", e.Topic, e.Brokers)
		}
		return "not authorized by the brokers " + e.Brokers
	case KafkaErrAuthentication:
		return "SASL authentication with " + e.Brokers + " failed"
	case KafkaErrTLS:
		return "TLS handshake with " + e.Brokers + " failed"
	case KafkaErrMessageTooLarge:
		return fmt.Sprintf("a record is larger than topic %q accepts; it is dropped", e.Topic)
	case KafkaErrNetwork:
		return "brokers " + e.Brokers + " not reachable"
	case KafkaErrBroker:
		return "brokers " + e.Brokers + " refused the write for now"
	}
	return "delivery to " + e.Brokers + " failed"
}

// kafkaReason classifies err by what would fix it.
func kafkaReason(err error) string {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.UnknownTopicOrPartition, kafka.InvalidTopic, kafka.UnknownTopicID:
			return KafkaErrUnknownTopic
		case kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed, kafka.GroupAuthorizationFailed,
			kafka.TransactionalIDAuthorizationFailed:
			return KafkaErrAuthorization
		case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return KafkaErrAuthentication
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge:
			return KafkaErrMessageTooLarge
		case kafka.NetworkException, kafka.RequestTimedOut:
			return KafkaErrNetwork
		}
		if kerr.Temporary() {
			return KafkaErrBroker
		}
		return KafkaErrOther
	}
	var (
		verr  *tls.CertificateVerificationError
		alert tls.AlertError
		rerr  tls.RecordHeaderError
		uerr  x509.UnknownAuthorityError
		herr  x509.HostnameError
		cerr  x509.CertificateInvalidError
	)
	if errors.As(err, &verr) || errors.As(err, &alert) || errors.As(err, &rerr) || errors.As(err, &uerr) ||
		errors.As(err, &herr) || errors.As(err, &cerr) || strings.Contains(err.Error(), "tls: ") {
		return KafkaErrTLS
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return KafkaErrNetwork
	}
	return KafkaErrOther
}

// classify turns err into a KafkaError. fromCheck: err is the answer to
// the cluster check, which decides whether a missing topic is final; a
// produce that finds the topic missing may only have met stale metadata.
func (k *Kafka) classify(err error, topic string, fromCheck bool) *KafkaError {
	var ke *KafkaError
	if errors.As(err, &ke) {
		return ke
	}
	e := &KafkaError{Reason: kafkaReason(err), Topic: topic, Brokers: strings.Join(k.cfg.Brokers, ","), Err: err}
	if e.Topic == "" && e.Reason == KafkaErrUnknownTopic || e.Reason == KafkaErrAuthorization && e.Topic == "" {
		e.Topic = k.cfg.Topic
	}
	switch e.Reason {
	case KafkaErrUnknownTopic:
		e.Permanent = fromCheck
	case KafkaErrAuthorization, KafkaErrAuthentication, KafkaErrTLS, KafkaErrMessageTooLarge:
		e.Permanent = true
	}
	e.Fix = k.fix(e)
	return e
}

// fix is the advice for e.
func (k *Kafka) fix(e *KafkaError) string {
	create := fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions N --replication-factor R", k.cfg.Brokers[0], e.Topic)
	user := "the producer's principal"
	if k.cfg.SASL != nil {
		user = "User:" + k.cfg.SASL.Username
	}
	switch e.Reason {
	case KafkaErrUnknownTopic:
		if k.cfg.DisableTopicCreation {
			return "create it (" + create + "), or let pqwatch ask the brokers to create it (-kafka-create-topic=true)"
		}
		return "the brokers did not create it (auto.create.topics.enable=false, or no CREATE permission): create it (" + create + ") or allow automatic topic creation on the brokers"
	case KafkaErrAuthorization:
		return fmt.Sprintf("grant %s WRITE and DESCRIBE on topic %s (kafka-acls.sh --bootstrap-server %s --add --allow-principal %s --producer --topic %s), and CREATE for it to be created", user, e.Topic, k.cfg.Brokers[0], user, e.Topic)
	case KafkaErrAuthentication:
		mech := ""
		if k.cfg.SASL != nil {
			mech = k.cfg.SASL.Mechanism
		}
		return fmt.Sprintf("check the SASL mechanism (%s, which the brokers must enable), the username (%s) and the password (-kafka-sasl-password-file or $PQWATCH_KAFKA_SASL_PASSWORD)", mech, user)
	case KafkaErrTLS:
		return "check that the brokers speak TLS on this port, the CA that signed their certificates (-kafka-tls-ca-file), the name they are verified against (-kafka-tls-server-name), and the client certificate if they require one (-kafka-tls-cert-file, -kafka-tls-key-file)"
	case KafkaErrMessageTooLarge:
		return fmt.Sprintf("raise the topic's max.message.bytes (kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config max.message.bytes=2097152)", k.cfg.Brokers[0], e.Topic)
	}
	return ""
}

// kafkaHealth is what the metrics and Close know of delivery.
type kafkaHealth struct {
	up        atomic.Bool
	errs      [len(kafkaReasons)]atomic.Uint64 // by kafkaReasonIndex
	permanent atomic.Pointer[KafkaError]
}

// deliveryState is the delivery goroutine's view of the current trouble,
// for logging once per episode.
type deliveryState struct {
	reason    string // "" while delivering
	fromCheck bool   // the failure came from the cluster check
	since     time.Time
	lastLog   time.Time
	attempts  int
	tooLarge  bool // a too-large record was reported
}

// failure records a failed attempt: counted always, logged when the reason
// changes, and for errors a retry may fix, once a minute while they last.
func (k *Kafka) failure(e *KafkaError, fromCheck bool) {
	k.health.errs[kafkaReasonIndex(e.Reason)].Add(1)
	k.health.up.Store(false)
	if e.Permanent {
		k.health.permanent.Store(e)
	} else {
		k.health.permanent.Store(nil)
	}
	st := &k.st
	now := time.Now()
	st.attempts++
	st.fromCheck = fromCheck
	queued, spooled := k.q.depth()
	switch {
	case st.reason != e.Reason:
		if st.reason == "" {
			st.since, st.attempts = now, 1
		}
		st.reason, st.lastLog = e.Reason, now
		if e.Permanent {
			k.log.Error("kafka: delivery stopped: "+e.what(), "reason", e.Reason, "err", e.Err, "fix", e.Fix,
				"queued", queued, "spool_unread_bytes", spooled, "recheck_every", k.cfg.RecheckInterval.String())
		} else {
			k.log.Warn("kafka: delivery failing, records kept queued and retried", "reason", e.Reason, "err", e.Err,
				"queued", queued, "spool_unread_bytes", spooled)
		}
	case !e.Permanent && now.Sub(st.lastLog) >= time.Minute:
		st.lastLog = now
		k.log.Warn("kafka: delivery still failing", "reason", e.Reason, "err", e.Err, "for", now.Sub(st.since).Round(time.Second).String(),
			"attempts", st.attempts, "queued", queued, "spool_unread_bytes", spooled)
	}
}

// success records a delivered batch (or, fromCheck, a passed cluster check
// after a failed one).
func (k *Kafka) success(fromCheck bool) {
	st := &k.st
	if fromCheck && st.reason != "" && !st.fromCheck {
		// The check passes on cached metadata; only a produce tells that
		// the brokers are back.
		return
	}
	k.health.up.Store(true)
	k.health.permanent.Store(nil)
	if st.reason != "" {
		k.log.Info("kafka: delivering again", "after", time.Since(st.since).Round(time.Second).String(), "attempts", st.attempts, "was", st.reason)
		st.reason = ""
	}
}

// Collector returns a Prometheus collector of the sink's health:
// pqwatch_kafka_up and pqwatch_kafka_errors_total{reason}, read at scrape
// time. Register it with the registry of the process's other metrics
// (there are no such series without a Kafka feed).
func (k *Kafka) Collector() prometheus.Collector {
	f := newKafkaHealthFamily()
	f.attach(k)
	return f
}

// kafkaHealthFamily exports pqwatch_kafka_up and
// pqwatch_kafka_errors_total of the Kafka sinks attached to it, read at
// scrape time. Without a sink it has no series; with several, up is 1 only
// when all are, and errors add up.
type kafkaHealthFamily struct {
	up, errs  *prometheus.Desc
	unspooled *prometheus.Desc // pqwatch_kafka_spool_unwritten_total (spool.go)
	mu        sync.Mutex
	sinks     []*Kafka
}

func newKafkaHealthFamily() *kafkaHealthFamily {
	return &kafkaHealthFamily{
		up: prometheus.NewDesc(namespace+"_kafka_up",
			"1 when the last Kafka produce or cluster check succeeded, 0 while delivery fails (pqwatch_kafka_errors_total says why). Only with a Kafka feed.",
			nil, nil),
		errs: prometheus.NewDesc(namespace+"_kafka_errors_total",
			"Failed Kafka produce attempts and cluster checks by reason: network, broker (retried), unknown_topic, authorization, authentication, tls (need a change on the brokers or in pqwatch's flags), message_too_large (the record is dropped), other. Only with a Kafka feed.",
			[]string{"reason"}, nil),
		unspooled: spoolUnwrittenDesc(),
	}
}

func (f *kafkaHealthFamily) attach(k *Kafka) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sinks = append(f.sinks, k)
}

func (f *kafkaHealthFamily) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.up
	ch <- f.errs
	ch <- f.unspooled
}

func (f *kafkaHealthFamily) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	sinks := slices.Clone(f.sinks)
	f.mu.Unlock()
	if len(sinks) == 0 {
		return
	}
	up := 1.0
	var errs [len(kafkaReasons)]uint64
	var unspooled uint64
	for _, k := range sinks {
		n, _ := k.SpoolWriteFailures()
		unspooled += n
		if !k.health.up.Load() {
			up = 0
		}
		for i := range errs {
			errs[i] += k.health.errs[i].Load()
		}
	}
	ch <- prometheus.MustNewConstMetric(f.up, prometheus.GaugeValue, up)
	for i, r := range KafkaErrorReasons {
		ch <- prometheus.MustNewConstMetric(f.errs, prometheus.CounterValue, float64(errs[i]), r)
	}
	ch <- prometheus.MustNewConstMetric(f.unspooled, prometheus.CounterValue, float64(unspooled))
}
