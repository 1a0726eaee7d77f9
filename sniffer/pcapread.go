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
const pcapChunk = 256 << 10

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
// gzip stream) with read(2) into one reused buffer, and hands each frame to
// the sniffer where it lies in that buffer: one copy, by the kernel, where
// pcapgo's reader makes two more and a memory mapping costs a page fault
// (or, under some hypervisors, a shadow page table miss) per 4 KiB page.
// read counts the bytes read from the source for progress (of total).
// The caller has checked r's magic.
func readClassicPcap(r io.Reader, fs *FileStats, s *Sniffer, progress Progress, total int64, read func() int64) {
	buf := make([]byte, pcapChunk)
	n, err := io.ReadFull(r, buf[:24])
	ph, ok := parsePcapHeader(buf[:n])
	if err != nil || !ok {
		// The caller checked the magic: the header is cut short.
		fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fs.Path, fs.Packets)
		return
	}
	bo, nano, snaplen, link := ph.bo, ph.nano, ph.snaplen, ph.link
	last := time.Now()
	// The time span in nanoseconds, kept as integers on the hot path.
	first, latest := int64(math.MaxInt64), int64(math.MinInt64)
	defer func() {
		if fs.Packets > 0 {
			fs.First, fs.Last = time.Unix(0, first).UTC(), time.Unix(0, latest).UTC()
		}
	}()
	start, end := 0, 0 // unread bytes: buf[start:end]
	eof := false
	var readErr error
	for {
		// Every whole record in the buffer.
		for end-start >= 16 {
			h := buf[start : start+16]
			sec, frac := int64(bo.Uint32(h[0:4])), int64(bo.Uint32(h[4:8]))
			capLen, origLen := int(bo.Uint32(h[8:12])), int(bo.Uint32(h[12:16]))
			if capLen > snaplen || capLen > origLen && origLen != 0 {
				fs.Err = fmt.Errorf("%w: %s after %d packets: capture length %d (snaplen %d, length %d)", ErrCorruptEntry, fs.Path, fs.Packets, capLen, snaplen, origLen)
				return
			}
			if end-start-16 < capLen {
				if 16+capLen > len(buf) {
					// A frame larger than the buffer (snaplen up to
					// 256 KiB): grow it once.
					nb := make([]byte, 16+capLen+pcapChunk)
					end = copy(nb, buf[start:end])
					buf, start = nb, 0
				}
				break
			}
			if !nano {
				frac *= 1000
			}
			fs.Packets++
			ns := sec*1e9 + frac
			first, latest = min(first, ns), max(latest, ns)
			off := start + 16
			s.Packet(time.Unix(sec, frac).UTC(), link, buf[off:off+capLen:off+capLen])
			start = off + capLen
			if progress != nil && fs.Packets&0xffff == 0 {
				if now := time.Now(); now.Sub(last) > 200*time.Millisecond {
					last = now
					progress(read(), total)
				}
			}
		}
		if eof {
			switch {
			case errors.Is(readErr, io.ErrUnexpectedEOF):
				fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fs.Path, fs.Packets)
			case readErr != nil:
				// The whole records before a read error count.
				fs.Err = fmt.Errorf("%w: %s after %d packets: %v", ErrCorruptEntry, fs.Path, fs.Packets, readErr)
			case start < end:
				fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fs.Path, fs.Packets)
			}
			break
		}
		// Keep the partial record, fill the rest of the buffer.
		if start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		for end < len(buf) {
			n, err := r.Read(buf[end:])
			end += n
			if err != nil {
				eof = true
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				break
			}
			if n > 0 {
				break // parse what came: a pipe gives what it has
			}
		}
	}
	if progress != nil {
		progress(read(), total)
	}
}
