package logparse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree builds files ("name": content) and links ("name": "->target") under
// dir.
func tree(t *testing.T, dir string, spec map[string]string) {
	t.Helper()
	for name, v := range spec {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(v, "->"):
			err = os.Symlink(v[2:], p)
		case v == "/":
			err = os.MkdirAll(p, 0o755)
		default:
			err = os.WriteFile(p, []byte(v), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// bothWays runs fn with openat2 (when the kernel lets us) and with the
// component walk forced.
func bothWays(t *testing.T, fn func(t *testing.T, walk bool)) {
	t.Run("openat2", func(t *testing.T) {
		if !haveOpenat2() {
			t.Skip("openat2 not available (kernel < 5.6 or filtered)")
		}
		fn(t, false)
	})
	t.Run("walk", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		fn(t, true)
	})
}

func haveOpenat2() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOpenLogRule: the cases of OpenLog's rule, with openat2 and with the
// walk.
func TestOpenLogRule(t *testing.T) {
	top := t.TempDir()
	secret := filepath.Join(top, "root")
	pods := filepath.Join(top, "var/log/pods")
	tree(t, top, map[string]string{
		"root/secret.log": "secret",
		// The tester's attack: a directory on the log's path is a link
		// someone else made, pointing at a root-only directory.
		"var/log/app/x": "->" + secret,
		// A link out of the log's directory, and one inside it.
		"var/log/nginx/access.log":     "access",
		"var/log/nginx/old/access.log": "old",
		"var/log/nginx/cur.log":        "->old/access.log",
		"var/log/nginx/abs.log":        "->" + filepath.Join(top, "var/log/nginx/access.log"),
		"var/log/nginx/out.log":        "->../other/x.log",
		"var/log/other/x.log":          "other",
		"var/log/nginx/secret.log":     "->" + filepath.Join(secret, "secret.log"),
		// A chain that climbs out and comes back in.
		"var/log/nginx/away.log":   "->../other/back.log",
		"var/log/other/back.log":   "->../nginx/access.log",
		"var/log/nginx/loop1.log":  "->loop2.log",
		"var/log/nginx/loop2.log":  "->loop1.log",
		"var/log/nginx/dotdot.log": "->d/../access.log", // d is a link: .. is d's target's parent
		"var/log/nginx/d":          "->old/sub",
		"var/log/nginx/old/sub/x":  "x",
		// ConfigMap mount: file -> ..data/file, ..data -> timestamped dir.
		"cm/nginx.conf": "->..data/nginx.conf",
		"cm/..data":     "->..2026_12_05_08_58_45.123456789",
		"cm/..2026_12_05_08_58_45.123456789/nginx.conf": "conf",
		// kubelet: /var/log/containers/*.log -> /var/log/pods/...
		"var/log/containers/web_ns_nginx-abc.log":   "->" + filepath.Join(pods, "ns_web_uid/nginx/0.log"),
		"var/log/pods/ns_web_uid/nginx/0.log":       "pod",
		"var/log/nginx/fifo-dir/":                   "/",
		"etc/nginx/sites-available/default":         "site",
		"etc/nginx/sites-enabled/default":           "->../sites-available/default",
		"var/log/linked/access.log":                 "->../nginx/access.log",
		"var/log/nginx/dirlink":                     "->old",
		"var/log/nginx/dangling.log":                "->nowhere.log",
		"var/log/nginx/old/sub/../../typed-dotdot/": "/",
	})
	p := func(s string) string { return filepath.Join(top, s) }
	cases := []struct {
		name, path string
		dirs       []string
		want       string // content, or "!symlink", "!notexist", "!notregular", "!loop"
	}{
		{"plain", "var/log/nginx/access.log", nil, "access"},
		{"symlinked parent refused", "var/log/app/x/secret.log", nil, "!symlink"},
		{"symlinked parent, dirs elsewhere", "var/log/app/x/secret.log", []string{p("var/log")}, "!symlink"},
		{"symlinked parent allowed", "var/log/app/x/secret.log", []string{secret}, "secret"},
		{"everything (/)", "var/log/app/x/secret.log", []string{"/"}, "secret"},
		{"link inside the dir", "var/log/nginx/cur.log", nil, "old"},
		{"absolute link inside the dir", "var/log/nginx/abs.log", nil, "access"},
		{"link out of the dir", "var/log/nginx/out.log", nil, "!symlink"},
		{"link out, allowed", "var/log/nginx/out.log", []string{p("var/log/other")}, "other"},
		{"link out, parent allowed", "var/log/nginx/out.log", []string{p("var/log")}, "other"},
		{"link to a secret", "var/log/nginx/secret.log", nil, "!symlink"},
		{"escape and come back", "var/log/nginx/away.log", nil, "!symlink"},
		{"escape and come back, allowed", "var/log/nginx/away.log", []string{p("var/log/other")}, "!symlink"},
		{"escape and come back, parent allowed", "var/log/nginx/away.log", []string{p("var/log")}, "access"},
		{"loop", "var/log/nginx/loop1.log", nil, "!loop"},
		{"dotdot after a link", "var/log/nginx/dotdot.log", nil, "old"},
		{"typed dotdot is lexical", "var/log/nginx/old/../access.log", nil, "access"},
		{"configmap", "cm/nginx.conf", nil, "conf"},
		{"pod log refused", "var/log/containers/web_ns_nginx-abc.log", nil, "!symlink"},
		{"pod log allowed", "var/log/containers/web_ns_nginx-abc.log", []string{pods}, "pod"},
		{"sites-enabled named directly", "etc/nginx/sites-enabled/default", nil, "!symlink"},
		{"sites-enabled, /etc/nginx allowed", "etc/nginx/sites-enabled/default", []string{p("etc/nginx")}, "site"},
		{"a sibling directory's link", "var/log/linked/access.log", nil, "!symlink"},
		{"directory", "var/log/nginx/fifo-dir", nil, "!notregular"},
		{"link to a directory", "var/log/nginx/dirlink", nil, "!notregular"},
		{"dangling", "var/log/nginx/dangling.log", nil, "!notexist"},
		{"missing", "var/log/nginx/missing.log", nil, "!notexist"},
		{"device", "/dev/null", nil, "!notregular"},
		{"magic link", "/proc/self/root/etc/hostname", []string{"/"}, "!loop"},
	}
	bothWays(t, func(t *testing.T, walk bool) {
		for _, c := range cases {
			path := c.path
			if !filepath.IsAbs(path) {
				path = p(path)
			}
			f, err := OpenLog(path, c.dirs)
			got := ""
			switch {
			case err == nil:
				got = readAll(t, f)
			case errors.Is(err, syscall.ELOOP):
				got = "!loop"
			case errors.Is(err, ErrSymlink):
				got = "!symlink"
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "-log-symlink-dirs") {
					t.Errorf("%s: the error names neither the path nor the flag: %v", c.name, err)
				}
			case errors.Is(err, os.ErrNotExist):
				got = "!notexist"
			case errors.Is(err, ErrNotRegular):
				got = "!notregular"
			default:
				got = "!" + err.Error()
			}
			if got != c.want {
				t.Errorf("%s: got %q (err %v), want %q", c.name, got, err, c.want)
			}
		}
	})
}

// TestOpenBeneathWalkEqualsOpenat2: the walk and the kernel's openat2
// agree, RESOLVE_BENEATH and RESOLVE_IN_ROOT, on a table of paths.
func TestOpenBeneathWalkEqualsOpenat2(t *testing.T) {
	if !haveOpenat2() {
		t.Skip("openat2 not available (kernel < 5.6 or filtered)")
	}
	top := t.TempDir()
	root := filepath.Join(top, "etc/nginx")
	tree(t, top, map[string]string{
		"etc/nginx/nginx.conf":                              "main",
		"etc/nginx/sites-available/default":                 "site",
		"etc/nginx/sites-enabled/default":                   "->../sites-available/default",
		"etc/nginx/sites-enabled/abs":                       "->" + filepath.Join(root, "sites-available/default"),
		"etc/nginx/sites-enabled/rootabs":                   "->/sites-available/default",
		"etc/nginx/sites-enabled/out":                       "->../../passwd",
		"etc/nginx/sites-enabled/outback":                   "->../../nginx/nginx.conf",
		"etc/nginx/sites-enabled/deep":                      "->../../../../../../../../nginx.conf",
		"etc/passwd":                                        "passwd",
		"etc/nginx/..data":                                  "->..2026_12_05_08_58_45.123456789",
		"etc/nginx/cm.conf":                                 "->..data/cm.conf",
		"etc/nginx/..2026_12_05_08_58_45.123456789/cm.conf": "cm",
		"etc/nginx/loop":                                    "->loop",
		"etc/nginx/a":                                       "->b",
		"etc/nginx/b":                                       "->a",
		"etc/nginx/d":                                       "->sites-available/sub",
		"etc/nginx/sites-available/sub/x":                   "x",
		"etc/nginx/sites-available/y":                       "y",
		"etc/nginx/viad":                                    "->d/../y",
		"etc/nginx/empty-dir/":                              "/",
		"etc/nginx/dirlink":                                 "->sites-available",
		"etc/nginx/dangling":                                "->nope",
		"etc/nginx/filedir":                                 "->nginx.conf/x",
	})
	names := []string{
		"nginx.conf", "sites-enabled/default", "sites-enabled/abs", "sites-enabled/rootabs",
		"sites-enabled/out", "sites-enabled/outback", "sites-enabled/deep", "../passwd",
		"sites-available/../nginx.conf", "sites-enabled/../sites-available/default", "/nginx.conf",
		"cm.conf", "..data/cm.conf", "loop", "a", "viad", "d/x", "d/../y", "empty-dir", "dirlink",
		"dirlink/default", "dangling", "missing", "nginx.conf/x", "filedir", "..", ".",
		"sites-enabled/default/../default",
	}
	type result struct {
		ino   uint64
		class string
	}
	classify := func(err error) string {
		for _, e := range []struct {
			err  error
			name string
		}{{syscall.EXDEV, "EXDEV"}, {syscall.ELOOP, "ELOOP"}, {syscall.ENOENT, "ENOENT"}, {syscall.ENOTDIR, "ENOTDIR"}, {ErrNotRegular, "not regular"}} {
			if errors.Is(err, e.err) {
				return e.name
			}
		}
		return err.Error()
	}
	of := func(f *os.File, err error) result {
		if err != nil {
			return result{class: classify(err)}
		}
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return result{ino: st.Ino, class: "ok"}
	}
	// kernel opens with openat2 alone (no walk to fall back to).
	kernel := func(name string, res uint64) result {
		rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(rfd)
		fd, err := unix.Openat2(rfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: res | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return result{class: classify(err)}
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return result{class: "not regular"}
		}
		return result{ino: st.Ino, class: "ok"}
	}
	noOpenat2.Store(true)
	defer noOpenat2.Store(false)
	oks := 0
	for _, n := range names {
		for _, m := range []struct {
			how  string
			res  uint64
			open func(root, name string) (*os.File, error)
		}{{"beneath", unix.RESOLVE_BENEATH, OpenBeneath}, {"in-root", unix.RESOLVE_IN_ROOT, OpenInRoot}} {
			want := kernel(n, m.res)
			got := of(m.open(root, n))
			if got != want {
				t.Errorf("%s %q: walk %+v, openat2 %+v", m.how, n, got, want)
			}
			if got.class == "ok" {
				oks++
			}
		}
	}
	if oks < 10 {
		t.Errorf("only %d opens succeeded: the table tests little", oks)
	}
}

// TestTailSymlinkedParent: the tailer refuses a log under a symbolic link
// to elsewhere (logging the path and the flag once), follows it when
// -log-symlink-dirs names the target, and a rotation that puts a link out
// of the directory at the path is refused too: the re-open is confined.
func TestTailSymlinkedParent(t *testing.T) {
	top := t.TempDir()
	tree(t, top, map[string]string{
		"root/secret.log": "2026/01/01 12:00:00 [emerg] 1#1: the secret\n",
		"logs/app/x":      "->" + filepath.Join(top, "root"),
	})
	path := filepath.Join(top, "logs/app/x/secret.log")
	for _, c := range []struct {
		dirs  []string
		lines int
	}{{nil, 0}, {[]string{filepath.Join(top, "root")}, 1}} {
		var logs bytes.Buffer
		tl := NewTailer(path, TailOptions{PollInterval: 10 * time.Millisecond, SymlinkDirs: c.dirs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		n := 0
		if err := tl.Run(ctx, func([]byte, time.Time) { n++ }); err != nil {
			t.Fatal(err)
		}
		cancel()
		if n != c.lines {
			t.Errorf("dirs %v: %d lines, want %d; log:\n%s", c.dirs, n, c.lines, logs.String())
		}
		if c.lines == 0 && (strings.Count(logs.String(), "refusing") != 1 || !strings.Contains(logs.String(), "-log-symlink-dirs") || !strings.Contains(logs.String(), "x/secret.log")) {
			t.Errorf("refusal not logged once with the path and the flag:\n%s", logs.String())
		}
	}

	// Rotation: the new file at the path is a link out of the directory.
	dir := filepath.Join(top, "nginx")
	log := filepath.Join(dir, "access.log")
	tree(t, top, map[string]string{"nginx/access.log": "one\n"})
	var logs bytes.Buffer
	tl := NewTailer(log, TailOptions{PollInterval: 5 * time.Millisecond, RotateWait: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	done := make(chan error)
	lines := make(chan string, 10)
	go func() {
		done <- tl.Run(ctx, func(l []byte, _ time.Time) { lines <- string(l) })
	}()
	got = append(got, <-lines)
	if err := os.Rename(log, log+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(top, "root/secret.log"), log); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tl.Stats().Refused == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(lines)
	for l := range lines {
		got = append(got, l)
	}
	if tl.Stats().Refused == 0 || len(got) != 1 || got[0] != "one" {
		t.Errorf("after rotation to a link: lines %q, %d refused; log:\n%s", got, tl.Stats().Refused, logs.String())
	}
}
