package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/sniffer"
)

// BenchmarkHandshakePath is the agent's whole per-handshake cost on the
// capture side, without the ring: every packet of a real handshake (the
// demo's client mix, no bulk data) through a worker's sniffer, and the
// finished record through metrics, forecast and the record sinks. The live
// figure in `make bench` (internal/benchlive) adds the ring, wakeups and
// the Go runtime on top of this.
//
// Records wait in the merge (one handshake once) for 30 ms of wall time:
// at the hundreds of thousands of handshakes a second this loop makes,
// that is some ten thousand records in flight, which the record pool and
// the caches do not hold; BenchmarkHandshakePathReleased releases them
// after each round of 100, as a node at some 3,000 handshakes a second
// holds them.
func BenchmarkHandshakePath(b *testing.B) { handshakePath(b, false) }

// BenchmarkHandshakePathReleased is BenchmarkHandshakePath with the merge
// flushed after each round of 100 handshakes: the per-handshake cost
// without the backlog a 30 ms hold builds at this loop's rate.
func BenchmarkHandshakePathReleased(b *testing.B) { handshakePath(b, true) }

func handshakePath(b *testing.B, release bool) {
	const conns = 100
	var buf bytes.Buffer
	res, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(conns)})
	if err != nil {
		b.Fatal(err)
	}
	r, err := pcapgen.NewReaderForTest(&buf)
	if err != nil {
		b.Fatal(err)
	}
	type pkt struct {
		ts   time.Time
		data []byte
	}
	var pkts []pkt
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		pkts = append(pkts, pkt{ci.Timestamp, data})
	}
	a, err := New(Config{Workers: 1, RecycleRecords: true}) // as pqwatch run
	if errors.Is(err, capture.ErrPermission) {
		b.Skip("agent.New needs an AF_PACKET socket: ", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer a.capt.Close()
	b.ReportAllocs()
	span := pkts[len(pkts)-1].ts.Sub(pkts[0].ts) + time.Second
	round := 0
	for b.Loop() {
		shift := time.Duration(round) * span
		w := a.pipe.Workers()[0]
		for _, p := range pkts {
			w.Packet(p.ts.Add(shift), sniffer.LinkEthernet, 0, p.data)
		}
		w.BatchEnd()
		a.batchEnd(0)
		if release {
			a.pipe.Flush()
		}
		round++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(round*len(res)), "ns/handshake")
	b.ReportMetric(float64(len(pkts))/float64(len(res)), "packets/handshake")
	a.pipe.Flush()
	if got := a.pipe.Delivered(); got < uint64(round*len(res))*9/10 {
		b.Fatalf("%d records out of %d handshakes", got, round*len(res))
	}
}
