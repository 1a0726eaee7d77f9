package loadgen

import (
	"math"
	"math/bits"
)

// Histogram geometry: values below 2*histHalf are stored exactly; above that
// every power-of-two range is split into histHalf linear sub-buckets, so the
// relative error of any reported value is at most 1/histHalf (0.78 %).
const (
	histSubBits = 8
	histHalf    = 1 << (histSubBits - 1) // 128
	histBuckets = (64-histSubBits)*histHalf + 2*histHalf
)

// Histogram is an HDR-style log-linear histogram of non-negative int64 values
// (loadgen records nanoseconds). Record allocates nothing and takes constant
// time. The zero value is ready to use. A Histogram is not safe for concurrent
// use.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func histIndex(v int64) int {
	u := uint64(v)
	if u < 2*histHalf {
		return int(u)
	}
	e := bits.Len64(u) - histSubBits // >= 1
	return e*histHalf + int(u>>uint(e))
}

// histUpper returns the largest value that maps to bucket i.
func histUpper(i int) int64 {
	if i < 2*histHalf {
		return int64(i)
	}
	e := i/histHalf - 1
	sub := uint64(i - e*histHalf)
	lo := sub << uint(e)
	hi := lo + (uint64(1) << uint(e)) - 1
	if hi > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(hi)
}

// Record adds one value; negative values are recorded as zero.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest recorded value (exact), or 0 when empty.
func (h *Histogram) Max() int64 { return h.max }

// Min returns the smallest recorded value (exact), or 0 when empty.
func (h *Histogram) Min() int64 { return h.min }

// Mean returns the arithmetic mean of the recorded values (exact), or 0.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q in [0,1]: the highest value
// equivalent to the bucket that holds the ceil(q*n)-th smallest sample,
// clamped to the exact max. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Reset empties the histogram for reuse.
func (h *Histogram) Reset() { *h = Histogram{} }
