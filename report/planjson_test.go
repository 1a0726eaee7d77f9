package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// planView is what the plan reads of a record (Add, the forecast, the
// costs, the policy check and its listed violations).
type planView struct {
	TS, Loc                                string
	Client, Server, SNI                    string
	OfferedGroups                          []string
	OfferedIDs                             []uint16
	KeyShares                              []record.KeyShare
	KeyShareIDs                            []uint16
	PQOffered, PQ, HRR                     bool
	Version, Group, HRRGroup, GroupMissing string
	Outcome, Alert, JA4, Node, ID          string
	HasID                                  bool
	CHBytes, SHBytes, WireSegs             int
	Log                                    bool
	UserAgent                              string
}

func viewOf(r *record.Handshake) planView {
	v := planView{
		TS: r.TS.Format("2006-01-02T15:04:05.999999999Z07:00") + "|" + r.TS.GoString(), Loc: r.TS.Location().String(),
		Client: r.ClientText(), Server: r.Server, SNI: r.SNI,
		PQOffered: r.PQOffered, PQ: r.PQ, HRR: r.HRR,
		Version: r.Version, Group: r.Group, HRRGroup: r.HRRGroup, GroupMissing: r.GroupMissing,
		Outcome: r.Outcome, Alert: r.Alert, JA4: r.JA4, Node: r.Node, ID: r.RecordID(), HasID: r.HasID(),
		CHBytes: r.ClientHelloBytes, SHBytes: r.ServerHelloBytes, WireSegs: r.ClientHelloWireSegments,
		Log: r.Log != nil,
	}
	// Lengths and contents: the plan reads no capacity and no nil-ness.
	v.OfferedGroups = append([]string{}, r.OfferedGroups...)
	v.OfferedIDs = append([]uint16{}, r.OfferedIDs...)
	v.KeyShares = append([]record.KeyShare{}, r.KeyShares...)
	v.KeyShareIDs = append([]uint16{}, r.KeyShareIDs...)
	if r.Log != nil {
		v.UserAgent = r.Log.UserAgent
	}
	return v
}

// referenceDecode is the plan's reference: encoding/json, then FillIDs.
func referenceDecode(line []byte) (record.Handshake, error) {
	var h record.Handshake
	err := json.Unmarshal(line, &h)
	h.FillIDs()
	return h, err
}

// checkDecode: when the fast decoder reads line, the reference reads it
// without error and the plan's view of both is the same.
func checkDecode(t *testing.T, d *PlanDecoder, line []byte) bool {
	t.Helper()
	var got record.Handshake
	if !d.Decode(line, &got) {
		return false
	}
	want, err := referenceDecode(line)
	if err != nil {
		t.Fatalf("fast decoder reads a line encoding/json refuses (%v): %q", err, line)
	}
	if g, w := viewOf(&got), viewOf(&want); !reflect.DeepEqual(g, w) {
		t.Fatalf("line %q\nfast      %+v\nreference %+v", line, g, w)
	}
	return true
}

// planGoldenLines are the record lines of the plan's and analyze's golden
// inputs and outputs.
func planGoldenLines(t testing.TB) [][]byte {
	var out [][]byte
	for _, pat := range []string{"plan/*.jsonl", "plan/recapture/*.jsonl", "golden/*jsonl*.golden"} {
		files, _ := filepath.Glob(filepath.Join("..", "cmd", "pqwatch", "testdata", pat))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if h, err := referenceDecode([]byte(l)); err == nil && h.Outcome != "" {
					out = append(out, []byte(l)) // a record (not ECS, not a rollup)
				}
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("only %d golden lines", len(out))
	}
	return out
}

// Every record of the golden inputs is read by the fast decoder (none
// declined) exactly as encoding/json reads it, twice (the second time
// from its tables).
func TestPlanDecoderGolden(t *testing.T) {
	d := NewPlanDecoder()
	d.Client = true
	lines := planGoldenLines(t)
	for range 2 {
		for _, l := range lines {
			if !checkDecode(t, d, l) {
				t.Errorf("declined a golden line: %s", l)
			}
		}
	}
	t.Logf("%d lines", len(lines))
}

var planDecoderEdges = []string{
	`{}`, `null`, `[]`, `{"outcome":"ok"}`, `{"outcome":null}`, `{"Outcome":"ok"}`, `{"outcome":"ok","outcome":"reset"}`,
	`{"outcome":"o\u006b"}`, `{"outcome":"ok","transport":5}`, `{"outcome":"ok","handshake_rtt_us":1.5}`,
	`{"outcome":"ok","client_hello_bytes":-0}`, `{"outcome":"ok","client_hello_bytes":1e3}`, `{"outcome":"ok","client_hello_bytes":99999999999999999999}`,
	`{"outcome":"ok","ts":"2026-02-30T00:00:00Z"}`, `{"outcome":"ok","ts":"2026-02-28T23:59:60Z"}`, `{"outcome":"ok","ts":"2026-01-01T00:00:00+01:00"}`,
	`{"outcome":"ok","ts":"2026-01-01T00:00:00.1Z"}`, `{"outcome":"ok","ts":"2026-01-01T00:00:00.Z"}`, `{"outcome":"ok","ts":"2026-01-01t00:00:00Z"}`,
	`{"outcome":"ok","log":{}}`, `{"outcome":"ok","log":null}`, `{"outcome":"ok","log":{"user_agent":"curl/8","User_agent":"x"}}`,
	`{"outcome":"ok","log":{"status":"200"}}`, `{"outcome":"ok","generation":{"master_pid":"1"}}`, `{"outcome":"ok","generation":{"x":[1,{"y":null}]}}`,
	`{"outcome":"ok","key_shares":[{"group":"x25519","bytes":32},{"bytes":1}]}`, `{"outcome":"ok","key_shares":[null]}`, `{"outcome":"ok","key_shares":[]}`,
	`{"outcome":"ok","offered_groups":[]}`, `{"outcome":"ok","offered_groups":["nope","x25519","0x11ec"]}`, `{"outcome":"ok","offered_groups":["a\"b"]}`,
	`{"outcome":"ok","alpn":["h2",1]}`, `{"outcome":"ok","id":"abc-000000000000002a"}`, `{"outcome":"ok","id":"abc-000000000000002A"}`,
	`{"outcome":"ok","id":"-0000000000000000"}`, `{"outcome":"ok","id":""}`, `{"outcome":"ok","sni":"caf\xc3\xa9"}`, `{"outcome":"ok","sni":"caf\xff"}`,
	`{"outcome":"ok","pq":tru}`, `{"outcome":"ok"} x`, `{"outcome":"ok",}`, `{"outcome":"ok","x":"\q"}`, `{"outcome":"ok","ſerver":"a"}`,
}

func TestPlanDecoderEdges(t *testing.T) {
	d := NewPlanDecoder()
	d.Client = true
	for _, l := range planDecoderEdges {
		checkDecode(t, d, []byte(l))
	}
}

// FuzzPlanDecoder: on any line the fast decoder reads, encoding/json reads
// the same values (see checkDecode).
func FuzzPlanDecoder(f *testing.F) {
	for _, l := range planGoldenLines(f) {
		f.Add(l)
	}
	for _, l := range planDecoderEdges {
		f.Add([]byte(l))
	}
	golden := planGoldenLines(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		d := NewPlanDecoder()
		d.Client = true
		checkDecode(t, d, golden[len(line)%len(golden)]) // its texts recent
		checkDecode(t, d, line)
		checkDecode(t, d, line) // from the tables
	})
}

// The switches say what the maps say.
func TestPlanFieldSwitches(t *testing.T) {
	for k, f := range planFields {
		if got := planFieldOf([]byte(k)); got != f {
			t.Errorf("%s: %d, want %d", k, got, f)
		}
	}
	for _, m := range []map[string]byte{planLogFields, planGenFields, planKSFields} {
		for k, f := range m {
			if got := planNestedOf([]byte(k), m); got != f {
				t.Errorf("%s: %c, want %c", k, got, f)
			}
		}
		if planNestedOf([]byte("nope"), m) != 0 {
			t.Error("nope")
		}
	}
	if len(planLogFields) == len(planGenFields) || len(planLogFields) == len(planKSFields) || len(planGenFields) == len(planKSFields) {
		t.Error("planNestedOf tells the maps apart by their sizes")
	}
}

func TestPlanPlain(t *testing.T) {
	naive := func(b []byte) bool {
		for _, c := range b {
			if c == '\\' || c < 0x20 {
				return false
			}
		}
		return true
	}
	for i := range 200000 {
		b := make([]byte, i%23)
		for j := range b {
			b[j] = byte(0x20 + (i*7+j*13)%0xe0)
		}
		if len(b) > 0 && i%3 == 0 {
			b[i%len(b)] = byte(i / 3 % 256)
		}
		if planPlain(b) != naive(b) {
			t.Fatalf("%q: %v", b, planPlain(b))
		}
	}
}

// planPlainEnd finds the closing quote of a plain string exactly: the
// first '"', -1 when a '\\' or a control character comes first or there
// is none.
func TestPlanPlainEnd(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			switch {
			case c == '"':
				return i
			case c == '\\' || c < 0x20:
				return -1
			}
		}
		return -1
	}
	specials := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff, '"' ^ 1, '\\' ^ 1}
	for i := range 300000 {
		b := make([]byte, i%37)
		for j := range b {
			b[j] = byte(0x23 + (i*7+j*13)%0x39) // no '"' or '\\'
		}
		for k := range i % 4 {
			if len(b) > 0 {
				b[(i/4+k*11)%len(b)] = specials[(i/7+k)%len(specials)]
			}
		}
		if got, want := planPlainEnd(b), naive(b); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	}
}

// Records of one PlanClass are one record but for ts, client and id: the
// golden lines, each again with another ts, client and id, through one
// decoder.
func TestPlanClassSameRecord(t *testing.T) {
	d := NewPlanDecoder()
	d.Client = true
	byClass := map[PlanClass]planView{}
	lines := planGoldenLines(t)
	classes := 0
	for pass := range 3 {
		for i, l := range lines {
			line := l
			if pass > 0 {
				var m map[string]any
				if err := json.Unmarshal(l, &m); err != nil {
					t.Fatal(err)
				}
				m["ts"] = fmt.Sprintf("2026-04-0%dT01:02:03.%09dZ", pass, i)
				m["client"] = fmt.Sprintf("192.0.2.%d:%d", pass, 1000+i)
				m["id"] = fmt.Sprintf("node%d-%016x", pass, i+1)
				var err error
				if line, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			var r record.Handshake
			if !d.Decode(line, &r) {
				continue
			}
			k, ok := d.Class()
			if !ok {
				t.Fatalf("no class: %s", line)
			}
			v := viewOf(&r)
			v.TS, v.Loc, v.Client, v.ID, v.HasID = "", "", "", "", false
			if old, seen := byClass[k]; !seen {
				byClass[k] = v
				classes++
			} else if !reflect.DeepEqual(old, v) {
				t.Fatalf("one class, two records:\n%+v\n%+v", old, v)
			}
		}
	}
	if classes < 10 {
		t.Fatalf("%d classes", classes)
	}
}

// planParseTime, its date from the last one's or parsed, reads what
// time.Time's UnmarshalJSON reads, to the same time.Time.
func TestPlanParseTime(t *testing.T) {
	var day planDay
	for _, v := range []string{
		"2026-03-01T00:00:00Z", "2026-03-01T23:59:59.999999999Z", "2026-03-01T12:00:00.5Z", "2026-03-02T00:00:00.000000001Z",
		"2024-02-29T10:00:00Z", "2023-02-29T10:00:00Z", "2024-02-29T24:00:00Z", "2024-02-29T10:60:00Z", "2024-02-29T10:00:60Z",
		"2024-02-29T10:00:00.Z", "2024-13-01T00:00:00Z", "2024-00-01T00:00:00Z", "2024-01-00T00:00:00Z", "2024-04-31T00:00:00Z",
		"2024-04-30T01:02:03+00:00", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.123Z", "1969-12-31T23:59:59.9Z", "1969-12-31T23:59:58Z",
	} {
		var want time.Time
		werr := want.UnmarshalJSON([]byte(`"` + v + `"`))
		got, ok := planParseTime([]byte(v), &day)
		switch {
		case ok && werr != nil:
			t.Errorf("%s: read, encoding/json refuses it: %v", v, werr)
		case ok && (got != want || got.GoString() != want.GoString()):
			t.Errorf("%s: %s, want %s", v, got.GoString(), want.GoString())
		case !ok && werr == nil && !strings.Contains(v, "+"):
			t.Errorf("%s: declined, encoding/json reads it", v)
		}
	}
}
