package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
time=2026-12-05T12:41:06.000Z level=INFO msg="swap event" component=proctrack kind=usr2 generation=nginx-2c28ddf8a9ed-11709 other=nginx-3bac05767a0a-11684 msg="new master 11709" ts=2026-12-05T12:41:06.000Z
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
		"1 swap events of generations that served none of the records left out",
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

// TestStudyData: docs/migration-study.md's swap table and chart are what
// this command makes of the run's records kept in testdata/study, and the
// clients' counts it quotes are loadgen's.
func TestStudyData(t *testing.T) {
	const root = "../.."
	td := filepath.Join(root, "testdata", "study")
	var out bytes.Buffer
	svg := filepath.Join(t.TempDir(), "g.svg")
	err := run(filepath.Join(td, "swap-records.jsonl.gz"),
		[]string{filepath.Join(td, "swap-loadgen.json"), filepath.Join(td, "swap-rollback.json")},
		filepath.Join(td, "swap-agent.log"), 0.5, svg, &out)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "migration-study.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The doc's rows: | `id` (A) | library | handshakes | X25519MLKEM768 | x25519 | share |.
	var rows int
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(l, "| `nginx-") {
			continue
		}
		rows++
		c := strings.Split(strings.Trim(l, "| "), " | ")
		id := strings.Trim(strings.Fields(c[0])[0], "`")
		hs, pq, cl := num(c[2]), num(c[3]), num(c[4])
		want := fmt.Sprintf("| %s | %s | %d | %d | %.1f%% |", id, c[1], hs, pq, 100*float64(pq)/float64(hs))
		if !strings.Contains(out.String(), want) || hs != pq+cl {
			t.Errorf("the doc's row %q: genchart says\n%s", l, out.String())
		}
	}
	if rows != 2 {
		t.Errorf("the doc has %d generation rows, want 2 (A and B)", rows)
	}
	if !strings.Contains(out.String(), "failed nginx-3df098091284-27282") || !strings.Contains(string(doc), "kind=failed generation=nginx-3df098091284-27282") {
		t.Error("the failed event the doc quotes is not the run's")
	}
	got, _ := os.ReadFile(svg)
	if want, _ := os.ReadFile(filepath.Join(root, "docs", "img", "migration-swap.svg")); !bytes.Equal(got, want) {
		t.Error("docs/img/migration-swap.svg is not what genchart draws from testdata/study: redraw it (see the doc)")
	}
	// The clients: 611 x25519, 989 + 900 X25519MLKEM768, none failed.
	clients, _ := os.ReadFile(filepath.Join(td, "swap-clients.csv"))
	for _, want := range []string{"loadgen,x25519,200,611", "loadgen,X25519MLKEM768,200,989", "rollback,X25519MLKEM768,200,900"} {
		if !strings.Contains(string(clients), want+"\n") {
			t.Errorf("swap-clients.csv lacks %s", want)
		}
	}
	if n := strings.Count(strings.TrimSpace(string(clients)), "\n"); n != 3 {
		t.Errorf("swap-clients.csv has %d rows, want 3 (no failed request)", n)
	}
	for _, want := range []string{"611 handshakes negotiated x25519", "989 during\nthe swap plus 900"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the doc no longer says %q", want)
		}
	}
}

func num(s string) int {
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		return -1
	}
	return n
}
