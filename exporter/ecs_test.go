package exporter

import (
	"bytes"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

func ecsSample() *record.Handshake {
	return &record.Handshake{
		TS: time.Date(2026, 1, 1, 12, 0, 0, 80000, time.UTC), Transport: "tcp", Client: "10.0.0.2:40000", Server: "10.0.0.1:443",
		SNI: "pqwatch.test", ALPN: []string{"h2", "http/1.1"}, OfferedGroups: []string{"X25519MLKEM768", "x25519"},
		KeyShares: []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}}, PQOffered: true, Version: "TLS1.3",
		Cipher: "TLS_AES_128_GCM_SHA256", Group: "X25519MLKEM768", PQ: true, ClientHelloBytes: 1504, ServerHelloBytes: 1210,
		Outcome: "ok", HandshakeRTTMicros: 140, JA4: "t13d1312h1_f57a46bbacb6_ab7e3b40a677", Node: "node-a", ID: "9f3c2a1b0d4e5f60-000000000000002a",
	}
}

// TestECSReadsBack: the ECS view of a record reads back to the record.
func TestECSReadsBack(t *testing.T) {
	h := ecsSample()
	h.Pod = &record.Pod{Namespace: "web", Name: "web-0", UID: "0f4c8a52-3c1e-4a8e-9d52-1b2c3d4e5f60", Container: "nginx"}
	back, err := ParseECS(AppendECS(nil, h))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := AppendJSON(nil, back), AppendJSON(nil, h); !bytes.Equal(a, b) {
		t.Errorf("read back as\n%s\nnot\n%s", a, b)
	}
	if !IsECS(AppendECS(nil, h)) || IsECS(AppendJSON(nil, h)) {
		t.Error("IsECS does not tell the ECS view from the record")
	}
}

// BenchmarkAppendECS: the ECS encoder on run's path (-format ecs-jsonl,
// -kafka-format ecs), against AppendJSON's.
func BenchmarkAppendECS(b *testing.B) {
	h := ecsSample()
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendECS(buf[:0], h)
	}
}

// FuzzParseECS: no input makes ParseECS panic, and what it accepts it
// writes back as an ECS line that reads to the same record.
func FuzzParseECS(f *testing.F) {
	f.Add(AppendECS(nil, ecsSample()))
	f.Add([]byte(`{"@timestamp":"x","ecs":{"version":"9.4.0"},"pqwatch":{"outcome":"ok"}}`))
	f.Add([]byte(`{"@timestamp":"2026-01-01T00:00:00Z","ecs":{"version":"1"},"client":{"ip":"::1","port":70000},"pqwatch":{"outcome":"ok"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		h, err := ParseECS(line)
		if err != nil {
			return
		}
		again, err := ParseECS(AppendECS(nil, h))
		if err != nil {
			t.Fatalf("the ECS view of an accepted line does not read: %v", err)
		}
		if a, b := AppendJSON(nil, again), AppendJSON(nil, h); !bytes.Equal(a, b) {
			t.Fatalf("not stable:\n%s\n%s", a, b)
		}
	})
}
