package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

// parseRunFlags parses args as `pqwatch run` does.
func parseRunFlags(t *testing.T, args ...string) (*runFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var rf runFlags
	rf.register(fs)
	return &rf, fs.Parse(args)
}

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestKafkaFlagErrors: what `pqwatch run` refuses among the Kafka flags,
// and that no flag takes a password.
func TestKafkaFlagErrors(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	b := "-kafka-brokers=127.0.0.1:9092"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"password flag", []string{b, "-kafka-sasl-password", "x"}, nil, "flag provided but not defined"},
		{"no password", []string{b, "-kafka-sasl-mechanism", "plain", "-kafka-sasl-username", "u"}, nil, "$" + saslPasswordEnv},
		{"two passwords", []string{b, "-kafka-sasl-mechanism", "plain", "-kafka-sasl-username", "u", "-kafka-sasl-password-file", pw}, map[string]string{saslPasswordEnv: "x"}, "use one"},
		{"empty password file", []string{b, "-kafka-sasl-mechanism", "plain", "-kafka-sasl-username", "u", "-kafka-sasl-password-file", empty}, nil, "is empty"},
		{"no username", []string{b, "-kafka-sasl-mechanism", "scram-sha-256", "-kafka-sasl-password-file", pw}, nil, "-kafka-sasl-username"},
		{"bad mechanism", []string{b, "-kafka-sasl-mechanism", "gssapi", "-kafka-sasl-username", "u", "-kafka-sasl-password-file", pw}, nil, "plain, scram-sha-256 or scram-sha-512"},
		{"user without mechanism", []string{b, "-kafka-sasl-username", "u"}, nil, "-kafka-sasl-mechanism"},
		{"cert without key", []string{b, "-kafka-tls-cert-file", pw}, nil, "go together"},
		{"CA not PEM", []string{b, "-kafka-tls-ca-file", notPEM}, nil, "no PEM certificate"},
		{"CA missing", []string{b, "-kafka-tls-ca-file", filepath.Join(dir, "nope")}, nil, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := parseRunFlags(t, tc.args...)
			if err == nil {
				_, err = rf.kafka.config(envOf(tc.env), nil)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	// The CLI: a usage error, exit 2.
	if code, _, stderr := run(t, "run", b, "-kafka-sasl-mechanism", "plain", "-kafka-sasl-username", "u"); code != exitUsage || !strings.Contains(stderr, saslPasswordEnv) {
		t.Errorf("run without a SASL password: exit %d, %q", code, stderr)
	}

	// Defaults: the topic is created when missing; the node comes from
	// -node, else NODE_NAME, else the host name.
	rf, _ := parseRunFlags(t, b)
	cfg, err := rf.kafka.config(envOf(nil), nil)
	if err != nil || cfg.DisableTopicCreation || cfg.TLS != nil || cfg.SASL != nil || cfg.StartTimeout == 0 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	rf, _ = parseRunFlags(t, b, "-kafka-create-topic=false", "-kafka-sasl-mechanism", "scram-sha-512", "-kafka-sasl-username", "u", "-kafka-sasl-password-file", pw)
	if cfg, err = rf.kafka.config(envOf(nil), nil); err != nil || !cfg.DisableTopicCreation || cfg.SASL.Password != "s3cret" {
		t.Errorf("-kafka-create-topic=false, password file: %+v %+v, %v", cfg, cfg.SASL, err)
	}
	host, _ := os.Hostname()
	for _, tc := range []struct{ flag, env, want string }{{"n1", "n2", "n1"}, {"", "n2", "n2"}, {"", "", host}} {
		if got := nodeName(tc.flag, envOf(map[string]string{"NODE_NAME": tc.env})); got != tc.want {
			t.Errorf("nodeName(%q, NODE_NAME=%q) = %q, want %q", tc.flag, tc.env, got, tc.want)
		}
	}
}

// testPKI is a CA, a broker certificate for the name kafka.test (and no
// IP address) and a client certificate, as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	server, client            tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pqwatch test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string) (tls.Certificate, []byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
			pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server, _, _ = leaf(2, "kafka.test", x509.ExtKeyUsageServerAuth, []string{"kafka.test"})
	var certPEM, keyPEM []byte
	p.client, certPEM, keyPEM = leaf(3, "pqwatch", x509.ExtKeyUsageClientAuth, nil)
	os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	os.WriteFile(p.certFile, certPEM, 0o600)
	os.WriteFile(p.keyFile, keyPEM, 0o600)
	return p
}

// readRecords reads topic's partition 0 until want records came and then
// half a second more (a duplicate would show), or until timeout.
func readRecords(t *testing.T, brokers []string, topic string, dialer *kafka.Dialer, want int, timeout time.Duration) []record.Handshake {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, Dialer: dialer, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []record.Handshake
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return out
		}
		var h record.Handshake
		if err := json.Unmarshal(m.Value, &h); err != nil {
			t.Errorf("offset %d: %v", m.Offset, err)
		}
		out = append(out, h)
		if len(out) == want {
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
		}
	}
}

// TestKafkaFlagsTLSSASL: the TLS and SASL flags reach the brokers: mutual
// TLS verified against -kafka-tls-ca-file under -kafka-tls-server-name,
// SASL PLAIN with the password from the environment, SCRAM-SHA-256 and
// SCRAM-SHA-512 from a file (over TLS): every record is delivered to a
// topic the broker creates. A certificate checked against the wrong name
// is an error at start.
func TestKafkaFlagsTLSSASL(t *testing.T) {
	pki := newTestPKI(t)
	pwFile := filepath.Join(t.TempDir(), "password")
	os.WriteFile(pwFile, []byte("s3cret\n"), 0o600)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	clientTLS := &tls.Config{RootCAs: pki.pool, ServerName: "kafka.test", Certificates: []tls.Certificate{pki.client}, MinVersion: tls.VersionTLS12}
	tlsFlags := []string{"-kafka-tls-ca-file", pki.caFile, "-kafka-tls-cert-file", pki.certFile, "-kafka-tls-key-file", pki.keyFile, "-kafka-tls-server-name", "kafka.test"}
	scram512, _ := scram.Mechanism(scram.SHA512, "pqwatch", "s3cret")
	scram256, _ := scram.Mechanism(scram.SHA256, "pqwatch", "s3cret")
	for _, tc := range []struct {
		name  string
		opts  []kfake.Opt
		flags []string
		env   map[string]string
		tls   *tls.Config
		mech  sasl.Mechanism
	}{
		{"mutual TLS", []kfake.Opt{kfake.TLS(serverTLS)}, tlsFlags, nil, clientTLS, nil},
		{"SASL PLAIN, password from the environment", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "pqwatch", "s3cret")},
			[]string{"-kafka-sasl-mechanism", "plain", "-kafka-sasl-username", "pqwatch"}, map[string]string{saslPasswordEnv: "s3cret"}, nil, plain.Mechanism{Username: "pqwatch", Password: "s3cret"}},
		{"SCRAM-SHA-256, password file", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "pqwatch", "s3cret")},
			[]string{"-kafka-sasl-mechanism", "scram-sha-256", "-kafka-sasl-username", "pqwatch", "-kafka-sasl-password-file", pwFile}, nil, nil, scram256},
		{"SCRAM-SHA-512 over mutual TLS", []kfake.Opt{kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "pqwatch", "s3cret")},
			append([]string{"-kafka-sasl-mechanism", "scram-sha-512", "-kafka-sasl-username", "pqwatch", "-kafka-sasl-password-file", pwFile}, tlsFlags...), nil, clientTLS, scram512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rf, err := parseRunFlags(t, append([]string{"-kafka-brokers", strings.Join(c.ListenAddrs(), ","), "-kafka-topic", "pq.flags"}, tc.flags...)...)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			cfg, err := rf.kafka.config(envOf(tc.env), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			k, err := exporter.NewKafka(*cfg) // checks the cluster first
			if err != nil {
				t.Fatal(err)
			}
			const n = 10
			for i := range n {
				h := &record.Handshake{TS: time.Now(), Transport: "tcp", Client: "192.0.2.1:1234", Server: "198.51.100.1:443", Outcome: "ok", ID: strconv.Itoa(i)}
				if err := k.Write(h); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := k.Close(ctx); err != nil {
				t.Fatalf("close: %v\n%s", err, logs.String())
			}
			got := readRecords(t, c.ListenAddrs(), "pq.flags", &kafka.Dialer{Timeout: 5 * time.Second, TLS: tc.tls, SASLMechanism: tc.mech}, n, 10*time.Second)
			var ids []string
			for _, h := range got {
				ids = append(ids, h.ID)
			}
			if st := k.Stats(); st.Delivered != n || len(got) != n || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != n {
				t.Errorf("stats %+v; read %d records %v; want %d, once each\n%s", st, len(got), ids, n, logs.String())
			}
		})
	}
	t.Run("wrong server name", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.TLS(serverTLS))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rf, _ := parseRunFlags(t, "-kafka-brokers", c.ListenAddrs()[0], "-kafka-tls-ca-file", pki.caFile, "-kafka-tls-cert-file", pki.certFile, "-kafka-tls-key-file", pki.keyFile)
		cfg, err := rf.kafka.config(envOf(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = slog.New(slog.DiscardHandler)
		_, err = exporter.NewKafka(*cfg)
		var ke *exporter.KafkaError
		if !errors.As(err, &ke) || ke.Reason != exporter.KafkaErrTLS || !strings.Contains(err.Error(), "-kafka-tls-server-name") {
			t.Errorf("NewKafka: %v, want a tls KafkaError naming the fix", err)
		}
	})
}

// runAgent runs `pqwatch run ARGS` in this process until stop is called; it
// returns the exit code.
func runAgent(t *testing.T, stderr io.Writer, args ...string) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- runMain(ctx, append([]string{"run"}, args...), io.Discard, stderr) }()
	return func() int {
		cancel()
		return <-done
	}
}

// TestRunKafkaCreatesTopic: `pqwatch run -kafka-brokers B` against a broker
// that allows topic creation, with no topic: every handshake arrives, with
// the node of -node and an id unique per record, the same as in the JSONL
// stream. With -kafka-create-topic=false the same run stops at start with
// the topic and the fix on stderr.
func TestRunKafkaCreatesTopic(t *testing.T) {
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
	code, _, errOut := run(t, "run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-kafka-brokers", brokers, "-kafka-create-topic=false")
	if code != exitFailure || !strings.Contains(errOut, `topic "pqwatch.handshakes" does not exist`) || !strings.Contains(errOut, "kafka-topics.sh") {
		t.Errorf("-kafka-create-topic=false without the topic: exit %d, stderr:\n%s", code, errOut)
	}
	t.Logf("-kafka-create-topic=false without the topic: exit %d, stderr:\n%s", code, errOut)

	out := filepath.Join(t.TempDir(), "records.jsonl")
	stop := runAgent(t, &stderr, "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-format", "jsonl", "-o", out, "-kafka-brokers", brokers, "-node", "edge-test-1", "-log-level", "warn")
	time.Sleep(500 * time.Millisecond)
	const n = 12
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
	got := readRecords(t, c.ListenAddrs(), exporter.DefaultKafkaTopic, nil, ok, 10*time.Second)
	data, _ := os.ReadFile(out)
	var jsonlIDs, kafkaIDs []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var h record.Handshake
		json.Unmarshal([]byte(l), &h)
		jsonlIDs = append(jsonlIDs, h.ID)
	}
	for _, h := range got {
		if h.Node != "edge-test-1" || len(h.ID) != 33 {
			t.Errorf("record node %q id %q", h.Node, h.ID)
		}
		kafkaIDs = append(kafkaIDs, h.ID)
	}
	slices.Sort(jsonlIDs)
	slices.Sort(kafkaIDs)
	if ok != n || len(got) != n || !slices.Equal(jsonlIDs, kafkaIDs) || len(slices.Compact(slices.Clone(kafkaIDs))) != n {
		t.Errorf("clients completed %d of %d; Kafka has %d records; ids in Kafka %v, in JSONL %v\n%s", ok, n, len(got), kafkaIDs, jsonlIDs, stderr.String())
	}
	if strings.Contains(stderr.String(), "level=WARN") || strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("warnings:\n%s", stderr.String())
	}
}

// deadKafka returns a free port's address where no broker listens yet, and
// a function that starts one there (allowing topic creation, one
// partition).
func deadKafka(t *testing.T) (string, func() *kfake.Cluster) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return addr, func() *kfake.Cluster {
		var c *kfake.Cluster
		for range 50 { // the port may be held for a moment
			if c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1)); err == nil {
				t.Cleanup(c.Close)
				return c
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("kfake on port %d: %v", port, err)
		return nil
	}
}

func waitLog(t *testing.T, log *testenv.Buffer, s string, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(log.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestRunKilledKeepsKafkaSpool: `pqwatch run -kafka-spool-dir D` with the
// brokers down, killed with SIGKILL: every record finished more than a
// second before is in the spool, and a restart with the brokers up
// delivers each of them once (the ids of the JSONL stream, no duplicate).
func TestRunKilledKeepsKafkaSpool(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	brokers, startBroker := deadKafka(t)
	dir := t.TempDir()
	spool, out := filepath.Join(dir, "spool"), filepath.Join(dir, "records.jsonl")
	args := []string{"run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-kafka-brokers", brokers, "-kafka-spool-dir", spool}
	var stderr testenv.Buffer
	cmd := pqwatchProcess(t, &stderr, append(args, "-format", "jsonl", "-o", out)...)
	if !waitLog(t, &stderr, "capture starting", 15*time.Second) {
		t.Fatalf("agent did not start:\n%s", stderr.String())
	}
	time.Sleep(300 * time.Millisecond) // rings up
	const n = 20
	ok := 0
	for range n {
		if handshake(t, addr, nil) != "" {
			ok++
		}
	}
	// A record reaches the sink within one ring block timeout (1 s) and the
	// spool within a second more. Wait past both.
	time.Sleep(2500 * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	segs, _ := filepath.Glob(filepath.Join(spool, "*.seg"))
	data, _ := os.ReadFile(out)
	var want []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var h record.Handshake
		json.Unmarshal([]byte(l), &h)
		want = append(want, h.ID)
	}
	t.Logf("after SIGKILL: %d records in the JSONL stream, %d spool segments", len(want), len(segs))

	c := startBroker()
	var stderr2 testenv.Buffer
	cmd2 := pqwatchProcess(t, &stderr2, append(args, "-format", "jsonl", "-o", os.DevNull)...)
	got := readRecords(t, c.ListenAddrs(), exporter.DefaultKafkaTopic, nil, len(want), 15*time.Second)
	cmd2.Process.Signal(syscall.SIGTERM)
	cmd2.Wait()
	var ids []string
	for _, h := range got {
		ids = append(ids, h.ID)
	}
	slices.Sort(ids)
	slices.Sort(want)
	if ok != n || len(want) != n || !slices.Equal(ids, want) {
		t.Errorf("clients completed %d of %d, %d in the JSONL stream; after the restart Kafka has %d records:\n got %v\nwant %v\nfirst run:\n%s\nsecond run:\n%s",
			ok, n, len(want), len(got), ids, want, stderr.String(), stderr2.String())
	}
	if left, _ := filepath.Glob(filepath.Join(spool, "*")); len(left) != 0 {
		t.Errorf("spool files left after everything was delivered: %v", left)
	}
}

// TestRunSecondSignal: SIGTERM with the brokers down says what the agent
// waits for and how long; a second SIGTERM stops it at once, and what was
// queued is in the spool.
func TestRunSecondSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	addr, port := goTLSServer(t)
	brokers, _ := deadKafka(t)
	spool := filepath.Join(t.TempDir(), "spool")
	var stderr testenv.Buffer
	cmd := pqwatchProcess(t, &stderr, "run", "-iface", "lo", "-ports", strconv.Itoa(int(port)), "-metrics-addr", "", "-no-process-tracking",
		"-kafka-brokers", brokers, "-kafka-spool-dir", spool, "-format", "jsonl", "-o", os.DevNull)
	if !waitLog(t, &stderr, "capture starting", 15*time.Second) {
		t.Fatalf("agent did not start:\n%s", stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	for range 5 {
		handshake(t, addr, nil)
	}
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	if !waitLog(t, &stderr, "delivering queued records before stopping", 5*time.Second) {
		t.Fatalf("no word of what the agent waits for:\n%s", stderr.String())
	}
	log := stderr.String()
	for _, want := range []string{"a second SIGINT or SIGTERM stops at once", "queued=5", "deadline=30s"} {
		if !strings.Contains(log, want) {
			t.Errorf("shutdown log lacks %q:\n%s", want, log)
		}
	}
	t0 := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5 s after the second SIGTERM:\n%s", stderr.String())
	}
	took := time.Since(t0)
	if took > 2*time.Second || !strings.Contains(stderr.String(), "stopping at once") || !strings.Contains(stderr.String(), "kept_in_spool=5") {
		t.Errorf("second SIGTERM: exited after %v:\n%s", took, stderr.String())
	}
	if segs, _ := filepath.Glob(filepath.Join(spool, "*.seg")); len(segs) == 0 {
		t.Errorf("nothing in the spool after the second signal")
	}
	t.Logf("exited %v after the second SIGTERM; log:\n%s", took.Round(time.Millisecond), stderr.String())
}
