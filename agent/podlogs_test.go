package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
)

// TestPodLogsDiscovery: over a fixture var/log/pods, the first listing
// takes an ingress-nginx log (upstreaminfo, CRI) and a Caddy log
// (json-file) from their ends, leaves an application's log out saying why,
// waits for a log with stderr lines only and takes it from its beginning
// once access lines come, follows a container's restart to its new log,
// lets a deleted pod's log go, and never follows a link out of the
// directory.
func TestPodLogsDiscovery(t *testing.T) {
	root := t.TempDir()
	pods := filepath.Join(root, "pods")
	outside := filepath.Join(root, "outside")
	const uid = "3f8a2c1e-5b7d-4e9a-8c6f-0123456789a"
	write := func(p string, lines ...string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o755)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			f.WriteString(l + "\n")
		}
		f.Close()
	}
	cri := func(stream, l string) string { return "2026-12-05T08:58:45.419141256Z " + stream + " F " + l }
	upstream := `10.198.0.1 - - [05/Dec/2026:08:58:45 +0000] "GET /p HTTP/1.1" 200 615 "-" "Go-http-client/1.1" 78 0.002 [default-web-443] [] 10.199.0.2:8443 615 0.002 200 6f5c0c3a1f1e4a0e9b1d2c3e4f5a6b7c`
	caddy := `{"log":"{\"level\":\"info\",\"ts\":1767268800.1,\"logger\":\"http.log.access\",\"request\":{\"remote_ip\":\"10.0.0.3\",\"remote_port\":\"40001\",\"method\":\"GET\",\"uri\":\"/\"},\"status\":200}\n","stream":"stdout","time":"2026-12-05T08:58:45.419141256Z"}`
	ingress := filepath.Join(pods, "ingress-nginx_controller-x_"+uid+"1", "controller", "0.log")
	caddyLog := filepath.Join(pods, "web_caddy-0_"+uid+"2", "caddy", "0.log")
	app := filepath.Join(pods, "app_api-0_"+uid+"3", "api", "0.log")
	quiet := filepath.Join(pods, "web_web-0_"+uid+"4", "nginx", "0.log")
	write(ingress, cri("stderr", "I1205 controller started"), cri("stdout", upstream))
	write(caddyLog, caddy)
	write(app, cri("stdout", "listening on :8080"), cri("stdout", "ready"))
	write(quiet, cri("stderr", "2026/12/05 08:58:45 [notice] 1#1: start worker processes"))
	// A pod directory that is a link out, and a directory of no pod.
	write(filepath.Join(outside, "c", "0.log"), cri("stdout", upstream))
	os.Symlink(outside, filepath.Join(pods, "evil_x_"+uid+"5"))
	write(filepath.Join(pods, "not-a-pod", "c", "0.log"), cri("stdout", upstream))

	type took struct {
		path, source, format string
		fromEnd              bool
	}
	var taken []took
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p := newPodLogs(a, pods)
	ctxs := map[string]context.Context{}
	p.take = func(ctx context.Context, _ *sync.WaitGroup, path, how string, lr *logjoin.LineReader, opts logparse.TailOptions) {
		if how != howPodLogs || len(opts.SymlinkDirs) != 1 || opts.SymlinkDirs[0] != pods {
			t.Errorf("%s: how %q, symlink dirs %v", path, how, opts.SymlinkDirs)
		}
		taken = append(taken, took{path, lr.Source(), lr.FormatName(), opts.StartAtEnd})
		ctxs[path] = ctx
	}
	var wg sync.WaitGroup
	ctx := context.Background()
	p.scan(ctx, &wg, true)
	got := map[string]took{}
	for _, tk := range taken {
		got[tk.path] = tk
	}
	if len(taken) != 2 || got[ingress] != (took{ingress, "nginx", "upstreaminfo", true}) || got[caddyLog] != (took{caddyLog, "caddy", "", true}) {
		t.Fatalf("first listing took %+v", taken)
	}
	notTaken := p.notTakenLogs()
	if len(notTaken) != 2 || notTaken[0].Path != app || !strings.Contains(notTaken[0].Reason, "0 of 2 lines parse") ||
		notTaken[1].Path != quiet || !strings.Contains(notTaken[1].Reason, "no access-log lines") {
		t.Fatalf("not taken: %+v", notTaken)
	}

	// The quiet nginx logs its first request: taken from its beginning.
	taken = nil
	write(quiet, cri("stdout", upstream))
	p.checkPending(ctx, &wg)
	if len(taken) != 1 || taken[0] != (took{quiet, "nginx", "upstreaminfo", false}) {
		t.Fatalf("after the quiet log's first line: took %+v", taken)
	}
	// The ingress controller restarts (1.log); the caddy pod is deleted.
	taken = nil
	write(filepath.Join(filepath.Dir(ingress), "1.log"), cri("stdout", upstream))
	os.RemoveAll(filepath.Dir(filepath.Dir(caddyLog)))
	p.scan(ctx, &wg, false)
	if len(taken) != 1 || taken[0].path != filepath.Join(filepath.Dir(ingress), "1.log") || taken[0].fromEnd {
		t.Fatalf("after a restart: took %+v", taken)
	}
	if ctxs[ingress].Err() == nil || ctxs[caddyLog].Err() == nil {
		t.Error("the restarted container's old log or the deleted pod's log is still tailed")
	}
	if ctxs[quiet].Err() != nil {
		t.Error("a log still there was let go")
	}
	// The application's log stays out; nothing outside was looked at.
	if nt := p.notTakenLogs(); len(nt) != 1 || nt[0].Path != app {
		t.Errorf("not taken: %+v", nt)
	}
}
