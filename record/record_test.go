package record

import "testing"

// TestGroupLabel: the group metrics label a record with, as docs/contract.md
// states it for pqwatch_handshakes_total and
// pqwatch_generation_handshakes_total.
func TestGroupLabel(t *testing.T) {
	for _, c := range []struct {
		h    Handshake
		want string
	}{
		{Handshake{Group: "X25519MLKEM768", Outcome: OutcomeOK}, "X25519MLKEM768"},
		{Handshake{Group: "x25519", Outcome: OutcomeAlert}, "x25519"}, // chose a group, then failed
		{Handshake{Outcome: OutcomeOK, GroupMissing: GroupMissingResumed}, "resumed"},
		{Handshake{Outcome: OutcomeOK, GroupMissing: GroupMissingNoKeyExchange}, "no_key_exchange"},
		{Handshake{Outcome: OutcomeOK, GroupMissing: GroupMissingUnknown}, "unknown"},
		{Handshake{Outcome: OutcomeOK}, "unknown"}, // completed, no reason said
		{Handshake{Outcome: OutcomeReset}, "none"},
		{Handshake{Outcome: OutcomeIncomplete}, "none"},
		{Handshake{Outcome: OutcomeTimeout, GroupMissing: GroupMissingUnknown}, "none"},
	} {
		if got := GroupLabel(&c.h); got != c.want {
			t.Errorf("GroupLabel(%+v) = %q, want %q", c.h, got, c.want)
		}
	}
}
