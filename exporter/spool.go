package exporter

import (
	"bufio"
	"cmp"
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
// by a decimal sequence number with a ".seg" suffix, read from the oldest,
// each with an append-only ".ack" file beside it that marks the frames the
// broker acknowledged. A segment is removed once every frame in it is
// acknowledged; after a restart the marked frames are skipped, so nothing
// the spool knows was delivered is delivered again. Its size on disk is
// capped; a message that does not fit is refused.
//
// A frame is written for two reasons. A message that did not fit in memory
// goes to the spool only (append: "unread", read back by next). A message
// in memory that waited too long for its acknowledgement is written ahead
// (appendLoaded), so that a killed process loses only the youngest
// messages; the queue keeps it in memory and marks it when it is acked.
// The queue writes frames in arrival order, so the segments replay in the
// order the messages came.
//
// Frame layout: uint32 payload length, uint32 CRC-32C of the payload, then
// the payload: uint8 topic length, topic, uint16 key length, key, value.
// Ack record: uint64 offset, uint64 length of a run of acknowledged frames.
//
// Frames reach the page cache within the queue's flush interval and ack
// records at once, which is what a SIGKILL or an OOM kill leaves behind;
// the spool is synced to disk only when it is closed (a power loss may lose
// more).
//
// A spool is not safe for concurrent use; the queue serialises access.
type spool struct {
	dir      string
	maxBytes int64
	segBytes int64

	segs    []int64 // sequence numbers on disk, oldest first
	seg     map[int64]*segment
	total   int64 // bytes on disk, buffered writes included
	nextSeq int64 // the sequence number of the next segment

	w      *os.File
	bw     *bufio.Writer
	wSeq   int64
	wBytes int64
	dirty  bool // bw holds frames not yet written to the file

	// The read cursor: the oldest frame not handed out yet. It is only
	// meaningful while unread > 0.
	r      *os.File
	br     *bufio.Reader
	rSeq   int64
	rOff   int64
	unread int64 // bytes from the cursor to the tail (acknowledged frames still to skip included)

	corrupt int // frames or tails lost to corruption (counted as dropped)
	hdr     [8]byte
	ackBuf  []byte
}

// segment is what the spool knows of one segment file.
type segment struct {
	size  int64    // bytes of frames (on disk or buffered)
	acked int64    // bytes of acknowledged frames
	marks *os.File // its ack file, opened on the first acknowledgement
	skip  []span   // frames acknowledged in an earlier run, sorted: the reader skips them
}

// span is a byte range of a segment.
type span struct{ off, n int64 }

// spoolLoc is where a message is in the spool; n == 0: nowhere.
type spoolLoc struct {
	seq, off int64
	n        int64
}

const (
	segSuffix     = ".seg"
	ackSuffix     = ".ack"
	firstSeq      = int64(1) << 40 // earlier versions prepended segments below it
	maxFrameBytes = 16 << 20
	ackRecordSize = 16
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openSpool(dir string, maxBytes, segBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("exporter: spool: %w", err)
	}
	s := &spool{dir: dir, maxBytes: maxBytes, segBytes: segBytes, seg: map[int64]*segment{}, wSeq: -1, rSeq: -1, nextSeq: firstSeq}
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
		if err != nil || seq <= 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("exporter: spool: %w", err)
		}
		sg := &segment{size: fi.Size()}
		if sg.skip, err = readMarks(s.ackPath(seq), sg.size); err != nil {
			return nil, err
		}
		for _, sp := range sg.skip {
			sg.acked += sp.n
		}
		s.segs = append(s.segs, seq)
		s.seg[seq] = sg
		s.total += sg.size
		s.unread += sg.size
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	slices.Sort(s.segs)
	// Ack files without their segment are leftovers of a removal cut short.
	for _, e := range entries {
		name := e.Name()
		if seq, err := strconv.ParseInt(strings.TrimSuffix(name, ackSuffix), 10, 64); err == nil && strings.HasSuffix(name, ackSuffix) && s.seg[seq] == nil {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	for _, seq := range slices.Clone(s.segs) {
		if err := s.dropIfDone(seq); err != nil {
			return nil, err
		}
	}
	if len(s.segs) > 0 {
		s.rSeq, s.rOff = s.segs[0], 0
	}
	return s, nil
}

// readMarks reads an ack file into sorted, merged spans within [0, size).
// A torn last record is ignored.
func readMarks(path string, size int64) ([]span, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("exporter: spool: %w", err)
	}
	var spans []span
	for ; len(b) >= ackRecordSize; b = b[ackRecordSize:] {
		off, n := int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:]))
		if off < 0 || n <= 0 || off >= size {
			continue
		}
		spans = append(spans, span{off, min(n, size-off)})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	merged := spans[:0]
	for _, sp := range spans {
		if k := len(merged); k > 0 && sp.off <= merged[k-1].off+merged[k-1].n {
			merged[k-1].n = max(merged[k-1].n, sp.off+sp.n-merged[k-1].off)
			continue
		}
		merged = append(merged, sp)
	}
	return merged, nil
}

func (s *spool) segPath(seq int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, segSuffix))
}

func (s *spool) ackPath(seq int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, ackSuffix))
}

// empty reports whether every frame has been handed out.
func (s *spool) empty() bool { return s.unread == 0 }

func frameSize(m *qmsg) int64 { return int64(8 + 1 + len(m.topic) + 2 + len(m.key) + len(m.value)) }

// append writes m at the tail for next to read back (m is not in memory).
// It returns false when m does not fit.
func (s *spool) append(m *qmsg) (bool, error) {
	loc, ok, err := s.write(m)
	if !ok {
		return false, err
	}
	if s.unread == 0 {
		s.closeReader()
		s.rSeq, s.rOff = loc.seq, loc.off
	}
	s.unread += loc.n
	return true, err
}

// appendLoaded writes m, which stays in memory, at the tail: the queue
// marks it when the broker acknowledges it. The spool must be empty (every
// frame handed out), so that frames stay in arrival order.
func (s *spool) appendLoaded(m *qmsg) (spoolLoc, bool, error) {
	return s.write(m)
}

func (s *spool) write(m *qmsg) (spoolLoc, bool, error) {
	n := frameSize(m)
	if s.total+n > s.maxBytes || len(m.topic) > 255 || len(m.key) > 65535 || n > maxFrameBytes {
		return spoolLoc{}, false, nil
	}
	if s.w == nil || s.wBytes+n > s.segBytes && s.wBytes > 0 {
		if err := s.rotate(); err != nil {
			return spoolLoc{}, false, err
		}
	}
	if err := s.writeFrame(s.bw, m); err != nil {
		return spoolLoc{}, false, fmt.Errorf("exporter: spool write: %w", err)
	}
	loc := spoolLoc{seq: s.wSeq, off: s.wBytes, n: n}
	s.wBytes += n
	s.seg[s.wSeq].size += n
	s.total += n
	s.dirty = true
	return loc, true, nil
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

// flush writes buffered frames to the file (the page cache).
func (s *spool) flush() error {
	if !s.dirty || s.bw == nil {
		return nil
	}
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("exporter: spool write: %w", err)
	}
	s.dirty = false
	return nil
}

// rotate closes the write segment and starts a new one after the newest.
func (s *spool) rotate() error {
	if err := s.closeWriter(); err != nil {
		return err
	}
	seq := s.nextSeq
	f, err := os.OpenFile(s.segPath(seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	s.nextSeq++
	s.w, s.bw, s.wSeq, s.wBytes = f, bufio.NewWriterSize(f, 64<<10), seq, 0
	s.segs = append(s.segs, seq)
	s.seg[seq] = &segment{}
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
	s.w, s.bw, s.wSeq, s.dirty = nil, nil, -1, false
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	return nil
}

// next reads the oldest frame not handed out, skipping frames acknowledged
// in an earlier run. ok is false when there is none.
func (s *spool) next() (m qmsg, ok bool, err error) {
	for s.unread > 0 {
		sg := s.seg[s.rSeq]
		if sg == nil {
			// The cursor's segment is gone: go on with the next one.
			i, _ := slices.BinarySearch(s.segs, s.rSeq)
			if i == len(s.segs) {
				s.unread = 0
				return m, false, nil
			}
			s.rSeq, s.rOff = s.segs[i], 0
			continue
		}
		// Skip acknowledged frames. A span that does not begin at a frame
		// (a damaged ack file) is dropped: its frames are handed out.
		for len(sg.skip) > 0 && sg.skip[0].off < s.rOff {
			sg.acked -= sg.skip[0].n
			sg.skip = sg.skip[1:]
		}
		if len(sg.skip) > 0 && sg.skip[0].off == s.rOff {
			s.rOff += sg.skip[0].n
			s.unread -= sg.skip[0].n
			sg.skip = sg.skip[1:]
			s.closeReader()
			continue
		}
		if s.rOff >= sg.size {
			// At the end of this segment: on to the next.
			i, _ := slices.BinarySearch(s.segs, s.rSeq+1)
			if i == len(s.segs) {
				s.unread = 0
				return m, false, nil
			}
			s.closeReader()
			s.rSeq, s.rOff = s.segs[i], 0
			continue
		}
		if s.rSeq == s.wSeq {
			if err := s.flush(); err != nil {
				return m, false, err
			}
		}
		if s.r == nil {
			if err := s.openReader(); err != nil {
				return m, false, err
			}
		}
		off := s.rOff
		m, n, rerr := s.readFrame()
		if rerr == nil {
			m.loc = spoolLoc{seq: s.rSeq, off: off, n: n}
			s.rOff += n
			s.unread -= n
			return m, true, nil
		}
		// A damaged or torn frame: the rest of this segment is lost.
		s.corrupt++
		for _, sp := range sg.skip {
			sg.acked -= sp.n
		}
		s.unread -= sg.size - s.rOff
		s.total -= sg.size - s.rOff
		sg.size, sg.skip = s.rOff, nil
		s.closeReader()
		if s.rSeq == s.wSeq {
			// Never append after damage.
			if err := s.closeWriter(); err != nil {
				return m, false, err
			}
		}
		if err := s.dropIfDone(s.rSeq); err != nil {
			return m, false, err
		}
	}
	return m, false, nil
}

func (s *spool) openReader() error {
	f, err := os.Open(s.segPath(s.rSeq))
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	if _, err := f.Seek(s.rOff, io.SeekStart); err != nil {
		_ = f.Close()
		return fmt.Errorf("exporter: spool: %w", err)
	}
	s.r, s.br = f, bufio.NewReaderSize(f, 64<<10)
	return nil
}

func (s *spool) closeReader() {
	if s.r != nil {
		_ = s.r.Close()
		s.r, s.br = nil, nil
	}
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

// markAcked records that the frames at locs (in spool order) were
// acknowledged, one ack record per run of adjacent frames, and removes the
// segments that are then fully acknowledged.
func (s *spool) markAcked(locs []spoolLoc) error {
	var errs []error
	for len(locs) > 0 {
		seq := locs[0].seq
		sg := s.seg[seq]
		k := 1
		for k < len(locs) && locs[k].seq == seq {
			k++
		}
		run, rest := locs[:k], locs[k:]
		locs = rest
		if sg == nil {
			continue
		}
		s.ackBuf = s.ackBuf[:0]
		start, end := run[0].off, run[0].off+run[0].n
		for _, l := range run[1:] {
			if l.off != end {
				s.ackBuf = appendAck(s.ackBuf, start, end-start)
				start = l.off
			}
			end = l.off + l.n
		}
		s.ackBuf = appendAck(s.ackBuf, start, end-start)
		for _, l := range run {
			sg.acked += l.n
		}
		if sg.acked >= sg.size {
			// Fully acknowledged: removed below, no need to mark.
			if err := s.dropIfDone(seq); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if sg.marks == nil {
			f, err := os.OpenFile(s.ackPath(seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
			if err != nil {
				errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
				continue
			}
			sg.marks = f
		}
		if _, err := sg.marks.Write(s.ackBuf); err != nil {
			errs = append(errs, fmt.Errorf("exporter: spool ack: %w", err))
		}
	}
	return errors.Join(errs...)
}

func appendAck(b []byte, off, n int64) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// dropIfDone removes segment seq when every frame in it is acknowledged.
func (s *spool) dropIfDone(seq int64) error {
	sg := s.seg[seq]
	if sg == nil || sg.acked < sg.size {
		return nil
	}
	if seq == s.wSeq {
		if err := s.closeWriter(); err != nil {
			return err
		}
	}
	// What the reader had still to pass in it is gone.
	switch {
	case s.unread == 0:
	case seq == s.rSeq:
		s.unread -= sg.size - s.rOff
		s.closeReader()
	case seq > s.rSeq:
		s.unread -= sg.size
	}
	s.unread = max(s.unread, 0)
	if sg.marks != nil {
		_ = sg.marks.Close()
	}
	s.total -= sg.size
	delete(s.seg, seq)
	if i, ok := slices.BinarySearch(s.segs, seq); ok {
		s.segs = slices.Delete(s.segs, i, i+1)
	}
	var errs []error
	for _, p := range []string{s.segPath(seq), s.ackPath(seq)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
		}
	}
	return errors.Join(errs...)
}

// close flushes and syncs what was written and closes the files. The
// segments stay for the next run.
func (s *spool) close() error {
	var errs []error
	if s.w != nil {
		if err := s.bw.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("exporter: spool write: %w", err))
		}
		if err := s.w.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
		}
	}
	if err := s.closeWriter(); err != nil {
		errs = append(errs, err)
	}
	s.closeReader()
	for _, sg := range s.seg {
		if sg.marks != nil {
			if err := sg.marks.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
			}
			_ = sg.marks.Close()
			sg.marks = nil
		}
	}
	return errors.Join(errs...)
}
