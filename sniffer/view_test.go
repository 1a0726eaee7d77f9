package sniffer_test

import (
	"bytes"
	"testing"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestTCPView: a TCP record's View is its ClientHello's random, the
// sequence number of its first byte and the TTL of the segment that
// carried it, whole or split, in order or not, after a plaintext prelude,
// with or without the SYN captured.
func TestTCPView(t *testing.T) {
	transcripts(t)
	n := len(hsHybridCH)
	random := hsHybridCH[5+4+2 : 5+4+2+32] // record header, handshake header, version
	cpre := []byte("EHLO client.example\r\nSTARTTLS\r\n")
	spre := []byte("220 mx.example ESMTP ready\r\n250 STARTTLS\r\n220 2.0.0 Ready to start TLS\r\n")
	for _, tc := range []struct {
		name    string
		prelude bool
		build   func(c *capture, off int)
		seq     func(c *capture, off int) uint32
		ttl     uint8
	}{
		{name: "one segment", build: func(c *capture, off int) {
			c.handshake3()
			c.ttl = 61
			c.seg(0, off, off+n)
		}, ttl: 61},
		{name: "split, in order", build: func(c *capture, off int) {
			c.handshake3()
			c.ttl = 60
			c.seg(0, off, off+700)
			c.ttl = 50
			c.seg(0, off+700, off+n)
		}, ttl: 60},
		{name: "split, second part first", build: func(c *capture, off int) {
			c.handshake3()
			c.ttl = 50
			c.seg(0, off+700, off+n)
			c.ttl = 63
			c.seg(0, off, off+700)
		}, ttl: 63},
		{name: "after a plaintext prelude", prelude: true, build: func(c *capture, off int) {
			c.handshake3()
			c.seg(1, 0, len(spre)-30)
			c.seg(0, 0, off)
			c.seg(1, len(spre)-30, len(spre))
			c.ttl = 62
			c.segs(0, off, off+n, 1000)
		}, ttl: 62},
		{name: "no SYN captured", build: func(c *capture, off int) {
			c.ttl = 59
			c.seg(0, off, off+n)
		}, ttl: 59},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := hsHybrid.cli, hsHybrid.srv
			off := 0
			if tc.prelude {
				cli = append(append([]byte(nil), cpre...), cli...)
				srv = append(append([]byte(nil), spre...), srv...)
				off = len(cpre)
			}
			c := newCapture(t, cli, srv)
			tc.build(c, off)
			c.ttl = 40 // the server's flight: not the ClientHello's TTL
			c.segs(1, len(srv)-len(hsHybrid.srv), -1, 1400)
			c.closeBoth()
			recs, _, _ := feed(sniffer.Config{}, c.link(), c.pkts, true)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			v := recs[0].View
			if want := c.isn[0] + 1 + uint32(off); v.Seq != want || v.TTL != tc.ttl || !v.Known || !bytes.Equal(v.Random[:], random) || v.DCIDLen != 0 {
				t.Errorf("view: seq %d (want %d) ttl %d (want %d) known %v random ok %v", v.Seq, want, v.TTL, tc.ttl, v.Known, bytes.Equal(v.Random[:], random))
			}
			if recs[0].Outcome != record.OutcomeOK {
				t.Errorf("outcome %s", recs[0].Outcome)
			}
		})
	}
}
