package sniffer_test

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// helloHeader is a ClientHello record header claiming a body of n bytes,
// followed by part of a body (the start of client_version and random).
func helloHeader(n int) []byte {
	return []byte{0x16, 0x03, 0x01, byte((n + 4) >> 8), byte(n + 4), 0x01, byte(n >> 16), byte(n >> 8), byte(n), 0x03, 0x03, 1, 2, 3}
}

// TestJunkIsNoHandshake: bytes that are not the start of a real ClientHello
// never become a record, and each is counted by what it is; a ClientHello
// that starts after a SYN and never completes is outcome incomplete.
func TestJunkIsNoHandshake(t *testing.T) {
	transcripts(t)
	junk := func(b ...byte) func(t *testing.T) *capture {
		return func(t *testing.T) *capture {
			c := newCapture(t, append(b, make([]byte, 64)...), nil)
			c.handshake3()
			c.seg(0, 0, len(b)+64)
			c.ctl(1, 0x14)
			return c
		}
	}
	for _, tc := range []struct {
		name    string
		build   func(t *testing.T) *capture
		outcome string // the one record's outcome; "" for none
		errs    map[string]uint64
	}{
		{name: "16 03 and junk after a SYN", build: junk(0x16, 0x03, 0x01, 0x00, 0x40, 0x00), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "record version 0x0305", build: junk(0x16, 0x03, 0x05, 0x00, 0x40, 0x01, 0, 0, 0x3c), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "a ClientHello shorter than its fixed fields", build: junk(0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0, 0, 20), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "a ClientHello longer than the stream cap", build: junk(0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x01, 0, 0), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "a record shorter than a handshake header", build: junk(0x16, 0x03, 0x01, 0x00, 0x02, 0x01, 0, 1, 0), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "a ServerHello from the side that sent the SYN", build: junk(0x16, 0x03, 0x03, 0x00, 0x40, 0x02, 0, 0, 0x3c), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "another handshake message first", build: junk(0x16, 0x03, 0x03, 0x00, 0x40, 0x0b, 0, 0, 0x3c), errs: map[string]uint64{"not_client_hello": 1}},
		{name: "no SYN: a ClientHello header, then RST", build: func(t *testing.T) *capture {
			c := newCapture(t, helloHeader(1500), nil)
			c.seg(0, 0, -1)
			c.ctl(1, 0x14)
			return c
		}, errs: map[string]uint64{"no_syn_incomplete": 1}},
		{name: "no SYN: a ClientHello header, capture ends", build: func(t *testing.T) *capture {
			c := newCapture(t, helloHeader(1500), nil)
			c.seg(0, 0, -1)
			return c
		}, errs: map[string]uint64{"no_syn_incomplete": 1}},
		{name: "a SYN, a ClientHello header, then RST: incomplete", build: func(t *testing.T) *capture {
			c := newCapture(t, helloHeader(1500), nil)
			c.handshake3()
			c.seg(0, 0, -1)
			c.ctl(1, 0x14)
			return c
		}, outcome: record.OutcomeIncomplete},
		{name: "a SYN, a ClientHello header, then FIN: incomplete", build: func(t *testing.T) *capture {
			c := newCapture(t, helloHeader(1500), nil)
			c.handshake3()
			c.seg(0, 0, -1)
			c.closeBoth()
			return c
		}, outcome: record.OutcomeIncomplete},
		{name: "a SYN, a ClientHello header, capture ends: truncated", build: func(t *testing.T) *capture {
			c := newCapture(t, helloHeader(1500), nil)
			c.handshake3()
			c.seg(0, 0, -1)
			return c
		}, outcome: record.OutcomeTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.build(t)
			recs, st, _ := feed(sniffer.Config{}, c.link(), c.pkts, true)
			switch {
			case tc.outcome == "" && len(recs) != 0:
				t.Errorf("%d records, want none: %+v", len(recs), *recs[0])
			case tc.outcome != "" && (len(recs) != 1 || recs[0].Outcome != tc.outcome):
				for _, r := range recs {
					t.Logf("got %+v", *r)
				}
				t.Errorf("%d records, want one with outcome %s", len(recs), tc.outcome)
			}
			if tc.errs == nil {
				tc.errs = map[string]uint64{}
			}
			for k, v := range tc.errs {
				if st.Errors[k] != v {
					t.Errorf("errors %v, want %v", st.Errors, tc.errs)
				}
			}
			if len(st.Errors) != len(tc.errs) {
				t.Errorf("errors %v, want %v", st.Errors, tc.errs)
			}
		})
	}
}

// TestForgedSegmentsFlood: random forged segments starting 16 03, with and
// without a SYN, random lengths and random flags, on many flows. None
// becomes a record unless it is a plausible ClientHello start after a SYN,
// and then only as incomplete; the failure outcomes never appear.
// PQWATCH_SOAK=1 (make soak) sends 95,400.
func TestForgedSegmentsFlood(t *testing.T) {
	n := 5000
	if soak() {
		n = 95400
	}
	rng := rand.New(rand.NewPCG(14, 14))
	var pkts []pkt
	var link int
	starts := 0
	for i := range n {
		body := make([]byte, 2+rng.IntN(1400))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		body[0], body[1] = 0x16, 0x03
		plausible := i%3 == 0
		if plausible {
			copy(body, helloHeader(200+rng.IntN(4000)))
		}
		c := newCapture(t, body, nil)
		c.cli = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1024+i%60000))
		c.now = t0.Add(time.Duration(i) * time.Microsecond)
		withSYN := i%2 == 0
		if withSYN {
			c.handshake3()
			if plausible {
				starts++
			}
		}
		c.seg(0, 0, -1)
		switch rng.IntN(3) {
		case 0:
			c.ctl(1, 0x14)
		case 1:
			c.ctl(0, 0x11)
		}
		pkts = append(pkts, c.pkts...)
		link = c.link()
	}
	recs, st, _ := feed(sniffer.Config{}, link, pkts, true)
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
	}
	t.Logf("%d forged segments (%d plausible ClientHello starts after a SYN): %d records %v, errors %v", n, starts, len(recs), outcomes, st.Errors)
	for o, k := range outcomes {
		if o != record.OutcomeIncomplete && o != record.OutcomeTruncated {
			t.Errorf("%d records with outcome %s from forged segments", k, o)
		}
	}
	if len(recs) > starts {
		t.Errorf("%d records from %d ClientHello starts after a SYN", len(recs), starts)
	}
	if st.Errors["not_client_hello"] == 0 || st.Errors["no_syn_incomplete"] == 0 {
		t.Errorf("errors %v: want not_client_hello and no_syn_incomplete counted", st.Errors)
	}
}

// soak reports whether the full-size floods were asked for (make soak).
func soak() bool { return os.Getenv("PQWATCH_SOAK") != "" }
