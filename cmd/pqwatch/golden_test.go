package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnalyzeGolden pins the output of analyze, every -format, on the
// testdata capture with and without logs, policies, filters and damage:
// refactorings keep it byte-identical (go test -run TestAnalyzeGolden
// -update rewrites testdata/golden/*.golden after an intended change).
func TestAnalyzeGolden(t *testing.T) {
	capture := filepath.Join("..", "..", "testdata", "handshakes.pcap")
	g := func(name string) string { return filepath.Join("testdata", "golden", name) }
	good, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	trunc := filepath.Join(tmp, "trunc.pcap")
	if err := os.WriteFile(trunc, good[:len(good)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	edge := `$remote_addr $remote_port $msec "$request" $status "$http_user_agent" $ssl_curve $pid`
	logs := []string{"-nginx-log", g("access.log"), "-nginx-log-format", edge, "-caddy-log", g("caddy.log"), "-nginx-error-log", g("error.log")}
	cases := []struct {
		name string
		args []string
	}{
		{"text", nil},
		{"json", []string{"-format", "json"}},
		{"jsonl", []string{"-format", "jsonl"}},
		{"ecs-jsonl", []string{"-format", "ecs-jsonl"}},
		{"policy-go", []string{"-format", "json", "-forecast-groups", "go=X25519MLKEM768,x25519"}},
		{"policy-openssl30-text", []string{"-forecast-groups", "openssl3.0=x25519,secp256r1"}},
		{"ports-none", []string{"-ports", "8443"}},
		{"ports-json", []string{"-format", "json", "-ports", "443"}},
		{"joined-text", logs},
		{"joined-json", append([]string{"-format", "json"}, logs...)},
		{"joined-jsonl", append([]string{"-format", "jsonl"}, logs...)},
		{"joined-ecs-jsonl", append([]string{"-format", "ecs-jsonl"}, logs...)},
		{"conf-json", []string{"-format", "json", "-nginx-conf", g("nginx.conf"), "-nginx-log", g("access.log")}},
		{"two-files-json", []string{"-format", "json", capture}},
		{"truncated-text", []string{trunc}},
		{"truncated-json", []string{"-format", "json", trunc}},
		{"missing-json", []string{"-format", "json", filepath.Join(tmp, "missing.pcap")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"analyze"}, c.args...)
			if !strings.Contains(c.name, "truncated") && !strings.Contains(c.name, "missing") {
				args = append(args, capture)
			}
			code, out, errs := run(t, args...)
			got := fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", code, out, errs)
			got = strings.ReplaceAll(got, tmp, "$TMP")
			path := g(c.name + ".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("analyze %s differs from %s (run with -update after an intended change):\n%s", strings.Join(c.args, " "), path, got)
			}
		})
	}
}
