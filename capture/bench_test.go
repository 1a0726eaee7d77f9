package capture

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"golang.org/x/sys/unix"
)

// loopRig is a running capture on "lo" filtered to one UDP port, and a raw
// socket that sends to that port without allocating.
type loopRig struct {
	c       *Capture
	stop    func()
	fd      int
	payload []byte
	handled atomic.Int64
}

func newLoopRig(tb testing.TB, workers int) *loopRig {
	testenv.NeedRoot(tb)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pc.Close() })
	// The receiver never reads: the capture sees every datagram whether
	// or not the socket buffer overflows.
	up := port(pc.LocalAddr())
	r := &loopRig{payload: make([]byte, 512)}
	handle := func(int, int, time.Time, int, []byte) { r.handled.Add(1) }
	c, err := New(Config{Ifaces: []string{"lo"}, Ports: []uint16{up}, Workers: workers, BlockSize: 1 << 18, NumBlocks: 64})
	if err != nil {
		tb.Fatal(err)
	}
	r.c = c
	_, r.stop = startRun(tb, c, handle)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(up), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	r.fd = fd
	return r
}

// burst sends n datagrams and waits (bounded) until the handler saw them.
func (r *loopRig) burst(tb testing.TB, n int) {
	want := r.handled.Load() + int64(n)
	for range n {
		unix.Write(r.fd, r.payload)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.handled.Load() < want {
		if time.Now().After(deadline) {
			tb.Fatalf("handled %d of %d (stats %+v)", r.handled.Load(), want, r.c.Stats())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func startRun(tb testing.TB, c *Capture, handle Handler) (*Capture, func()) {
	ctx, cancel := contextWithCancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, handle) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				tb.Errorf("Run did not return")
			}
		})
	}
	tb.Cleanup(stop)
	return c, stop
}

// TestNoAllocs: reading the ring and calling the handler allocates nothing.
// The mallocs counted are the whole process's: the sender uses raw
// syscalls and the waiter only sleeps, so what remains is the capture path,
// plus what the process does in the background while a burst lasts (a GC
// cycle, netlink link updates on a busy host, which bursts of 256 packets
// on a loaded machine showed as 10 to 36 mallocs). So the figure is the
// difference between long and short bursts: one allocation per packet
// would show up as the difference in packets.
func TestNoAllocs(t *testing.T) {
	r := newLoopRig(t, 1)
	r.burst(t, 64) // warm up
	const short, long = 256, 2048
	a := testing.AllocsPerRun(10, func() { r.burst(t, short) })
	b := testing.AllocsPerRun(10, func() { r.burst(t, long) })
	t.Logf("%.2f allocations per burst of %d packets, %.2f per burst of %d", a, short, b, long)
	if per := (b - a) / (long - short); per > 0.05 {
		t.Errorf("%.3f allocations per packet (%.2f per %d, %.2f per %d); want none", per, a, short, b, long)
	}
}

// BenchmarkLoopback: packets per second through Run on lo. Each b.Loop
// iteration sends a burst of 64 datagrams of 512 bytes; the clock stops when
// the handler has seen them all (bounded wait), so the figure is end to end
// and drops (a ring the worker cannot drain in time) are reported.
func BenchmarkLoopback(b *testing.B) {
	r := newLoopRig(b, 1)
	const burst = 64
	b.ReportAllocs()
	b.SetBytes(burst * int64(len(r.payload)+28+14))
	start := time.Now()
	base := r.handled.Load()
	sent := 0
	for b.Loop() {
		for range burst {
			unix.Write(r.fd, r.payload)
		}
		sent += burst
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := r.c.Stats()
		if r.handled.Load()-base+int64(s.Drops) >= int64(sent) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(r.handled.Load()-base)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(r.c.Stats().Drops), "drops")
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// TestIdleAndPanics: an idle capture sleeps in poll (no busy loop), and a
// panicking handler is counted while capture goes on.
func TestIdleAndPanics(t *testing.T) {
	testenv.NeedRoot(t)
	r := newLoopRig(t, 2)
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	time.Sleep(time.Second)
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	t.Logf("idle CPU over 1s: %v", cpu)
	if cpu > 200*time.Millisecond {
		t.Errorf("idle capture used %v CPU in 1s", cpu)
	}
	r.stop()

	// A second capture whose handler panics on every packet.
	c, err := New(Config{Ifaces: []string{"lo"}, Ports: r.c.cfg.Ports, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	startRun(t, c, func(int, int, time.Time, int, []byte) { calls.Add(1); panic("boom") })
	for range 10 {
		unix.Write(r.fd, r.payload)
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := c.Stats(); calls.Load() != 10 || s.Panics != 10 {
		t.Errorf("calls %d, stats %+v; want 10 panics recovered", calls.Load(), s)
	}
}
