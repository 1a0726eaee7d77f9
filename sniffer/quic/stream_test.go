package quic

import (
	"bytes"
	"errors"
	"testing"
)

func TestCryptoStream(t *testing.T) {
	msg := handshakeMsg(1, 96) // 100 bytes
	type piece struct{ start, end int }
	for _, tc := range []struct {
		name     string
		pieces   []piece
		limit    int
		complete bool
		ranges   int
		overflow bool
	}{
		{"in order", []piece{{0, 50}, {50, 100}}, 1000, true, 1, false},
		{"reversed", []piece{{50, 100}, {0, 50}}, 1000, true, 1, false},
		{"overlaps", []piece{{10, 60}, {0, 20}, {55, 100}, {30, 40}}, 1000, true, 1, false},
		{"gap", []piece{{0, 40}, {60, 100}}, 1000, false, 2, false},
		{"gap filled", []piece{{0, 40}, {80, 100}, {60, 70}, {40, 60}, {70, 80}}, 1000, true, 1, false},
		{"header only", []piece{{0, 4}}, 1000, false, 1, false},
		{"beyond limit", []piece{{0, 50}, {50, 100}}, 64, false, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cryptoStream{limit: tc.limit}
			overflow := false
			for _, p := range tc.pieces {
				if _, err := s.add(uint64(p.start), msg[p.start:p.end]); errors.Is(err, errStreamOverflow) {
					overflow = true
				}
			}
			got, need := s.message(0)
			if (got != nil) != tc.complete || len(s.ranges) != tc.ranges || overflow != tc.overflow {
				t.Fatalf("complete %v need %d ranges %v overflow %v", got != nil, need, s.ranges, overflow)
			}
			if tc.complete && !bytes.Equal(got, msg) {
				t.Errorf("message %x", got)
			}
		})
	}
	t.Run("too fragmented", func(t *testing.T) {
		s := cryptoStream{limit: 1 << 16}
		var err error
		for i := 0; i < 2*maxRanges && err == nil; i++ {
			_, err = s.add(uint64(10*i), []byte{1})
		}
		if !errors.Is(err, errStreamOverflow) || len(s.ranges) != maxRanges {
			t.Errorf("err %v ranges %d", err, len(s.ranges))
		}
	})
	t.Run("duplicate adds nothing", func(t *testing.T) {
		s := cryptoStream{limit: 1000}
		s.add(0, msg[:50])
		if added, _ := s.add(10, msg[10:20]); added {
			t.Error("duplicate reported as new")
		}
	})
}
