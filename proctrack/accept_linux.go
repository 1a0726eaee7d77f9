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
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
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
	if k.rd, err = ringbuf.NewReader(k.objs.Events); err != nil {
		return nil, fmt.Errorf("proctrack: accept events: ring buffer: %w", err)
	}
	a := &Accepts{idx: newAcceptIndex(cfg.MaxEntries), kernel: k}
	a.offset.Store(clockOffset())
	go k.read(a)
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
	rd    *ringbuf.Reader
	done  chan struct{} // closed when read returns
	once  sync.Once

	syncMu sync.Mutex
	synced chan struct{} // closed when the reader has read what a sync found
}

// The reader's wakeups (bpf/accept.c): the program wakes the reader at most
// every 10 ms (or when 256 KiB wait), so while events come the reader polls
// the ring every acceptPollEvery; after acceptIdleAfter without an event it
// sleeps until a wakeup, the first event after a quiet spell forcing one,
// with acceptIdlePoll as a safety net. A record whose accept is not indexed
// yet asks for a sync (Accepts.sync): the reader reads the ring at once.
const (
	acceptPollEvery = 10 * time.Millisecond
	acceptIdleAfter = 500 * time.Millisecond
	acceptIdlePoll  = time.Second
)

// eventSize is sizeof(struct event) in bpf/accept.c.
const eventSize = 56

// read indexes events until the reader is closed, re-measuring the clock
// offset (NTP steps and slews) every 10 s.
func (k *acceptLoaded) read(a *Accepts) {
	defer close(k.done)
	defer k.release()
	var rec ringbuf.Record
	next := time.Now().Add(10 * time.Second)
	var lastData time.Time
	for {
		now := time.Now()
		if now.Sub(lastData) < acceptIdleAfter {
			k.rd.SetDeadline(now.Add(acceptPollEvery))
		} else {
			k.rd.SetDeadline(now.Add(acceptIdlePoll))
		}
		if err := k.rd.ReadInto(&rec); err != nil {
			switch {
			case errors.Is(err, ringbuf.ErrClosed):
				return
			case errors.Is(err, ringbuf.ErrFlushed):
				k.release() // everything a sync asked for was read
			}
			continue
		}
		lastData = now
		b := rec.RawSample
		if len(b) < eventSize {
			continue
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
			continue
		}
		a.add(netip.AddrPortFrom(la, lport), netip.AddrPortFrom(ra, rport), tgid, tid, mono)
		if now := time.Now(); now.After(next) {
			a.offset.Store(clockOffset())
			next = now.Add(10 * time.Second)
		}
	}
}

// sync makes the reader read what the ring holds now, and waits until it
// has (at most d).
func (k *acceptLoaded) sync(d time.Duration) {
	k.syncMu.Lock()
	ch := k.synced
	if ch == nil {
		ch = make(chan struct{})
		k.synced = ch
		if k.rd.Flush() != nil {
			close(ch)
			k.synced = nil
		}
	}
	k.syncMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// release frees the waiters of a sync.
func (k *acceptLoaded) release() {
	k.syncMu.Lock()
	if k.synced != nil {
		close(k.synced)
		k.synced = nil
	}
	k.syncMu.Unlock()
}

func (k *acceptLoaded) counters() (drops, readFailures uint64) {
	if k.objs.Counters == nil {
		return 0, 0
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
	return drops, readFailures
}

func (k *acceptLoaded) close() error {
	var err error
	k.once.Do(func() {
		for _, l := range k.links {
			err = errors.Join(err, l.Close())
		}
		if k.rd != nil {
			err = errors.Join(err, k.rd.Close())
			<-k.done
		}
		err = errors.Join(err, k.objs.Close())
	})
	return err
}
