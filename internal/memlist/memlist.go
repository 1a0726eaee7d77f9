// Package memlist keeps, for a table whose entries hold buffer memory (TCP
// flows reassembling a hello, QUIC connections gathering CRYPTO data), the
// entries that hold some, oldest first, and the bytes they hold: what a
// byte budget needs to evict the oldest first. It is intrusive (each entry
// embeds a Link) and allocates nothing.
package memlist

// Link is embedded in each entry of a List.
type Link[T any] struct {
	prev, next *T
	mem        int // bytes the entry holds, as counted in the List
}

// Mem is the bytes the entry holds, as last accounted.
func (k *Link[T]) Mem() int { return k.mem }

// List is the entries holding memory, in the order they began to.
type List[T any] struct {
	head, tail *T
	bytes      int
	link       func(*T) *Link[T]
}

// New returns an empty list whose entries' Links link returns.
func New[T any](link func(*T) *Link[T]) List[T] { return List[T]{link: link} }

// Account records that e now holds m bytes: an entry joins the end of the
// list when it begins to hold memory and leaves it when it holds none.
func (l *List[T]) Account(e *T, m int) {
	k := l.link(e)
	switch {
	case k.mem == 0 && m > 0:
		k.prev, k.next = l.tail, nil
		if l.tail != nil {
			l.link(l.tail).next = e
		} else {
			l.head = e
		}
		l.tail = e
	case k.mem > 0 && m == 0:
		if k.prev != nil {
			l.link(k.prev).next = k.next
		} else {
			l.head = k.next
		}
		if k.next != nil {
			l.link(k.next).prev = k.prev
		} else {
			l.tail = k.prev
		}
		k.prev, k.next = nil, nil
	}
	l.bytes += m - k.mem
	k.mem = m
}

// Oldest is the entry that has held memory longest, nil when none does.
func (l *List[T]) Oldest() *T { return l.head }

// Bytes is the total the entries hold.
func (l *List[T]) Bytes() int { return l.bytes }
