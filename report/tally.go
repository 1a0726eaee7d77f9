package report

// tally counts records by a short string key (a transport, an outcome, a
// version, a group name). A run sees a handful of distinct keys, so a slice
// searched from the last hit costs less per record than a map's hash and
// assignment; the counts go into the map (flush) when it is read. Past
// maxTally keys (hostile input: a version field the parser names by its
// code) the rest go straight to the map.
type tally struct {
	keys []string
	n    []int
	last int
}

const maxTally = 16

// add counts n records under k, in t or, when t is full, in m.
func (t *tally) add(m map[string]int, k string, n int) {
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
		m[k] += n
		return
	}
	t.keys = append(t.keys, k)
	t.n = append(t.n, n)
	t.last = len(t.keys) - 1
}

// flush adds the counts to m and zeroes them (the keys are kept).
func (t *tally) flush(m map[string]int) {
	for i, k := range t.keys {
		if t.n[i] != 0 {
			m[k] += t.n[i]
			t.n[i] = 0
		}
	}
}
