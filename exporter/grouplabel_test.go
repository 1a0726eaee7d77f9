package exporter

import (
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

// TestGroupIdxMatchesGroupLabel: pqwatch_handshakes_total labels a record's
// group as record.GroupLabel says (the label
// pqwatch_generation_handshakes_total uses), registered groups as they are.
func TestGroupIdxMatchesGroupLabel(t *testing.T) {
	for _, h := range []record.Handshake{
		{Group: "X25519MLKEM768", Outcome: record.OutcomeOK},
		{Group: "x25519", Outcome: record.OutcomeAlert},
		{Outcome: record.OutcomeOK, GroupMissing: record.GroupMissingResumed},
		{Outcome: record.OutcomeOK, GroupMissing: record.GroupMissingNoKeyExchange},
		{Outcome: record.OutcomeOK, GroupMissing: record.GroupMissingUnknown},
		{Outcome: record.OutcomeOK},
		{Outcome: record.OutcomeReset},
		{Outcome: record.OutcomeIncomplete, GroupMissing: record.GroupMissingUnknown},
	} {
		h.FillIDs()
		if got, want := groupValues[groupIdx(&h)], record.GroupLabel(&h); got != want {
			t.Errorf("%+v: pqwatch_handshakes_total group %q, record.GroupLabel %q", h, got, want)
		}
	}
}

// BenchmarkGroupIdx: the group label of the metrics tap, per record, for
// the common groups and one outside them.
func BenchmarkGroupIdx(b *testing.B) {
	var recs []record.Handshake
	for _, name := range []string{"X25519MLKEM768", "x25519", "secp256r1", "SecP256r1MLKEM768", "0x1234"} {
		h := record.Handshake{Group: name, Outcome: record.OutcomeOK}
		h.FillIDs()
		recs = append(recs, h)
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			groupIdx(&recs[i])
		}
	}
}
