package logparse

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChooseFormats: the order of the choice: -nginx-log-as, then
// -nginx-log-format, then the conf's access_log line for the path, then the
// conf format the log's own lines parse in, then combined.
func TestChooseFormats(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	portLog := filepath.Join(dir, "port.log")   // lines in the "pq" format, no access_log line
	namedLog := filepath.Join(dir, "named.log") // the conf's access_log names "pq"
	emptyLog := filepath.Join(dir, "empty.log") // nothing to sample: combined
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(conf, `http {
  log_format pq '$remote_addr:$remote_port [$time_local] "$request" $status $ssl_curve';
  access_log `+namedLog+` pq;
}`)
	var lines strings.Builder
	for range 5 {
		lines.WriteString(`192.0.2.1:40000 [05/Dec/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 X25519MLKEM768` + "\n")
	}
	write(portLog, lines.String())
	write(namedLog, "")
	write(emptyLog, "")

	got, err := ChooseFormats(NginxLogs{Conf: conf, Paths: []string{portLog, namedLog, emptyLog}, As: []string{"combined=" + emptyLog}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ path, how string }{{emptyLog, HowPerFile}, {portLog, HowFound}, {namedLog, HowConfPath}, {emptyLog, HowDefault}}
	if len(got) != len(want) {
		t.Fatalf("got %d logs, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Path != w.path || got[i].How != w.how || got[i].Format == nil {
			t.Errorf("log %d: %s chosen %q, want %s %q", i, got[i].Path, got[i].How, w.path, w.how)
		}
	}
	got, err = ChooseFormats(NginxLogs{Conf: conf, LogFormat: "pq", Paths: []string{emptyLog}})
	if err != nil || got[0].How != HowFlag {
		t.Errorf("-nginx-log-format pq: %+v %v", got, err)
	}
	if _, err := ChooseFormats(NginxLogs{LogFormat: "pq", Paths: []string{emptyLog}}); err == nil || !strings.Contains(err.Error(), "only combined is known") {
		t.Errorf("a format name without a conf: %v", err)
	}
	if _, err := ChooseFormats(NginxLogs{As: []string{"nope"}}); err == nil {
		t.Error("-nginx-log-as without NAME=PATH accepted")
	}
}
