package exporter

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
)

const testTopic = "pqwatch.handshakes"

// startBroker starts a one-broker kfake cluster persisting to dir, on port
// (0: any free port).
func startBroker(t *testing.T, port int, dir string, topics ...string) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, topics...)}
	if dir != "" {
		opts = append(opts, kfake.DataDir(dir))
	}
	var c *kfake.Cluster
	var err, lastErr error
	// The port may still be held for a moment after a restart.
	t0 := time.Now()
	for i := range 100 {
		if c, err = kfake.NewCluster(opts...); err == nil {
			if i > 0 {
				t.Logf("kfake: port %d free after %v: %v", port, time.Since(t0), lastErr)
			}
			return c
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("kfake: %v", err)
	return nil
}

// stopBroker stops c the way a broker's controlled shutdown looks on the
// wire: produce requests are refused (their connections closed without an
// append) and then the listener goes away.
func stopBroker(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("broker shutting down"), true
	})
	time.Sleep(300 * time.Millisecond) // let in-flight responses reach the client
	c.Close()
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func seqRecord(i int) *record.Handshake {
	h := sampleRecord()
	h.Server = "10.0.0." + strconv.Itoa(i%5+1) + ":443"
	h.JA4 = fmt.Sprintf("seq%07d", i)
	h.TS = h.TS.Add(time.Duration(i) * time.Millisecond)
	return h
}

type readMsg struct {
	partition int
	offset    int64
	key       string
	seq       int
	header    string
}

// readAll reads want messages from every partition of topic.
func readAll(t *testing.T, addr, topic string, want int, timeout time.Duration) []readMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		mu  sync.Mutex
		out []readMsg
		wg  sync.WaitGroup
	)
	enough := make(chan struct{})
	var once sync.Once
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers: []string{addr}, Topic: topic, Partition: p,
				MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond,
			})
			defer r.Close()
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			go func() {
				select {
				case <-enough:
					rcancel()
				case <-rctx.Done():
				}
			}()
			for {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					return
				}
				var h record.Handshake
				if err := json.Unmarshal(m.Value, &h); err != nil {
					t.Errorf("partition %d offset %d: %v", p, m.Offset, err)
					continue
				}
				seq, _ := strconv.Atoi(h.JA4[3:])
				rm := readMsg{partition: p, offset: m.Offset, key: string(m.Key), seq: seq}
				for _, hd := range m.Headers {
					if hd.Key == SchemaHeader {
						rm.header = string(hd.Value)
					}
				}
				mu.Lock()
				out = append(out, rm)
				if len(out) >= want {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Give a duplicate the chance to show up.
	return out
}

func checkExactlyOnceInOrder(t *testing.T, got []readMsg, n int) {
	t.Helper()
	slices.SortFunc(got, func(a, b readMsg) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
	seen := make(map[int]int, n)
	last := map[string]readMsg{}
	for _, m := range got {
		seen[m.seq]++
		if m.header != SchemaVersion {
			t.Errorf("seq %d: schema_version header %q", m.seq, m.header)
		}
		if prev, ok := last[m.key]; ok {
			if prev.partition != m.partition {
				t.Errorf("key %s in partitions %d and %d", m.key, prev.partition, m.partition)
			} else if prev.seq > m.seq {
				t.Errorf("key %s: seq %d at offset %d after seq %d at offset %d", m.key, m.seq, m.offset, prev.seq, prev.offset)
			}
		}
		last[m.key] = m
	}
	missing, dup := 0, 0
	for i := range n {
		switch seen[i] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	if missing != 0 || dup != 0 || len(got) != n {
		t.Errorf("read %d messages for %d records: %d missing, %d duplicated", len(got), n, missing, dup)
	}
}

func TestKafkaSurvivesBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s broker outage; skipped with -short")
	}
	dir := t.TempDir()
	c := startBroker(t, 0, dir, testTopic)
	addr := c.ListenAddrs()[0]
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)

	k, err := NewKafka(KafkaConfig{
		Brokers: []string{addr}, Topic: testTopic, Key: KeyServer,
		BatchSize: 100, BatchTimeout: 5 * time.Millisecond, WriteTimeout: 2 * time.Second,
		RetryBackoffMax: 500 * time.Millisecond, MemoryBytes: 8 << 20, MetadataTTL: time.Second,
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}

	const rate = 200 // records per second
	outage := 30 * time.Second
	total := 0
	write := func(d time.Duration) {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			<-tick.C
			if err := k.Write(seqRecord(total)); err != nil {
				t.Fatalf("write %d: %v", total, err)
			}
			total++
		}
	}

	write(2 * time.Second)
	stopBroker(c)
	down := time.Now()
	write(outage)
	duringOutage := k.Stats()
	c = startBroker(t, port, dir, testTopic)
	t.Cleanup(c.Close)
	t.Logf("broker down for %v; at restart: %+v", time.Since(down).Round(time.Millisecond), duringOutage)
	write(2 * time.Second)

	deadline := time.Now().Add(20 * time.Second)
	for k.Stats().Delivered < uint64(total) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	st := k.Stats()
	t.Logf("records %d, stats %+v", total, st)
	if duringOutage.Failed == 0 {
		t.Errorf("no failed delivery during the outage: the broker was not down")
	}
	if st.Delivered != uint64(total) || st.Dropped != 0 {
		t.Errorf("delivered %d dropped %d of %d", st.Delivered, st.Dropped, total)
	}
	got := readAll(t, c.ListenAddrs()[0], testTopic, total, 20*time.Second)
	checkExactlyOnceInOrder(t, got, total)
}

// deadBroker returns the address of a port where nothing listens, and a
// function that starts a broker there.
func deadBroker(t *testing.T, topics ...string) (addr string, start func() *kfake.Cluster) {
	t.Helper()
	c := startBroker(t, 0, "", topics...)
	addr = c.ListenAddrs()[0]
	c.Close()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	return addr, func() *kfake.Cluster {
		c := startBroker(t, port, "", topics...)
		t.Cleanup(c.Close)
		return c
	}
}

func waitDelivered(t *testing.T, k *Kafka, n uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for k.Stats().Delivered < n {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d after %v: %+v", k.Stats().Delivered, n, timeout, k.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fastConfig(addr string) KafkaConfig {
	return KafkaConfig{
		Brokers: []string{addr}, Topic: testTopic,
		BatchSize: 50, BatchTimeout: 5 * time.Millisecond, WriteTimeout: time.Second,
		RetryBackoffMin: 20 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
		MetadataTTL: 500 * time.Millisecond,
	}
}

func TestKafkaOverflowCountsDropped(t *testing.T) {
	addr, start := deadBroker(t, testTopic)
	reg := prometheusRegistry()
	m := NewMetrics(reg)
	cfg := fastConfig(addr)
	cfg.Metrics, cfg.Logger = m, testLogger(t)
	size := (&qmsg{topic: testTopic, key: []byte(seqRecord(0).Server), value: AppendJSON(nil, seqRecord(0))}).size()
	const capMsgs = 10
	cfg.MemoryBytes = capMsgs * size
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var accepted []int
	for i := range n {
		switch err := k.Write(seqRecord(i)); {
		case err == nil:
			accepted = append(accepted, i)
		case errors.Is(err, ErrDropped):
		default:
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if len(accepted) != capMsgs {
		t.Fatalf("accepted %d records, want %d", len(accepted), capMsgs)
	}
	if got := k.Stats().Dropped; got != n-capMsgs {
		t.Errorf("dropped %d, want %d", got, n-capMsgs)
	}
	c := start()
	waitDelivered(t, k, capMsgs, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Error(err)
	}
	got := readAll(t, c.ListenAddrs()[0], testTopic, capMsgs, 10*time.Second)
	checkExactlyOnceInOrder(t, got, capMsgs) // the first capMsgs records, no others
	if v := counterValue(m.kafka[KafkaDropped]); v != n-capMsgs {
		t.Errorf("pqwatch_kafka_messages_total{result=dropped} = %v, want %d", v, n-capMsgs)
	}
	if v := counterValue(m.kafka[KafkaDelivered]); v != capMsgs {
		t.Errorf("pqwatch_kafka_messages_total{result=delivered} = %v, want %d", v, capMsgs)
	}
}

// spoolConfig returns a config whose memory holds 5 records and whose spool
// holds 20, in segments of 3.
func spoolConfig(t *testing.T, addr string) KafkaConfig {
	m := qmsg{topic: testTopic, key: []byte(seqRecord(0).Server), value: AppendJSON(nil, seqRecord(0))}
	cfg := fastConfig(addr)
	cfg.Logger = testLogger(t)
	cfg.MemoryBytes = 5 * m.size()
	cfg.SpoolDir = t.TempDir()
	cfg.SpoolBytes = 20 * frameSize(&m)
	cfg.SpoolSegmentBytes = 3 * frameSize(&m)
	return cfg
}

func closeShort(t *testing.T, k *Kafka) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return k.Close(ctx)
}

// TestKafkaSpoolRestart: with the broker down, records overflow memory into
// the spool; Close moves memory to the front of the spool; a new sink on the
// same directory delivers everything, once, in order.
func TestKafkaSpoolRestart(t *testing.T) {
	addr, start := deadBroker(t, testTopic)
	cfg := spoolConfig(t, addr)
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := k.Write(seqRecord(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if st := k.Stats(); st.Spooled != n-5 || st.Queued != 5 {
		t.Fatalf("stats %+v, want 5 in memory and %d spooled", st, n-5)
	}
	if err := closeShort(t, k); err != nil {
		t.Logf("close: %v", err) // closing the writer may hit the deadline
	}
	if st := k.Stats(); st.Dropped != 0 {
		t.Fatalf("close dropped messages although the spool had room: %+v", st)
	}

	c := start()
	k2, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, k2, n, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k2.Close(ctx); err != nil {
		t.Error(err)
	}
	checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, n, 10*time.Second), n)
	if left, _ := filepath.Glob(filepath.Join(cfg.SpoolDir, "*"+segSuffix)); len(left) != 0 {
		t.Errorf("spool segments left after delivery: %v", left)
	}
}

// TestKafkaSpoolOverflow: beyond memory and spool, records are dropped and
// counted at Write: the newest. Memory is written to the spool before the
// first overflow (the spool keeps arrival order), so at Close nothing more
// is lost, and after a restart the 20 oldest records are delivered.
func TestKafkaSpoolOverflow(t *testing.T) {
	addr, start := deadBroker(t, testTopic)
	cfg := spoolConfig(t, addr)
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for i := range 30 {
		if err := k.Write(seqRecord(i)); errors.Is(err, ErrDropped) {
			if i < 20 {
				t.Errorf("record %d dropped with room in the spool", i)
			}
			dropped++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if st := k.Stats(); st.Spooled != 15 || st.WrittenAhead != 5 || dropped != 10 || st.Dropped != 10 {
		t.Fatalf("stats %+v, %d dropped at Write; want 5 in memory written ahead, 15 spooled, 10 dropped", st, dropped)
	}
	if err := closeShort(t, k); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close: %v", err) // closing the writer may hit the deadline
	}
	if st := k.Stats(); st.Dropped != 10 {
		t.Errorf("stats %+v, want still 10 dropped", st)
	}
	c := start()
	k2, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, k2, 20, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k2.Close(ctx); err != nil {
		t.Error(err)
	}
	checkExactlyOnceInOrder(t, readAll(t, c.ListenAddrs()[0], testTopic, 20, 10*time.Second), 20)
}

func TestKafkaCloseDeadlineBrokerDown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{"connection refused", func(t *testing.T) string { addr, _ := deadBroker(t, testTopic); return addr }},
		{"broker never answers", func(t *testing.T) string {
			c := startBroker(t, 0, "", testTopic)
			t.Cleanup(c.Close)
			c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				return nil, nil, true // swallow every request
			})
			return c.ListenAddrs()[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig(tc.setup(t))
			cfg.WriteTimeout = 30 * time.Second // longer than the Close deadline
			cfg.Logger = testLogger(t)
			reg := prometheusRegistry()
			cfg.Metrics = NewMetrics(reg)
			k, err := NewKafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := k.Write(seqRecord(i)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			t0 := time.Now()
			err = k.Close(ctx)
			took := time.Since(t0)
			if took > 1500*time.Millisecond {
				t.Errorf("Close took %v with a 1s deadline", took)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close: %v, want DeadlineExceeded", err)
			}
			if st := k.Stats(); st.Dropped != 10 || st.Delivered != 0 {
				t.Errorf("stats %+v, want 10 dropped", st)
			}
			if v := counterValue(cfg.Metrics.kafka[KafkaDropped]); v != 10 {
				t.Errorf("dropped metric %v", v)
			}
			if err := k.Write(seqRecord(99)); !errors.Is(err, ErrClosed) {
				t.Errorf("Write after Close: %v", err)
			}
			if err := k.Close(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestKafkaRollupTopic(t *testing.T) {
	const rollupTopic = "pqwatch.rollups"
	c := startBroker(t, 0, "", testTopic, rollupTopic)
	t.Cleanup(c.Close)
	cfg := fastConfig(c.ListenAddrs()[0])
	cfg.RollupTopic, cfg.RollupInterval, cfg.Logger = rollupTopic, time.Hour, testLogger(t)
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		h := sampleRecord()
		if i%2 == 1 {
			h = classicalRecord()
		}
		if err := k.Write(h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil { // emits the partial window
		t.Fatal(err)
	}
	if st := k.Stats(); st.Delivered != 11 {
		t.Fatalf("stats %+v, want 10 records + 1 rollup delivered", st)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.ListenAddrs(), Topic: rollupTopic, Partition: partitionOf(t, c, rollupTopic), MaxWait: 100 * time.Millisecond})
	defer r.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	msg, err := r.ReadMessage(rctx)
	if err != nil {
		t.Fatal(err)
	}
	var row report.RollupRow
	if err := json.Unmarshal(msg.Value, &row); err != nil {
		t.Fatal(err)
	}
	if row.Server != sampleRecord().Server || string(msg.Key) != row.Server || row.Handshakes != 10 || row.PQShare != 0.5 ||
		row.Groups["X25519MLKEM768"].Handshakes != 5 || row.ClientHelloBytes == nil {
		t.Errorf("rollup row %s", msg.Value)
	}
}

// partitionOf finds the partition of the rollup topic that holds data.
func partitionOf(t *testing.T, c *kfake.Cluster, topic string) int {
	t.Helper()
	conn, err := kafka.Dial("tcp", c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for p := range 3 {
		pc, err := kafka.DialLeader(context.Background(), "tcp", c.ListenAddrs()[0], topic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := pc.ReadLastOffset()
		pc.Close()
		if err == nil && last > 0 {
			return p
		}
	}
	t.Fatal("rollup topic is empty")
	return 0
}

func BenchmarkKafkaEnqueue(b *testing.B) {
	// A dead broker address: the benchmark measures Write (encode + queue),
	// not the network. Every 4096 writes the queue is emptied directly, as
	// delivery would, so memory stays bounded and nothing is dropped.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	k, err := NewKafka(KafkaConfig{Brokers: []string{addr}, RetryBackoffMin: time.Hour, RetryBackoffMax: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = k.Close(ctx)
	}()
	h := sampleRecord()
	b.SetBytes(int64(len(AppendJSON(nil, h))))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := k.Write(h); err != nil {
			b.Fatal(err)
		}
		if n++; n == 4096 {
			queued, _ := k.q.depth()
			k.q.ack(queued, nil)
			n = 0
		}
	}
}

// TestKafkaTLS delivers through a TLS listener, verifying the broker's
// certificate.
func TestKafkaTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := fastConfig(c.ListenAddrs()[0])
	cfg.Logger = testLogger(t)
	cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	deliverFive(t, cfg)
}

// deliverFive writes five records through a sink of cfg, waits (10 s at
// most) until the broker has them, and closes the sink.
func deliverFive(t *testing.T, cfg KafkaConfig) {
	t.Helper()
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_ = k.Write(seqRecord(i))
	}
	waitDelivered(t, k, 5, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Error(err)
	}
}

// TestKafkaSASL delivers through a broker that requires SASL, with each
// mechanism, and delivers nothing with a wrong password.
func TestKafkaSASL(t *testing.T) {
	for _, tc := range []struct{ mech, kfakeMech string }{
		{"plain", "PLAIN"}, {"scram-sha-256", "SCRAM-SHA-256"}, {"scram-sha-512", "SCRAM-SHA-512"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic),
				kfake.EnableSASL(), kfake.Superuser(tc.kfakeMech, "pqwatch", "s3cret"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			cfg := fastConfig(c.ListenAddrs()[0])
			cfg.Logger = testLogger(t)
			cfg.SASL = &SASLConfig{Mechanism: tc.mech, Username: "pqwatch", Password: "s3cret"}
			deliverFive(t, cfg)

			cfg.SASL.Password = "wrong"
			bad, err := NewKafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_ = bad.Write(seqRecord(0))
			time.Sleep(300 * time.Millisecond)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel2()
			_ = bad.Close(ctx2)
			if st := bad.Stats(); st.Delivered != 0 || st.Dropped != 1 {
				t.Errorf("wrong password: %+v", st)
			}
		})
	}
}
