package report

// tally counts records by a small key (a transport, an outcome, a version,
// a group): a run sees a handful of distinct keys, so a slice searched from
// the last hit costs less per record than a map's hash and assignment (and
// a group counted by code needs no name per record). The counts go to
// their map when it is read (flush). Past maxTally keys (hostile input: a
// version the parser names by its code) the rest go there at once.
type tally[K comparable] struct {
	keys []K
	n    []int
	last int
}

const maxTally = 16

// add counts n records under k; when t is full, spill(k, n) counts them.
func (t *tally[K]) add(k K, n int, spill func(K, int)) {
	if t.last < len(t.keys) && t.keys[t.last] == k {
		t.n[t.last] += n
		return
	}
	for i, x := range t.keys {
		if x == k {
			t.last = i
			t.n[i] += n
			return
		}
	}
	if len(t.keys) >= maxTally {
		spill(k, n)
		return
	}
	t.keys = append(t.keys, k)
	t.n = append(t.n, n)
	t.last = len(t.keys) - 1
}

// flush hands each nonzero count to to and zeroes it (the keys are kept).
func (t *tally[K]) flush(to func(K, int)) {
	for i, k := range t.keys {
		if t.n[i] != 0 {
			to(k, t.n[i])
			t.n[i] = 0
		}
	}
}

// into returns a function adding counts to m (a tally's spill and flush).
func into(m map[string]int) func(string, int) {
	return func(k string, n int) { m[k] += n }
}
