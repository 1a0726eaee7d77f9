package record

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/pqwatch/pqwatch/tlsparse"
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

// TestFillIDs: a record read from JSON gets the codepoints the sniffer
// sets with the names, so that readers of either kind of record read the
// same fields.
func TestFillIDs(t *testing.T) {
	const mlkem, x25519 = uint16(tlsparse.GroupX25519MLKEM768), uint16(tlsparse.GroupX25519)
	r := &Handshake{
		OfferedGroups: []string{"X25519MLKEM768", "x25519", "0x1234", "no-such-group"},
		KeyShares:     []KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}},
		Group:         "X25519MLKEM768", HRRGroup: "x25519",
	}
	r.FillIDs()
	if !slices.Equal(r.OfferedIDs, []uint16{mlkem, x25519, 0x1234}) || !slices.Equal(r.KeyShareIDs, []uint16{mlkem}) {
		t.Errorf("offered %x, shares %x", r.OfferedIDs, r.KeyShareIDs)
	}
	if r.GroupID != mlkem || r.HRRGroupID != x25519 {
		t.Errorf("group %x, hrr group %x", r.GroupID, r.HRRGroupID)
	}
	// Names without a codepoint: 0.
	d := &Handshake{Group: "dhe2048"}
	d.FillIDs()
	if d.GroupID != 0 {
		t.Errorf("dhe2048: group %x, want 0", d.GroupID)
	}
	// SetGroup sets what FillIDs reads back.
	for _, g := range tlsparse.CommonGroups {
		var s Handshake
		s.SetGroup(g)
		s.SetHRRGroup(g)
		f := Handshake{Group: s.Group, HRRGroup: s.HRRGroup}
		f.FillIDs()
		if f.GroupID != s.GroupID || f.HRRGroupID != s.HRRGroupID || s.PQ != g.IsPQ() {
			t.Errorf("%s: set %x/%x, filled %x/%x", g, s.GroupID, s.HRRGroupID, f.GroupID, f.HRRGroupID)
		}
	}
}
