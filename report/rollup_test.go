package report

import (
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

func TestRollupFlush(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := NewRollup(start, 2)
	// Server A: 100 handshakes; ClientHello sizes 1..100 x 16 bytes.
	for i := 1; i <= 100; i++ {
		h := classicalRecord()
		if i%4 == 0 {
			h = sampleRecord()
		}
		h.Server = "A"
		h.ClientHelloBytes = i * 16
		_ = r.Write(h)
	}
	failed := &record.Handshake{Server: "A", Outcome: record.OutcomeReset, ClientHelloBytes: 300}
	_ = r.Write(failed)
	_ = r.Write(&record.Handshake{Server: "B", Outcome: record.OutcomeOK, Group: "brandnew", ServerHelloBytes: 9000})
	_ = r.Write(&record.Handshake{Server: "C", Outcome: record.OutcomeOK}) // beyond the cap of 2
	_ = r.Write(&record.Handshake{Server: "D", Outcome: record.OutcomeOK})

	end := start.Add(time.Minute)
	rows := r.Flush(end)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want A, B and other: %+v", len(rows), rows)
	}
	a := rows[0]
	if a.Server != "A" || a.Handshakes != 101 || a.Completed != 100 || a.PQ != 25 || a.PQShare != 0.25 ||
		a.PQOffered != 25 || !a.Start.Equal(start) || !a.End.Equal(end) {
		t.Errorf("row A = %+v", a)
	}
	if p := a.ClientHelloBytes; p == nil || p.P50 != 50*16 || p.P90 != 90*16 || p.P99 != 99*16 {
		t.Errorf("row A ClientHello percentiles = %+v", p)
	}
	if g := a.Groups["X25519MLKEM768"]; g.Handshakes != 25 || !g.PQ {
		t.Errorf("row A hybrid group = %+v", g)
	}
	if g := a.Groups["none"]; g.Handshakes != 1 {
		t.Errorf("row A failed handshakes under group none = %+v", g)
	}
	b := rows[1]
	if b.Server != "B" || b.Groups["other"].Handshakes != 1 || b.ServerHelloBytes == nil || b.ServerHelloBytes.P99 != 9000 {
		t.Errorf("row B = %+v", b)
	}
	if rows[2].Server != RollupOtherServer || rows[2].Handshakes != 2 {
		t.Errorf("overflow row = %+v", rows[2])
	}
	if rows := r.Flush(end.Add(time.Minute)); len(rows) != 0 {
		t.Errorf("empty window yields %d rows", len(rows))
	}
}

func sampleRecord() *record.Handshake {
	return &record.Handshake{
		Transport: record.TransportTCP, Client: "192.0.2.10:51234", Server: "198.51.100.1:443",
		OfferedGroups: []string{"X25519MLKEM768", "x25519", "secp256r1"}, PQOffered: true,
		Version: "TLS1.3", Group: "X25519MLKEM768", PQ: true, ClientHelloBytes: 1751, ServerHelloBytes: 1210,
		Outcome: record.OutcomeOK,
	}
}

func classicalRecord() *record.Handshake {
	h := sampleRecord()
	h.PQOffered, h.PQ, h.Group = false, false, "x25519"
	h.OfferedGroups = []string{"x25519", "secp256r1"}
	h.ClientHelloBytes, h.ServerHelloBytes = 517, 122
	return h
}
