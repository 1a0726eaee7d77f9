package sniffer_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// FuzzPacket: any bytes under any link type, alone or as a sequence of
// frames, never panic, and every record the sniffer emits is well formed.
func FuzzPacket(f *testing.F) {
	for i, p := range genPackets(f, 5, 2000) {
		if i%3 == 0 {
			f.Add(uint8(1), p.data)
		}
	}
	f.Add(uint8(0), []byte{2, 0, 0, 0, 0x45})
	f.Add(uint8(113), make([]byte, 16))
	f.Add(uint8(101), []byte{0x60, 0, 0, 0, 0, 8, 6, 64})
	f.Fuzz(func(t *testing.T, link uint8, data []byte) {
		links := []int{sniffer.LinkEthernet, sniffer.LinkLinuxSLL, sniffer.LinkLinuxSLL2, sniffer.LinkRaw, sniffer.LinkNull, sniffer.LinkLoop, sniffer.LinkIPv4, sniffer.LinkIPv6}
		lt := links[int(link)%len(links)]
		s := sniffer.New(sniffer.Config{MaxFlows: 8, MaxStreamBytes: 4096, OnRecord: func(r *record.Handshake) {
			if r.Outcome == "" || r.ClientText() == "" || r.Server == "" {
				t.Fatalf("malformed record %+v", r)
			}
		}})
		ts := time.Unix(1700000000, 0)
		// The input is also split into frames by 2-byte length prefixes,
		// so sequences of related packets get explored.
		s.Packet(ts, lt, data)
		for b := data; len(b) > 2; {
			n := int(binary.BigEndian.Uint16(b)) % 2048
			b = b[2:]
			if n > len(b) {
				n = len(b)
			}
			ts = ts.Add(time.Millisecond)
			s.Packet(ts, lt, b[:n])
			b = b[n:]
		}
		s.Flush()
	})
}
