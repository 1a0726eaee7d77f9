package capture

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gopacket/gopacket/afpacket"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/pqwatch/pqwatch/internal/pollfd"
)

// ring is one AF_PACKET TPACKET_V3 socket: the member of its interface's
// fanout group that belongs to one worker. Only that worker reads and closes
// it; Stats may read its counters from any goroutine, hence mu.
type ring struct {
	tp       *afpacket.TPacket
	fd       int
	linkType int
	ifindex  int // the group's interface (0: every interface, "any")
	// rd reads the ring (afpacket.TPacket set it up; its reader is not
	// used: see blockReader).
	rd *blockReader
	// skippedLogged is rd.skipped as last logged (the worker's).
	skippedLogged uint64

	mu     sync.Mutex
	closed bool
	final  IfaceStats // counters at close

	// watchFile is a non-blocking dup of fd registered with Go's network
	// poller; its watcher goroutine ends when it is closed.
	watchFile *os.File
	watchRC   syscall.RawConn
	// watchDone is closed when the watcher goroutine returns: close waits
	// for it before unmapping the ring the watcher reads (ready).
	watchDone chan struct{}
}

// watch starts the goroutine that calls nudge whenever the ring's socket
// becomes readable (a block was retired, or an error is pending). Without
// a pollable dup it falls back to nudging on a timer.
//
// Go's poller forgets a readiness nobody waited for: each wait starts
// afresh. A block retired after the watcher woke and before it waits again
// would be slept through (until the next block, or the worker's
// PollTimeout once traffic stops) if the worker had already found the ring
// empty. So each wait after a wakeup first polls the socket once, without
// waiting, and nudges a worker that sleeps (idle) when a block is ready;
// the worker polls once more after saying it sleeps, so one of the two
// sees the block.
func (r *ring) watch(nudge func(), idle func() bool) {
	f, rc := r.pollable()
	if rc == nil {
		return // the worker's PollTimeout still drains the ring
	}
	r.mu.Lock()
	r.watchDone = make(chan struct{})
	r.mu.Unlock()
	done := r.watchDone
	go func() {
		defer close(done)
		check := false // poll before waiting: after a wakeup only
		for {
			first := true
			// No system call here: the first one after the runtime's
			// sysmon thread went to deep sleep wakes it and has it poll
			// every 20 µs while the worker parses the block, which cost
			// more than the parsing (whether the block is ready is a load
			// from its header, blockReader.ready). A pending socket error
			// is cleared by the worker when nudges find nothing to read
			// (clearError).
			polled := false
			err := rc.Read(func(fd uintptr) bool {
				if first {
					first = false
					if check && idle() && r.rd.ready() {
						polled = true
						return true
					}
					return false // wait for readiness
				}
				return true
			})
			// After a nudge for a block found by polling, wait for the
			// next readiness: the worker may not have run yet, and the
			// block is still there.
			check = !polled
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// A deadline the worker set while it waited on the
				// socket itself (worker.waitDirect), before this watcher
				// took over.
				f.SetReadDeadline(time.Time{})
			} else if err != nil {
				return // closed
			}
			nudge()
		}
	}()
}

// pollable returns the ring's socket as Go's network poller waits on it:
// a non-blocking dup (f, for its read deadline, and rc), made once and
// closed by close. rc is nil when it cannot be made.
func (r *ring) pollable() (f *os.File, rc syscall.RawConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchFile != nil {
		return r.watchFile, r.watchRC
	}
	f, err := pollfd.Dup(r.fd, "afpacket")
	if err != nil {
		return nil, nil
	}
	if rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, nil
	}
	r.watchFile, r.watchRC = f, rc
	return f, rc
}

// clearError clears a pending socket error (ENETDOWN when the link goes
// down), which makes the socket readable with nothing to read, so that it
// is not reported again and again. Only the ring's worker calls it.
func (r *ring) clearError() {
	unix.GetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_ERROR)
}

// stats returns the ring's cumulative kernel counters.
func (r *ring) stats() IfaceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.final
	}
	_, s3, err := r.tp.SocketStats()
	if err != nil {
		return r.final
	}
	r.final = IfaceStats{Packets: uint64(s3.Packets()), Drops: uint64(s3.Drops())}
	return r.final
}

// close reads the last counters and releases the socket and its mapping.
// Only the goroutine that reads the ring may call it.
func (r *ring) close() {
	r.stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		if r.watchFile != nil {
			r.watchFile.Close()
			if r.watchDone != nil {
				<-r.watchDone // the watcher reads the mapping (ready): gone before it is unmapped
			}
		}
		r.rd.close()
		r.tp.Close()
	}
}

// group is the set of rings of one interface, one per worker, joined in one
// PACKET_FANOUT group so the kernel hashes each flow to one of them.
type group struct {
	ifindex  int // 0 = every interface ("any")
	name     string
	linkType int
	rings    []*ring
	removed  bool // rings are being closed; still counted in the totals
}

func (g *group) stats() IfaceStats {
	var s IfaceStats
	for _, r := range g.rings {
		rs := r.stats()
		s.Packets += rs.Packets
		s.Drops += rs.Drops
	}
	return s
}

func (g *group) closeAll() {
	for _, r := range g.rings {
		r.close()
	}
}

// tpacketFD digs the socket out of afpacket.TPacket, which keeps it
// unexported: workers poll all their rings at once, and rings are bound
// after their filter is in place. Checked by TestTPacketFD.
func tpacketFD(tp *afpacket.TPacket) (int, error) {
	f := reflect.ValueOf(tp).Elem().FieldByName("fd")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return -1, errors.New("capture: afpacket.TPacket has no int fd field (gopacket changed?)")
	}
	return int(f.Int()), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ringOpts are the parts of Config a ring needs.
type ringOpts struct {
	frameSize, blockSize, numBlocks int
	blockTimeout                    time.Duration
	ports                           []uint16
	skipNoise                       bool
	ebpf                            *ebpfFilter // nil: classic filter
}

// openGroup opens n rings on ifindex (0 = all interfaces) inside network
// namespace ns, attaches the port filter and joins them in a fresh fanout
// group. Ethernet-framed devices (and loopback) get SOCK_RAW sockets and
// LinkEthernet; everything else, and "any", gets SOCK_DGRAM (data starts at
// the IP header) and LinkRaw. loop selects the in-kernel drop of the
// outgoing copy of loopback packets (see socketFilter).
//
// Sockets are created with protocol 0, so they receive nothing until they
// are bound; each is bound only after a reject-all filter is attached, joins
// the fanout group, and gets the real filter once every member has joined.
// So no packet lands in a ring unfiltered or outside the fanout (which would
// show it to two workers); packets that arrive during the setup window
// may be missed, never duplicated.
func openGroup(ns netns.NsHandle, ifindex int, name string, ether bool, loop int, n int, o ringOpts) (*group, error) {
	g := &group{ifindex: ifindex, name: name, linkType: LinkRaw}
	sockType := afpacket.SocketDgram
	if ether {
		g.linkType = LinkEthernet
		sockType = afpacket.SocketRaw
	}
	var filter []bpf.RawInstruction
	if o.ebpf == nil {
		var err error
		if filter, err = socketFilter(g.linkType, o.ports, o.skipNoise, loop); err != nil {
			return nil, err
		}
	}
	err := inNS(ns, func() error {
		for range n {
			tp, err := afpacket.NewTPacket(
				afpacket.OptInterface(""), // bound below, by index
				afpacket.OptProtocol(0),   // not hooked until then
				afpacket.OptSocketType(sockType),
				afpacket.OptFrameSize(o.frameSize),
				afpacket.OptBlockSize(o.blockSize),
				afpacket.OptNumBlocks(o.numBlocks),
				afpacket.OptBlockTimeout(o.blockTimeout),
				afpacket.OptPollTimeout(0), // reads never block; workers poll
				afpacket.OptTPacketVersion(afpacket.TPacketVersion3),
			)
			if err != nil {
				return fmt.Errorf("capture: %s: ring: %w", name, err)
			}
			fd, err := tpacketFD(tp)
			if err != nil {
				tp.Close()
				return err
			}
			rd, err := newBlockReader(fd, o.blockSize, o.numBlocks)
			if err != nil {
				tp.Close()
				return fmt.Errorf("capture: %s: %w", name, err)
			}
			g.rings = append(g.rings, &ring{tp: tp, fd: fd, linkType: g.linkType, ifindex: ifindex, rd: rd})
		}
		return nil
	})
	if err == nil {
		err = g.join(ifindex, filter, o.ebpf, loop)
	}
	if err != nil {
		g.closeAll()
		return nil, err
	}
	return g, nil
}

// join binds every ring, joins them in one fanout group and then attaches
// the real filter: ebpf's program for loopback mode loop, else the classic
// filter.
func (g *group) join(ifindex int, filter []bpf.RawInstruction, ebpf *ebpfFilter, loop int) error {
	var lastErr error
	for range 16 { // a few ids in case one is held by another process
		id := uint16(rand.Uint32())
		lastErr = nil
		for i, r := range g.rings {
			if err := r.tp.SetBPF(rejectAll); err != nil {
				return fmt.Errorf("capture: %s: attach filter: %w", g.name, err)
			}
			sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
			if err := unix.Bind(r.fd, sa); err != nil {
				return fmt.Errorf("capture: %s: bind: %w", g.name, err)
			}
			if err := r.tp.SetFanout(afpacket.FanoutHashWithDefrag, id); err != nil {
				lastErr = fmt.Errorf("capture: %s: fanout %d: %w", g.name, id, err)
				if i > 0 {
					// Members already joined cannot leave; start over.
					return lastErr
				}
				break
			}
		}
		if lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return lastErr
	}
	for _, r := range g.rings {
		if ebpf != nil {
			if err := ebpf.attach(r.fd, loop, g.linkType); err != nil {
				return fmt.Errorf("capture: %s: attach eBPF filter: %w", g.name, err)
			}
			continue
		}
		if err := r.tp.SetBPF(filter); err != nil {
			return fmt.Errorf("capture: %s: attach filter: %w", g.name, err)
		}
	}
	return nil
}

// inNS runs fn on an OS thread in ns. A thread already there runs fn as it
// is: entering a namespace (setns) needs CAP_SYS_ADMIN, which an agent
// capturing its own namespace under NET_RAW alone does not have. Only a
// thread in another namespace (a test's, or the caller's after it moved)
// switches; it stays locked and exits with the goroutine, so its namespace
// never leaks.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		cur, err := netns.Get()
		if err == nil {
			same := cur.Equal(ns)
			cur.Close()
			if same {
				defer runtime.UnlockOSThread()
				errc <- fn()
				return
			}
		}
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("capture: enter network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// netlinkHandle opens a netlink handle in ns, entering it only when the
// thread is elsewhere (netlink.NewHandleAt always calls setns).
func netlinkHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := inNS(ns, func() (err error) {
		h, err = netlink.NewHandle()
		return err
	})
	return h, err
}
