package sniffer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"

	"golang.org/x/sys/unix"
)

// TestGrowPipe: a capture read from a pipe gets the largest pipe buffer
// allowed, so the writer runs ahead and each read returns up to that much.
func TestGrowPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	before, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Skip("F_GETPIPE_SZ:", err)
	}
	growPipe(r)
	after, _ := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if after < 1<<20 || after <= before {
		t.Errorf("pipe buffer %d bytes before, %d after growPipe: want at least 1 MiB", before, after)
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	growPipe(f) // not a pipe: nothing to do, no error
	f.Close()
}

// readAll reads path with the given reader (PQWATCH_PCAP_READER) and
// returns the records as JSON lines and the file's stats as text.
func readAll(t *testing.T, path, mode string) (string, string) {
	t.Helper()
	t.Setenv("PQWATCH_PCAP_READER", mode)
	var out strings.Builder
	s := New(Config{OnRecord: func(r *record.Handshake) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}})
	fs, err := ReadFile(path, s, nil)
	s.Flush()
	return out.String(), fmt.Sprintf("err %v format %s packets %d first %v last %v stats %+v", err, fs.Format, fs.Packets, fs.First, fs.Last, fs.Err)
}

// TestReadClassicPcapSameAsMmap: the read(2) reader, inline and ahead, with
// its buffer as large as in use and small enough that records straddle
// every boundary (and frames outgrow it), hands the sniffer the same
// packets as the memory-mapped reader: the same records and the same file
// stats, on whole, truncated and corrupt captures.
func TestReadClassicPcapSameAsMmap(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	clients := pcapgen.DefaultClients(6)
	for i := range clients {
		clients[i].BulkBytes = 20 << 10
	}
	if _, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients}); err != nil {
		t.Fatal(err)
	}
	gen := buf.Bytes()
	paths := []string{"../testdata/handshakes.pcap"}
	write := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	write("gen.pcap", gen)
	for _, cut := range []int{24 + 7, 24 + 16 + 30, len(gen) / 2, len(gen) - 1} {
		write(fmt.Sprintf("cut%d.pcap", cut), gen[:cut])
	}
	// A record whose capture length exceeds the snaplen, in the middle.
	bad := bytes.Clone(gen)
	off := 24
	for range 40 {
		off += 16 + int(binary.LittleEndian.Uint32(bad[off+8:]))
	}
	binary.LittleEndian.PutUint32(bad[off+8:], 1<<20)
	write("corrupt.pcap", bad)
	// The public captures of ../shared/corpus, when it is there.
	_ = filepath.WalkDir("../../shared/corpus", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".pcap") || strings.HasSuffix(p, ".cap")) {
			paths = append(paths, p)
		}
		return nil
	})
	defer func(n int) { pcapChunk = n }(pcapChunk)
	read := 0
	for _, p := range paths {
		head := make([]byte, 4)
		if f, err := os.Open(p); err == nil {
			_, _ = f.Read(head)
			f.Close()
		}
		if !isClassicPcap(head) {
			continue
		}
		read++
		wantRecs, wantStats := readAll(t, p, "mmap")
		for _, chunk := range []int{256 << 10, 1000, 97} {
			pcapChunk = chunk
			for _, mode := range []string{"inline", "ahead"} {
				recs, stats := readAll(t, p, mode)
				if recs != wantRecs || stats != wantStats {
					t.Errorf("%s, %s, %d-byte buffer: not what the mapping reads:\n%s\nwant %s\nrecords equal: %v", p, mode, chunk, stats, wantStats, recs == wantRecs)
				}
			}
		}
	}
	t.Logf("%d classic pcap captures read alike", read)
}

// TestReadClassicPcapShortHeader: a classic pcap magic with its file header
// cut short is not a capture, from a file, a pipe or gzip, as with pcapgo.
func TestReadClassicPcapShortHeader(t *testing.T) {
	head := []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0}
	path := filepath.Join(t.TempDir(), "short.pcap")
	if err := os.WriteFile(path, head, 0o644); err != nil {
		t.Fatal(err)
	}
	var want string
	for _, mode := range []string{"pcapgo", "inline", "ahead"} {
		t.Setenv("PQWATCH_PCAP_READER", mode)
		fs, err := ReadFile(path, New(Config{}), nil)
		if !errors.Is(err, ErrNotCapture) || fs.Format != "" || fs.Packets != 0 {
			t.Fatalf("%s: %v, format %q, %d packets: want ErrNotCapture, no format, no packets", mode, err, fs.Format, fs.Packets)
		}
		if want == "" {
			want = err.Error()
		} else if err.Error() != want {
			t.Errorf("%s: %v, pcapgo: %s", mode, err, want)
		}
		if _, err := ReadFrom("stdin", bytes.NewReader(head), New(Config{}), nil); !errors.Is(err, ErrNotCapture) {
			t.Errorf("%s, from a stream: %v, want ErrNotCapture", mode, err)
		}
	}
}
