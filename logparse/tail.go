package logparse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TailOptions configures a Tailer. The zero value is usable.
type TailOptions struct {
	// PollInterval between checks for new data and rotation (default 200ms).
	PollInterval time.Duration
	// MaxLineBytes is the longest line delivered (default 64 KiB, newline
	// excluded); longer lines are skipped and counted as too_long.
	MaxLineBytes int
	// OffsetFile, when set, persists the read position (device, inode,
	// offset and a fingerprint of the bytes before it) so that a restarted
	// tailer resumes where the last one stopped.
	OffsetFile string
	// SaveInterval between offset-file writes while running (default 1s).
	// The file is always written when Run returns.
	SaveInterval time.Duration
	// StartAtEnd, when there is no saved offset, skips what the file already
	// holds. The default reads it from the beginning.
	StartAtEnd bool
	// RotateWait is how long a file renamed away is still read for late
	// writes (nginx writes to the old file until it reopens its logs)
	// after a new file appeared at the path (default 5s).
	RotateWait time.Duration
	// SymlinkDirs: directories a symbolic link in the log's path may lead
	// into ("/" allows every link). Without them a link is followed only
	// while it stays inside the log's own directory, and none on the way
	// to that directory, so a log path cannot be pointed at a file pqwatch
	// should not read (OpenLog has the exact rule).
	SymlinkDirs []string
	// OnSave, when set, is told of every offset-file save: nil when it was
	// written, else why not.
	OnSave func(err error)
	// Counters receives too_long counts; may be nil.
	Counters *LineCounters
	// Logger for rotation events; nil discards.
	Logger *slog.Logger
}

// TailStats counts the tailer's file events.
type TailStats struct {
	Lines        uint64 // lines delivered
	Refused      uint64 // opens refused: not a regular file, or a symbolic link not allowed
	TooLong      uint64 // lines skipped for exceeding MaxLineBytes
	Rotations    uint64 // rename-and-create rotations followed
	Truncations  uint64 // copytruncate (or other shrink/replace in place) seen
	Gaps         uint64 // rotations whose unread rest could not be found: lines may be lost
	SaveFailures uint64 // offset-file saves that failed
}

// ErrOffsetFile reports an unreadable offset file.
var ErrOffsetFile = errors.New("logparse: bad offset file")

const fpLen = 32 // fingerprint: the bytes right before the offset

// Tailer follows one log file across rotation.
//
// The rotation rule: the tailer holds the file open and identifies it by
// device and inode. When the path names another inode (rename-and-create),
// the old file is read to its end and kept open for RotateWait for late
// writes; a file at path+".1" that the tailer has never seen (a second
// rotation between two polls) is read from its start before the new file,
// which is read from offset 0. When the same inode shrinks below the read
// position or the fingerprint (the 32 bytes before the offset) no longer
// matches (copytruncate), the rest is read from path+".1" if that file holds
// the same fingerprint at the same offset, then the truncated file from 0.
// After a restart the saved entries are matched by inode against path,
// path+".1" and then path+".SUFFIX" (kubelet's 0.log.20261205-085845) with
// the same rules; a path inode that no entry names is read from 0. Whatever
// cannot be located (more than one rotation between polls, or while stopped
// when the old file went elsewhere) is counted in TailStats.Gaps. Delivery
// is exactly once as long as Run returns normally; after a crash, lines
// delivered after the last save (SaveInterval) are delivered again.
type Tailer struct {
	path string
	opts TailOptions
	log  *slog.Logger

	cur      *tfile
	draining []*tfile
	finished []uint64 // recently finished inodes (ring)
	stats    struct{ lines, tooLong, rotations, truncations, gaps, refused, saveFailures atomic.Uint64 }
	saveErr  error  // the last offset save's
	refusal  string // the last refusal logged, so each is said once

	mu        sync.Mutex
	curIno    uint64
	curOff    int64
	lastSave  time.Time
	saveDirty bool
}

type tfile struct {
	f        *os.File
	name     string
	dev, ino uint64
	off      int64 // first byte not yet delivered (start of the partial line)
	pos      int64 // next byte to read
	buf      []byte
	bufStart int64
	skipping bool
	tail     []byte // up to fpLen bytes before off
	fp       [fpLen]byte
	rotated  time.Time
}

// NewTailer returns a tailer for path; Run starts it.
func NewTailer(path string, opts TailOptions) *Tailer {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 64 << 10
	}
	if opts.SaveInterval <= 0 {
		opts.SaveInterval = time.Second
	}
	if opts.RotateWait <= 0 {
		opts.RotateWait = 5 * time.Second
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Tailer{path: path, opts: opts, log: lg}
}

// Offset returns the inode and offset of the current file up to which lines
// have been delivered.
func (t *Tailer) Offset() (inode uint64, off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.curIno, t.curOff
}

// Stats returns the tailer's counters.
func (t *Tailer) Stats() TailStats {
	return TailStats{
		Lines: t.stats.lines.Load(), TooLong: t.stats.tooLong.Load(), Rotations: t.stats.rotations.Load(),
		Truncations: t.stats.truncations.Load(), Gaps: t.stats.gaps.Load(), Refused: t.stats.refused.Load(),
		SaveFailures: t.stats.saveFailures.Load(),
	}
}

// Run follows the file until ctx is done, calling fn for every complete line
// (newline excluded) with the time it was read. line is valid only during the
// call. Run saves the offset file before it returns; it returns nil when ctx
// ends and an error only for failures of the offset file.
func (t *Tailer) Run(ctx context.Context, fn func(line []byte, ts time.Time)) error {
	defer t.closeAll()
	if err := t.restore(); err != nil {
		return err
	}
	tick := time.NewTicker(t.opts.PollInterval)
	defer tick.Stop()
	for {
		t.poll(ctx, fn)
		if time.Since(t.lastSave) >= t.opts.SaveInterval && t.saveDirty {
			t.saved(t.save())
		}
		select {
		case <-ctx.Done():
			return t.save()
		case <-tick.C:
		}
	}
}

// saved follows the offset file's saves: a failure (a full or read-only
// state directory) is logged when it begins and when it ends, not at every
// try (one a SaveInterval while the offset changes), and reported to
// OnSave.
func (t *Tailer) saved(err error) {
	if t.opts.OnSave != nil {
		t.opts.OnSave(err)
	}
	switch {
	case err != nil && t.saveErr == nil:
		t.log.Warn("tail: the read offset cannot be saved: a restart now reads this log again from the last offset saved; tried again every second", "path", t.path, "err", err)
	case err == nil && t.saveErr != nil:
		t.log.Info("tail: the read offset is saved again", "path", t.path, "failed_saves", t.stats.saveFailures.Load())
	}
	if err != nil {
		t.stats.saveFailures.Add(1)
	}
	t.saveErr = err
}

func (t *Tailer) closeAll() {
	if t.cur != nil {
		t.cur.f.Close()
		t.cur = nil
	}
	for _, d := range t.draining {
		d.f.Close()
	}
	t.draining = nil
}

func fileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}

// Errors of a path the tailer refuses to read.
var (
	ErrNotRegular = errors.New("logparse: not a regular file")
	ErrSymlink    = errors.New("logparse: a symbolic link outside the allowed directories")
)

// openAt opens name for tailing at off. Only a regular file is read: a
// FIFO would block (and hang shutdown), a device such as /dev/zero never
// ends. Every component of the path is resolved as OpenLog does (a link
// stays inside the log's directory or leads into opts.SymlinkDirs), for the
// first open and after every rotation alike. A refusal
// is logged once (until the path changes) and counted; the tailer keeps
// watching the path.
func (t *Tailer) openAt(name string, off int64) (*tfile, error) {
	tf, err := t.open(name, off)
	if errors.Is(err, ErrNotRegular) || errors.Is(err, ErrSymlink) {
		t.stats.refused.Add(1)
		if msg := err.Error(); msg != t.refusal {
			t.refusal = msg
			t.log.Error("tail: refusing to read the log", "path", name, "err", err)
		}
	} else if err == nil {
		t.refusal = ""
	}
	return tf, err
}

func (t *Tailer) open(name string, off int64) (*tfile, error) {
	f, err := OpenLog(name, t.opts.SymlinkDirs) // confine.go: every component checked
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, name, fileKind(fi.Mode()))
	}
	tf := &tfile{f: f, name: name, off: off, pos: off, bufStart: off}
	tf.dev, tf.ino = fileID(fi)
	return tf, nil
}

// fileKind names a non-regular file type for a message.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// fingerprintAt reports whether f holds fp right before off.
func fingerprintAt(f *os.File, off int64, fp []byte) bool {
	if len(fp) == 0 {
		return true
	}
	if off < int64(len(fp)) {
		return false
	}
	var tmp [fpLen]byte
	n, err := f.ReadAt(tmp[:len(fp)], off-int64(len(fp)))
	return n == len(fp) && (err == nil || err == io.EOF) && bytes.Equal(tmp[:n], fp)
}

// poll reads all files, then checks the path for rotation.
func (t *Tailer) poll(ctx context.Context, fn func([]byte, time.Time)) {
	now := time.Now()
	// Rotated files first: their lines are older.
	keep := t.draining[:0]
	for _, d := range t.draining {
		t.drain(ctx, d, fn)
		if now.Sub(d.rotated) >= t.opts.RotateWait && ctx.Err() == nil {
			if len(d.buf) > 0 && !d.skipping {
				// The writer is gone: its last line will never end.
				t.deliver(d.buf, fn)
				d.advance(d.bufStart+int64(len(d.buf)), d.buf)
			}
			d.f.Close()
			t.remember(d.ino)
			t.saveDirty = true
			continue
		}
		keep = append(keep, d)
	}
	t.draining = keep
	if ctx.Err() != nil {
		return
	}
	if t.cur == nil {
		tf, err := t.openAt(t.path, 0)
		if err != nil {
			return // not there yet
		}
		t.cur = tf
		t.setOffset()
	}
	t.drain(ctx, t.cur, fn)
	if ctx.Err() != nil {
		return
	}
	t.checkRotation(ctx, now, fn)
	t.setOffset()
}

func (t *Tailer) remember(ino uint64) {
	if len(t.finished) >= 16 {
		copy(t.finished, t.finished[1:])
		t.finished = t.finished[:15]
	}
	t.finished = append(t.finished, ino)
}

func (t *Tailer) known(ino uint64) bool {
	if t.cur != nil && t.cur.ino == ino {
		return true
	}
	for _, d := range t.draining {
		if d.ino == ino {
			return true
		}
	}
	for _, f := range t.finished {
		if f == ino {
			return true
		}
	}
	return false
}

func (t *Tailer) checkRotation(ctx context.Context, now time.Time, fn func([]byte, time.Time)) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return // renamed away, not yet recreated: keep reading the old one
	}
	dev, ino := fileID(fi)
	cur := t.cur
	if dev != cur.dev || ino != cur.ino {
		t.stats.rotations.Add(1)
		t.log.Info("tail: rotated", "path", t.path)
		cur.rotated = now
		t.draining = append(t.draining, cur)
		// A second rotation between two polls leaves an unseen file at .1.
		if fi1, err := os.Stat(t.path + ".1"); err == nil {
			d1, i1 := fileID(fi1)
			if !(d1 == dev && i1 == ino) && !t.known(i1) {
				if mid, err := t.openAt(t.path+".1", 0); err == nil {
					mid.rotated = now
					t.draining = append(t.draining, mid)
				}
			}
		}
		t.cur = nil
		if tf, err := t.openAt(t.path, 0); err == nil {
			t.cur = tf
		}
		t.saveDirty = true
		// Read what the old files still hold before the new one.
		for _, d := range t.draining {
			t.drain(ctx, d, fn)
		}
		if t.cur == nil {
			t.curIno, t.curOff = 0, 0
			return
		}
		t.drain(ctx, t.cur, fn)
		return
	}
	if fi.Size() >= cur.pos && fingerprintAt(cur.f, cur.off, cur.tail) {
		return
	}
	nd := len(t.draining)
	t.truncated(cur, now)
	if len(t.draining) > nd {
		t.drain(ctx, t.draining[len(t.draining)-1], fn)
	}
	t.drain(ctx, cur, fn)
}

// truncated handles a file cut (copytruncate) under cur: finish the copy at
// .1 from our offset when it holds our fingerprint, then restart cur at 0.
func (t *Tailer) truncated(cur *tfile, now time.Time) {
	t.stats.truncations.Add(1)
	t.log.Info("tail: truncated", "path", cur.name)
	found := false
	if cur.off > 0 {
		if cp, err := t.openAt(t.path+".1", cur.off); err == nil {
			fi, err := cp.f.Stat()
			if err == nil && fi.Size() >= cur.off && fingerprintAt(cp.f, cur.off, cur.tail) && cp.ino != cur.ino {
				cp.tail = cur.tail
				cp.rotated = now.Add(-t.opts.RotateWait) // a copy gets no more writes
				t.draining = append(t.draining, cp)
				found = true
			} else {
				cp.f.Close()
			}
		}
	}
	if !found && cur.off > 0 {
		t.stats.gaps.Add(1)
		t.log.Warn("tail: truncated file's rest not found at .1; lines may be lost", "path", cur.name)
	}
	cur.off, cur.pos, cur.bufStart = 0, 0, 0
	cur.buf = cur.buf[:0]
	cur.skipping = false
	cur.tail = cur.tail[:0]
	t.saveDirty = true
}

func (t *Tailer) deliver(line []byte, fn func([]byte, time.Time)) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	t.stats.lines.Add(1)
	fn(line, time.Now())
}

// advance moves off to newOff; consumed are the bytes right before it.
func (tf *tfile) advance(newOff int64, consumed []byte) {
	if len(consumed) >= fpLen || newOff-tf.off > int64(len(consumed)) {
		// Bytes between were skipped: the fingerprint is what we hold.
		tf.tail = append(tf.tail[:0], consumed[max(0, len(consumed)-fpLen):]...)
	} else {
		tf.tail = append(tf.tail, consumed...)
		if len(tf.tail) > fpLen {
			tf.tail = append(tf.tail[:0], tf.tail[len(tf.tail)-fpLen:]...)
		}
	}
	tf.off = newOff
}

// intactBefore reports whether the file still holds, right before pos, the
// bytes we read there: the held partial line (which starts at bufStart), or
// the fingerprint before off when no partial is held.
func (tf *tfile) intactBefore(pos int64, held []byte) bool {
	if pos == 0 {
		return true
	}
	var want []byte
	if len(held) > 0 {
		if len(held) >= fpLen || tf.bufStart != tf.off {
			want = held[max(0, len(held)-fpLen):]
		} else {
			want = append(tf.fp[:0], tf.tail[max(0, len(tf.tail)+len(held)-fpLen):]...)
			want = append(want, held...)
		}
	} else {
		if pos != tf.off {
			pos, want = tf.off, tf.tail // skipping an over-long line
		} else {
			want = tf.tail
		}
	}
	return fingerprintAt(tf.f, pos, want)
}

// drain reads tf up to its current end, delivering complete lines.
func (t *Tailer) drain(ctx context.Context, tf *tfile, fn func([]byte, time.Time)) {
	maxLine := t.opts.MaxLineBytes
	if cap(tf.buf) < maxLine+1+64<<10 {
		nb := make([]byte, len(tf.buf), maxLine+1+64<<10)
		copy(nb, tf.buf)
		tf.buf = nb
	}
	for ctx.Err() == nil {
		scan := len(tf.buf)
		n, err := tf.f.ReadAt(tf.buf[scan:cap(tf.buf)], tf.pos)
		if n == 0 {
			if err != nil && err != io.EOF {
				t.log.Warn("tail: read", "path", tf.name, "err", err)
			}
			return
		}
		if !tf.intactBefore(tf.pos, tf.buf[:scan]) {
			// The file was cut or replaced in place before this read: the
			// chunk is not a continuation of what we hold.
			if tf != t.cur {
				t.stats.gaps.Add(1)
				tf.rotated = time.Time{}
				tf.buf = tf.buf[:0]
				tf.pos, _ = tf.f.Seek(0, io.SeekEnd) // give up on this file
				return
			}
			nd := len(t.draining)
			t.truncated(tf, time.Now())
			if len(t.draining) > nd {
				t.drain(ctx, t.draining[len(t.draining)-1], fn)
			}
			continue
		}
		tf.buf = tf.buf[:scan+n]
		tf.pos += int64(n)
		start := 0
		for {
			j := bytes.IndexByte(tf.buf[scan:], '\n')
			if j < 0 {
				break
			}
			nl := scan + j
			if tf.skipping || nl-start > maxLine {
				tf.skipping = false
				t.stats.tooLong.Add(1)
				if t.opts.Counters != nil {
					t.opts.Counters.TooLong.Add(1)
				}
			} else {
				t.deliver(tf.buf[start:nl], fn)
			}
			start = nl + 1
			scan = start
		}
		if start > 0 {
			tf.advance(tf.bufStart+int64(start), tf.buf[:start])
			t.saveDirty = true
		}
		rest := copy(tf.buf, tf.buf[start:])
		tf.buf = tf.buf[:rest]
		tf.bufStart += int64(start)
		if tf.skipping || len(tf.buf) > maxLine {
			tf.skipping = true
			tf.buf = tf.buf[:0]
			tf.bufStart = tf.pos
		}
	}
}

func (t *Tailer) setOffset() {
	t.mu.Lock()
	if t.cur != nil {
		t.curIno, t.curOff = t.cur.ino, t.cur.off
	}
	t.mu.Unlock()
}

// Offset file: a header line, then one line per open file (rotated ones
// first, the current file last): "dev ino offset fingerprint-hex".
const offsetHeader = "pqwatch-tail v1"

type savedEntry struct {
	dev, ino uint64
	off      int64
	tail     []byte
}

func (t *Tailer) save() error {
	if t.opts.OffsetFile == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString(offsetHeader + "\n")
	w := func(tf *tfile) {
		fp := hex.EncodeToString(tf.tail)
		if fp == "" {
			fp = "-"
		}
		fmt.Fprintf(&b, "%d %d %d %s\n", tf.dev, tf.ino, tf.off, fp)
	}
	for _, d := range t.draining {
		w(d)
	}
	if t.cur != nil {
		w(t.cur)
	}
	tmp := t.opts.OffsetFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrOffsetFile, err)
	}
	if err := os.Rename(tmp, t.opts.OffsetFile); err != nil {
		return fmt.Errorf("%w: %w", ErrOffsetFile, err)
	}
	t.lastSave = time.Now()
	t.saveDirty = false
	return nil
}

func readOffsetFile(name string) ([]savedEntry, error) {
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %w", ErrOffsetFile, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || sc.Text() != offsetHeader {
		return nil, fmt.Errorf("%w: %s: missing header", ErrOffsetFile, name)
	}
	var out []savedEntry
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			return nil, fmt.Errorf("%w: %s: bad line %q", ErrOffsetFile, name, sc.Text())
		}
		var e savedEntry
		var err1, err2, err3, err4 error
		e.dev, err1 = strconv.ParseUint(fs[0], 10, 64)
		e.ino, err2 = strconv.ParseUint(fs[1], 10, 64)
		e.off, err3 = strconv.ParseInt(fs[2], 10, 64)
		if fs[3] != "-" {
			e.tail, err4 = hex.DecodeString(fs[3])
		}
		if err := errors.Join(err1, err2, err3, err4); err != nil || e.off < 0 || len(e.tail) > fpLen {
			return nil, fmt.Errorf("%w: %s: bad line %q", ErrOffsetFile, name, sc.Text())
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOffsetFile, err)
	}
	return out, nil
}

// restore positions the tailer from the offset file (see the rotation rule
// in the Tailer documentation).
func (t *Tailer) restore() error {
	t.lastSave = time.Now()
	var entries []savedEntry
	if t.opts.OffsetFile != "" {
		var err error
		if entries, err = readOffsetFile(t.opts.OffsetFile); err != nil {
			return err
		}
	}
	now := time.Now()
	cur, curErr := t.openAt(t.path, 0)
	if entries == nil {
		if curErr == nil && t.opts.StartAtEnd {
			if fi, err := cur.f.Stat(); err == nil {
				cur.off, cur.pos, cur.bufStart = fi.Size(), fi.Size(), fi.Size()
				// Start after the last complete line only.
				var tmp [1]byte
				for cur.off > 0 {
					if _, err := cur.f.ReadAt(tmp[:], cur.off-1); err != nil || tmp[0] == '\n' {
						break
					}
					cur.off--
				}
				cur.pos, cur.bufStart = cur.off, cur.off
			}
		}
		if curErr == nil {
			t.cur = cur
			t.setOffset()
		}
		return nil
	}
	rot, rotErr := t.openAt(t.path+".1", 0)
	usedRot, usedCur := false, false
	for _, e := range entries {
		switch {
		case curErr == nil && !usedCur && e.dev == cur.dev && e.ino == cur.ino:
			usedCur = true
			cur.off, cur.pos, cur.bufStart = e.off, e.off, e.off
			cur.tail = e.tail
			fi, err := cur.f.Stat()
			if err != nil || fi.Size() < e.off || !fingerprintAt(cur.f, e.off, e.tail) {
				t.truncated(cur, now)
			}
		case rotErr == nil && !usedRot && e.dev == rot.dev && e.ino == rot.ino:
			usedRot = true
			fi, err := rot.f.Stat()
			if err != nil || fi.Size() < e.off || !fingerprintAt(rot.f, e.off, e.tail) {
				t.stats.gaps.Add(1)
				continue
			}
			rot.off, rot.pos, rot.bufStart, rot.tail = e.off, e.off, e.off, e.tail
			rot.rotated = now
			t.draining = append(t.draining, rot)
		default:
			if sib := t.rotatedSibling(e.dev, e.ino); sib != nil {
				fi, err := sib.f.Stat()
				if err == nil && fi.Size() >= e.off && fingerprintAt(sib.f, e.off, e.tail) {
					sib.off, sib.pos, sib.bufStart, sib.tail = e.off, e.off, e.off, e.tail
					sib.rotated = now
					t.draining = append(t.draining, sib)
					continue
				}
				sib.f.Close()
			}
			t.stats.gaps.Add(1)
			t.log.Warn("tail: saved file not found at path, .1 or path.SUFFIX", "path", t.path, "inode", e.ino)
		}
	}
	if rotErr == nil && !usedRot {
		rot.f.Close()
	}
	if curErr == nil {
		// A path inode that no entry names appeared after the save: read it all.
		t.cur = cur
		t.setOffset()
	}
	return nil
}

// OffsetFileFor returns the offset-file name pqwatch uses for logPath in stateDir.
func OffsetFileFor(stateDir, logPath string) string {
	clean := strings.NewReplacer("/", "_", "\\", "_").Replace(filepath.Clean(logPath))
	return filepath.Join(stateDir, strings.TrimLeft(clean, "_")+".offset")
}
