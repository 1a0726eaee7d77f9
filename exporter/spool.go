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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A spool is a FIFO of messages on disk: append-only segment files named
// by a decimal sequence number with a ".seg" suffix, read from the oldest.
// A segment is removed once every frame in it is acknowledged; after a
// restart the frames marked acknowledged are skipped, so nothing the spool
// knows was delivered is delivered again. Its size on disk is capped; a
// message that does not fit is refused.
//
// A frame is written for two reasons. A message that did not fit in memory
// goes to the spool only (append: "unread", read back by next). A message
// in memory that waited too long for its acknowledgement is written ahead
// (stage and commit), so that a killed process loses only the youngest
// messages; the queue keeps it in memory and marks it when it is acked.
// The queue writes frames in arrival order, so the segments replay in the
// order the messages came.
//
// Frame layout: uint32 payload length, uint32 CRC-32C of the payload, then
// the payload: uint8 topic length, topic, uint16 key length, key, value.
//
// Acknowledgements are kept in memory while running (exact) and in a
// ".ackmap" file beside each segment: one bit per frameMin bytes of the
// segment, bit off/frameMin for the frame at off (frames are at least
// frameMin bytes long, so no two share a bit). The map is written in full
// (zeros) when its segment is created, so a mark overwrites blocks that are
// already allocated and a full disk cannot stop it (a copy-on-write file
// system may still refuse). A segment whose frames are all acknowledged is
// removed, which frees space and needs none. Earlier versions appended
// (offset, length) records to a ".ack" file; such a file is still read.
//
// Disk full (or any write error) is a state, not an end: a commit writes
// whole frames in one write and, when the write falls short, truncates the
// segment back to the last whole frame; the frames not written are refused
// and counted (noteFailure), and further writes are refused without a
// system call until a probe (a probeBytes file written and removed, at most
// every probeInterval) succeeds. The episode's start and end (with its
// totals) are reported once each (takeNotices).
//
// Frames and marks reach the page cache when they are written, which is
// what a SIGKILL or an OOM kill leaves behind; the spool is synced to disk
// only when it is closed (a power loss may lose more).
//
// A spool is not safe for concurrent use; the queue serialises access.
// Degraded and WriteFailures may be called concurrently.
type spool struct {
	dir      string
	maxBytes int64
	segBytes int64

	segs    []int64 // sequence numbers on disk, oldest first
	seg     map[int64]*segment
	total   int64 // bytes of frames on disk
	nextSeq int64 // the sequence number of the next segment

	w      *os.File // the write segment; nil: none open
	wSeq   int64
	wBytes int64 // bytes of whole frames in it

	// Frames staged for the next commit, all for the write segment.
	wbuf    []byte
	pend    []int64 // their sizes
	batchOK int     // frames committed since the last takeBatch
	stop    bool    // a commit failed: stage refuses until takeBatch

	// The read cursor: the oldest frame not handed out yet. It is only
	// meaningful while unread > 0.
	r      *os.File
	br     *bufio.Reader
	rSeq   int64
	rOff   int64
	unread int64 // bytes from the cursor to the tail (acknowledged frames still to skip included)

	corrupt int // frames or tails lost to corruption (counted as dropped)
	hdr     [8]byte

	// The disk's state: full while writes fail.
	full      bool
	fullSince time.Time
	nextProbe time.Time
	epRecords uint64 // records refused in this episode
	epBytes   uint64
	marksLate bool // a mark could not be written: retried after the next successful probe
	notices   []error

	failRecords, failBytes atomic.Uint64
	degraded               atomic.Pointer[string]

	// writeAt is (*os.File).WriteAt; tests inject errors.
	writeAt func(f *os.File, p []byte, off int64) (int, error)
	now     func() time.Time
}

// segment is what the spool knows of one segment file.
type segment struct {
	size  int64  // bytes of whole frames
	acked int64  // bytes of frames known to be acknowledged
	skip  []span // frames acknowledged in an earlier run (a legacy .ack file), sorted: the reader skips them

	bits     []byte   // the ack map; nil: not loaded yet
	mapf     *os.File // the ack map file, opened on the first mark
	dlo, dhi int      // bits[dlo:dhi] is not written to the file yet
}

// span is a byte range of a segment.
type span struct{ off, n int64 }

// spoolLoc is where a message is in the spool; n == 0: nowhere.
type spoolLoc struct {
	seq, off int64
	n        int64
}

// stageResult is what stage did with a message.
type stageResult int

const (
	staged     stageResult = iota
	noRoom                 // beyond the spool's bounds: refused, not a write failure
	notWritten             // the disk refuses writes (full): refused, a write failure
)

const (
	segSuffix     = ".seg"
	ackSuffix     = ".ack"    // legacy: (offset, length) records
	mapSuffix     = ".ackmap" // one bit per frameMin bytes of the segment
	probeName     = ".probe"
	firstSeq      = int64(1) << 40 // earlier versions prepended segments below it
	maxFrameBytes = 16 << 20
	ackRecordSize = 16
	frameMin      = 8 + 1 + 2 // header, topic length, key length
	probeBytes    = 64 << 10
	probeInterval = 500 * time.Millisecond
)

var (
	crcTable   = crc32.MakeTable(crc32.Castagnoli)
	probeZeros [probeBytes]byte
)

// mapLen is the length of an ack map that covers frames starting before
// size.
func mapLen(size int64) int64 { return max(size-1, 0)/frameMin/8 + 1 }

func openSpool(dir string, maxBytes, segBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("exporter: spool: %w", err)
	}
	s := &spool{
		dir: dir, maxBytes: maxBytes, segBytes: segBytes, seg: map[int64]*segment{}, wSeq: -1, rSeq: -1, nextSeq: firstSeq,
		writeAt: (*os.File).WriteAt, now: time.Now,
	}
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
	// Ack files without their segment are leftovers of a removal cut short,
	// a probe file of a crash.
	for _, e := range entries {
		name := e.Name()
		base, suffix := name, ""
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			base, suffix = name[:i], name[i:]
		}
		seq, err := strconv.ParseInt(base, 10, 64)
		if name == probeName || (suffix == ackSuffix || suffix == mapSuffix) && err == nil && s.seg[seq] == nil {
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

func (s *spool) mapPath(seq int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, mapSuffix))
}

// empty reports whether every frame has been handed out.
func (s *spool) empty() bool { return s.unread == 0 }

func frameSize(m *qmsg) int64 { return int64(8 + 1 + len(m.topic) + 2 + len(m.key) + len(m.value)) }

// append writes m at the tail for next to read back (m is not in memory).
// It returns false when m does not fit or was not written (counted as a
// write failure).
func (s *spool) append(m *qmsg) bool {
	loc, r := s.stage(m)
	if r == staged {
		s.commit()
		if s.takeBatch() == 1 {
			if s.unread == 0 {
				s.closeReader()
				s.rSeq, s.rOff = loc.seq, loc.off
			}
			s.unread += loc.n
			return true
		}
		r = notWritten
	}
	s.takeBatch()
	if r == notWritten {
		s.noteFailure(frameSize(m))
	}
	return false
}

// appendLoaded writes m, which stays in memory, at the tail: the queue
// marks it when the broker acknowledges it. The spool must be empty (every
// frame handed out), so that frames stay in arrival order. The queue
// writes many at once with stage and commit.
func (s *spool) appendLoaded(m *qmsg) (spoolLoc, bool) {
	loc, r := s.stage(m)
	if r == staged {
		s.commit()
	}
	return loc, s.takeBatch() == 1
}

// stage adds m to the frames the next commit writes and returns where it
// will be. The frames committed are a prefix of those staged (takeBatch
// says how many).
func (s *spool) stage(m *qmsg) (spoolLoc, stageResult) {
	n := frameSize(m)
	if s.total+int64(len(s.wbuf))+n > s.maxBytes || len(m.topic) > 255 || len(m.key) > 65535 || n > maxFrameBytes {
		return spoolLoc{}, noRoom
	}
	if s.stop || !s.writable() {
		return spoolLoc{}, notWritten
	}
	if end := s.wBytes + int64(len(s.wbuf)); s.w == nil || end+n > s.segBytes && end > 0 {
		s.commitPending()
		if s.stop {
			return spoolLoc{}, notWritten
		}
		if err := s.rotate(); err != nil {
			s.fail(err)
			return spoolLoc{}, notWritten
		}
	}
	loc := spoolLoc{seq: s.wSeq, off: s.wBytes + int64(len(s.wbuf)), n: n}
	s.wbuf = s.appendFrame(s.wbuf, m)
	s.pend = append(s.pend, n)
	return loc, staged
}

// commit writes the staged frames.
func (s *spool) commit() { s.commitPending() }

// takeBatch returns how many frames were committed since it was last
// called (the first ones staged), and lets stage try again.
func (s *spool) takeBatch() int {
	k := s.batchOK
	s.batchOK, s.stop = 0, false
	return k
}

// commitPending writes the staged frames to the write segment in one
// write. After a short write the segment is cut back to its last whole
// frame: the frames not written are refused (the caller counts them).
func (s *spool) commitPending() {
	if len(s.wbuf) == 0 {
		return
	}
	n, err := s.writeAt(s.w, s.wbuf, s.wBytes)
	if err == nil && n < len(s.wbuf) {
		err = io.ErrShortWrite
	}
	var whole int64
	k := 0
	for k < len(s.pend) && whole+s.pend[k] <= int64(n) {
		whole += s.pend[k]
		k++
	}
	if err != nil {
		if terr := s.w.Truncate(s.wBytes + whole); terr != nil {
			// The torn frame stays at the tail: never append after it (the
			// next run counts it as a damaged tail).
			err = errors.Join(err, terr)
			s.wbuf, s.pend = s.wbuf[:0], s.pend[:0]
			s.seg[s.wSeq].size += whole
			s.total += whole
			s.batchOK += k
			_ = s.closeWriter()
			s.fail(fmt.Errorf("exporter: spool write: %w", err))
			return
		}
	}
	s.seg[s.wSeq].size += whole
	s.wBytes += whole
	s.total += whole
	s.batchOK += k
	s.wbuf, s.pend = s.wbuf[:0], s.pend[:0]
	if err != nil {
		s.fail(fmt.Errorf("exporter: spool write: %w", err))
	}
}

// appendFrame appends m as a frame to b.
func (s *spool) appendFrame(b []byte, m *qmsg) []byte {
	plen := 1 + len(m.topic) + 2 + len(m.key) + len(m.value)
	at := len(b)
	b = binary.BigEndian.AppendUint32(b, uint32(plen))
	b = append(b, 0, 0, 0, 0, byte(len(m.topic)))
	b = append(b, m.topic...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.key)))
	b = append(b, m.key...)
	b = append(b, m.value...)
	binary.BigEndian.PutUint32(b[at+4:], crc32.Checksum(b[at+8:], crcTable))
	return b
}

// writeFrame writes m as a frame to w.
func (s *spool) writeFrame(w io.Writer, m *qmsg) error {
	_, err := w.Write(s.appendFrame(nil, m))
	return err
}

// rotate closes the write segment and starts a new one after the newest,
// with its ack map written in full.
func (s *spool) rotate() error {
	if err := s.closeWriter(); err != nil {
		return err
	}
	seq := s.nextSeq
	s.nextSeq++
	f, err := os.OpenFile(s.segPath(seq), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	if err := s.preallocMap(seq); err != nil {
		_ = f.Close()
		_ = os.Remove(s.segPath(seq))
		_ = os.Remove(s.mapPath(seq))
		return err
	}
	s.w, s.wSeq, s.wBytes = f, seq, 0
	s.segs = append(s.segs, seq)
	s.seg[seq] = &segment{}
	return nil
}

// preallocMap writes the ack map of a new segment as zeros.
func (s *spool) preallocMap(seq int64) error {
	f, err := os.OpenFile(s.mapPath(seq), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	zeros := make([]byte, mapLen(s.segBytes))
	n, err := s.writeAt(f, zeros, 0)
	if err == nil && n < len(zeros) {
		err = io.ErrShortWrite
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("exporter: spool ack map: %w", err)
	}
	return nil
}

func (s *spool) closeWriter() error {
	if s.w == nil {
		return nil
	}
	s.commitPending()
	err := s.w.Close()
	s.w, s.wSeq = nil, -1
	if err != nil {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	return nil
}

// writable reports whether stage may write: the disk is not full, or a
// probe due now finds room again.
func (s *spool) writable() bool {
	if !s.full {
		return true
	}
	now := s.now()
	if now.Before(s.nextProbe) {
		return false
	}
	if err := s.probe(); err != nil {
		s.nextProbe = now.Add(probeInterval)
		return false
	}
	s.recovered()
	return true
}

// tick probes the disk when it is full and a probe is due, so that the
// state ends when space returns even while nothing is written.
func (s *spool) tick() { s.writable() }

// retryNow lets the next write try at once (Close's last chance).
func (s *spool) retryNow() { s.nextProbe = time.Time{} }

// probe writes probeBytes to a file of its own and removes it.
func (s *spool) probe() error {
	p := filepath.Join(s.dir, probeName)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	n, err := s.writeAt(f, probeZeros[:], 0)
	if err == nil && n < probeBytes {
		err = io.ErrShortWrite
	}
	_ = f.Close()
	_ = os.Remove(p)
	return err
}

// fail starts an episode of failing writes, or continues it.
func (s *spool) fail(err error) {
	s.stop = true
	now := s.now()
	s.nextProbe = now.Add(probeInterval)
	if s.full {
		return
	}
	s.full, s.fullSince, s.epRecords, s.epBytes = true, now, 0, 0
	reason := err.Error()
	s.degraded.Store(&reason)
	s.notices = append(s.notices, fmt.Errorf("%w; records are kept in memory only (a kill loses them) and what memory cannot hold is dropped, until a write succeeds again (tried every %v)", err, probeInterval))
}

// recovered ends the episode: writes succeed again.
func (s *spool) recovered() {
	s.full = false
	s.degraded.Store(nil)
	s.notices = append(s.notices, fmt.Errorf("exporter: spool: writing again after %v; %d records (%d bytes) could not be written meanwhile",
		s.now().Sub(s.fullSince).Round(time.Millisecond), s.epRecords, s.epBytes))
	if s.marksLate {
		s.marksLate = false
		for seq, sg := range s.seg {
			if err := s.writeMap(seq, sg); err != nil {
				s.marksFailed(err)
				return
			}
		}
	}
}

// noteFailure counts a record of n bytes that could not be written.
func (s *spool) noteFailure(n int64) {
	s.failRecords.Add(1)
	s.failBytes.Add(uint64(n))
	s.epRecords++
	s.epBytes += uint64(n)
}

// marksFailed notes acknowledgements that are in memory only.
func (s *spool) marksFailed(err error) {
	s.marksLate = true
	stop := s.stop
	s.fail(fmt.Errorf("exporter: spool ack map: %w", err))
	s.stop = stop
}

// takeNotices returns and clears the start and end of disk-full episodes.
func (s *spool) takeNotices() error {
	err := errors.Join(s.notices...)
	s.notices = s.notices[:0]
	return err
}

// Degraded reports whether the spool cannot write (the disk is full), and
// why. Safe for concurrent use.
func (s *spool) Degraded() (reason string, ok bool) {
	if p := s.degraded.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// WriteFailures reports the records (and their bytes) that the spool
// could not write, each counted once. Safe for concurrent use.
func (s *spool) WriteFailures() (records, bytes uint64) {
	return s.failRecords.Load(), s.failBytes.Load()
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
		if s.r == nil {
			if err := s.openReader(); err != nil {
				return m, false, err
			}
		}
		if err := s.loadBits(s.rSeq, sg); err != nil {
			return m, false, err
		}
		off := s.rOff
		m, n, rerr := s.readFrame()
		if rerr == nil {
			s.rOff += n
			s.unread -= n
			if sg.marked(off) {
				// Acknowledged in an earlier run.
				sg.acked += n
				if err := s.dropIfDone(s.rSeq); err != nil {
					return qmsg{}, false, err
				}
				m = qmsg{}
				continue
			}
			m.loc = spoolLoc{seq: s.rSeq, off: off, n: n}
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

// loadBits reads segment seq's ack map, once.
func (s *spool) loadBits(seq int64, sg *segment) error {
	if sg.bits != nil {
		return nil
	}
	b, err := os.ReadFile(s.mapPath(seq))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("exporter: spool: %w", err)
	}
	if need := int(mapLen(max(sg.size, s.segBytes))); len(b) < need {
		b = append(b, make([]byte, need-len(b))...)
	}
	sg.bits = b
	return nil
}

// marked reports whether the frame at off is marked acknowledged.
func (sg *segment) marked(off int64) bool {
	i := off / frameMin
	return i/8 < int64(len(sg.bits)) && sg.bits[i/8]&(1<<(i%8)) != 0
}

// mark marks the frame at off acknowledged (in memory).
func (sg *segment) mark(off int64) {
	i := off / frameMin
	b := int(i / 8)
	if b >= len(sg.bits) {
		sg.bits = append(sg.bits, make([]byte, b+1-len(sg.bits))...)
	}
	sg.bits[b] |= 1 << (i % 8)
	if sg.dhi == 0 {
		sg.dlo, sg.dhi = b, b+1
	} else {
		sg.dlo, sg.dhi = min(sg.dlo, b), max(sg.dhi, b+1)
	}
}

// writeMap writes the marks of sg not yet in its ack map file.
func (s *spool) writeMap(seq int64, sg *segment) error {
	if sg.dhi == 0 {
		return nil
	}
	if sg.mapf == nil {
		f, err := os.OpenFile(s.mapPath(seq), os.O_CREATE|os.O_WRONLY, 0o640)
		if err != nil {
			return err
		}
		sg.mapf = f
	}
	n, err := s.writeAt(sg.mapf, sg.bits[sg.dlo:sg.dhi], int64(sg.dlo))
	if err == nil && n < sg.dhi-sg.dlo {
		err = io.ErrShortWrite
	}
	if err != nil {
		return err
	}
	sg.dlo, sg.dhi = 0, 0
	return nil
}

// markAcked records that the frames at locs (in spool order) were
// acknowledged, in memory and in their segments' ack maps, and removes the
// segments that are then fully acknowledged. A map that cannot be written
// (it is preallocated, so only an I/O error or a copy-on-write file
// system) keeps the marks in memory and starts a disk episode; they are
// written when it ends.
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
		for _, l := range run {
			sg.acked += l.n
		}
		if sg.acked >= sg.size {
			// Fully acknowledged: removed, no need to mark.
			if err := s.dropIfDone(seq); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := s.loadBits(seq, sg); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range run {
			sg.mark(l.off)
		}
		if err := s.writeMap(seq, sg); err != nil {
			s.marksFailed(err)
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
	if sg.mapf != nil {
		_ = sg.mapf.Close()
	}
	s.total -= sg.size
	delete(s.seg, seq)
	if i, ok := slices.BinarySearch(s.segs, seq); ok {
		s.segs = slices.Delete(s.segs, i, i+1)
	}
	var errs []error
	for _, p := range []string{s.segPath(seq), s.ackPath(seq), s.mapPath(seq)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
		}
	}
	return errors.Join(errs...)
}

// close syncs what was written and closes the files. The segments stay
// for the next run.
func (s *spool) close() error {
	var errs []error
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
		}
	}
	if err := s.closeWriter(); err != nil {
		errs = append(errs, err)
	}
	s.closeReader()
	for seq, sg := range s.seg {
		if err := s.writeMap(seq, sg); err != nil {
			errs = append(errs, fmt.Errorf("exporter: spool ack map: %w", err))
		}
		if sg.mapf != nil {
			if err := sg.mapf.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("exporter: spool: %w", err))
			}
			_ = sg.mapf.Close()
			sg.mapf = nil
		}
	}
	return errors.Join(errs...)
}

// spoolUnwrittenDesc describes pqwatch_kafka_spool_unwritten_total, part
// of the Kafka sink's Collector.
func spoolUnwrittenDesc() *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_kafka_spool_unwritten_total",
		"Records the Kafka disk spool could not write (its disk full or failing), each counted once: written ahead, they stayed in memory only (a kill loses them); overflow, they were dropped (also counted as dropped). 0 without a spool. Only with a Kafka feed.",
		nil, nil)
}

// SpoolDegraded reports whether the Kafka sink's disk spool cannot write
// (its disk is full), and why; false without a spool. For health.
func (k *Kafka) SpoolDegraded() (reason string, ok bool) {
	if k.q.spool == nil {
		return "", false
	}
	return k.q.spool.Degraded()
}

// SpoolWriteFailures reports the records (and bytes) the Kafka sink's
// spool could not write: written ahead ones stayed in memory only,
// overflow ones were dropped (and counted as dropped too).
func (k *Kafka) SpoolWriteFailures() (records, bytes uint64) {
	if k.q.spool == nil {
		return 0, 0
	}
	return k.q.spool.WriteFailures()
}
