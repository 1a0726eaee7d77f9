package exporter

import (
	"errors"
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
		if ok, err := sp.append(&m); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if _, err := sp.closeWith(nil); err != nil {
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
	}
	if keys != "ab" || sp.corrupt != 1 || !sp.empty() {
		t.Errorf("read keys %q, corrupt %d, empty %v", keys, sp.corrupt, sp.empty())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix)); len(left) != 0 {
		t.Errorf("segments left: %v", left)
	}
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
