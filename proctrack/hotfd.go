package proctrack

import "sync"

// hotFDs remembers, per serving process, the fd numbers where its accepted
// connections were last found. A server reuses the lowest free fd for each
// new connection (nginx workers, Go servers alike), so the socket of a new
// connection is almost always at one of a few numbers: a handful of
// readlinks instead of rebuilding the whole inode index from every fd of
// every serving process.
type hotFDs struct {
	mu  sync.Mutex
	fds map[int][]int // pid -> fd numbers, most recent first
}

const hotPerPID = 4

func (h *hotFDs) note(pid, fd int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fds == nil || len(h.fds) > 4096 {
		h.fds = make(map[int][]int)
	}
	l := h.fds[pid]
	for i, f := range l {
		if f == fd {
			copy(l[1:i+1], l[:i])
			l[0] = fd
			return
		}
	}
	if len(l) < hotPerPID {
		l = append(l, 0)
	}
	copy(l[1:], l[:len(l)-1])
	l[0] = fd
	h.fds[pid] = l
}

func (h *hotFDs) get(pid int, dst []int) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(dst, h.fds[pid]...)
}
