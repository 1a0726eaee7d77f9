package exporter

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A spool is a FIFO of messages on disk: append-only segment files named
// by a decimal sequence number with a ".seg" suffix, read from the oldest.
// A segment is removed once it has been read to its end. Its size on disk is
// capped; a message that does not fit is refused. On close, messages still in
// memory are written in front of the spool and the read prefix of the oldest
// segment is cut off, so that a restart resumes where delivery stopped.
//
// Frame layout: uint32 payload length, uint32 CRC-32C of the payload, then
// the payload: uint8 topic length, topic, uint16 key length, key, value.
//
// A spool is not safe for concurrent use; the queue serialises access.
type spool struct {
	dir      string
	maxBytes int64
	segBytes int64

	segs  []int64 // sequence numbers on disk, oldest first
	sizes map[int64]int64
	total int64 // bytes on disk, buffered writes included

	w      *os.File
	bw     *bufio.Writer
	wSeq   int64
	wBytes int64

	r    *os.File
	br   *bufio.Reader
	rSeq int64
	rOff int64

	corrupt int // frames or tails lost to corruption (counted as dropped)
	hdr     [8]byte
}

const (
	segSuffix     = ".seg"
	firstSeq      = int64(1) << 40 // leaves room to prepend segments below
	maxFrameBytes = 16 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openSpool(dir string, maxBytes, segBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("exporter: spool: %w", err)
	}
	s := &spool{dir: dir, maxBytes: maxBytes, segBytes: segBytes, sizes: map[int64]int64{}, wSeq: -1, rSeq: -1}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("exporter: spool: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseInt(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("exporter: spool: %w", err)
		}
		s.segs = append(s.segs, seq)
		s.sizes[seq] = fi.Size()
		s.total += fi.Size()
	}
	slices.Sort(s.segs)
	return s, nil
}

func (s *spool) segPath(seq int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, segSuffix))
}

// unread reports the bytes not yet read back.
func (s *spool) unread() int64 {
	if len(s.segs) == 0 {
		return 0
	}
	return s.total - s.rOff
}

func (s *spool) empty() bool { return s.unread() == 0 }

func frameSize(m *qmsg) int64 { return int64(8 + 1 + len(m.topic) + 2 + len(m.key) + len(m.value)) }

// append writes m at the tail. It returns false when m does not fit.
func (s *spool) append(m *qmsg) (bool, error) {
	n := frameSize(m)
	if s.total+n > s.maxBytes || len(m.topic) > 255 || len(m.key) > 65535 || n > maxFrameBytes {
		return false, nil
	}
	if s.w == nil || s.wBytes+n > s.segBytes && s.wBytes > 0 {
		if err := s.rotate(); err != nil {
			return false, err
		}
	}
	if err := s.writeFrame(s.bw, m); err != nil {
		return false, fmt.Errorf("exporter: spool write: %w", err)
	}
	s.wBytes += n
	s.sizes[s.wSeq] += n
	s.total += n
	return true, nil
}

func (s *spool) writeFrame(w io.Writer, m *qmsg) error {
	plen := 1 + len(m.topic) + 2 + len(m.key) + len(m.value)
	crc := crc32.Update(0, crcTable, []byte{byte(len(m.topic))})
	crc = crc32.Update(crc, crcTable, []byte(m.topic))
	var kl [2]byte
	binary.BigEndian.PutUint16(kl[:], uint16(len(m.key)))
	crc = crc32.Update(crc, crcTable, kl[:])
	crc = crc32.Update(crc, crcTable, m.key)
	crc = crc32.Update(crc, crcTable, m.value)
	binary.BigEndian.PutUint32(s.hdr[0:4], uint32(plen))
	binary.BigEndian.PutUint32(s.hdr[4:8], crc)
	for _, b := range [][]byte{s.hdr[:], {byte(len(m.topic))}, []byte(m.topic), kl[:], m.key, m.value} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// rotate closes the write segment and starts a new one after the newest.
func (s *spool) rotate() error {
	if err := s.closeWriter(); err != nil {
		return err
	}
	seq := firstSeq
	if n := len(s.segs); n > 0 {
		seq = s.segs[n-1] + 1
	}
	f, err := os.OpenFile(s.segPath(seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	s.w, s.bw, s.wSeq, s.wBytes = f, bufio.NewWriterSize(f, 64<<10), seq, 0
	s.segs = append(s.segs, seq)
	s.sizes[seq] = 0
	return nil
}

func (s *spool) closeWriter() error {
	if s.w == nil {
		return nil
	}
	err := s.bw.Flush()
	if cerr := s.w.Close(); err == nil {
		err = cerr
	}
	s.w, s.bw, s.wSeq = nil, nil, -1
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	return nil
}

// next reads the oldest unread message. ok is false when the spool is empty.
func (s *spool) next() (m qmsg, ok bool, err error) {
	for len(s.segs) > 0 {
		head := s.segs[0]
		if s.rSeq != head || s.r == nil {
			if err := s.openReader(head); err != nil {
				return m, false, err
			}
		}
		if head == s.wSeq {
			if err := s.bw.Flush(); err != nil {
				return m, false, fmt.Errorf("exporter: spool: %w", err)
			}
		}
		if s.rOff < s.sizes[head] {
			m, n, rerr := s.readFrame()
			if rerr == nil {
				s.rOff += n
				if s.rOff == s.sizes[head] {
					// Read to its end: remove it now rather than on the
					// next call, which may come only after a restart.
					if head == s.wSeq {
						err = s.closeWriter()
					}
					if err == nil {
						err = s.dropHead()
					}
				}
				return m, true, err
			}
			// A damaged or torn frame: the rest of this segment is lost.
			s.corrupt++
			s.total -= s.sizes[head] - s.rOff
			s.sizes[head] = s.rOff
		}
		// Segment read to its end.
		if head == s.wSeq {
			if err := s.closeWriter(); err != nil {
				return m, false, err
			}
		}
		if err := s.dropHead(); err != nil {
			return m, false, err
		}
	}
	return m, false, nil
}

func (s *spool) openReader(seq int64) error {
	if s.r != nil {
		_ = s.r.Close()
	}
	f, err := os.Open(s.segPath(seq))
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	off := int64(0)
	if s.rSeq == seq {
		off = s.rOff
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		_ = f.Close()
		return fmt.Errorf("exporter: spool: %w", err)
	}
	s.r, s.br, s.rSeq, s.rOff = f, bufio.NewReaderSize(f, 64<<10), seq, off
	return nil
}

func (s *spool) readFrame() (qmsg, int64, error) {
	var m qmsg
	if _, err := io.ReadFull(s.br, s.hdr[:]); err != nil {
		return m, 0, fmt.Errorf("%w: %w", ErrSpoolCorrupt, err)
	}
	plen := binary.BigEndian.Uint32(s.hdr[0:4])
	crc := binary.BigEndian.Uint32(s.hdr[4:8])
	if plen < 3 || plen > maxFrameBytes {
		return m, 0, ErrSpoolCorrupt
	}
	p := make([]byte, plen)
	if _, err := io.ReadFull(s.br, p); err != nil {
		return m, 0, fmt.Errorf("%w: %w", ErrSpoolCorrupt, err)
	}
	if crc32.Checksum(p, crcTable) != crc {
		return m, 0, fmt.Errorf("%w: checksum", ErrSpoolCorrupt)
	}
	tl := int(p[0])
	if 1+tl+2 > len(p) {
		return m, 0, ErrSpoolCorrupt
	}
	m.topic = string(p[1 : 1+tl])
	kl := int(binary.BigEndian.Uint16(p[1+tl:]))
	rest := p[1+tl+2:]
	if kl > len(rest) {
		return m, 0, ErrSpoolCorrupt
	}
	if kl > 0 {
		m.key = rest[:kl:kl]
	}
	m.value = rest[kl:]
	return m, int64(8 + plen), nil
}

func (s *spool) dropHead() error {
	head := s.segs[0]
	if s.r != nil && s.rSeq == head {
		_ = s.r.Close()
		s.r, s.br = nil, nil
	}
	s.total -= s.sizes[head]
	delete(s.sizes, head)
	s.segs = s.segs[1:]
	s.rSeq, s.rOff = -1, 0
	if err := os.Remove(s.segPath(head)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	return nil
}

// closeWith persists msgs, which are older than anything spooled, in front
// of the spool, drops the already-read prefix of the head segment so that a
// restart does not redeliver it, and closes the files. The byte cap still
// applies: it returns how many of msgs were stored.
func (s *spool) closeWith(msgs []qmsg) (int, error) {
	if err := s.closeWriter(); err != nil {
		return 0, err
	}
	defer func() {
		if s.r != nil {
			_ = s.r.Close()
			s.r, s.br = nil, nil
		}
	}()
	partial := len(s.segs) > 0 && s.rSeq == s.segs[0] && s.rOff > 0
	if len(msgs) == 0 && !partial {
		return 0, nil
	}
	seq := firstSeq
	if len(s.segs) > 0 {
		seq = s.segs[0] - 1
	}
	f, err := os.OpenFile(s.segPath(seq), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return 0, fmt.Errorf("exporter: spool: %w", err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	base := s.total
	if partial {
		base -= s.rOff
	}
	var n int
	var size int64
	for i := range msgs {
		fs := frameSize(&msgs[i])
		if base+size+fs > s.maxBytes {
			break
		}
		if err := s.writeFrame(bw, &msgs[i]); err != nil {
			_ = f.Close()
			return 0, fmt.Errorf("exporter: spool write: %w", err)
		}
		size += fs
		n++
	}
	var copied int64
	if partial {
		head := s.segs[0]
		copied, err = io.Copy(bw, io.NewSectionReader(s.r, s.rOff, s.sizes[head]-s.rOff))
		if err != nil {
			_ = f.Close()
			return 0, fmt.Errorf("exporter: spool: %w", err)
		}
	}
	err = bw.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("exporter: spool write: %w", err)
	}
	if partial {
		if err := s.dropHead(); err != nil {
			return n, err
		}
	}
	if size+copied == 0 {
		_ = os.Remove(s.segPath(seq))
		return n, nil
	}
	s.segs = slices.Insert(s.segs, 0, seq)
	s.sizes[seq] = size + copied
	s.total += size + copied
	return n, nil
}
