package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// clickHouseSQL returns the ```sql blocks of docs/schema/clickhouse.md's
// section titled heading.
func clickHouseSQL(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "schema", "clickhouse.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("clickhouse.md: no section %q", heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// clickHouse is a throwaway clickhouse-server on loopback.
type clickHouse struct{ port string }

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// startClickHouse starts clickhouse-server with its data under a test
// directory, listening on loopback only; stopped when the test ends.
func startClickHouse(t *testing.T) *clickHouse {
	t.Helper()
	dir := t.TempDir()
	ch := &clickHouse{port: freePort(t)}
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/err.log</errorlog><size>10M</size><count>1</count></logger>
    <tcp_port>%[2]s</tcp_port>
    <http_port>%[3]s</http_port>
    <listen_host>127.0.0.1</listen_host>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <users_config>%[1]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>104857600</mark_cache_size>
</yandex>
`, dir, ch.port, freePort(t))
	users := `<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>1000000000</max_memory_usage></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default></default></quotas>
</yandex>
`
	for name, text := range map[string]string{"config.xml": config, "users.xml": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	srv := exec.Command("clickhouse-server", "--config-file="+filepath.Join(dir, "config.xml"))
	srv.Dir, srv.Stdout, srv.Stderr = dir, &stderr, &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for i := 0; ; i++ {
		if _, err := ch.query(nil, "SELECT 1"); err == nil {
			return ch
		} else if i == 60 {
			log, _ := os.ReadFile(filepath.Join(dir, "err.log"))
			t.Fatalf("clickhouse-server did not answer on 127.0.0.1:%s in 30 s: %v\n%s\n%s", ch.port, err, stderr.String(), log)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// query runs sql (several statements) with in as its input.
func (ch *clickHouse) query(in io.Reader, sql string, settings ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--host", "127.0.0.1", "--port", ch.port, "--allow_experimental_low_cardinality_type=1", "-n", "--query", sql}, settings...)
	cmd := exec.CommandContext(ctx, "clickhouse-client", args...)
	cmd.Stdin = in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return out, nil
}

// The worked example's 18.16 dialect (docs/schema/clickhouse.md) on the
// records plan reads gives plan's today figures, per node, per server
// and for the fleet, exactly; FINAL drops the duplicates plan drops.
func TestPlanClickHouse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clickhouse-server: not with -short")
	}
	for _, p := range []string{"clickhouse-server", "clickhouse-client"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skip(p + " not installed (Debian: apt-get install clickhouse-server clickhouse-client)")
		}
	}
	blocks := clickHouseSQL(t, "On ClickHouse 18.16 (Debian 12)")
	if len(blocks) != 2 {
		t.Fatalf("%d sql blocks in the 18.16 section, want the DDL and the per-node query", len(blocks))
	}
	ddl, perNode := blocks[0], strings.TrimSuffix(strings.TrimSpace(blocks[1]), ";")

	dir := t.TempDir()
	file := filepath.Join(dir, "records.jsonl")
	g := newRecordGen(t, 20_000, 200)
	g.dupEvery, g.dupLag = 100, 37
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	if _, err := io.Copy(w, g); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, out, stderr := run(t, "plan", "-format", "json", file)
	if code != exitOK {
		t.Fatalf("plan: %d: %s", code, stderr)
	}
	var plan map[string]any
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}

	ch := startClickHouse(t)
	if _, err := ch.query(nil, ddl); err != nil {
		t.Fatalf("the doc's DDL: %v", err)
	}
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := ch.query(in, "INSERT INTO pqwatch_handshakes_queue FORMAT JSONEachRow", "--input_format_skip_unknown_fields=1"); err != nil {
		t.Fatal(err)
	}
	rows := func(sql string) []map[string]any {
		t.Helper()
		b, err := ch.query(nil, sql+" FORMAT JSONEachRow", "--output_format_json_quote_64bit_integers=0")
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var rs []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var r map[string]any
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	var loaded []map[string]any = rows("SELECT count() AS n FROM pqwatch_handshakes")
	if n := loaded[0]["n"].(float64); int(n) != 20_000+g.dups || g.dups == 0 {
		t.Fatalf("%v rows loaded, %d records and %d second deliveries generated", n, 20_000, g.dups)
	}
	fields := [][2]string{{"handshakes", "handshakes"}, {"completed", "completed"}, {"pq", "pq_completed"}, {"pq_share", "pq_share"}, {"hrr", "hrr_handshakes"}, {"hrr_share", "hrr_share"}, {"failed", "failed"}}
	compared := 0
	compare := func(scope, name string, p, c map[string]any) {
		t.Helper()
		for _, f := range fields {
			compared++
			if p[f[0]] != c[f[1]] {
				t.Errorf("%s %s: plan %s %v, ClickHouse %s %v", scope, name, f[0], p[f[0]], f[1], c[f[1]])
			}
		}
	}
	for _, scope := range []struct{ key, column string }{{"nodes", "node"}, {"servers", "server"}} {
		sql := strings.ReplaceAll(perNode, "node", scope.column)
		got := rows(sql)
		want := plan[scope.key].(map[string]any)
		if len(got) != len(want) {
			t.Errorf("%s: ClickHouse %d rows, plan %d", scope.key, len(got), len(want))
		}
		for _, r := range got {
			name := r[scope.column].(string)
			p, ok := want[name].(map[string]any)
			if !ok {
				t.Errorf("%s %s: not in the plan", scope.key, name)
				continue
			}
			compare(scope.key, name, p, r)
		}
	}
	fleetSQL := strings.Replace(strings.Replace(perNode, "SELECT node,", "SELECT", 1), "GROUP BY node\nORDER BY node", "", 1)
	compare("fleet", "", plan, rows(fleetSQL)[0])
	if dups := plan["duplicates_dropped"].(float64); int(dups) != g.dups {
		t.Errorf("plan dropped %v duplicates, %d generated", dups, g.dups)
	}
	t.Logf("%d figures compared (%d nodes, %d servers, the fleet); %d duplicates dropped by both", compared, len(plan["nodes"].(map[string]any)), len(plan["servers"].(map[string]any)), g.dups)
}
