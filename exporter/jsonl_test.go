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
	// A pod from the log's directory, one from the generation's cgroup
	// (UID and container ID only), and one with nothing known.
	podLog := sampleRecord()
	podLog.Pod = &record.Pod{Namespace: "ingress-nginx", Name: "ingress-nginx-controller-7d9f-x2b4q", UID: "0f4c8a52-3c1e-4a8e-9d52-1b2c3d4e5f60", Container: "controller"}
	podGen := sampleRecord()
	gen := *podGen.Generation
	gen.Pod = &record.Pod{UID: "0f4c8a52-3c1e-4a8e-9d52-1b2c3d4e5f60", ContainerID: "ab12"}
	podGen.Generation = &gen
	podEmpty := classicalRecord()
	podEmpty.Pod = &record.Pod{}
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
		"pod from the log": podLog, "pod from the generation": podGen, "pod with nothing known": podEmpty,
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

// TestJSONLWriteError: a writer that fails (after taking part of a line)
// puts the output in a failing state: Write never fails, lines that fit
// wait, the rest are counted; the line cut in two is finished first when
// the writer works again, and the probe writes what waits without a new
// record. Every record is either written whole or counted.
func TestJSONLWriteError(t *testing.T) {
	fw := &roomWriter{room: 1500}
	var h Health
	sh := h.Sink("jsonl")
	j := NewJSONLWith(fw, JSONLOptions{EachLine: true, Health: sh})
	const n = 400
	for range n {
		if err := j.Write(sampleRecord()); err != nil {
			t.Fatalf("Write failed: %v", err)
		}
	}
	if r, ok := sh.Failing(); !ok || !strings.Contains(r, "disk full") {
		t.Fatalf("not failing: %q %v", r, ok)
	}
	if d := h.Degraded(); len(d) != 1 || !strings.HasPrefix(d[0], "jsonl: ") {
		t.Errorf("Degraded() = %q", d)
	}
	fw.setRoom(1 << 30)
	deadline := time.Now().Add(3 * time.Second)
	for _, ok := sh.Failing(); ok && time.Now().Before(deadline); _, ok = sh.Failing() {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := sh.Failing(); ok {
		t.Fatal("the output did not resume by itself")
	}
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	out := fw.bytes()
	if len(out) == 0 || out[len(out)-1] != '\n' {
		t.Fatalf("output ends in a partial line")
	}
	got := 0
	for l := range bytes.SplitSeq(bytes.TrimSuffix(out, []byte("\n")), []byte("\n")) {
		if !json.Valid(l) {
			t.Fatalf("line %d is not whole JSON: %.80q", got+1, l)
		}
		got++
	}
	lost, lostBytes := sh.LostTotals()
	if got+int(lost) != n || lost == 0 || lostBytes == 0 {
		t.Errorf("%d written + %d counted lost (%d bytes) != %d records", got, lost, lostBytes, n)
	}
}

// roomWriter takes room bytes, then writes part of a buffer and fails.
type roomWriter struct {
	mu   sync.Mutex
	room int
	b    bytes.Buffer
}

var errDisk = errors.New("disk full")

func (w *roomWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) <= w.room {
		w.room -= len(p)
		return w.b.Write(p)
	}
	n := w.room
	w.b.Write(p[:n])
	w.room = 0
	return n, errDisk
}

func (w *roomWriter) setRoom(n int) { w.mu.Lock(); w.room = n; w.mu.Unlock() }
func (w *roomWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.b.Bytes())
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
