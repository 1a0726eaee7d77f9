package record

import (
	"encoding/json"
	"net/netip"
	"testing"
)

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

// TestClientText: a record whose Client is left to its address fields
// reads, marshals and appends exactly as the address's own text, for every
// form of address; the forms the fields cannot tell keep their text.
func TestClientText(t *testing.T) {
	for _, s := range []string{"192.0.2.7:51234", "[2001:db8::2]:40000", "[::ffff:192.0.2.7]:443", "0.0.0.0:0", "[fe80::1%eth0]:5", "127.0.0.1:1"} {
		ap := netip.MustParseAddrPort(s)
		h := Handshake{Client: ClientField(ap), ClientAddr: ap.Addr().As16(), ClientPort: ap.Port()}
		lazy := h.Client == ""
		if got := h.ClientText(); got != ap.String() {
			t.Errorf("%s: ClientText %q (lazy %v)", s, got, lazy)
		}
		if got := h.ClientAddrPort(); got != ap {
			t.Errorf("%s: ClientAddrPort %v", s, got)
		}
		if got := string(h.AppendClient([]byte("x"))); got != "x"+ap.String() {
			t.Errorf("%s: AppendClient %q", s, got)
		}
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var back Handshake
		if err := json.Unmarshal(b, &back); err != nil || back.Client != ap.String() {
			t.Errorf("%s: JSON %s -> client %q (%v)", s, b, back.Client, err)
		}
		if wantLazy := ap.Addr().Is4() || (ap.Addr().Is6() && !ap.Addr().Is4In6() && ap.Addr().Zone() == ""); lazy != (wantLazy && ap.Port() != 0) {
			t.Errorf("%s: left to the fields %v", s, lazy)
		}
	}
}
