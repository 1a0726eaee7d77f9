package exporter

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestJSONLFullDisk: a JSONL file on a full filesystem. Every record is
// in the file whole or counted lost, no partial line is left, and writing
// resumes within a second of space returning, by itself.
func TestJSONLFullDisk(t *testing.T) {
	dir := smallTmpfs(t, "512k")
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 400<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "records.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h Health
	sh := h.Sink("jsonl")
	j := NewJSONLWith(f, JSONLOptions{FlushAfter: 100 * time.Millisecond, Health: sh, Name: path})
	const first, second = 1200, 300
	for range first {
		j.Write(sampleRecord())
	}
	if _, ok := sh.Failing(); !ok {
		t.Fatal("the disk did not fill: make the filler larger")
	}
	freed := time.Now()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for _, ok := sh.Failing(); ok && time.Since(freed) < 3*time.Second; _, ok = sh.Failing() {
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := sh.Failing(); ok {
		t.Fatal("no write within 3 s of space returning")
	}
	if d := time.Since(freed); d > 1200*time.Millisecond {
		t.Errorf("resumed %v after space returned, want within a second", d)
	}
	for range second {
		j.Write(sampleRecord())
	}
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatal("the file ends in a partial line")
	}
	got := 0
	for l := range bytes.SplitSeq(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if !json.Valid(l) {
			t.Fatalf("line %d is not a whole record: %.80q", got+1, l)
		}
		got++
	}
	lost, _ := sh.LostTotals()
	t.Logf("%d records written, %d counted lost", got, lost)
	if got+int(lost) != first+second || lost == 0 {
		t.Errorf("%d in the file + %d counted lost != %d written", got, lost, first+second)
	}
}
