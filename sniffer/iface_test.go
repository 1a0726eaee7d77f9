package sniffer_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestPacketOnInterfaces: a connection captured on two interfaces by one
// ring each, handed over block by block (the second interface's copy of a
// packet after the first's, the order within each interface kept), is a
// complete flow on each: two complete records, never one flow fed two
// interleaved copies. The same packets without an interface are one flow
// and one record each, as a capture of every interface in one ring gives
// them.
func TestPacketOnInterfaces(t *testing.T) {
	var buf bytes.Buffer
	res, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{Clients: pcapgen.DefaultClients(6)})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := pcapgo.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	link := int(rd.LinkType())
	var pkts [][]byte
	var times []time.Time
	for {
		data, ci, err := rd.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, data)
		times = append(times, ci.Timestamp)
	}
	want := 0 // connections the client completed
	for _, c := range res {
		if c.Err == nil {
			want++
		}
	}
	// Blocks of 4 packets, each block on iface1 then on iface2.
	run := func(iface1, iface2 int) (n, ok int) {
		s := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) {
			n++
			if r.Outcome == record.OutcomeOK {
				ok++
			}
		}})
		for i := 0; i < len(pkts); i += 4 {
			j := min(i+4, len(pkts))
			for k := i; k < j; k++ {
				s.PacketOn(times[k], link, iface1, pkts[k])
			}
			for k := i; k < j; k++ {
				s.PacketOn(times[k], link, iface2, pkts[k])
			}
		}
		s.Flush()
		return n, ok
	}
	if n, ok := run(3, 4); n != 2*len(res) || ok != 2*want {
		t.Errorf("two interfaces: %d records (%d ok), want %d (%d ok): a view per interface", n, ok, 2*len(res), 2*want)
	}
	if n, ok := run(0, 0); n != len(res) || ok != want {
		t.Errorf("no interface: %d records (%d ok), want %d (%d ok)", n, ok, len(res), want)
	}
}
