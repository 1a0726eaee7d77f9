package sniffer_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// analyzeFile runs a capture through a Sniffer and returns the records,
// each checked to carry its groups' codepoints (checkGroupIDs).
func analyzeFile(t testing.TB, path string) ([]*record.Handshake, sniffer.Stats) {
	t.Helper()
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{OnRecord: func(r *record.Handshake) { recs = append(recs, r) }})
	if _, err := sniffer.ReadFile(path, s, nil); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	for _, r := range recs {
		checkGroupIDs(t, r)
	}
	return recs, s.Stats()
}

// checkGroupIDs: a record's GroupID and HRRGroupID are the codepoints of
// its group names, as a reader of the record from JSON resolves them, so
// that the forecast, the report and the metrics read the same group
// whichever way the record came.
func checkGroupIDs(t testing.TB, r *record.Handshake) {
	t.Helper()
	if g := record.GroupCode(r.Group); r.GroupID != g {
		t.Errorf("%s: group %q, GroupID %#04x, want %#04x", r.ClientText(), r.Group, r.GroupID, g)
	}
	if g := record.GroupCode(r.HRRGroup); r.HRRGroupID != g {
		t.Errorf("%s: hrr_group %q, HRRGroupID %#04x, want %#04x", r.ClientText(), r.HRRGroup, r.HRRGroupID, g)
	}
}

// TestGeneratedGroundTruth: real crypto/tls handshakes of several client
// kinds, synthesised into TCP at two MSS values; every record must say what
// the client itself saw.
func TestGeneratedGroundTruth(t *testing.T) {
	for _, mss := range []int{1460, 536} {
		for _, server := range [][]tls.CurveID{nil, pcapgen.DemoServerCurves, {tls.CurveP256, tls.X25519}} {
			var buf bytes.Buffer
			res, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: server, Clients: pcapgen.DefaultClients(10), MSS: mss})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "gen.pcap")
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			recs, st := analyzeFile(t, path)
			if len(recs) != len(res) {
				t.Fatalf("mss %d server %v: %d records for %d connections (stats %+v)", mss, server, len(recs), len(res), st)
			}
			byClient := map[string]*record.Handshake{}
			for _, r := range recs {
				byClient[r.ClientText()] = r
			}
			for _, want := range res {
				r := byClient[want.ClientAddr.String()]
				if r == nil {
					t.Fatalf("no record for %s", want.ClientAddr)
				}
				if want.Err != nil {
					if r.Outcome == record.OutcomeOK {
						t.Errorf("%s: client failed (%v) but outcome ok", want.Client, want.Err)
					}
					continue
				}
				if r.Outcome != record.OutcomeOK {
					t.Errorf("%s: outcome %s", want.Client, r.Outcome)
				}
				if g := tlsparse.Group(want.Group); r.Group != g.String() || r.GroupID != uint16(g) {
					t.Errorf("mss %d %s: group %q (%#04x), client saw %q", mss, want.Client, r.Group, r.GroupID, g)
				}
				if r.HRR != want.HRR {
					t.Errorf("%s: hrr %v, client saw %v", want.Client, r.HRR, want.HRR)
				}
				if v := tlsparse.VersionName(want.Version); r.Version != v {
					t.Errorf("%s: version %s, client saw %s", want.Client, r.Version, v)
				}
				wantSeg := (r.ClientHelloBytes + 5 + mss - 1) / mss
				if r.ClientHelloSegments != wantSeg || r.ClientHelloWireSegments != wantSeg {
					t.Errorf("%s: CH %d bytes: segments %d wire %d, want %d", want.Client, r.ClientHelloBytes, r.ClientHelloSegments, r.ClientHelloWireSegments, wantSeg)
				}
			}
		}
	}
}
