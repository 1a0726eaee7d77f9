package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/afpacket"
	"github.com/pqwatch/pqwatch/internal/testenv"
)

// seen is one decoded packet.
type seen struct {
	worker             int
	linkType           int
	src, dst           netip.AddrPort
	proto              uint8
	flags              uint8
	seq                uint32
	ipid               uint16
	payload            int
	zeroMACs, ethernet bool
}

// flowKey is direction-agnostic.
type flowKey struct {
	proto uint8
	a, b  netip.AddrPort
}

func (s seen) flow() flowKey {
	a, b := s.src, s.dst
	if b.Addr().Less(a.Addr()) || (a.Addr() == b.Addr() && b.Port() < a.Port()) {
		a, b = b, a
	}
	return flowKey{s.proto, a, b}
}

// decodeTest parses Ethernet or raw IPv4 TCP/UDP; ok is false for anything
// else.
func decodeTest(linkType int, d []byte) (s seen, ok bool) {
	s.linkType = linkType
	if linkType == LinkEthernet {
		if len(d) < 14 || binary.BigEndian.Uint16(d[12:]) != ethIPv4 {
			return s, false
		}
		s.ethernet = true
		s.zeroMACs = string(d[:12]) == string(make([]byte, 12))
		d = d[14:]
	}
	if len(d) < 20 || d[0]>>4 != 4 {
		return s, false
	}
	ihl := int(d[0]&0xf) * 4
	s.proto = d[9]
	s.ipid = binary.BigEndian.Uint16(d[4:])
	total := int(binary.BigEndian.Uint16(d[2:]))
	src, _ := netip.AddrFromSlice(d[12:16])
	dst, _ := netip.AddrFromSlice(d[16:20])
	if total > len(d) {
		total = len(d)
	}
	l4 := d[ihl:total]
	if len(l4) < 8 {
		return s, false
	}
	s.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4))
	s.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
	switch s.proto {
	case protoTCP:
		if len(l4) < 20 {
			return s, false
		}
		s.seq = binary.BigEndian.Uint32(l4[4:])
		s.flags = l4[13]
		s.payload = len(l4) - int(l4[12]>>4)*4
	case protoUDP:
		s.payload = len(l4) - 8
	default:
		return s, false
	}
	return s, true
}

// collector records decoded packets per worker; each worker appends only
// to its own slice, and the worker field checks that.
type collector struct {
	mu      sync.Mutex
	pkts    []seen
	count   atomic.Int64
	inCall  []atomic.Int32
	overlap atomic.Int32
}

func newCollector(workers int) *collector {
	return &collector{inCall: make([]atomic.Int32, workers)}
}

func (c *collector) handle(worker, _ int, ts time.Time, linkType int, data []byte) {
	if c.inCall[worker].Add(1) != 1 {
		c.overlap.Add(1)
	}
	defer c.inCall[worker].Add(-1)
	c.count.Add(1)
	s, ok := decodeTest(linkType, data)
	s.worker = worker
	s.linkType = linkType
	if !ok {
		return
	}
	c.mu.Lock()
	c.pkts = append(c.pkts, s)
	c.mu.Unlock()
}

func (c *collector) snapshot() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seen(nil), c.pkts...)
}

// startCapture builds a Capture inside namespace ns ("" = current) and runs
// it; the returned stop cancels and waits for Run.
func startCapture(t *testing.T, ns string, cfg Config, handle func(int, int, time.Time, int, []byte)) (*Capture, func()) {
	t.Helper()
	var c *Capture
	mk := func() (err error) { c, err = New(cfg); return }
	var err error
	if ns == "" {
		err = mk()
	} else {
		err = testenv.InNS(ns, mk)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, handle) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// waitStable waits (bounded) until cond holds.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tcpExchange makes n connections from ns to addr, each writing msg and
// reading the echo, and returns the client-to-server byte count.
func tcpExchange(t *testing.T, ns, addr string, n int, msg []byte) int {
	t.Helper()
	total := 0
	for range n {
		conn, err := testenv.Dial(ns, addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		conn.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		total += len(msg)
	}
	return total
}

// echoServer serves TCP echo on ln until the test ends.
func echoServer(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.Copy(c, c)
			}()
		}
	}()
}

func udpListen(t *testing.T, ns, addr string) *net.UDPConn {
	t.Helper()
	var pc net.PacketConn
	err := testenv.InNS(ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.(*net.UDPConn)
}

// udpSend sends n datagrams from ns (from one socket per flow, flows
// sockets) to addr.
func udpSend(t *testing.T, ns, addr string, flows, n, size int) {
	t.Helper()
	for f := range flows {
		var conn net.Conn
		err := testenv.InNS(ns, func() (err error) { conn, err = net.Dial("udp4", addr); return })
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		for i := range n {
			binary.BigEndian.PutUint32(buf, uint32(f<<16|i))
			if _, err := conn.Write(buf); err != nil {
				t.Fatal(err)
			}
			if i%32 == 31 {
				time.Sleep(time.Millisecond) // stay under the socket buffers
			}
		}
		conn.Close()
	}
}

func port(a net.Addr) uint16 {
	switch a := a.(type) {
	case *net.TCPAddr:
		return uint16(a.Port)
	case *net.UDPAddr:
		return uint16(a.Port)
	}
	return 0
}

// TestVeth captures on a veth in the server namespace with two workers and
// a port filter, next to an unfiltered capture of the same link: every
// packet of the test flows is seen once, on one worker per flow, the
// filtered capture never sees other ports, and the kernel counters agree
// with what the handler got.
func TestVeth(t *testing.T) {
	p := testenv.NewPair(t, 1500)
	ln, err := testenv.Listen(p.S, p.SAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	echoServer(t, ln)
	other, err := testenv.Listen(p.S, p.SAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	echoServer(t, other)
	uc := udpListen(t, p.S, p.SAddr+":0")
	uo := udpListen(t, p.S, p.SAddr+":0")
	tcpPort, otherPort, udpPort, udpOther := port(ln.Addr()), port(other.Addr()), port(uc.LocalAddr()), port(uo.LocalAddr())

	const workers = 2
	col := newCollector(workers)
	c, stop := startCapture(t, p.S, Config{Ifaces: []string{p.SIf}, Ports: []uint16{tcpPort, udpPort}, Workers: workers}, col.handle)
	all := newCollector(workers)
	call, stopAll := startCapture(t, p.S, Config{Ifaces: []string{p.SIf}, Workers: workers}, all.handle)
	if got := c.Interfaces(); !reflect.DeepEqual(got, []string{p.SIf}) {
		t.Fatalf("Interfaces = %v", got)
	}

	const conns, udpFlows, udpPerFlow = 20, 8, 50
	msg := make([]byte, 3000) // more than one segment
	sent := tcpExchange(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, tcpPort), conns, msg)
	tcpExchange(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, otherPort), 5, msg)
	udpSend(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, udpPort), udpFlows, udpPerFlow, 200)
	udpSend(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, udpOther), 2, 50, 200)

	// The handler count catches up with the kernel's once blocks retire.
	waitFor(t, "filtered capture to drain", 5*time.Second, func() bool {
		s := c.Stats()
		return s.Packets > 0 && uint64(col.count.Load()) == s.Packets-s.Drops
	})
	waitFor(t, "unfiltered capture to drain", 5*time.Second, func() bool {
		s := call.Stats()
		return s.Packets > 0 && uint64(all.count.Load()) == s.Packets-s.Drops
	})
	time.Sleep(200 * time.Millisecond)
	fs, as := c.Stats(), call.Stats()
	stop()
	stopAll()
	t.Logf("filtered: %+v handled %d; unfiltered: %+v handled %d", fs, col.count.Load(), as, all.count.Load())
	if fs.Drops != 0 || as.Drops != 0 {
		t.Errorf("drops: %d, %d", fs.Drops, as.Drops)
	}
	if col.overlap.Load() != 0 {
		t.Errorf("handler ran concurrently on one worker %d times", col.overlap.Load())
	}

	pkts := col.snapshot()
	type dupKey struct {
		src, dst netip.AddrPort
		proto    uint8
		flags    uint8
		seq      uint32
		ipid     uint16
		payload  int
	}
	dups := map[dupKey]int{}
	flowWorkers := map[flowKey]map[int]bool{}
	var tcpBytesToServer, udpDatagrams int
	syns := map[flowKey]int{}
	for _, s := range pkts {
		if s.dst.Port() != tcpPort && s.src.Port() != tcpPort && s.dst.Port() != udpPort && s.src.Port() != udpPort {
			t.Fatalf("filtered capture saw %v -> %v", s.src, s.dst)
		}
		if s.linkType != LinkEthernet || !s.ethernet {
			t.Fatalf("link type %d on a veth", s.linkType)
		}
		dups[dupKey{s.src, s.dst, s.proto, s.flags, s.seq, s.ipid, s.payload}]++
		fk := s.flow()
		if flowWorkers[fk] == nil {
			flowWorkers[fk] = map[int]bool{}
		}
		flowWorkers[fk][s.worker] = true
		switch {
		case s.proto == protoTCP && s.dst.Port() == tcpPort:
			tcpBytesToServer += s.payload
			if s.flags&0x12 == 0x02 {
				syns[fk]++
			}
		case s.proto == protoUDP && s.dst.Port() == udpPort:
			udpDatagrams++
		}
	}
	for k, n := range dups {
		if n != 1 {
			t.Errorf("packet seen %d times: %+v", n, k)
		}
	}
	if tcpBytesToServer != sent {
		t.Errorf("TCP payload to server: %d bytes, sent %d", tcpBytesToServer, sent)
	}
	if len(syns) != conns {
		t.Errorf("SYNs on %d flows, want %d", len(syns), conns)
	}
	if udpDatagrams != udpFlows*udpPerFlow {
		t.Errorf("UDP datagrams: %d, sent %d", udpDatagrams, udpFlows*udpPerFlow)
	}
	used := map[int]int{}
	for fk, ws := range flowWorkers {
		if len(ws) != 1 {
			t.Errorf("flow %v split over workers %v", fk, ws)
		}
		for w := range ws {
			used[w]++
		}
	}
	t.Logf("%d flows, per worker %v", len(flowWorkers), used)
	if len(flowWorkers) != conns+udpFlows {
		t.Errorf("%d flows, want %d", len(flowWorkers), conns+udpFlows)
	}
	if len(used) != workers {
		t.Errorf("flows used workers %v, want all %d", used, workers)
	}
	// The kernel filter: the unfiltered capture counted the other ports too.
	otherSeen := 0
	for _, s := range all.snapshot() {
		if s.dst.Port() == otherPort || s.dst.Port() == udpOther {
			otherSeen++
		}
	}
	if otherSeen == 0 || as.Packets < fs.Packets+uint64(otherSeen) {
		t.Errorf("unfiltered capture: %d packets, %d to other ports; filtered %d", as.Packets, otherSeen, fs.Packets)
	}
	if fs.Interfaces[p.SIf] != (IfaceStats{Packets: fs.Packets, Drops: fs.Drops}) {
		t.Errorf("per-interface stats %v do not add up to %d/%d", fs.Interfaces, fs.Packets, fs.Drops)
	}
}

// TestLinkFollow: a veth created after Run starts gets rings, and loses
// them when it is deleted; the totals keep its packets.
func TestLinkFollow(t *testing.T) {
	p := testenv.NewPair(t, 1500)
	const newIf, peerIf = "pqx0", "pqx1"
	ln, err := testenv.Listen(p.S, "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	echoServer(t, ln)
	tcpPort := port(ln.Addr())
	col := newCollector(2)
	c, stop := startCapture(t, p.S, Config{Ifaces: []string{p.SIf, newIf}, Ports: []uint16{tcpPort}, Workers: 2, PollTimeout: 50 * time.Millisecond}, col.handle)
	if got := c.Interfaces(); !reflect.DeepEqual(got, []string{p.SIf}) {
		t.Fatalf("Interfaces = %v", got)
	}
	netA := fmt.Sprintf("10.78.%d", 1+int(p.SAddr[len(p.SAddr)-3])%250)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "add", newIf, "netns", p.S, "type", "veth", "peer", "name", peerIf, "netns", p.C)
	ip("-n", p.S, "addr", "add", netA+".1/24", "dev", newIf)
	ip("-n", p.C, "addr", "add", netA+".2/24", "dev", peerIf)
	ip("-n", p.C, "link", "set", peerIf, "up")
	ip("-n", p.S, "link", "set", newIf, "up")
	waitFor(t, "new link captured", 5*time.Second, func() bool {
		return reflect.DeepEqual(c.Interfaces(), []string{newIf, p.SIf})
	})
	tcpExchange(t, p.C, fmt.Sprintf("%s.1:%d", netA, tcpPort), 3, []byte("hello"))
	waitFor(t, "packets on the new link", 5*time.Second, func() bool {
		return c.Stats().Interfaces[newIf].Packets > 0 && uint64(col.count.Load()) == c.Stats().Packets
	})
	onNew := 0
	for _, s := range col.snapshot() {
		if s.dst.Addr().String() == netA+".1" {
			onNew++
		}
	}
	before := c.Stats()
	t.Logf("before delete: %+v, %d packets to the new address", before, onNew)
	if onNew == 0 {
		t.Fatal("no packets seen on the new link")
	}
	ip("-n", p.S, "link", "del", newIf)
	waitFor(t, "deleted link dropped", 5*time.Second, func() bool {
		return reflect.DeepEqual(c.Interfaces(), []string{p.SIf})
	})
	after := c.Stats()
	if _, ok := after.Interfaces[newIf]; ok || after.Packets < before.Packets {
		t.Errorf("after delete: %+v (before %+v)", after, before)
	}
	// The old link still works.
	tcpExchange(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, tcpPort), 1, []byte("again"))
	waitFor(t, "packets on the old link", 5*time.Second, func() bool { return c.Stats().Packets > after.Packets })
	stop()
}

// TestDrops: a slow handler on a tiny ring makes the kernel drop, the
// counters show it, and shutdown is prompt.
func TestDrops(t *testing.T) {
	p := testenv.NewPair(t, 1500)
	uc := udpListen(t, p.S, p.SAddr+":0")
	up := port(uc.LocalAddr())
	var handled atomic.Int64
	slow := func(int, int, time.Time, int, []byte) {
		handled.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
	c, stop := startCapture(t, p.S, Config{Ifaces: []string{p.SIf}, Ports: []uint16{up}, Workers: 1,
		FrameSize: 2048, BlockSize: 4096, NumBlocks: 2}, slow)
	udpSend(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, up), 1, 300, 1000)
	waitFor(t, "drops", 5*time.Second, func() bool { return c.Stats().Drops > 0 })
	s := c.Stats()
	t0 := time.Now()
	stop()
	t.Logf("stats %+v, handled %d, stop took %v", s, handled.Load(), time.Since(t0))
	if s.Packets < 300 || s.Drops == 0 || s.Drops >= s.Packets {
		t.Errorf("stats %+v after 300 datagrams", s)
	}
	if final := c.Stats(); final.Packets < s.Packets {
		t.Errorf("totals went down after close: %+v < %+v", final, s)
	}
}

// TestLoopback captures "lo" in the current namespace, filtered to the
// test's own port: loopback frames are Ethernet with zero MACs, each
// datagram is seen once.
func TestLoopback(t *testing.T) {
	for _, filter := range []string{FilterClassic, FilterEBPF} {
		t.Run(filter, func(t *testing.T) { testLoopback(t, filter) })
	}
}

// testLoopback: each datagram on lo is seen once (the outgoing copy is
// dropped in the kernel), with the classic and with the eBPF filter.
func testLoopback(t *testing.T, filter string) {
	testenv.NeedRoot(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	up := port(pc.LocalAddr())
	col := newCollector(2)
	c, stop := startCapture(t, "", Config{Ifaces: []string{"lo"}, Ports: []uint16{up}, Workers: 2, SkipNoise: true, Filter: filter}, col.handle)
	if c.Filter() != filter {
		t.Fatalf("filter %s, want %s (%s)", c.Filter(), filter, c.WhyClassic())
	}
	conn, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 100
	for i := range n {
		conn.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	waitFor(t, "datagrams", 5*time.Second, func() bool { return col.count.Load() >= n })
	time.Sleep(200 * time.Millisecond)
	stop()
	pkts := col.snapshot()
	if len(pkts) != n {
		t.Errorf("saw %d packets, sent %d datagrams", len(pkts), n)
	}
	for _, s := range pkts {
		if s.linkType != LinkEthernet || !s.zeroMACs {
			t.Fatalf("loopback frame: link type %d, zero MACs %v", s.linkType, s.zeroMACs)
		}
	}
	if s := c.Stats(); s.Packets != n {
		t.Errorf("stats %+v, want %d packets", s, n)
	}
}

// TestAny captures "any" inside the test's own namespace (its lo and its
// veth, nothing else): packets arrive without link headers as LinkRaw.
func TestAny(t *testing.T) {
	for _, filter := range []string{FilterClassic, FilterEBPF} {
		t.Run(filter, func(t *testing.T) { testAny(t, filter) })
	}
}

func testAny(t *testing.T, filter string) {
	p := testenv.NewPair(t, 1500)
	uc := udpListen(t, p.S, p.SAddr+":0")
	lc := udpListen(t, p.S, "127.0.0.1:0")
	up, lp := port(uc.LocalAddr()), port(lc.LocalAddr())
	col := newCollector(2)
	c, stop := startCapture(t, p.S, Config{Ifaces: []string{Any}, Ports: []uint16{up, lp}, Workers: 2, SkipNoise: true, Filter: filter}, col.handle)
	if c.Filter() != filter {
		t.Fatalf("filter %s, want %s (%s)", c.Filter(), filter, c.WhyClassic())
	}
	if got := c.Interfaces(); !reflect.DeepEqual(got, []string{Any}) {
		t.Fatalf("Interfaces = %v", got)
	}
	udpSend(t, p.C, fmt.Sprintf("%s:%d", p.SAddr, up), 4, 25, 100)
	udpSend(t, p.S, fmt.Sprintf("127.0.0.1:%d", lp), 2, 25, 100) // over lo: once, not twice
	waitFor(t, "datagrams", 5*time.Second, func() bool { return col.count.Load() >= 150 })
	time.Sleep(200 * time.Millisecond)
	stop()
	pkts := col.snapshot()
	if len(pkts) != 150 {
		t.Errorf("saw %d packets, sent 150", len(pkts))
	}
	for _, s := range pkts {
		if s.linkType != LinkRaw || (s.dst.Port() != up && s.dst.Port() != lp) {
			t.Fatalf("packet %+v", s)
		}
	}
}

func TestTPacketFD(t *testing.T) {
	testenv.NeedRoot(t)
	tp, err := afpacket.NewTPacket(afpacket.OptProtocol(0), afpacket.OptTPacketVersion(afpacket.TPacketVersion3),
		afpacket.OptBlockSize(1<<16), afpacket.OptNumBlocks(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	fd, err := tpacketFD(tp)
	if err != nil || fd <= 2 {
		t.Fatalf("fd %d, %v", fd, err)
	}
}

// TestRunBatches: batchEnd follows every pass that delivered packets, on
// the worker's own goroutine (no call of handle runs between a packet and
// its batch's end on another worker's behalf), and no batch ends empty.
func TestRunBatches(t *testing.T) {
	testenv.NeedRoot(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := New(Config{Ifaces: []string{"lo"}, Ports: []uint16{port(pc.LocalAddr())}, Workers: 2})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var (
		mu      sync.Mutex
		open    [2]int // packets of each worker's batch not yet ended
		packets atomic.Int64
		batches atomic.Int64
		bad     atomic.Value
	)
	handle := func(w, _ int, _ time.Time, _ int, _ []byte) {
		mu.Lock()
		open[w]++
		mu.Unlock()
		packets.Add(1)
	}
	end := func(w int) {
		mu.Lock()
		if open[w] == 0 {
			bad.Store(fmt.Sprintf("worker %d: a batch ended with no packet", w))
		}
		open[w] = 0
		mu.Unlock()
		batches.Add(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunBatches(ctx, handle, end) }()
	conn, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 300
	for i := range n {
		conn.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	waitFor(t, "datagrams", 5*time.Second, func() bool { return packets.Load() >= n })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunBatches: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunBatches did not return after cancel")
	}
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if open != [2]int{} {
		t.Errorf("packets after the last batch end: %v", open)
	}
	if b := batches.Load(); b < 1 || b > packets.Load() {
		t.Errorf("%d batches for %d packets", b, packets.Load())
	}
	t.Logf("%d packets in %d batches", packets.Load(), batches.Load())
}
