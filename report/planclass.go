package report

import (
	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
)

// A fleet's records fall in few classes: records that differ only in
// their ts, client and id are predicted, costed and counted alike. AddClass
// works out a class once (the prediction, the cost, the rows, the family)
// and then counts its records: per record only what is the record's own
// (the window, the id check, the policy check, the cost's floating-point
// sums, kept in record order so the sums are the same to the last bit);
// the counts are added to the figures, n at a time, when the plan is read
// (flush). The tables that keep their first rows and fold later ones
// ("other": JA4s, families) see the classes in the order of their first
// record since the last flush, so they keep the same rows as record by
// record.

// MaxPlanClasses bounds the classes a plan remembers (some 1 KiB each):
// past it, the records of a new class are added one by one (Add).
const MaxPlanClasses = 8192

// planClass is one class: a record of it (its own fields zero), what Add
// works out for it.
type planClass struct {
	overflow int // rows folded into "other" per record (RowsOverflow)
	r        record.Handshake
	log      record.Log
	scopes   [4]*PlanFigures
	o        forecast.Outcome
	cost     recordCost
	w        weight
	fail     string
	family   string
	reason   string // the family's, when it stays classical
	classic  bool
}

// hash is a 64-bit hash of k.
func (k *PlanClass) hash() uint64 {
	h := uint64(len(k))
	for _, w := range k {
		h = (h ^ uint64(w)) * 0x9e3779b97f4a7c15
	}
	return h ^ h>>29
}

// planClassSlot is a class's entry in the plan's table: what a record of
// it reads and writes, together (the class's other fields are read when
// it is made and flushed).
type planClassSlot struct {
	key      PlanClass
	h        uint32 // the hash's low bits, compared first
	n        int    // records since the last flush
	overflow int32  // rows folded into "other" per record (RowsOverflow)
	costed   bool   // its records add to the cost sums
	c        *planClass
}

// planClassTable is an open-addressed table of up to MaxPlanClasses
// classes: index holds slot numbers + 1, probed linearly from the hash.
type planClassTable struct {
	index []int32
	slots []planClassSlot
}

// find returns k's slot number, -1 when it has none; at is where a new
// slot's number goes.
func (t *planClassTable) find(k *PlanClass, h uint64) (slot, at int) {
	if t.index == nil {
		t.index = make([]int32, 2*MaxPlanClasses)
	}
	mask := len(t.index) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		n := int(t.index[i]) - 1
		if n < 0 {
			return -1, i
		}
		if s := &t.slots[n]; s.h == uint32(h) && s.key == *k {
			return n, i
		}
	}
}

// AddClass adds r as Add does, by its class k: r and k from one
// PlanDecoder (Decode, Class), the same decoder for every AddClass of a
// plan. r is not kept.
func (pl *Plan) AddClass(r *record.Handshake, k PlanClass) {
	t := &pl.classes
	h := k.hash()
	n, at := t.find(&k, h)
	if n < 0 && len(t.slots) >= MaxPlanClasses {
		pl.Add(r)
		return
	}
	pl.Read++
	if r.HasID() && pl.seenID(r) {
		pl.Duplicates++
		return
	}
	if n < 0 {
		c := pl.newClass(r)
		n = len(t.slots)
		t.slots = append(t.slots, planClassSlot{key: k, h: uint32(h), overflow: int32(c.overflow), costed: c.cost.why == "" && len(pl.Costs) > 0, c: c})
		t.index[at] = int32(n + 1)
	}
	s := &t.slots[n]
	pl.window(r)
	if r.Node == "" {
		pl.NoNode++
	}
	pl.RowsOverflow += int(s.overflow)
	if pl.PolicyCheck != nil {
		pl.PolicyCheck.Add(r)
	}
	if s.n == 0 {
		pl.pending = append(pl.pending, int32(n))
	}
	s.n++
	if s.costed {
		c := s.c
		for _, f := range c.scopes {
			f.addCostUs(c.cost, 1)
		}
	}
}

// newClass works out r's class; its rows are looked up now, in record
// order, as Add would.
func (pl *Plan) newClass(r *record.Handshake) *planClass {
	c := &planClass{r: *r}
	c.r.TS, c.r.Client, c.r.ID, c.r.IDPrefix, c.r.IDSeq = record.Handshake{}.TS, "", "", "", 0
	if r.Log != nil {
		c.log = *r.Log
		c.r.Log = &c.log
	}
	cr := &c.r
	node := cr.Node
	if node == "" {
		node = PlanNoNode
	}
	sni := cr.SNI
	if sni == "" {
		sni = PlanNoSNI
	}
	before := pl.RowsOverflow
	c.scopes = [4]*PlanFigures{pl.PlanFigures, pl.row(pl.Nodes, node), pl.row(pl.Servers, cr.Server), pl.row(pl.snis, sni)}
	c.overflow = pl.RowsOverflow - before
	pl.RowsOverflow = before // counted per record
	c.o = forecast.Predict(pl.policy, cr)
	if len(pl.Costs) > 0 {
		c.cost = planRecordCost(pl.table(cr.Server), cr, c.o)
	}
	c.w = recordWeight(cr, c.o)
	c.fail = pl.failure(cr)
	if c.classic = stayClassical(c.o); c.classic {
		c.family = pl.family(cr)
		c.reason = classicalReason(&pl.policy, cr, c.o)
	}
	return c
}

// flush adds the classes' records counted since the last flush to the
// figures, the classes in the order of their first record.
func (pl *Plan) flush() {
	for _, i := range pl.pending {
		s := &pl.classes.slots[i]
		c, n := s.c, s.n
		s.n = 0
		w := c.w
		w.N, w.Growth, w.HRRBytes, w.WireKnown, w.MultiSegment = n, w.Growth*int64(n), w.HRRBytes*int64(n), w.WireKnown*n, w.MultiSegment*n
		for _, f := range c.scopes {
			f.addCounts(&c.r, c.o, w, c.fail)
			if f.Cost != nil {
				if c.cost.why != "" {
					f.Cost.Uncosted[c.cost.why] += n
				} else {
					f.Cost.Costed += n
				}
			}
		}
		if c.classic {
			count(pl.families, tailKey{key: c.family}, c.reason, n, &pl.FamiliesOverflow)
		}
	}
	pl.pending = pl.pending[:0]
}
