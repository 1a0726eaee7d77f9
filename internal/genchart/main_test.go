package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	recs := filepath.Join(dir, "records.jsonl")
	os.WriteFile(recs, []byte(`{"ts":"2026-12-05T12:41:04.500000000Z","group":"x25519","pq":false,"generation":{"id":"nginx-3bac05767a0a-26920","openssl":"OpenSSL 3.0.19"}}
{"ts":"2026-12-05T12:41:05.000000000Z","group":"X25519MLKEM768","pq":true,"generation":{"id":"nginx-3df098091284-27282","openssl":"OpenSSL 3.5.7"}}
{"ts":"2026-12-05T12:41:06.000000000Z","group":"X25519MLKEM768","pq":true,"generation":{"id":"nginx-3df098091284-27282","openssl":"OpenSSL 3.5.7"}}
{"ts":"2026-12-05T12:41:06.500000000Z","group":"x25519","pq":false}
`), 0o644)
	res := filepath.Join(dir, "results.json")
	os.WriteFile(res, []byte(`{"started":"2026-12-05T12:41:04.000000000Z","events":[{"time":"2026-12-05T12:41:04.900000000Z","step":"USR2 old master","pid":26920,"ok":true}]}`), 0o644)
	log := filepath.Join(dir, "pqwatch.log")
	os.WriteFile(log, []byte(`time=2026-12-05T12:41:24.607Z level=INFO msg="go processors" gomaxprocs=2
time=2026-12-05T12:41:24.607Z level=WARN msg="swap event" component=proctrack kind=failed generation=nginx-3df098091284-27282 other=nginx-3df098091284-27282 msg="swap failed ([emerg] x=\"y z\"): no new master runs" ts=2026-12-05T12:41:07.000Z
`), 0o644)
	var out bytes.Buffer
	svg := filepath.Join(dir, "g.svg")
	if err := run(recs, []string{res}, log, 0.5, svg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"4 records, 1 without a generation; origin 2026-12-05T12:41:04Z",
		"| nginx-3bac05767a0a-26920 | OpenSSL 3.0.19 | 1 | 0 | 0.0% | 0.50 | 0.50 |",
		"| nginx-3df098091284-27282 | OpenSSL 3.5.7 | 2 | 2 | 100.0% | 1.00 | 2.00 |",
		"pqwatch swap event at 3.00 s: failed nginx-3df098091284-27282",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, _ := os.ReadFile(svg)
	for _, want := range []string{"pqwatch: failed master 27282", "USR2 old master 26920", "nginx-3df098091284-27282"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	os.WriteFile(recs, []byte(`{"ts":"2026-12-05T12:41:04.500000000Z","group":"x25519"}`+"\n"), 0o644)
	if err := run(recs, nil, "", 0.5, svg, &out); err == nil || !strings.Contains(err.Error(), "names a generation") {
		t.Errorf("records without generations: %v", err)
	}
}
