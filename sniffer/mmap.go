package sniffer

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"syscall"
	"time"
)

// readMappedPcap reads an uncompressed classic pcap file through a read-only
// memory mapping: no read(2) copies and no per-packet copy, the frames are
// handed to the sniffer straight from the page cache. It is the fast path of
// ReadFile (pcapgo's reader copies each packet twice); gzip and pcapng files
// take the pcapgo path. ok is false when the file is not a classic pcap or
// cannot be mapped, and the caller falls back.
func readMappedPcap(f *os.File, size int64, fs *FileStats, s *Sniffer, progress Progress) (ok bool) {
	if size < 24 || size > 1<<40 {
		return false
	}
	flags := syscall.MAP_SHARED
	if size < 1<<30 {
		// Fault the whole file in at once (one pass of read-ahead)
		// instead of a page fault per 4 KiB; large files are left to
		// fault in as they are read, so memory use stays bounded.
		flags |= syscall.MAP_POPULATE
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, flags)
	if err != nil {
		return false
	}
	defer syscall.Munmap(data)
	_ = madvise(data)
	var bo binary.ByteOrder
	nano := false
	switch binary.LittleEndian.Uint32(data) {
	case 0xa1b2c3d4:
		bo = binary.LittleEndian
	case 0xa1b23c4d:
		bo, nano = binary.LittleEndian, true
	case 0xd4c3b2a1:
		bo = binary.BigEndian
	case 0x4d3cb2a1:
		bo, nano = binary.BigEndian, true
	default:
		return false
	}
	snaplen := int(bo.Uint32(data[16:20]))
	link := int(bo.Uint32(data[20:24]) & 0x0fffffff) // upper bits: FCS flags
	if snaplen <= 0 || snaplen > 1<<18 {
		snaplen = 1 << 18 // as pcapgo: tolerate files with silly snaplens
	}
	fs.Format = "pcap"
	off := 24
	last := time.Now()
	// The time span in nanoseconds, kept as integers on the hot path.
	first, latest := int64(math.MaxInt64), int64(math.MinInt64)
	defer func() {
		if fs.Packets > 0 {
			fs.First, fs.Last = time.Unix(0, first).UTC(), time.Unix(0, latest).UTC()
		}
	}()
	for off < len(data) {
		if len(data)-off < 16 {
			fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fs.Path, fs.Packets)
			break
		}
		h := data[off : off+16]
		sec, frac := int64(bo.Uint32(h[0:4])), int64(bo.Uint32(h[4:8]))
		capLen, origLen := int(bo.Uint32(h[8:12])), int(bo.Uint32(h[12:16]))
		if capLen > snaplen || capLen > origLen && origLen != 0 {
			fs.Err = fmt.Errorf("%w: %s after %d packets: capture length %d (snaplen %d, length %d)", ErrCorruptEntry, fs.Path, fs.Packets, capLen, snaplen, origLen)
			break
		}
		off += 16
		if len(data)-off < capLen {
			fs.Err = fmt.Errorf("%w: %s after %d packets", ErrTruncated, fs.Path, fs.Packets)
			break
		}
		if !nano {
			frac *= 1000
		}
		fs.Packets++
		ns := sec*1e9 + frac
		first, latest = min(first, ns), max(latest, ns)
		s.Packet(time.Unix(sec, frac).UTC(), link, data[off:off+capLen:off+capLen])
		off += capLen
		if progress != nil && fs.Packets&0xffff == 0 {
			if now := time.Now(); now.Sub(last) > 200*time.Millisecond {
				last = now
				progress(int64(off), size)
			}
		}
	}
	if progress != nil {
		progress(int64(off), size)
	}
	return true
}

// madvise asks for sequential read-ahead on the mapping.
func madvise(b []byte) error {
	return syscall.Madvise(b, syscall.MADV_SEQUENTIAL)
}
