//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package proctrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/pqwatch/pqwatch/internal/pollfd"
)

// OpenAccepts loads and attaches the accept program and starts reading its
// events. Its error says why accept events are unavailable (no BTF, no
// CAP_BPF/CAP_PERFMON, no tracefs...); the caller falls back without them.
func OpenAccepts(cfg AcceptConfig) (_ *Accepts, err error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: kernel without BTF: %w", err)
	}
	if err := mountTracefs(cfg.TracefsDir); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: no CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): %w", err)
	}
	k := &acceptLoaded{done: make(chan struct{})}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	if err := loadAcceptObjects(&k.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("proctrack: accept events: no CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): %w", err)
		}
		return nil, fmt.Errorf("proctrack: accept events: load: %w", err)
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sys_exit_accept4", k.objs.ExitAccept4}, {"sys_exit_accept", k.objs.ExitAccept}} {
		l, err := link.Tracepoint("syscalls", tp.name, tp.prog, nil)
		if err != nil {
			return nil, fmt.Errorf("proctrack: accept events: attach %s: %w", tp.name, err)
		}
		k.links = append(k.links, l)
	}
	if k.ring, err = newRingReader(k.objs.Events.FD(), int(k.objs.Events.MaxEntries())); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: ring buffer: %w", err)
	}
	if k.watchFile, err = pollfd.Dup(k.objs.Events.FD(), "ringbuf"); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: ring buffer: %w", err)
	}
	if err := k.watchFile.SetReadDeadline(time.Time{}); err != nil {
		// Not in Go's poller: its watcher could not wait for bursts.
		return nil, fmt.Errorf("proctrack: accept events: ring buffer not pollable: %w", err)
	}
	if k.missedMem, err = unix.Mmap(k.objs.Missed.FD(), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: map the missed counter: %w", err)
	}
	if n := int(k.objs.Quiet.MaxEntries()); n != quietSlots || k.objs.Quiet.ValueSize() != quietSlotSize {
		return nil, fmt.Errorf("proctrack: accept events: quiet array of %d slots of %d bytes, want %d of %d", n, k.objs.Quiet.ValueSize(), quietSlots, quietSlotSize)
	}
	if k.quietMem, err = unix.Mmap(k.objs.Quiet.FD(), 0, quietSlots*quietSlotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: map the quiet set: %w", err)
	}
	a := &Accepts{idx: newAcceptIndex(cfg.MaxEntries), kernel: k}
	k.a = a
	a.offset.Store(clockOffset())
	k.nextOffset = time.Now().Add(10 * time.Second)
	go k.watch()
	return a, nil
}

// mountTracefs mounts tracefs on dir when it is not there (a fresh machine
// or a container has an empty /sys/kernel/tracing): the tracepoints' ids are
// read from it.
func mountTracefs(dir string) error {
	if dir == "" {
		dir = "/sys/kernel/tracing"
	}
	_, err := os.Stat(filepath.Join(dir, "events"))
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("proctrack: accept events: tracefs at %s not readable: needs root, or CAP_BPF and CAP_PERFMON with access to tracefs: %w", dir, err)
	}
	if _, err := os.Stat("/sys/kernel/debug/tracing/events"); err == nil {
		return nil
	}
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("proctrack: accept events: tracefs absent and not mountable on %s (needs CAP_SYS_ADMIN, or the host's tracefs mounted there): %w", dir, err)
	}
	return nil
}

// clockOffset measures CLOCK_REALTIME - CLOCK_MONOTONIC, keeping the
// tightest of a few bracketed samples.
func clockOffset() int64 {
	best, gap := int64(0), int64(-1)
	for range 5 {
		var m1, r, m2 unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1)
		unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2)
		g := m2.Nano() - m1.Nano()
		if gap < 0 || g < gap {
			best, gap = r.Nano()-(m1.Nano()+g/2), g
		}
	}
	return best
}

// acceptLoaded is the loaded program, its links and ring buffer reader.
type acceptLoaded struct {
	objs  acceptObjects
	links []link.Link
	ring  *ringReader
	done  chan struct{} // closed when watch returns
	once  sync.Once

	// watchFile is a non-blocking dup of the ring buffer's fd registered
	// with Go's network poller: the watcher waits there, not in a blocking
	// epoll_wait(2) of its own. A thread blocked in a system call keeps the
	// runtime's sysmon thread waking (some 900 times a second here, 1.6
	// wakeups per handshake at 600/s, more than everything else pqwatch
	// does for a handshake).
	watchFile *os.File

	// missedMem maps the program's missed counter (bpf/accept.c): accepts
	// outside the quiet set it did not report. quietMem maps its quiet
	// slots, written by setQuiet (under qmu) and read by counters.
	missedMem []byte
	quietMem  []byte
	qmu       sync.Mutex

	mu         sync.Mutex // serialises drains
	closed     bool       // under mu: the reader is closed
	skipped    uint64     // under mu: events skipped past an impossible record header
	a          *Accepts
	nextOffset time.Time
}

// The reader's wakeups (bpf/accept.c): the program never wakes the reader
// but for a burst (the ring a quarter full); a record whose accept is not
// indexed yet drains the ring itself, on its own goroutine (Accepts.sync),
// so freshness costs no wakeup; the tracker's Tick drains it every second
// (on the agent's housekeeping timer), and the watcher at least every
// acceptDrainEvery, a safety net of its own.
const acceptDrainEvery = 10 * time.Second

// eventSize is sizeof(struct event) in bpf/accept.c.
const eventSize = 56

// watch drains the ring when the program wakes it (a burst) and at least
// every acceptDrainEvery, until the reader is closed.
func (k *acceptLoaded) watch() {
	defer close(k.done)
	rc, err := k.watchFile.SyscallConn()
	if err != nil {
		return
	}
	for {
		k.watchFile.SetReadDeadline(time.Now().Add(acceptDrainEvery))
		first := true
		err := rc.Read(func(uintptr) bool {
			if first {
				first = false
				return false // wait for readiness
			}
			return true
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // closed
		}
		if k.drain() < 0 {
			return
		}
	}
}

// drain indexes what the ring holds now without waiting, re-measuring the
// clock offset (NTP steps and slews) every 10 s; it returns the events read,
// -1 once the reader is closed.
func (k *acceptLoaded) drain() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.drainLocked()
}

func (k *acceptLoaded) drainLocked() int {
	if k.closed {
		return -1
	}
	n := 0
	if _, err := k.ring.read(func(b []byte) {
		if k.add(b) {
			n++
		}
	}); err != nil {
		// A header no kernel writes: give up what the ring holds, counted
		// with the drops, rather than read garbage.
		k.skipped += k.ring.skip()
	}
	if now := time.Now(); now.After(k.nextOffset) {
		k.a.offset.Store(clockOffset())
		k.nextOffset = now.Add(10 * time.Second)
	}
	return n
}

// add indexes one event.
func (k *acceptLoaded) add(b []byte) bool {
	if len(b) < eventSize {
		return false
	}
	mono := binary.LittleEndian.Uint64(b[0:])
	tgid := binary.LittleEndian.Uint32(b[8:])
	tid := binary.LittleEndian.Uint32(b[12:])
	family := binary.LittleEndian.Uint16(b[16:])
	lport := binary.LittleEndian.Uint16(b[18:])
	rport := binary.LittleEndian.Uint16(b[20:])
	var la, ra netip.Addr
	switch family {
	case unix.AF_INET:
		la, ra = netip.AddrFrom4([4]byte(b[24:28])), netip.AddrFrom4([4]byte(b[40:44]))
	case unix.AF_INET6:
		la, ra = netip.AddrFrom16([16]byte(b[24:40])), netip.AddrFrom16([16]byte(b[40:56]))
	default:
		return false
	}
	k.a.add(netip.AddrPortFrom(la, lport), netip.AddrPortFrom(ra, rport), tgid, tid, mono)
	return true
}

// sync indexes what the ring holds now, on the caller's goroutine, and
// says whether it held anything; then, whether every event the kernel
// committed is indexed (drained: the ring is empty; an event reserved by
// an accept still in progress on another CPU keeps it false) and the
// program's missed count. Under mu, so that events a concurrent drain
// took from the ring are indexed before the ring is judged empty; an
// empty ring costs no system call.
func (k *acceptLoaded) sync() (more, drained bool, missed uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false, false, 0
	}
	if k.ring.available() != 0 {
		more = k.drainLocked() > 0
	}
	return more, k.ring.available() == 0, atomic.LoadUint64((*uint64)(unsafe.Pointer(&k.missedMem[0])))
}

// missed returns the program's count of accepts outside the quiet set
// that it did not report: one load from its mapping (0 once closed).
func (k *acceptLoaded) missed() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return 0
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&k.missedMem[0])))
}

// The quiet array of bpf/accept.c: QUIET_SLOTS slots of struct
// quiet_slot (tgid, pad, accepts).
const (
	quietSlots    = 1024
	quietSlotSize = 16
)

func (k *acceptLoaded) quietSlot(i int) (tgid *uint32, accepts *uint64) {
	b := k.quietMem[i*quietSlotSize:]
	return (*uint32)(unsafe.Pointer(&b[0])), (*uint64)(unsafe.Pointer(&b[8]))
}

// setQuiet makes pids the program's quiet set: the accepts of these
// processes are counted and not reported. Processes no longer in it are
// cleared first, so no process is quiet that should not be; a process
// whose slot another quiet process holds stays reported.
func (k *acceptLoaded) setQuiet(pids []int) error {
	k.qmu.Lock()
	defer k.qmu.Unlock()
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return errors.New("proctrack: accept events closed")
	}
	want := make(map[uint32]bool, len(pids))
	for _, p := range pids {
		if p > 0 {
			want[uint32(p)] = true
		}
	}
	for i := range quietSlots {
		if t, _ := k.quietSlot(i); !want[atomic.LoadUint32(t)] {
			atomic.StoreUint32(t, 0)
		}
	}
	for p := range want {
		if t, _ := k.quietSlot(int(p) & (quietSlots - 1)); atomic.LoadUint32(t) == 0 {
			atomic.StoreUint32(t, p)
		}
	}
	return nil
}

func (k *acceptLoaded) counters() (drops, readFailures, quiet uint64) {
	k.mu.Lock()
	drops = k.skipped
	k.mu.Unlock()
	if k.objs.Counters == nil {
		return drops, 0, 0
	}
	var per []uint64
	if k.objs.Counters.Lookup(uint32(0), &per) == nil {
		for _, n := range per {
			drops += n
		}
	}
	if k.objs.Counters.Lookup(uint32(1), &per) == nil {
		for _, n := range per {
			readFailures += n
		}
	}
	k.qmu.Lock()
	if k.quietMem != nil {
		for i := range quietSlots {
			_, n := k.quietSlot(i)
			quiet += atomic.LoadUint64(n)
		}
	}
	k.qmu.Unlock()
	return drops, readFailures, quiet
}

func (k *acceptLoaded) close() error {
	var err error
	k.once.Do(func() {
		for _, l := range k.links {
			err = errors.Join(err, l.Close())
		}
		if k.watchFile != nil {
			err = errors.Join(err, k.watchFile.Close())
			if k.a != nil { // the watcher runs
				<-k.done
			}
		}
		k.mu.Lock()
		k.closed = true
		if k.ring != nil {
			err = errors.Join(err, k.ring.close())
		}
		if k.missedMem != nil {
			err = errors.Join(err, unix.Munmap(k.missedMem))
			k.missedMem = nil
		}
		k.mu.Unlock()
		k.qmu.Lock()
		if k.quietMem != nil {
			err = errors.Join(err, unix.Munmap(k.quietMem))
			k.quietMem = nil
		}
		k.qmu.Unlock()
		err = errors.Join(err, k.objs.Close())
	})
	return err
}
