package proctrack

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/internal/procfs"
)

const nginxMaps = `55d0c0a00000-55d0c0a2c000 r--p 00000000 08:01 1234 /usr/sbin/nginx
7f1c2a000000-7f1c2a0a0000 r--p 00000000 08:01 2222 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f1c2b000000-7f1c2b0a0000 r--p 00000000 08:01 3333 /usr/lib/x86_64-linux-gnu/libcrypto.so.3
7f1c2c000000-7f1c2c0a0000 rw-p 00000000 00:00 0 
7ffc1c000000-7ffc1c021000 rw-p 00000000 00:00 0                          [stack]
`

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want procfs.Stat
		err  error
	}{
		{
			name: "nginx master",
			in:   "1234 (nginx) S 1 1234 1234 0 -1 4194624 93 0 0 0 12 34 0 0 20 0 1 0 5678 12345678 1500 18446744073709551615 1 1 0 0 0 0 0 4096 134749696 0 0 0 17 1 0 0 0 0 0\n",
			want: procfs.Stat{PID: 1234, Comm: "nginx", State: 'S', PPID: 1, Flags: 4194624, UTime: 12, STime: 34, StartTime: 5678, RSS: 1500},
		},
		{
			name: "comm with spaces and parens",
			in:   "42 (a) b (c)) R 7 0 0 0 -1 64 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0",
			want: procfs.Stat{PID: 42, Comm: "a) b (c)", State: 'R', PPID: 7, Flags: 64, UTime: 1, STime: 2, StartTime: 99},
		},
		{name: "empty", in: "", err: procfs.ErrBadStat},
		{name: "no close paren", in: "1 (nginx S 1", err: procfs.ErrBadStat},
		{name: "truncated", in: "1 (nginx) S 1 1 1 0 -1 0", err: procfs.ErrBadStat},
		{name: "bad pid", in: "x (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99", err: procfs.ErrBadStat},
		{name: "bad utime", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 -1 2 0 0 0 0 1 0 99", err: procfs.ErrBadStat},
		{name: "long state", in: "1 (nginx) SS 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99", err: procfs.ErrBadStat},
		{name: "overflow", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 99999999999999999999999 2 0 0 0 0 1 0 99", err: procfs.ErrBadStat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := procfs.ParseStat([]byte(tc.in))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("procfs.ParseStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseStatSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	st, err := procfs.ParseStat(b)
	if err != nil || st.PID != os.Getpid() || st.PPID != os.Getppid() || st.StartTime == 0 {
		t.Fatalf("procfs.ParseStat(/proc/self/stat) = %+v, %v", st, err)
	}
}

func TestParseStatm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4523 1780 1226 232 0 419 0\n", 1780, true},
		{"1 2", 2, true},
		{"", 0, false},
		{"12", 0, false},
		{"1 x 3", 0, false},
	} {
		got, err := procfs.ParseStatm([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("procfs.ParseStatm(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, procfs.ErrBadStatm) {
			t.Errorf("procfs.ParseStatm(%q) error %v is not ErrBadStatm", tc.in, err)
		}
	}
}

func TestParseBtime(t *testing.T) {
	got, err := procfs.ParseBtime([]byte("cpu  1 2 3\nintr 5\nbtime 1764480000\nprocesses 9\n"))
	if err != nil || got != 1764480000 {
		t.Fatalf("procfs.ParseBtime = %d, %v", got, err)
	}
	if _, err := procfs.ParseBtime([]byte("cpu 1\n")); !errors.Is(err, procfs.ErrNoBtime) {
		t.Fatalf("missing btime: %v", err)
	}
}

func TestParseSocketLink(t *testing.T) {
	if ino, err := parseSocketLink("socket:[123456]"); err != nil || ino != 123456 {
		t.Fatalf("got %d, %v", ino, err)
	}
	for _, bad := range []string{"pipe:[1]", "socket:[x]", "socket:[12", "/dev/null", ""} {
		if _, err := parseSocketLink(bad); !errors.Is(err, ErrNotSocket) {
			t.Errorf("parseSocketLink(%q) = %v", bad, err)
		}
	}
}

func TestNginxTitle(t *testing.T) {
	for _, tc := range []struct {
		in   string
		role nginxRole
		args string
	}{
		{"nginx: master process /usr/sbin/nginx -g daemon on; master_process on;\x00\x00\x00", roleMaster, "/usr/sbin/nginx -g daemon on; master_process on;"},
		{"nginx: worker process\x00\x00", roleWorker, ""},
		{"nginx: worker process is shutting down\x00", roleDrain, ""},
		{"nginx: cache manager process", roleHelper, ""},
		{"/usr/sbin/nginx\x00-s\x00reload\x00", roleNone, ""},
		{"", roleNone, ""},
	} {
		role, args := nginxTitle([]byte(tc.in))
		if role != tc.role || args != tc.args {
			t.Errorf("nginxTitle(%q) = %v %q", tc.in, role, args)
		}
	}
	bin, conf, prefix := masterArgs("/opt/nginx/sbin/nginx -p /opt/nginx/ -c conf/nginx.conf -e logs/error.log")
	if bin != "/opt/nginx/sbin/nginx" || conf != "conf/nginx.conf" || prefix != "/opt/nginx/" {
		t.Errorf("masterArgs = %q %q %q", bin, conf, prefix)
	}
}

func TestMappedTLSLibs(t *testing.T) {
	ssl, crypto := mappedTLSLibs([]byte(nginxMaps))
	if ssl != "/usr/lib/x86_64-linux-gnu/libssl.so.3" || crypto != "/usr/lib/x86_64-linux-gnu/libcrypto.so.3" {
		t.Fatalf("got %q %q", ssl, crypto)
	}
	ssl, crypto = mappedTLSLibs([]byte("7f-8f r-xp 0 08:01 1 /usr/lib/libssl3.so\n7f-8f r-xp 0 08:01 2 /opt/old/lib/libssl.so.1.1 (deleted)\n"))
	if ssl != "/opt/old/lib/libssl.so.1.1" || crypto != "" {
		t.Fatalf("NSS/deleted: got %q %q", ssl, crypto)
	}
	if v := sonameVersion(ssl); v != "1.1" {
		t.Fatalf("sonameVersion = %q", v)
	}
}

func TestFindTLSVersion(t *testing.T) {
	for in, want := range map[string]string{
		"xx\x00OpenSSL 3.0.19 27 Jan 2026\x00":      "OpenSSL 3.0.19",
		"OpenSSL 1.1.1w  11 Sep 2023":               "OpenSSL 1.1.1w",
		"built with OpenSSL x; OpenSSL 3.5.0 8 Apr": "OpenSSL 3.5.0",
		"LibreSSL 3.8.2":                            "LibreSSL 3.8.2",
		"OpenSSL 3.":                                "", "OpenSSL ..1": "", "nothing": "",
	} {
		if got := findTLSVersion([]byte(in)); got != want {
			t.Errorf("findTLSVersion(%q) = %q, want %q", in, got, want)
		}
	}
	v, err := scanVersion(strings.NewReader(strings.Repeat("x", 1<<20-5) + "OpenSSL 3.0.2 15 Mar 2022"))
	if err != nil || v != "OpenSSL 3.0.2" {
		t.Fatalf("scanVersion across chunks = %q, %v", v, err)
	}
}

func TestNginxPidDirective(t *testing.T) {
	for in, want := range map[string]string{
		"pid /run/nginx.pid;\nevents {}":                      "/run/nginx.pid",
		"# pid /x;\nuser www;\npid  'logs/n.pid' ;":           "logs/n.pid",
		"http { server { pid /nope; } }\nworker_processes 2;": "",
		"events { } pid \"/a b.pid\";":                        "/a b.pid",
		"pid /unterminated":                                   "",
		"pid \"open":                                          "",
	} {
		if got := nginxPidDirective([]byte(in)); got != want {
			t.Errorf("nginxPidDirective(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (nginx) S 1 1234 1234 0 -1 4194624 93 0 0 0 12 34 0 0 20 0 1 0 5678 12345678 1500"))
	f.Add([]byte("42 (a) b (c)) R 7 0 0 0 -1 64 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0"))
	f.Add([]byte(""))
	f.Add([]byte("1 ()"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := procfs.ParseStat(b)
		if err == nil && (st.PID <= 0 || st.PPID < 0) {
			t.Fatalf("accepted %q as %+v", b, st)
		}
	})
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(nginxMaps))
	f.Add([]byte("7f-8f r-xp 0 08:01 2 /opt/old/lib/libssl.so.1.1 (deleted)\n"))
	f.Add([]byte("/libssl.so.\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ssl, crypto := mappedTLSLibs(b)
		for _, p := range []string{ssl, crypto} {
			if p != "" && !strings.HasPrefix(p, "/") {
				t.Fatalf("non-absolute library %q from %q", p, b)
			}
			_ = sonameVersion(p)
		}
	})
}

func FuzzParseSmall(f *testing.F) {
	f.Add([]byte("4523 1780 1226 232 0 419 0\n"))
	f.Add([]byte("btime 1764480000\n"))
	f.Add([]byte("pid /run/nginx.pid;"))
	f.Add([]byte("OpenSSL 3.0.19 27 Jan 2026"))
	f.Add([]byte("nginx: master process /usr/sbin/nginx -c /etc/nginx/nginx.conf"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = procfs.ParseStatm(b)
		_, _ = procfs.ParseBtime(b)
		_ = nginxPidDirective(b)
		_ = findTLSVersion(b)
		_, args := nginxTitle(b)
		_, _, _ = masterArgs(args)
		_, _ = parseSocketLink(string(b))
	})
}
