package exporter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/record"
)

func jsonCases() map[string]*record.Handshake {
	minimal := &record.Handshake{TS: time.Unix(0, 0).UTC(), Transport: record.TransportQUIC, Client: "[2001:db8::1]:443", Server: "[2001:db8::2]:443", Outcome: record.OutcomeTimeout}
	escapes := sampleRecord()
	escapes.SNI = "a\"b\\c\n\t\x01\x7f<>&\u2028\u2029é😀"
	escapes.Log.UserAgent = "bad utf8 \xff\xfe end"
	escapes.Log.Path = "/p?q=\"x\"&y=<z>"
	local := sampleRecord()
	local.TS = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	alert := classicalRecord()
	alert.Outcome, alert.Alert, alert.Log, alert.Generation = record.OutcomeAlert, "handshake_failure", nil, nil
	alert.HRR, alert.HRRGroup, alert.ClientHelloWireSegments = true, "secp256r1", 3
	resumed12 := classicalRecord()
	resumed12.Version, resumed12.Group, resumed12.Resumed, resumed12.GroupMissing = "TLS1.2", "", true, record.GroupMissingResumed
	resumed13 := sampleRecord()
	resumed13.Resumed = true
	live := sampleRecord()
	live.Node, live.ID = "edge-7.example", "9f3c2a1b0d4e5f60-000000000000002a"
	nodeOnly := classicalRecord()
	nodeOnly.Node = "edge-7"
	rsa := classicalRecord()
	rsa.Version, rsa.Group, rsa.GroupMissing = "TLS1.2", "", record.GroupMissingNoKeyExchange
	// The sniffer's: Client left to the address fields.
	fields4, fields6 := sampleRecord(), classicalRecord()
	for h, s := range map[*record.Handshake]string{fields4: "192.0.2.9:50123", fields6: "[2001:db8::7]:443"} {
		ap := netip.MustParseAddrPort(s)
		h.Client, h.ClientAddr, h.ClientPort = record.ClientField(ap), ap.Addr().As16(), ap.Port()
	}
	return map[string]*record.Handshake{
		"resumed TLS1.2": resumed12, "resumed TLS1.3": resumed13, "RSA key transport": rsa,
		"hybrid": sampleRecord(), "classical": classicalRecord(), "minimal": minimal,
		"escapes": escapes, "non-UTC ts": local, "alert with HRR": alert,
		"live node and id": live, "node without id": nodeOnly,
		"client in fields (IPv4)": fields4, "client in fields (IPv6)": fields6,
		"empty slices": {ALPN: []string{}, KeyShares: []record.KeyShare{}, Log: &record.Log{}, Generation: &record.Generation{}},
	}
}

// TestAppendJSONMatchesEncodingJSON checks that AppendJSON and encoding/json
// agree: same keys and values, and AppendJSON's output decodes to the record.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for name, h := range jsonCases() {
		t.Run(name, func(t *testing.T) {
			got := AppendJSON(nil, h)
			if !json.Valid(got) {
				t.Fatalf("invalid JSON: %s", got)
			}
			want, err := json.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			var gm, wm map[string]any
			if err := json.Unmarshal(got, &gm); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &wm); err != nil {
				t.Fatal(err)
			}
			gts, _ := time.Parse(time.RFC3339Nano, gm["ts"].(string))
			wts, _ := time.Parse(time.RFC3339Nano, wm["ts"].(string))
			if !gts.Equal(wts) {
				t.Errorf("ts %v, want %v", gm["ts"], wm["ts"])
			}
			if !strings.HasSuffix(gm["ts"].(string), "Z") || len(gm["ts"].(string)) != len("2006-01-02T15:04:05.000000000Z") {
				t.Errorf("ts %q is not UTC with nanoseconds", gm["ts"])
			}
			delete(gm, "ts")
			delete(wm, "ts")
			if !reflect.DeepEqual(gm, wm) {
				t.Errorf("AppendJSON:\n%s\nencoding/json:\n%s", got, want)
			}
			// Same field order as the struct tags.
			if name != "escapes" && name != "non-UTC ts" && !bytes.Equal(got[bytes.IndexByte(got, ','):], want[bytes.IndexByte(want, ','):]) {
				t.Errorf("byte mismatch:\n%s\n%s", got, want)
			}
		})
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("www.example.com", "Mozilla/5.0", "x25519", 517)
	f.Add("a\"b\\\x00\xff", "\u2028", "0x1234", -1)
	f.Fuzz(func(t *testing.T, sni, ua, group string, n int) {
		h := sampleRecord()
		h.SNI, h.Log.UserAgent, h.Group, h.ClientHelloBytes = sni, ua, group, n
		h.ALPN = []string{ua, sni}
		got := AppendJSON(nil, h)
		var back record.Handshake
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%v: %s", err, got)
		}
		want, _ := json.Marshal(h)
		var wantBack record.Handshake
		_ = json.Unmarshal(want, &wantBack)
		back.TS, wantBack.TS = time.Time{}, time.Time{}
		if !reflect.DeepEqual(back, wantBack) {
			t.Fatalf("round trip differs:\n%s\n%s", got, want)
		}
	})
}

func TestJSONLConcurrent(t *testing.T) {
	var buf bytes.Buffer
	j := NewJSONL(&buf)
	const writers, per = 8, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sampleRecord()
			h.Client = "192.0.2." + string(rune('0'+w)) + ":1"
			for range per {
				if err := j.Write(h); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		var h record.Handshake
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("line %d: %v: %s", lines, err, sc.Bytes())
		}
		lines++
	}
	if lines != writers*per {
		t.Errorf("%d lines, want %d", lines, writers*per)
	}
}

type failWriter struct{ n int }

var errDisk = errors.New("disk full")

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, errDisk
	}
	return len(p), nil
}

func TestJSONLWriteError(t *testing.T) {
	j := NewJSONL(&failWriter{n: 10})
	var err error
	for range 200 {
		if err = j.Write(sampleRecord()); err != nil {
			break
		}
	}
	if err == nil {
		err = j.Flush()
	}
	if !errors.Is(err, errDisk) {
		t.Fatalf("err = %v, want %v", err, errDisk)
	}
	if err2 := j.Write(sampleRecord()); !errors.Is(err2, errDisk) {
		t.Errorf("error not sticky: %v", err2)
	}
}

func TestJSONLWriteAllocs(t *testing.T) {
	j := NewJSONL(io.Discard)
	h := sampleRecord()
	_ = j.Write(h)
	if a := testing.AllocsPerRun(1000, func() { _ = j.Write(h) }); a != 0 {
		t.Errorf("JSONL.Write allocates %v times", a)
	}
}

func BenchmarkJSONLWrite(b *testing.B) {
	j := NewJSONL(io.Discard)
	h := sampleRecord()
	b.SetBytes(int64(len(AppendJSON(nil, h)) + 1))
	b.ReportAllocs()
	for b.Loop() {
		_ = j.Write(h)
	}
}

// BenchmarkEncodingJSON is the baseline AppendJSON replaces.
func BenchmarkEncodingJSON(b *testing.B) {
	enc := json.NewEncoder(io.Discard)
	h := sampleRecord()
	b.ReportAllocs()
	for b.Loop() {
		_ = enc.Encode(h)
	}
}

// TestJSONLFlushAfter: a line waits in the buffer at most FlushAfter; with
// EachLine it is written at once.
func TestJSONLFlushAfter(t *testing.T) {
	var w testenv.Buffer
	j := NewJSONLWith(&w, JSONLOptions{FlushAfter: 50 * time.Millisecond})
	_ = j.Write(sampleRecord())
	if w.Len() != 0 {
		t.Fatalf("line written through before its time")
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	n := w.Len()
	if n == 0 {
		t.Fatal("line still buffered after 5 s")
	}
	_ = j.Write(sampleRecord()) // re-arms after a timed flush
	for w.Len() == n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w.Len() != 2*n {
		t.Errorf("second line: %d bytes written, want %d", w.Len(), 2*n)
	}
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}

	var each testenv.Buffer
	je := NewJSONLWith(&each, JSONLOptions{EachLine: true})
	_ = je.Write(sampleRecord())
	if each.Len() != n {
		t.Errorf("EachLine: %d bytes written at once, want %d", each.Len(), n)
	}
}
