package sniffer_test

import (
	"bytes"
	"context"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

type pkt struct {
	ts   time.Time
	data []byte
}

// genPackets makes a capture of n real handshakes with bulk bytes of
// application data each, and returns its packets.
func genPackets(tb testing.TB, n, bulk int) []pkt {
	tb.Helper()
	var buf bytes.Buffer
	clients := pcapgen.DefaultClients(n)
	for i := range clients {
		clients[i].BulkBytes = bulk
	}
	if _, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients}); err != nil {
		tb.Fatal(err)
	}
	r, err := pcapgen.NewReaderForTest(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	var out []pkt
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, pkt{ci.Timestamp, data})
	}
	return out
}

// BenchmarkPacket feeds a realistic mix — handshakes and bulk transfer —
// through the whole per-packet path.
func BenchmarkPacket(b *testing.B) {
	pkts := genPackets(b, 50, 32<<10)
	var bytesTotal int64
	for _, p := range pkts {
		bytesTotal += int64(len(p.data))
	}
	recs := 0
	b.SetBytes(bytesTotal / int64(len(pkts)))
	b.ReportAllocs()
	s := sniffer.New(sniffer.Config{OnRecord: func(*record.Handshake) { recs++ }})
	i := 0
	for b.Loop() {
		p := pkts[i%len(pkts)]
		s.Packet(p.ts, sniffer.LinkEthernet, p.data)
		i++
	}
	b.ReportMetric(float64(len(pkts)), "packets/capture")
}

// TestPacketPathNoAllocs: bulk data on a finished flow, and packets of a
// flow that is not TLS, cost no allocation.
func TestPacketPathNoAllocs(t *testing.T) {
	pkts := genPackets(t, 1, 256<<10)
	s := sniffer.New(sniffer.Config{})
	// Run the handshake through, then measure the bulk packets.
	half := len(pkts) / 2
	for _, p := range pkts[:half] {
		s.Packet(p.ts, sniffer.LinkEthernet, p.data)
	}
	bulk := pkts[half : half+20]
	allocs := testing.AllocsPerRun(100, func() {
		for _, p := range bulk {
			s.Packet(p.ts, sniffer.LinkEthernet, p.data)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 20 bulk packets, want 0", allocs)
	}
}

// BenchmarkDecidedFlowPacket is what a packet of a flow whose handshake
// is decided costs (bulk data after the record): decoding, the flow lookup
// and nothing more. Trains: the packets in capture order (a flow's
// segments follow each other); interleaved: round robin over 64 flows.
func BenchmarkDecidedFlowPacket(b *testing.B) {
	for _, mode := range []string{"trains", "interleaved"} {
		b.Run(mode, func(b *testing.B) {
			const flows = 64
			s := sniffer.New(sniffer.Config{})
			var bulk [flows][]pkt
			for i := range flows {
				// Each capture's flows are one client's: shift its
				// port so the 64 flows are distinct.
				pkts := genPackets(b, 1, 64<<10)
				for j := range pkts {
					d := bytes.Clone(pkts[j].data)
					d[14+20+0] ^= byte(i) // the high bytes of both TCP ports
					d[14+20+2] ^= byte(i)
					pkts[j].data = d
				}
				half := len(pkts) / 2
				for _, p := range pkts[:half] {
					s.Packet(p.ts, sniffer.LinkEthernet, p.data)
				}
				bulk[i] = pkts[half : len(pkts)-4] // before the FINs
			}
			if st := s.Stats(); st.Records != flows {
				b.Fatalf("%d records, want %d", st.Records, flows)
			}
			var order []pkt
			if mode == "trains" {
				for i := range flows {
					order = append(order, bulk[i]...)
				}
			} else {
				for j := 0; ; j++ {
					n := 0
					for i := range flows {
						if j < len(bulk[i]) {
							order = append(order, bulk[i][j])
							n++
						}
					}
					if n == 0 {
						break
					}
				}
			}
			b.ReportAllocs()
			i := 0
			cpu := cpuTime(b)
			for b.Loop() {
				p := order[i%len(order)]
				s.Packet(p.ts, sniffer.LinkEthernet, p.data)
				i++
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
			if st := s.Stats(); st.Records != flows || st.FlowsActive != flows {
				b.Fatalf("%d records, %d flows: the bulk packets changed the flows", st.Records, st.FlowsActive)
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far: on a shared
// machine a benchmark's wall time per op counts the time other processes
// ran, its CPU time per op (the cpu-ns/op metric) does not.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
