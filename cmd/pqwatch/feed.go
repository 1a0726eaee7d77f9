package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/exporter"
)

// saslPasswordEnv is the environment variable that may hold the SASL
// password. There is no password flag: the command line of a process is
// readable by every process on the node (and a hostPID pod shares the
// node's process table).
const saslPasswordEnv = "PQWATCH_KAFKA_SASL_PASSWORD"

// kafkaStartTimeout bounds run's cluster check at start.
const kafkaStartTimeout = 5 * time.Second

// kafkaFlags are `pqwatch run`'s Kafka flags.
type kafkaFlags struct {
	brokers     string
	topic       string
	rollupTopic string
	key         string
	format      string
	acks        string
	compression string
	spoolDir    string
	createTopic bool

	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	tlsInsecure   bool

	saslMechanism    string
	saslUsername     string
	saslPasswordFile string
}

func (kf *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&kf.brokers, "kafka-brokers", "", "Kafka `host:port,...` for the per-handshake feed (empty: no Kafka)")
	fs.StringVar(&kf.topic, "kafka-topic", exporter.DefaultKafkaTopic, "Kafka `topic` for handshake records")
	fs.StringVar(&kf.rollupTopic, "kafka-rollup-topic", "", "optional Kafka `topic` for per-minute rollups")
	fs.StringVar(&kf.format, "kafka-format", "record", "Kafka message value: record (the JSONL record) or ecs (its Elastic Common Schema view, as -format ecs-jsonl; header format: ecs)")
	fs.StringVar(&kf.key, "kafka-key", "server", "Kafka message key: server, sni, client_network or none")
	fs.StringVar(&kf.acks, "kafka-acks", "all", "Kafka acknowledgements: all, leader or none")
	fs.StringVar(&kf.compression, "kafka-compression", "snappy", "Kafka compression: none, gzip, snappy, lz4 or zstd")
	fs.StringVar(&kf.spoolDir, "kafka-spool-dir", "", "`dir` for the Kafka disk spool: records not acknowledged within about a second, and what the memory buffer cannot hold, so that a restart delivers them (empty: memory only)")
	fs.BoolVar(&kf.createTopic, "kafka-create-topic", true, "ask the brokers to create a missing topic (their auto.create.topics.enable and ACLs decide; false: a missing topic is an error at start)")
	kf.registerAuth(fs)
}

// registerAuth registers the TLS and SASL flags (run's and plan's).
func (kf *kafkaFlags) registerAuth(fs *flag.FlagSet) {
	fs.BoolVar(&kf.tls, "kafka-tls", false, "connect to the brokers with TLS, verified against the system's CAs (implied by the other -kafka-tls-* flags)")
	fs.StringVar(&kf.tlsCA, "kafka-tls-ca-file", "", "PEM `file` of the CAs that sign the brokers' certificates (default: the system's)")
	fs.StringVar(&kf.tlsCert, "kafka-tls-cert-file", "", "PEM `file` of the client certificate, for brokers that require one (with -kafka-tls-key-file)")
	fs.StringVar(&kf.tlsKey, "kafka-tls-key-file", "", "PEM `file` of the client certificate's private key")
	fs.StringVar(&kf.tlsServerName, "kafka-tls-server-name", "", "`name` the brokers' certificates are verified against (default: the host of each broker address)")
	fs.BoolVar(&kf.tlsInsecure, "kafka-tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only: anyone on the path can read and change the feed)")
	fs.StringVar(&kf.saslMechanism, "kafka-sasl-mechanism", "", "SASL `mechanism`: plain, scram-sha-256 or scram-sha-512 (empty: no SASL)")
	fs.StringVar(&kf.saslUsername, "kafka-sasl-username", "", "SASL `user`")
	fs.StringVar(&kf.saslPasswordFile, "kafka-sasl-password-file", "", "`file` holding the SASL password (a trailing newline is ignored); or set $"+saslPasswordEnv+"; there is no password flag")
}

// config builds the Kafka sink's configuration; nil without -kafka-brokers.
// getenv reads the environment.
func (kf *kafkaFlags) config(getenv func(string) string, logger *slog.Logger) (*exporter.KafkaConfig, error) {
	if strings.TrimSpace(kf.brokers) == "" {
		return nil, nil
	}
	cfg := &exporter.KafkaConfig{
		Brokers: kf.brokerList(), Topic: kf.topic, RollupTopic: kf.rollupTopic,
		Key: exporter.KafkaKey(kf.key), Acks: exporter.Acks(kf.acks),
		Compression: kf.compression, SpoolDir: kf.spoolDir,
		DisableTopicCreation: !kf.createTopic, StartTimeout: kafkaStartTimeout,
	}
	switch kf.format {
	case "record":
	case "ecs":
		cfg.ECS = true
	default:
		return nil, fmt.Errorf("-kafka-format %q: want record or ecs", kf.format)
	}
	var err error
	if cfg.TLS, err = kf.tlsConfig(); err != nil {
		return nil, err
	}
	if cfg.SASL, err = kf.saslConfig(getenv); err != nil {
		return nil, err
	}
	if cfg.SASL != nil && cfg.SASL.Mechanism == "plain" && cfg.TLS == nil && logger != nil {
		logger.Warn("kafka: SASL PLAIN without TLS sends the password in clear text; add -kafka-tls")
	}
	if kf.tlsInsecure && logger != nil {
		logger.Warn("kafka: -kafka-tls-insecure-skip-verify: the brokers' certificates are not verified")
	}
	return cfg, nil
}

// brokerList is -kafka-brokers split at commas.
func (kf *kafkaFlags) brokerList() []string {
	var brokers []string
	for b := range strings.SplitSeq(kf.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	return brokers
}

func (kf *kafkaFlags) tlsConfig() (*tls.Config, error) {
	if !kf.tls && kf.tlsCA == "" && kf.tlsCert == "" && kf.tlsKey == "" && kf.tlsServerName == "" && !kf.tlsInsecure {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: kf.tlsServerName, InsecureSkipVerify: kf.tlsInsecure}
	if kf.tlsCA != "" {
		pem, err := os.ReadFile(kf.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-kafka-tls-ca-file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-kafka-tls-ca-file %s: no PEM certificate in it", kf.tlsCA)
		}
	}
	if (kf.tlsCert == "") != (kf.tlsKey == "") {
		return nil, errors.New("-kafka-tls-cert-file and -kafka-tls-key-file go together")
	}
	if kf.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(kf.tlsCert, kf.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-kafka-tls-cert-file/-kafka-tls-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (kf *kafkaFlags) saslConfig(getenv func(string) string) (*exporter.SASLConfig, error) {
	env := getenv(saslPasswordEnv)
	if kf.saslMechanism == "" {
		if kf.saslUsername != "" || kf.saslPasswordFile != "" {
			return nil, errors.New("-kafka-sasl-username and -kafka-sasl-password-file need -kafka-sasl-mechanism (plain, scram-sha-256 or scram-sha-512)")
		}
		return nil, nil
	}
	switch kf.saslMechanism {
	case "plain", "scram-sha-256", "scram-sha-512":
	default:
		return nil, fmt.Errorf("-kafka-sasl-mechanism %q: want plain, scram-sha-256 or scram-sha-512", kf.saslMechanism)
	}
	if kf.saslUsername == "" {
		return nil, errors.New("-kafka-sasl-mechanism needs -kafka-sasl-username")
	}
	var password string
	switch {
	case kf.saslPasswordFile != "" && env != "":
		return nil, fmt.Errorf("the SASL password is in both -kafka-sasl-password-file and $%s: use one", saslPasswordEnv)
	case kf.saslPasswordFile != "":
		b, err := os.ReadFile(kf.saslPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("-kafka-sasl-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
		if password == "" {
			return nil, fmt.Errorf("-kafka-sasl-password-file %s is empty", kf.saslPasswordFile)
		}
	case env != "":
		password = env
	default:
		return nil, fmt.Errorf("-kafka-sasl-mechanism needs a password: -kafka-sasl-password-file FILE or $%s (no flag takes it: a command line is visible to every process on the node)", saslPasswordEnv)
	}
	return &exporter.SASLConfig{Mechanism: kf.saslMechanism, Username: kf.saslUsername, Password: password}, nil
}

// nodeName is the node a record is observed on: -node, else the Kubernetes
// node name ($NODE_NAME, from the downward API), else the host name.
func nodeName(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	if n := getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}
