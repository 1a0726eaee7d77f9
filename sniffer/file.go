package sniffer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"
)

// Errors of ReadFile. They wrap the underlying cause.
var (
	ErrNotCapture   = errors.New("sniffer: not a pcap or pcapng file")
	ErrTruncated    = errors.New("sniffer: capture file truncated")
	ErrCorruptEntry = errors.New("sniffer: corrupt capture record")
)

// FileStats describes one capture file read by ReadFile.
type FileStats struct {
	Path    string
	Format  string // "pcap", "pcapng", with "+gzip"
	Packets uint64
	// First and Last are the earliest and latest packet times.
	First, Last time.Time
	Err         error // why reading stopped early, nil at a clean end
}

// seen widens the file's time span to ts.
func (fs *FileStats) seen(ts time.Time) {
	if fs.First.IsZero() || ts.Before(fs.First) {
		fs.First = ts
	}
	if ts.After(fs.Last) {
		fs.Last = ts
	}
}

// Progress is called now and then with the compressed bytes read so far.
type Progress func(read, total int64)

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type packetReader interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// ReadFile feeds every packet of a pcap or pcapng file (optionally gzip
// compressed) to s. A damaged file is read up to the damage: the error is
// returned in FileStats.Err and everything before it is kept. Only an
// unreadable or unrecognised file returns a non-nil error.
func ReadFile(path string, s *Sniffer, progress Progress) (FileStats, error) {
	fs := FileStats{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return fs, fmt.Errorf("sniffer: %w", err)
	}
	defer f.Close()
	var total int64
	if st, err := f.Stat(); err == nil {
		total = st.Size()
	}
	if pcapReader() == "mmap" {
		// The memory-mapped reader, kept to compare with (BenchmarkReadFile).
		var head [4]byte
		if n, _ := f.ReadAt(head[:], 0); n == 4 && total > 0 && isClassicPcap(head[:]) {
			if readMappedPcap(f, total, &fs, s, progress) {
				return fs, nil
			}
		}
	}
	return readStream(path, f, total, s, progress, fs)
}

// pcapReader is PQWATCH_PCAP_READER: how classic pcap captures are read,
// to compare the ways (BenchmarkReadFile, internal/benchcmp). Empty or
// "inline": with read(2) on the sniffer's goroutine; "ahead": with read(2)
// on a goroutine of its own, ahead of the sniffer (it did not pay on the
// 2-core test machine: BenchmarkReadFile); "mmap": files through a memory
// mapping; "pcapgo": through gopacket's pcapgo reader.
func pcapReader() string { return os.Getenv("PQWATCH_PCAP_READER") }

// ReadFrom reads a pcap or pcapng capture, plain or gzip, from r (a pipe:
// `tcpdump -w - | pqwatch analyze -`); name stands for it in errors.
func ReadFrom(name string, r io.Reader, s *Sniffer, progress Progress) (FileStats, error) {
	if f, ok := r.(*os.File); ok {
		growPipe(f)
	}
	return readStream(name, r, 0, s, progress, FileStats{Path: name})
}

func readStream(path string, f io.Reader, total int64, s *Sniffer, progress Progress, fs FileStats) (FileStats, error) {
	cr := &countingReader{r: f}
	br := bufio.NewReaderSize(cr, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		return fs, fmt.Errorf("%w: %s: %v", ErrNotCapture, path, err)
	}
	var r io.Reader = br
	// r without its buffer: what the buffer holds, then the source.
	direct := func() io.Reader { return unbuffered(br, cr) }
	suffix := ""
	if magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fs, fmt.Errorf("%w: %s: gzip: %v", ErrNotCapture, path, err)
		}
		defer gz.Close()
		gbr := bufio.NewReaderSize(gz, 64<<10)
		if magic, err = gbr.Peek(4); err != nil {
			return fs, fmt.Errorf("%w: %s: %v", ErrNotCapture, path, err)
		}
		r = gbr
		direct = func() io.Reader { return unbuffered(gbr, gz) }
		suffix = "+gzip"
	}
	if mode := pcapReader(); isClassicPcap(magic) && mode != "pcapgo" {
		fs.Format = "pcap" + suffix
		if err := readClassicPcap(direct(), &fs, s, progress, total, func() int64 { return cr.n }, mode == "ahead"); err != nil {
			fs.Format = ""
			return fs, err
		}
		return fs, nil
	}
	var pr packetReader
	var linkOf func(ci *gopacket.CaptureInfo) int
	switch {
	case magic[0] == 0x0a && magic[1] == 0x0d && magic[2] == 0x0d && magic[3] == 0x0a:
		ng, err := pcapgo.NewNgReader(r, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return fs, fmt.Errorf("%w: %s: %v", ErrNotCapture, path, err)
		}
		pr = ng
		fs.Format = "pcapng" + suffix
		links := map[int]int{}
		linkOf = func(ci *gopacket.CaptureInfo) int {
			l, ok := links[ci.InterfaceIndex]
			if !ok {
				l = -1
				if iface, err := ng.Interface(ci.InterfaceIndex); err == nil {
					l = int(iface.LinkType)
				}
				links[ci.InterfaceIndex] = l
			}
			return l
		}
	default:
		pc, err := pcapgo.NewReader(r)
		if err != nil {
			return fs, fmt.Errorf("%w: %s: %v", ErrNotCapture, path, err)
		}
		pr = pc
		fs.Format = "pcap" + suffix
		lt := int(pc.LinkType())
		linkOf = func(*gopacket.CaptureInfo) int { return lt }
	}
	last := time.Now()
	for {
		data, ci, err := pr.ZeroCopyReadPacketData()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
			case errors.Is(err, io.ErrUnexpectedEOF):
				fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, path, fs.Packets)
			default:
				fs.Err = fmt.Errorf("%w: %s after %d packets: %v", ErrCorruptEntry, path, fs.Packets, err)
			}
			break
		}
		fs.Packets++
		fs.seen(ci.Timestamp)
		s.Packet(ci.Timestamp, linkOf(&ci), data)
		if progress != nil && fs.Packets&0xffff == 0 {
			if now := time.Now(); now.Sub(last) > 200*time.Millisecond {
				last = now
				progress(cr.n, total)
			}
		}
	}
	if progress != nil {
		progress(cr.n, total)
	}
	return fs, nil
}

// unbuffered returns what br has buffered, then under (br's source): the
// pcap reader reads into a buffer of its own, and a read through br would
// copy every byte once more.
func unbuffered(br *bufio.Reader, under io.Reader) io.Reader {
	b, _ := br.Peek(br.Buffered())
	return io.MultiReader(bytes.NewReader(b), under)
}

// growPipe makes f's pipe buffer as large as an unprivileged process may
// (fs.pipe-max-size, 1 MiB by default) when f is a pipe: the writer
// (tcpdump -w -, cat, zcat) runs that far ahead of the reader, and each
// read returns up to that much instead of 64 KiB. Not a pipe, or not
// allowed: nothing changes.
func growPipe(f *os.File) {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	size := 1 << 20
	if b, err := os.ReadFile("/proc/sys/fs/pipe-max-size"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			size = min(n, 16<<20)
		}
	}
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, size)
}
