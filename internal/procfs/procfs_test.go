package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// statCases are the table of TestParseStat and the seeds of FuzzParseStat.
var statCases = []struct {
	name string
	in   string
	want Stat
	err  error
}{
	{
		name: "nginx master",
		in:   "1234 (nginx) S 1 1234 1234 0 -1 4194624 93 0 0 0 12 34 0 0 20 0 1 0 5678 12345678 1500 18446744073709551615 1 1 0 0 0 0 0 4096 134749696 0 0 0 17 1 0 0 0 0 0\n",
		want: Stat{PID: 1234, Comm: "nginx", State: 'S', PPID: 1, Flags: 4194624, UTime: 12, STime: 34, StartTime: 5678, RSS: 1500},
	},
	{
		name: "comm with spaces and parens",
		in:   "42 (a) b (c)) R 7 0 0 0 -1 64 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0",
		want: Stat{PID: 42, Comm: "a) b (c)", State: 'R', PPID: 7, Flags: 64, UTime: 1, STime: 2, StartTime: 99},
	},
	{
		name: "comm ends at the last paren",
		in:   "77 (my (weird) proc) S 1 77 77 0 -1 4194560 10 0 0 0 5 6 7 8 20 0 1 0 4242 9000 33 18446744073709551615\n",
		want: Stat{PID: 77, Comm: "my (weird) proc", State: 'S', PPID: 1, Flags: 4194560, UTime: 5, STime: 6, CUTime: 7, CSTime: 8, StartTime: 4242, RSS: 33},
	},
	{
		name: "nginx worker title, children's time",
		in:   "4242 (nginx: worker) (x)) S 4241 4241 4241 0 -1 4194624 100 0 0 0 123 45 6 7 20 0 1 0 98765 1000000 321 18446744073709551615\n",
		want: Stat{PID: 4242, Comm: "nginx: worker) (x)", State: 'S', PPID: 4241, Flags: 4194624, UTime: 123, STime: 45, CUTime: 6, CSTime: 7, StartTime: 98765, RSS: 321},
	},
	{
		name: "empty comm, pid 1 zombie, ppid 0",
		in:   "1 () Z 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0",
		want: Stat{PID: 1, State: 'Z', StartTime: 1},
	},
	{name: "empty", in: "", err: ErrBadStat},
	{name: "no comm", in: "1 nginx S 1", err: ErrBadStat},
	{name: "no close paren", in: "1 (nginx S 1", err: ErrBadStat},
	{name: "close before open", in: "1 )nginx( S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "no pid", in: "(nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "short", in: "12 (x) S 1", err: ErrBadStat},
	{name: "truncated", in: "1 (nginx) S 1 1 1 0 -1 0", err: ErrBadStat},
	{name: "no rss", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0", err: ErrBadStat},
	{name: "bad pid", in: "x (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "pid 0", in: "0 (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "huge pid", in: "9223372036854775808 (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "huge ppid", in: "1 (nginx) S 4294967296 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "bad utime", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 -1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "bad rss", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 x", err: ErrBadStat},
	{name: "long state", in: "1 (nginx) SS 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	{name: "overflow", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 99999999999999999999999 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
	// 3e19 > 2^64 and wraps to a larger number than 3e18 when multiplied by
	// 10 unchecked: an overflow test of v*10+d < v would let it through.
	{name: "wrapping overflow", in: "1 (nginx) S 1 1 1 0 -1 0 0 0 0 0 30000000000000000000 2 0 0 0 0 1 0 99 0 0", err: ErrBadStat},
}

func TestParseStat(t *testing.T) {
	for _, tc := range statCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParseStat = %+v, %v; want error %v", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestStatTicks(t *testing.T) {
	st := Stat{UTime: 123, STime: 45, CUTime: 6, CSTime: 7}
	if st.Ticks() != 168 || st.TicksWithChildren() != 181 {
		t.Fatalf("Ticks %d, TicksWithChildren %d", st.Ticks(), st.TicksWithChildren())
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat("/proc", os.Getpid())
	if os.IsNotExist(err) {
		t.Skip("no /proc:", err)
	}
	if err != nil || st.PID != os.Getpid() || st.PPID != os.Getppid() || st.StartTime == 0 || st.RSS == 0 {
		t.Fatalf("ReadStat(/proc, self) = %+v, %v", st, err)
	}
}

// TestReadAllStats reads a made-up proc root: good entries, a non-PID name,
// a stat that names another PID, a malformed one and a PID directory
// without stat (a process that exited mid-scan).
func TestReadAllStats(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	line := func(pid, ppid int, comm string) string {
		return fmt.Sprintf("%d (%s) S %d 0 0 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 100 0 9\n", pid, comm, ppid)
	}
	write("1/stat", line(1, 0, "init"))
	write("20/stat", line(20, 1, "my (weird) proc"))
	write("21/stat", line(22, 1, "liar"))
	write("23/stat", "23 (broken")
	write("self/stat", line(20, 1, "my (weird) proc"))
	write("stat", "cpu 1\nbtime 1764480000\n")
	if err := os.Mkdir(filepath.Join(root, "24"), 0o755); err != nil {
		t.Fatal(err)
	}
	all, err := ReadAllStats(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[1].Comm != "init" || all[20].Comm != "my (weird) proc" || all[20].PPID != 1 || all[20].Ticks() != 7 || all[20].RSS != 9 {
		t.Fatalf("ReadAllStats = %+v", all)
	}
	if _, err := ReadStat(root, 23); !errors.Is(err, ErrBadStat) {
		t.Fatalf("ReadStat(broken) = %v", err)
	}
	if _, err := ReadStat(root, 24); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadStat(gone) = %v", err)
	}
	if bt, err := ReadBtime(root); err != nil || bt != 1764480000 {
		t.Fatalf("ReadBtime = %d, %v", bt, err)
	}
	if _, err := ReadAllStats(filepath.Join(root, "nope")); err == nil {
		t.Fatal("ReadAllStats of a missing root succeeded")
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
		{"  1   2\n", 2, true},
		{"", 0, false},
		{"12", 0, false},
		{"1 x 3", 0, false},
		{"1 -2 3", 0, false},
	} {
		got, err := ParseStatm([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseStatm(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadStatm) {
			t.Errorf("ParseStatm(%q) error %v is not ErrBadStatm", tc.in, err)
		}
	}
}

func TestParseBtime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"cpu  1 2 3\nintr 5\nbtime 1764480000\nprocesses 9\n", 1764480000, true},
		{"btime 1", 1, true},
		{"cpu 1\n", 0, false},
		{"btime -1\n", 0, false},
		{"btime 9223372036854775808\n", 0, false},
		{"xbtime 5\n", 0, false},
	} {
		got, err := ParseBtime([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBtime(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrNoBtime) {
			t.Errorf("ParseBtime(%q) error %v is not ErrNoBtime", tc.in, err)
		}
	}
}

// formatStat writes st back as a 24-field stat line.
func formatStat(st Stat) []byte {
	b := fmt.Appendf(nil, "%d (%s) ", st.PID, st.Comm)
	b = append(b, st.State) // a byte, not a rune
	return fmt.Appendf(b, " %d 0 0 0 -1 %d 0 0 0 0 %d %d %d %d 20 0 1 0 %d 0 %d\n",
		st.PPID, st.Flags, st.UTime, st.STime, st.CUTime, st.CSTime, st.StartTime, st.RSS)
}

// FuzzParseStat: ParseStat never panics, and what it accepts has a sane
// PID and PPID, the comm between the first '(' and the last ')', and
// survives being written back and parsed again.
func FuzzParseStat(f *testing.F) {
	for _, tc := range statCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err != nil {
			if !errors.Is(err, ErrBadStat) {
				t.Fatalf("error %v is not ErrBadStat", err)
			}
			return
		}
		if st.PID <= 0 || st.PID > maxPID || st.PPID < 0 || st.PPID > maxPID {
			t.Fatalf("accepted %q as %+v", b, st)
		}
		if want := b[bytes.IndexByte(b, '(')+1 : bytes.LastIndexByte(b, ')')]; st.Comm != string(want) {
			t.Fatalf("comm %q from %q, want %q", st.Comm, b, want)
		}
		again, err := ParseStat(formatStat(st))
		if err != nil || again != st {
			t.Fatalf("round trip of %+v: %+v, %v", st, again, err)
		}
	})
}

func BenchmarkParseStat(b *testing.B) {
	line := []byte(statCases[0].in)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := ParseStat(line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadStat(b *testing.B) {
	pid := os.Getpid()
	if _, err := ReadStat("/proc", pid); err != nil {
		b.Skip("no /proc:", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadStat("/proc", pid); err != nil {
			b.Fatal(err)
		}
	}
}

// schedstatCases are the table of TestParseSchedstat and the seeds of
// FuzzParseSchedstat.
var schedstatCases = []struct {
	in   string
	want uint64
	ok   bool
}{
	{"980120 311731 15\n", 980120, true},
	{"0 0 0", 0, true},
	{"18446744073709551615 1 1\n", 18446744073709551615, true},
	{"", 0, false},
	{"980120\n", 0, false},
	{"1 2\n", 0, false},
	{"1 2 3 4\n", 0, false},
	{"-1 2 3\n", 0, false},
	{"1 x 3\n", 0, false},
	{"18446744073709551616 1 1\n", 0, false},
}

func TestParseSchedstat(t *testing.T) {
	for _, tc := range schedstatCases {
		got, err := ParseSchedstat([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSchedstat(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadSchedstat) {
			t.Errorf("ParseSchedstat(%q) error %v is not ErrBadSchedstat", tc.in, err)
		}
	}
}

func TestParseSchedstatAllocs(t *testing.T) {
	line := []byte(schedstatCases[0].in)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseSchedstat(line) }); n != 0 {
		t.Fatalf("ParseSchedstat allocates %v", n)
	}
}

func FuzzParseSchedstat(f *testing.F) {
	for _, tc := range schedstatCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseSchedstat(b)
		if err != nil {
			if !errors.Is(err, ErrBadSchedstat) {
				t.Fatalf("error %v is not ErrBadSchedstat", err)
			}
			return
		}
		if again, err := ParseSchedstat(fmt.Appendf(nil, "%d 0 0\n", v)); err != nil || again != v {
			t.Fatalf("round trip of %d: %d, %v", v, again, err)
		}
	})
}

// TestReadTaskRuntimes reads a made-up task directory (two threads, a
// non-TID entry, a thread that exited mid-scan) and this process's own.
func TestReadTaskRuntimes(t *testing.T) {
	root := t.TempDir()
	for tid, line := range map[string]string{"7": "1000 5 1\n", "9": "2500 0 3\n"} {
		d := filepath.Join(root, "7", "task", tid)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "schedstat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "7", "task", "11"), 0o755); err != nil { // exited: no schedstat
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "7", "task", "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := map[int]uint64{99: 1}
	if err := ReadTaskRuntimes(root, 7, got); err != nil || len(got) != 2 || got[7] != 1000 || got[9] != 2500 {
		t.Fatalf("ReadTaskRuntimes = %v, %v", got, err)
	}
	if err := ReadTaskRuntimes(root, 8, got); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing process: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "task", "9", "schedstat"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReadTaskRuntimes(root, 7, got); !errors.Is(err, ErrBadSchedstat) {
		t.Fatalf("malformed: %v", err)
	}
	self := map[int]uint64{}
	if err := ReadTaskRuntimes("/proc", os.Getpid(), self); os.IsNotExist(err) {
		t.Skip("no /proc:", err)
	} else if err != nil || self[os.Getpid()] == 0 {
		t.Fatalf("self: %v, %v", self, err)
	}
}

func BenchmarkParseSchedstat(b *testing.B) {
	line := []byte(schedstatCases[0].in)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := ParseSchedstat(line); err != nil {
			b.Fatal(err)
		}
	}
}
