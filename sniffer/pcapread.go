package sniffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// pcapChunk is the size of the buffer a classic pcap capture is read into:
// large enough that a read(2) is rare per packet, small enough that the
// bytes the kernel copied are still in the CPU's cache when the packets'
// headers are decoded from them.
var pcapChunk = 256 << 10

// isClassicPcap reports whether magic (the file's first 4 bytes) is a
// classic pcap header's, in either byte order, micro- or nanosecond.
func isClassicPcap(magic []byte) bool {
	if len(magic) < 4 {
		return false
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0xa1b2c3d4, 0xa1b23c4d, 0xd4c3b2a1, 0x4d3cb2a1:
		return true
	}
	return false
}

// pcapHeader is what a classic pcap file header says.
type pcapHeader struct {
	bo      binary.ByteOrder
	nano    bool
	snaplen int
	link    int
}

// parsePcapHeader reads a classic pcap file header (24 bytes).
func parsePcapHeader(h []byte) (pcapHeader, bool) {
	var ph pcapHeader
	if len(h) < 24 {
		return ph, false
	}
	switch binary.LittleEndian.Uint32(h) {
	case 0xa1b2c3d4:
		ph.bo = binary.LittleEndian
	case 0xa1b23c4d:
		ph.bo, ph.nano = binary.LittleEndian, true
	case 0xd4c3b2a1:
		ph.bo = binary.BigEndian
	case 0x4d3cb2a1:
		ph.bo, ph.nano = binary.BigEndian, true
	default:
		return ph, false
	}
	ph.snaplen = int(ph.bo.Uint32(h[16:20]))
	ph.link = int(ph.bo.Uint32(h[20:24]) & 0x0fffffff) // upper bits: FCS flags
	if ph.snaplen <= 0 || ph.snaplen > 1<<18 {
		ph.snaplen = 1 << 18 // as pcapgo: tolerate files with silly snaplens
	}
	return ph, true
}

// readClassicPcap reads a classic pcap capture from r (a file, a pipe, a
// gzip stream) with read(2) into reused buffers, and hands each frame to
// the sniffer where it lies in its buffer: one copy, by the kernel, where
// pcapgo's reader makes two more and a memory mapping costs a page fault
// (or, under some hypervisors, a shadow page table miss) per 4 KiB page.
// With ahead, the reading and framing run on a goroutine of their own, a
// few buffers ahead of the sniffer, so that the kernel's copy and the
// packets' decoding may overlap on two CPUs; the packets reach the sniffer
// in the same order. read counts the bytes read from the source
// for progress (of total). The caller has checked r's magic.
// A file header cut short is not a capture (an error, as pcapgo says it).
func readClassicPcap(r io.Reader, fs *FileStats, s *Sniffer, progress Progress, total int64, read func() int64, ahead bool) error {
	var h [24]byte
	n, err := io.ReadFull(r, h[:])
	ph, ok := parsePcapHeader(h[:n])
	if err != nil || !ok {
		// The caller checked the magic: the header is cut short.
		return fmt.Errorf("%w: %s: %v", ErrNotCapture, fs.Path, err)
	}
	fr := &framer{r: r, ph: ph, path: fs.Path, read: read}
	d := deliverer{s: s, ph: ph, fs: fs, progress: progress, total: total, last: time.Now(),
		first: math.MaxInt64, latest: math.MinInt64}
	if ahead {
		fr.ahead(d.chunk)
	} else {
		fr.inline(d.chunk)
	}
	if fs.Packets > 0 {
		fs.First, fs.Last = time.Unix(0, d.first).UTC(), time.Unix(0, d.latest).UTC()
	}
	fs.Err = fr.err
	if progress != nil {
		progress(read(), total)
	}
	return nil
}

// A framer cuts a classic pcap stream into chunks of whole records, checked.
type framer struct {
	r       io.Reader
	ph      pcapHeader
	path    string
	read    func() int64
	packets uint64 // records framed
	err     error  // why the stream ended early; nil at a clean end
}

// fill reads into buf after the carried bytes buf[:carried] until buf is
// full or the stream ends, and finds the whole records at its start: they
// are buf[:n], and buf[n:end] begins the next one. done says the stream
// ended (cleanly, or with fr.err): buf[:n] is the last chunk. need, when n
// is 0 and the stream goes on, is the buffer size the record at its start
// needs.
func (fr *framer) fill(buf []byte, carried int) (n, end, need int, done bool) {
	end = carried
	var rerr error
	for end < len(buf) {
		m, err := fr.r.Read(buf[end:])
		end += m
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = err
			}
			done = true
			break
		}
	}
	bo, snaplen := fr.ph.bo, fr.ph.snaplen
	for end-n >= 16 {
		h := buf[n : n+16]
		capLen, origLen := int(bo.Uint32(h[8:12])), int(bo.Uint32(h[12:16]))
		if capLen > snaplen || capLen > origLen && origLen != 0 {
			fr.err = fmt.Errorf("%w: %s after %d packets: capture length %d (snaplen %d, length %d)", ErrCorruptEntry, fr.path, fr.packets, capLen, snaplen, origLen)
			return n, end, 0, true
		}
		if end-n-16 < capLen {
			need = 16 + capLen
			break
		}
		n += 16 + capLen
		fr.packets++
	}
	if done {
		switch {
		case errors.Is(rerr, io.ErrUnexpectedEOF):
			fr.err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fr.path, fr.packets)
		case rerr != nil:
			// The whole records before a read error count.
			fr.err = fmt.Errorf("%w: %s after %d packets: %v", ErrCorruptEntry, fr.path, fr.packets, rerr)
		case n < end:
			fr.err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fr.path, fr.packets)
		}
	}
	return n, end, need, done
}

// pcapBuffers is how many chunk buffers the read-ahead goroutine cycles
// through: one being filled, one being decoded, and slack.
const pcapBuffers = 4

// inline reads and frames the stream on the caller's goroutine, handing
// each chunk of whole records to deliver.
func (fr *framer) inline(deliver func(recs []byte, read int64)) {
	buf := make([]byte, pcapChunk)
	carried := 0
	for {
		n, end, need, done := fr.fill(buf, carried)
		deliver(buf[:n], fr.read())
		if done {
			return
		}
		if need > len(buf) {
			// A frame larger than the buffer (snaplen up to 256 KiB).
			nb := make([]byte, need+pcapChunk)
			carried = copy(nb, buf[n:end])
			buf = nb
			continue
		}
		carried = copy(buf, buf[n:end])
	}
}

// ahead reads and frames the stream on a goroutine of its own, up to
// pcapBuffers-2 chunks ahead of deliver, which runs on the caller's.
func (fr *framer) ahead(deliver func(recs []byte, read int64)) {
	type chunk struct {
		buf  []byte
		n    int
		read int64
	}
	full := make(chan chunk, pcapBuffers-2)
	free := make(chan []byte, pcapBuffers)
	go func() {
		defer close(full)
		buf := make([]byte, pcapChunk)
		made, carried := 1, 0
		for {
			n, end, need, done := fr.fill(buf, carried)
			full <- chunk{buf, n, fr.read()}
			if done {
				return
			}
			var next []byte
			select {
			case next = <-free:
			default:
				if made < pcapBuffers {
					next, made = make([]byte, pcapChunk), made+1
				} else {
					next = <-free
				}
			}
			if need > len(next) {
				next = make([]byte, need+pcapChunk)
			}
			// buf[n:end] is not the sniffer's: only buf[:n] is.
			carried = copy(next, buf[n:end])
			buf = next
		}
	}()
	for c := range full {
		deliver(c.buf[:c.n], c.read)
		select {
		case free <- c.buf:
		default:
		}
	}
}

// A deliverer hands framed records to the sniffer and keeps the file's
// counts and time span.
type deliverer struct {
	s             *Sniffer
	ph            pcapHeader
	fs            *FileStats
	progress      Progress
	total         int64
	last          time.Time
	first, latest int64 // the time span in nanoseconds
}

// chunk hands recs, whole checked records, to the sniffer.
func (d *deliverer) chunk(recs []byte, read int64) {
	bo, nano, link, s, fs := d.ph.bo, d.ph.nano, d.ph.link, d.s, d.fs
	first, latest := d.first, d.latest
	for off := 0; off+16 <= len(recs); {
		h := recs[off : off+16]
		sec, frac := int64(bo.Uint32(h[0:4])), int64(bo.Uint32(h[4:8]))
		capLen := int(bo.Uint32(h[8:12]))
		if !nano {
			frac *= 1000
		}
		fs.Packets++
		ns := sec*1e9 + frac
		first, latest = min(first, ns), max(latest, ns)
		off += 16
		s.Packet(time.Unix(sec, frac).UTC(), link, recs[off:off+capLen:off+capLen])
		off += capLen
		if d.progress != nil && fs.Packets&0xffff == 0 {
			if now := time.Now(); now.Sub(d.last) > 200*time.Millisecond {
				d.last = now
				d.progress(read, d.total)
			}
		}
	}
	d.first, d.latest = first, latest
}
