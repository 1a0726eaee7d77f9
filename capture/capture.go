package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Any captures every interface through one socket per worker bound to no
// interface. Packets arrive cooked (LinkRaw): without link headers, the same
// for Ethernet, loopback, tunnels and WireGuard alike.
const Any = "any"

// Defaults for the zero Config fields. A ring holds BlockSize*NumBlocks
// bytes of kernel memory, and there is one ring per interface per worker.
const (
	DefaultFrameSize   = 4096
	DefaultBlockSize   = 1 << 20          // 1 MiB; also the largest packet kept whole
	DefaultNumBlocks   = 8                // 8 MiB per ring
	DefaultPollTimeout = 10 * time.Second // a fallback: ring watchers nudge the workers
	// DefaultBlockTimeout is how long the kernel keeps a partly filled
	// block before handing it to the worker. Each hand-over wakes the
	// process, and on a small VM a wakeup (threads, Go's sysmon) costs as
	// much as parsing a few handshakes; at 300 handshakes/s going from 64
	// ms to 1 s cut pqwatch's CPU per handshake by more than half. Records
	// arrive up to this much later; timestamps are the packets' own. A
	// full block is handed over at once, so at high rates it plays no part.
	DefaultBlockTimeout = time.Second
)

// Sentinel errors.
var (
	ErrRunning = errors.New("capture: Run called twice")
	// ErrPermission: the process may not open packet sockets.
	ErrPermission = errors.New("capture: permission denied")
)

// Config tells New what to capture.
type Config struct {
	// Ifaces are interface names, or the single name "any". Nil means every
	// interface that is up, including ones that come up later.
	Ifaces []string
	// Ports narrows capture to TCP and UDP with a source or destination
	// port in the set (in the kernel, with a classic BPF filter). Empty
	// captures everything.
	Ports []uint16
	// SkipNoise drops in the kernel the TCP segments a handshake tracker
	// never needs (pure ACKs, segments starting with a TLS application-data
	// record): see FilterWith.
	SkipNoise bool
	// Filter picks the kernel filter: FilterAuto (empty) is the classic
	// one unless FilterEnv says "ebpf", which tries the eBPF socket filter
	// of bpf/filter.c when SkipNoise is set and falls back to the classic
	// one (saying why in the log) when the kernel or the process's
	// capabilities do not allow it; FilterEBPF fails instead; FilterClassic
	// never tries. The eBPF filter also keeps
	// a flow's packets out of the rings once its handshake is decided (see
	// bpf/filter.c): fewer packets, the same records.
	Filter string
	// Workers is the number of fanout members per interface, each read by
	// its own goroutine (default runtime.GOMAXPROCS(0), which follows the cgroup CPU limit).
	Workers int
	// Ring geometry (TPACKET_V3): BlockSize must be a multiple of the page
	// size and of FrameSize.
	FrameSize, BlockSize, NumBlocks int
	// BlockTimeout bounds how long a packet waits in a partly filled block
	// (TPACKET_V3 tp_retire_blk_tov, millisecond granularity).
	BlockTimeout time.Duration
	// PollTimeout bounds how long an idle worker sleeps in poll(2) before
	// looking around again (wakeups for new rings and shutdown are
	// immediate anyway).
	PollTimeout time.Duration
	Logger      *slog.Logger
}

// Panics is how many handler calls panicked (recovered by the workers).
func (c *Capture) Panics() uint64 { return c.panics.Load() }

// IfaceStats are the kernel's ring counters of one interface, summed over
// its workers. Packets counts every packet that passed the filter, the
// dropped ones included (PACKET_STATISTICS tp_packets); Drops counts those
// the ring had no room for.
type IfaceStats struct {
	Packets uint64
	Drops   uint64
}

// Stats is a snapshot of the capture counters. The totals are cumulative
// since New and include interfaces that have gone away; Interfaces holds
// the interfaces captured now.
type Stats struct {
	Packets    uint64
	Drops      uint64
	Interfaces map[string]IfaceStats
	Panics     uint64 // handler panics recovered by the workers
}

// Capture is a live AF_PACKET capture. Build it with New, start it with Run.
type Capture struct {
	cfg     Config
	log     *slog.Logger
	ns      netns.NsHandle // the namespace New ran in; rings and netlink live there
	any     bool
	names   map[string]bool // explicit interface names; nil = every up link
	opts    ringOpts
	workers []*worker
	ebpf    *ebpfFilter // nil: the classic filter
	noEBPF  string      // why the eBPF filter is not used (auto mode)

	mu      sync.Mutex
	groups  map[int]*group // by ifindex
	retired IfaceStats     // counters of groups that are gone
	closed  bool

	running  atomic.Bool
	stopping atomic.Bool // ctx done: workers leave their read loops
	panics   atomic.Uint64
}

// New opens the rings for the configured interfaces in the calling
// thread's network namespace. Interfaces that appear later (named ones
// that did not exist yet, or any new link that is up when Ifaces is nil) are
// picked up by Run.
func New(cfg Config) (*Capture, error) {
	// Say plainly what is missing when the process may not capture, before
	// the first namespace or netlink call fails with a vaguer message.
	if fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: AF_PACKET capture needs root or CAP_NET_RAW: %w", ErrPermission, err)
		}
	} else {
		unix.Close(fd)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.FrameSize <= 0 {
		cfg.FrameSize = DefaultFrameSize
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.NumBlocks <= 0 {
		cfg.NumBlocks = DefaultNumBlocks
	}
	if cfg.PollTimeout <= 0 {
		cfg.PollTimeout = DefaultPollTimeout
	}
	if cfg.BlockTimeout <= 0 {
		cfg.BlockTimeout = DefaultBlockTimeout
	}
	if cfg.BlockTimeout < time.Millisecond || cfg.BlockTimeout > time.Minute {
		return nil, fmt.Errorf("capture: block timeout %v: from 1ms to 1m", cfg.BlockTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if _, err := Filter(LinkEthernet, cfg.Ports); err != nil {
		return nil, err
	}
	kind, err := filterKind(cfg)
	if err != nil {
		return nil, err
	}
	strict := cfg.Filter == FilterEBPF // FilterEnv=ebpf falls back instead
	if strict && !cfg.SkipNoise {
		return nil, errors.New("capture: the eBPF filter needs SkipNoise")
	}
	if cfg.Workers > 1<<12 {
		return nil, fmt.Errorf("capture: %d workers, at most %d", cfg.Workers, 1<<12)
	}
	c := &Capture{
		cfg:    cfg,
		log:    cfg.Logger,
		groups: map[int]*group{},
		opts:   ringOpts{frameSize: cfg.FrameSize, blockSize: cfg.BlockSize, numBlocks: cfg.NumBlocks, blockTimeout: cfg.BlockTimeout, ports: cfg.Ports, skipNoise: cfg.SkipNoise},
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	switch {
	case !cfg.SkipNoise:
		c.noEBPF = "every packet is wanted"
	case kind == FilterClassic:
		c.noEBPF = "asked for the classic filter"
	case kind == FilterAuto:
		c.noEBPF = "the default (cheaper than the eBPF filter, which " + FilterEnv + "=ebpf turns on)"
	default:
		f, err := loadEBPF(cfg.Ports)
		if err != nil {
			if strict {
				return nil, fmt.Errorf("capture: eBPF socket filter: %w", err)
			}
			c.noEBPF = err.Error()
		}
		c.ebpf = f
		c.opts.ebpf = f
	}
	if c.ebpf != nil {
		c.log.Info("capture: kernel filter", "filter", FilterEBPF)
	} else {
		c.log.Info("capture: kernel filter", "filter", FilterClassic, "why", c.noEBPF)
	}
	for _, n := range cfg.Ifaces {
		if n == Any {
			if len(cfg.Ifaces) > 1 {
				return nil, errors.New(`capture: "any" cannot be combined with interface names`)
			}
			c.any = true
			continue
		}
		if c.names == nil {
			c.names = map[string]bool{}
		}
		c.names[n] = true
	}
	if len(cfg.Ifaces) > 0 && !c.any && len(c.names) == 0 {
		return nil, errors.New("capture: empty interface list")
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("capture: network namespace: %w", err)
	}
	c.ns = ns
	for i := range cfg.Workers {
		w, err := newWorker(c, i)
		if err != nil {
			return nil, err
		}
		c.workers = append(c.workers, w)
	}
	if c.any {
		g, err := openGroup(c.ns, 0, Any, false, loopAny, cfg.Workers, c.opts)
		if err != nil {
			return nil, err
		}
		c.addGroup(g)
		ok = true
		return c, nil
	}
	h, err := netlinkHandle(c.ns)
	if err != nil {
		return nil, fmt.Errorf("capture: netlink: %w", err)
	}
	defer h.Close()
	links, err := linkList(h)
	if err != nil {
		return nil, fmt.Errorf("capture: list links: %w", err)
	}
	found := map[string]bool{}
	for _, l := range links {
		found[l.Attrs().Name] = true
	}
	for n := range c.names {
		if !found[n] {
			c.log.Warn("capture: interface not there yet; captured when it appears", "iface", n)
		}
	}
	for _, l := range links {
		if err := c.linkUp(l); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// wanted reports whether link l should be captured now.
func (c *Capture) wanted(a *netlink.LinkAttrs) bool {
	if c.names != nil && !c.names[a.Name] {
		return false
	}
	return a.Flags&net.FlagUp != 0
}

// linkUp opens rings for a link that is wanted and not yet captured, and
// follows renames of links already captured.
func (c *Capture) linkUp(l netlink.Link) error {
	a := l.Attrs()
	c.mu.Lock()
	g := c.groups[a.Index]
	if g != nil && !g.removed && g.name != a.Name {
		c.log.Info("capture: interface renamed", "from", g.name, "to", a.Name)
		g.name = a.Name
	}
	closed := c.closed
	c.mu.Unlock()
	if g != nil || closed || !c.wanted(a) {
		return nil
	}
	ether := a.EncapType == "ether" || a.EncapType == "loopback"
	loop := loopNone
	if a.EncapType == "loopback" {
		loop = loopDevice
	}
	g, err := openGroup(c.ns, a.Index, a.Name, ether, loop, c.cfg.Workers, c.opts)
	if err != nil {
		return err
	}
	c.log.Info("capture: interface added", "iface", a.Name, "ifindex", a.Index, "link_type", g.linkType, "workers", len(g.rings))
	c.addGroup(g)
	return nil
}

// addGroup records g and hands each ring to its worker.
func (c *Capture) addGroup(g *group) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		g.closeAll()
		return
	}
	c.groups[g.ifindex] = g
	c.mu.Unlock()
	for i, r := range g.rings {
		c.workers[i].send(ctlMsg{add: r})
	}
}

// linkGone closes the rings of a link that went away (deleted or moved to
// another namespace). Its counters stay in the totals.
func (c *Capture) linkGone(ctx context.Context, ifindex int) {
	c.mu.Lock()
	g := c.groups[ifindex]
	if g == nil || g.removed {
		c.mu.Unlock()
		return
	}
	g.removed = true
	c.mu.Unlock()
	c.log.Info("capture: interface removed", "iface", g.name, "ifindex", ifindex)
	done := make(chan struct{}, len(g.rings))
	for i, r := range g.rings {
		c.workers[i].send(ctlMsg{del: r, done: done})
	}
	for range g.rings {
		select {
		case <-done:
		case <-ctx.Done():
			return // Close finishes the job once the workers stop
		}
	}
	c.mu.Lock()
	s := g.stats()
	c.retired.Packets += s.Packets
	c.retired.Drops += s.Drops
	delete(c.groups, ifindex)
	c.mu.Unlock()
}

// Stats returns the ring counters now. Safe to call at any time from any
// goroutine.
func (c *Capture) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Packets: c.retired.Packets, Drops: c.retired.Drops, Interfaces: make(map[string]IfaceStats, len(c.groups))}
	for _, g := range c.groups {
		gs := g.stats()
		s.Packets += gs.Packets
		s.Drops += gs.Drops
		if !g.removed {
			is := s.Interfaces[g.name]
			is.Packets += gs.Packets
			is.Drops += gs.Drops
			s.Interfaces[g.name] = is
		}
	}
	s.Panics = c.panics.Load()
	return s
}

// Interfaces returns the names of the interfaces captured now, sorted
// ("any" in any mode).
func (c *Capture) Interfaces() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, g := range c.groups {
		if !g.removed {
			names = append(names, g.name)
		}
	}
	slices.Sort(names)
	return names
}

// Handler receives one packet. worker is the fanout member that read it
// (0..Workers-1): all packets of a flow, both directions, on one interface
// go to the same worker, and a worker never runs two calls at once. data is
// only valid during the call (it points into the ring). ifindex is the
// interface whose ring it came from, 0 for a capture of every interface
// ("any", one ring that sees each packet on each interface it crosses).
type Handler func(worker, ifindex int, ts time.Time, linkType int, data []byte)

// Run reads the rings until ctx is cancelled, calling handle for every
// packet, and follows link changes (unless capturing "any"). After ctx ends
// it reads on for one block timeout (at most 5 s), so that packets captured
// before the stop are delivered, then closes all rings and returns. Run may
// be called once.
func (c *Capture) Run(ctx context.Context, handle Handler) error {
	return c.RunBatches(ctx, handle, nil)
}

// RunBatches is Run that also calls batchEnd(worker) on the worker's
// goroutine after each pass over its rings that delivered packets: at most
// readBudget (256) packets from each ring, usually what one ring block
// held. A handler can then take a lock once per batch instead of once per
// packet, and release it in batchEnd (a handler's panic is recovered per
// packet; batchEnd still follows). nil batchEnd is Run.
func (c *Capture) RunBatches(ctx context.Context, handle Handler, batchEnd func(worker int)) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Workers outlive ctx by a drain period (see below).
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var wg sync.WaitGroup
	for _, w := range c.workers {
		wg.Go(func() { w.run(wctx, handle, batchEnd) })
	}
	var linkErr error
	if !c.any {
		wg.Go(func() {
			linkErr = c.followLinks(ctx)
			if linkErr != nil {
				cancel()
			}
		})
	}
	<-ctx.Done()
	// Drain: packets captured before the stop sit in a block the kernel
	// hands over when it fills or when its timeout expires; read on for one
	// block timeout (at most maxDrain) so that they are not lost.
	t := time.NewTimer(min(c.cfg.BlockTimeout, maxDrain) + 100*time.Millisecond)
	<-t.C
	c.stopping.Store(true)
	wcancel()
	for _, w := range c.workers {
		w.wake()
	}
	wg.Wait()
	return linkErr
}

// maxDrain bounds the drain at shutdown; with a longer block timeout the
// packets of a block not yet handed over are lost.
const maxDrain = 5 * time.Second

// followLinks applies netlink link updates until ctx is done, resubscribing
// (and reconciling with a fresh link list) when the subscription breaks.
func (c *Capture) followLinks(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		if err := c.followOnce(ctx); err != nil {
			c.log.Warn("capture: link subscription lost", "err", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(time.Second<<min(attempt, 5), 30*time.Second)):
		}
	}
}

func (c *Capture) followOnce(ctx context.Context) error {
	ch := make(chan netlink.LinkUpdate, 256)
	done := make(chan struct{})
	defer close(done)
	var subErr atomic.Value
	// The subscription's socket is made in the namespace of the thread that
	// subscribes (netlink's Namespace option would setns even into its own).
	// Its ListExisting dump is sent to the multicast group, which needs
	// CAP_NET_ADMIN: reconcile lists the links instead, after subscribing,
	// so a link that comes up in between is seen by one or the other.
	err := inNS(c.ns, func() error {
		return netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) { subErr.Store(err) },
		})
	})
	if err != nil {
		return err
	}
	if err := c.reconcile(ctx); err != nil {
		c.log.Warn("capture: reconcile links", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-ch:
			if !ok {
				if e, _ := subErr.Load().(error); e != nil {
					return e
				}
				return errors.New("capture: link subscription closed")
			}
			switch u.Header.Type {
			case unix.RTM_NEWLINK:
				if err := c.linkUp(u.Link); err != nil {
					// A link can vanish while its rings are set up.
					c.log.Warn("capture: open interface", "iface", u.Link.Attrs().Name, "err", err)
				}
			case unix.RTM_DELLINK:
				c.linkGone(ctx, int(u.Index))
			}
		}
	}
}

// linkList lists h's links, dumping again (up to five dumps) while the
// kernel says a dump was interrupted by a concurrent change: links come
// and go as containers start and stop, and an interrupted dump may miss a
// link or show one twice. Still interrupted after five: the error.
func linkList(h *netlink.Handle) ([]netlink.Link, error) {
	for range 4 {
		links, err := h.LinkList()
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			return links, err
		}
	}
	return h.LinkList()
}

// reconcile opens rings for the wanted links there now and drops groups
// whose link no longer exists: what the subscription missed before it
// began or while it was down.
func (c *Capture) reconcile(ctx context.Context) error {
	h, err := netlinkHandle(c.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := linkList(h)
	if err != nil {
		return err
	}
	live := map[int]bool{}
	for _, l := range links {
		live[l.Attrs().Index] = true
		if err := c.linkUp(l); err != nil {
			c.log.Warn("capture: open interface", "iface", l.Attrs().Name, "err", err)
		}
	}
	c.mu.Lock()
	var gone []int
	for idx := range maps.Keys(c.groups) {
		if !live[idx] {
			gone = append(gone, idx)
		}
	}
	c.mu.Unlock()
	for _, idx := range gone {
		c.linkGone(ctx, idx)
	}
	return nil
}

// Close releases the rings. Run calls it on return; call it yourself only
// when Run is never called.
func (c *Capture) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	groups := slices.Collect(maps.Values(c.groups))
	c.mu.Unlock()
	// Workers have stopped (Run waits for them) or never ran.
	for _, g := range groups {
		g.closeAll()
	}
	c.mu.Lock()
	for _, g := range groups {
		s := g.stats()
		c.retired.Packets += s.Packets
		c.retired.Drops += s.Drops
		delete(c.groups, g.ifindex)
	}
	c.mu.Unlock()
	c.ns.Close()
	if c.ebpf != nil {
		c.ebpf.close()
	}
	return nil
}

// Workers is the number of fanout members per interface (Config.Workers,
// GOMAXPROCS when it was 0): a handler's worker is below it.
func (c *Capture) Workers() int { return c.cfg.Workers }

// Filter is the kernel filter in use: FilterEBPF or FilterClassic.
func (c *Capture) Filter() string {
	if c.ebpf != nil {
		return FilterEBPF
	}
	return FilterClassic
}

// WhyClassic says why the classic filter runs ("" with the eBPF one).
func (c *Capture) WhyClassic() string { return c.noEBPF }

// EBPFStats returns the eBPF filter's counters (zero with the classic
// filter).
func (c *Capture) EBPFStats() EBPFStats {
	if c.ebpf == nil {
		return EBPFStats{}
	}
	return c.ebpf.stats()
}
