package report

import (
	"hash/maphash"

	"github.com/pqwatch/pqwatch/record"
)

// Duplicate ids of the agent's form ("<prefix>-<16 hex digits>", a
// prefix per agent start and a counter) are found in a window of sequence
// numbers per prefix and stream: a bitmap of the last PlanIDWindow
// numbers, exact within it, its memory bounded whatever the input's size.
const (
	// PlanIDWindow is how many sequence numbers below the highest seen a
	// window remembers (32 KiB of bitmap when full): a record further
	// behind is kept unchecked (IDsOutsideWindow).
	PlanIDWindow = 1 << 18
	// MaxPlanIDWindows bounds the windows (prefixes x streams): past it a
	// new prefix's ids are remembered by hash, as other ids (MaxPlanIDs).
	MaxPlanIDWindows = 8192
	planWindowStart  = 1 << 12 // a window's first bitmap, doubled as needed
)

// idStream is one window's key: an agent prefix in one stream (a Kafka
// partition: an agent's records are spread over the partitions by their
// key, and each partition is read in order).
type idStream struct {
	stream int
	prefix string
}

// seqWindow remembers which sequence numbers of [lo, hi] were seen: bit s
// mod len(bits)*64. Bits outside [lo, hi] are 0. forgot says numbers below
// lo were forgotten (seen ones may have been).
type seqWindow struct {
	bits   []uint64
	lo, hi uint64
	forgot bool
}

// seqResult is what a window says of a number.
type seqResult uint8

const (
	seqNew seqResult = iota
	seqDup
	seqOutside
)

func (w *seqWindow) size() uint64 { return uint64(len(w.bits)) * 64 }

func (w *seqWindow) testSet(s uint64) bool {
	i, m := s/64%uint64(len(w.bits)), uint64(1)<<(s%64)
	old := w.bits[i]&m != 0
	w.bits[i] |= m
	return old
}

func (w *seqWindow) clear(s uint64) {
	w.bits[s/64%uint64(len(w.bits))] &^= uint64(1) << (s % 64)
}

// grow doubles the bitmap, its numbers kept.
func (w *seqWindow) grow() {
	old := *w
	w.bits = make([]uint64, 2*len(old.bits))
	for s := old.lo; ; s++ {
		i, m := s/64%uint64(len(old.bits)), uint64(1)<<(s%64)
		if old.bits[i]&m != 0 {
			w.testSet(s)
		}
		if s == old.hi {
			break
		}
	}
}

// see marks s seen: new, a duplicate, or outside the window (below it,
// where seen numbers were forgotten, or too far below hi to remember).
func (w *seqWindow) see(s uint64) seqResult {
	if w.bits == nil {
		w.bits = make([]uint64, planWindowStart/64)
		w.lo, w.hi = s, s
		w.testSet(s)
		return seqNew
	}
	switch {
	case s > w.hi:
		for s-w.lo >= w.size() && w.size() < PlanIDWindow {
			w.grow()
		}
		if s-w.lo >= w.size() { // forget [lo, s-size]
			newLo := s - w.size() + 1
			if newLo-w.lo >= w.size() || newLo > w.hi {
				clear(w.bits)
			} else {
				for x := w.lo; x < newLo; x++ {
					w.clear(x)
				}
			}
			w.lo, w.forgot = newLo, true
		}
		w.hi = s
		w.testSet(s)
		return seqNew
	case s >= w.lo:
		if w.testSet(s) {
			return seqDup
		}
		return seqNew
	case w.forgot:
		return seqOutside
	}
	// Below every number seen, none forgotten: new, remembered if the
	// window can reach it.
	for w.hi-s >= w.size() && w.size() < PlanIDWindow {
		w.grow()
	}
	if w.hi-s >= w.size() {
		return seqOutside
	}
	w.lo = s
	w.testSet(s)
	return seqNew
}

// seenID reports whether r's id (r.HasID) was seen before, remembering it.
func (pl *Plan) seenID(r *record.Handshake) bool {
	prefix, seq := r.IDPrefix, r.IDSeq
	if r.ID != "" {
		var ok bool
		if seq, ok = planIDSeq(r.ID); ok {
			prefix = r.ID[:len(r.ID)-16]
		}
	}
	if seq != 0 {
		k := idStream{pl.Stream, prefix}
		w := pl.lastWin
		if w == nil || pl.lastKey != k {
			w = pl.windows[k]
			if w == nil && len(pl.windows) < MaxPlanIDWindows {
				w = &seqWindow{}
				pl.windows[k] = w
			}
			pl.lastKey, pl.lastWin = k, w
		}
		if w != nil {
			switch w.see(seq) {
			case seqDup:
				return true
			case seqOutside:
				pl.IDsOutsideWindow++
			}
			return false
		}
	}
	var b [64]byte
	return pl.seenKey(maphash.Bytes(pl.seed, r.AppendID(b[:0])))
}

// seenKey reports whether the hash h was seen, remembering it up to
// MaxPlanIDs (past it counted in IDsUnchecked).
func (pl *Plan) seenKey(h uint64) bool {
	if _, dup := pl.ids[h]; dup {
		return true
	}
	if len(pl.ids) < MaxPlanIDs {
		pl.ids[h] = struct{}{}
	} else {
		pl.IDsUnchecked++
	}
	return false
}
