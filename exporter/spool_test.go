package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

func TestSpoolCorruptTail(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m := qmsg{topic: "t", key: []byte{byte('a' + i)}, value: []byte("value")}
		if !sp.append(&m) {
			t.Fatal("not appended")
		}
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	// Tear the last frame, as a crash mid-write would.
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	fi, _ := os.Stat(segs[0])
	if err := os.Truncate(segs[0], fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	sp, err = openSpool(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var keys string
	var locs []spoolLoc
	for {
		m, ok, err := sp.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if m.topic != "t" || string(m.value) != "value" {
			t.Errorf("message %+v", m)
		}
		keys += string(m.key)
		locs = append(locs, m.loc)
	}
	if keys != "ab" || sp.corrupt != 1 || !sp.empty() {
		t.Errorf("read keys %q, corrupt %d, empty %v", keys, sp.corrupt, sp.empty())
	}
	// Read is not delivered: the segment stays until both are acknowledged.
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix)); len(left) != 1 {
		t.Errorf("segments before the acknowledgement: %v", left)
	}
	if err := sp.markAcked(locs); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left after every frame was acknowledged: %v", left)
	}
}

// TestSpoolAckMarks: frames acknowledged out of order (a partition that
// fails while others deliver) are marked; after a crash the spool hands out
// exactly the others, in order, and removes segments once all is acked.
func TestSpoolAckMarks(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 1<<20, 4*frameSize(&qmsg{topic: "t", key: []byte{'a'}, value: []byte("value")}))
	if err != nil {
		t.Fatal(err)
	}
	var locs []spoolLoc
	for i := range 10 { // segments of 4, 4 and 2 frames
		m := qmsg{topic: "t", key: []byte{byte('a' + i)}, value: []byte("value")}
		loc, ok := sp.appendLoaded(&m)
		if !ok {
			t.Fatal("not written")
		}
		locs = append(locs, loc)
	}
	// Acked: a, b, d, e, f, g, h (all of the second segment), j. Not: c, i.
	if err := sp.markAcked([]spoolLoc{locs[0], locs[1], locs[3]}); err != nil {
		t.Fatal(err)
	}
	if err := sp.markAcked(locs[4:8]); err != nil {
		t.Fatal(err)
	}
	if err := sp.markAcked(locs[9:10]); err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix)); len(segs) != 2 {
		t.Errorf("segments %v, want the fully acknowledged one removed", segs)
	}
	// A crash: no close. The next run reads what is not acknowledged.
	sp2, err := openSpool(dir, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var keys string
	var again []spoolLoc
	for {
		m, ok, err := sp2.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		keys += string(m.key)
		again = append(again, m.loc)
	}
	if keys != "ci" || sp2.corrupt != 0 {
		t.Errorf("after the crash: read %q (corrupt %d), want \"ci\"", keys, sp2.corrupt)
	}
	if err := sp2.markAcked(again); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left after every frame was acknowledged: %v", left)
	}
	_ = sp.close()
}

func TestAppendKey(t *testing.T) {
	h := sampleRecord()
	v6 := sampleRecord()
	v6.Client = "[2001:db8:1:2:3::4]:443"
	mapped := sampleRecord()
	mapped.Client = ""
	copy(mapped.ClientAddr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 203, 0, 113, 77})
	for _, tc := range []struct {
		name string
		key  KafkaKey
		h    *record.Handshake
		want string
	}{
		{"server", KeyServer, h, "198.51.100.1:443"},
		{"sni", KeySNI, h, "www.example.com"},
		{"client /24", KeyClientNetwork, h, "192.0.2.0/24"},
		{"client /64", KeyClientNetwork, v6, "2001:db8:1:2::/64"},
		{"client from ClientAddr", KeyClientNetwork, mapped, "203.0.113.0/24"},
		{"none", KeyNone, h, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendKey(nil, tc.key, tc.h)); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewKafkaConfigErrors(t *testing.T) {
	for name, cfg := range map[string]KafkaConfig{
		"no brokers": {},
		"bad acks":   {Brokers: []string{"x:1"}, Acks: "some"},
		"bad key":    {Brokers: []string{"x:1"}, Key: "ja4"},
		"bad codec":  {Brokers: []string{"x:1"}, Compression: "brotli"},
		"bad sasl":   {Brokers: []string{"x:1"}, SASL: &SASLConfig{Mechanism: "gssapi"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewKafka(cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
		})
	}
}

// FuzzSpoolOpen: whatever a crash or a disk leaves in a segment and its ack
// file, opening the spool and reading it neither panics nor hands out a
// frame twice, and acknowledging what it read removes both files.
func FuzzSpoolOpen(f *testing.F) {
	var seg bytes.Buffer
	sp := &spool{}
	for i := range 3 {
		m := qmsg{topic: "t", key: []byte{byte('a' + i)}, value: []byte("value")}
		_ = sp.writeFrame(&seg, &m)
	}
	n := frameSize(&qmsg{topic: "t", key: []byte{'a'}, value: []byte("value")})
	f.Add(seg.Bytes(), appendAck(nil, 0, n))
	f.Add(seg.Bytes()[:len(seg.Bytes())-3], appendAck(appendAck(nil, n, n), 0, 1))
	f.Add([]byte{0, 0, 0, 5, 1, 2, 3, 4, 0}, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, segData, ackData []byte) {
		dir := t.TempDir()
		name := fmt.Sprintf("%020d", firstSeq)
		if err := os.WriteFile(filepath.Join(dir, name+segSuffix), segData, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+ackSuffix), ackData, 0o600); err != nil {
			t.Fatal(err)
		}
		sp, err := openSpool(dir, 1<<20, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var locs []spoolLoc
		seen := map[int64]bool{}
		for range 1000 {
			m, ok, err := sp.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if seen[m.loc.off] {
				t.Fatalf("frame at %d handed out twice", m.loc.off)
			}
			seen[m.loc.off] = true
			locs = append(locs, m.loc)
		}
		if !sp.empty() {
			t.Fatalf("not empty after reading: %d bytes unread", sp.unread)
		}
		if err := sp.markAcked(locs); err != nil {
			t.Fatal(err)
		}
		if err := sp.close(); err != nil {
			t.Fatal(err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
			t.Fatalf("files left after acknowledging every frame read: %v", left)
		}
	})
}
