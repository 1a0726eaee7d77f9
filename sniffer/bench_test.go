package sniffer_test

import (
	"bytes"
	"context"
	"io"
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
