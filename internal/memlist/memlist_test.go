package memlist

import "testing"

type entry struct {
	id int
	Link[entry]
}

func TestList(t *testing.T) {
	l := New(func(e *entry) *Link[entry] { return &e.Link })
	es := []*entry{{id: 0}, {id: 1}, {id: 2}}
	order := func() (ids []int) {
		for e := l.Oldest(); e != nil; e = e.next {
			ids = append(ids, e.id)
		}
		return ids
	}
	l.Account(es[0], 10)
	l.Account(es[1], 20)
	l.Account(es[2], 30)
	l.Account(es[0], 15) // still the oldest
	if got := order(); len(got) != 3 || got[0] != 0 || got[2] != 2 || l.Bytes() != 65 {
		t.Fatalf("order %v bytes %d", got, l.Bytes())
	}
	l.Account(es[1], 0) // the middle leaves
	if got := order(); len(got) != 2 || got[0] != 0 || got[1] != 2 || l.Bytes() != 45 {
		t.Fatalf("order %v bytes %d", got, l.Bytes())
	}
	l.Account(es[0], 0)
	l.Account(es[2], 0)
	if l.Oldest() != nil || l.Bytes() != 0 {
		t.Fatalf("not empty: %v %d", order(), l.Bytes())
	}
	l.Account(es[1], 5) // joins again, at the end
	if got := order(); len(got) != 1 || es[1].Mem() != 5 {
		t.Fatalf("order %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { l.Account(es[0], 7); l.Account(es[0], 0) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
