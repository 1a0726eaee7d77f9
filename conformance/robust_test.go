package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestEveryCaptureNoPanic reads every capture of the corpus. None may
// panic; each ends cleanly or with a counted, wrapped ReadFile error.
func TestEveryCaptureNoPanic(t *testing.T) {
	root := corpus(t)
	var clean, damaged int
	for _, e := range loadAnalysis(t, root) {
		r := run(t, e.File)
		switch {
		case r.Panic != "":
			t.Errorf("%s: panic: %s", e.File, r.Panic)
		case r.Err != nil:
			t.Errorf("%s: unreadable: %v", e.File, r.Err)
		case r.File.Err != nil:
			damaged++
			if !errors.Is(r.File.Err, sniffer.ErrTruncated) && !errors.Is(r.File.Err, sniffer.ErrCorruptEntry) {
				t.Errorf("%s: damage error %v wraps neither ErrTruncated nor ErrCorruptEntry", e.File, r.File.Err)
			}
			t.Logf("%s: %v (%d records kept)", e.File, r.File.Err, len(r.Records))
		default:
			clean++
		}
	}
	t.Logf("%d captures read to the end, %d stopped at damage, none panicked", clean, damaged)
}

// TestCorruptCaptures: Suricata's bug-1450-04/05 captures hold a record
// whose length claims 4 MB (beyond the snaplen); tshark refuses them. pqwatch
// must keep what came before, return a counted ErrCorruptEntry and not panic.
func TestCorruptCaptures(t *testing.T) {
	corpus(t)
	for _, c := range []string{
		"OISF_suricata-verify/tests/bug-1450-04/tls_DER-incomplete-header.pcap",
		"OISF_suricata-verify/tests/bug-1450-05/tls_DER-incomplete-content.pcap",
	} {
		t.Run(filepath.Base(filepath.Dir(c)), func(t *testing.T) {
			r := run(t, c)
			if r.Panic != "" {
				t.Fatalf("panic: %s", r.Panic)
			}
			if r.Err != nil {
				t.Fatalf("ReadFile: %v (want the damage in FileStats.Err)", r.Err)
			}
			if !errors.Is(r.File.Err, sniffer.ErrCorruptEntry) && !errors.Is(r.File.Err, sniffer.ErrTruncated) {
				t.Fatalf("FileStats.Err = %v, want ErrCorruptEntry or ErrTruncated", r.File.Err)
			}
			t.Logf("%v after %d packets, %d records", r.File.Err, r.File.Packets, len(r.Records))
		})
	}
}

// TestTruncatedCaptures cuts corpus captures at several points (in a
// temporary directory, never in the repository): every cut reads up to the
// damage, reports ErrTruncated, keeps at most the full capture's records,
// and never panics.
func TestTruncatedCaptures(t *testing.T) {
	root := corpus(t)
	for _, c := range []string{
		"FoxIO-LLC_ja4/pcap/tls-handshake.pcapng",
		"OISF_suricata-verify/tests/quic-frag/input.pcap",
		"zeek_zeek/testing/btest/Traces/tls/chrome-1250-tls-x25519-kyber.pcap",
		"zeek_zeek/testing/btest/Traces/tls/tls-fragmented-handshake.pcap.gz",
	} {
		full := run(t, c)
		data, err := os.ReadFile(filepath.Join(root, c))
		if err != nil {
			t.Fatal(err)
		}
		for _, frac := range []float64{0.1, 0.37, 0.5, 0.93} {
			cut := int(float64(len(data)) * frac)
			p := filepath.Join(t.TempDir(), filepath.Base(c))
			if err := os.WriteFile(p, data[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			var n int
			var fs sniffer.FileStats
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Errorf("%s cut at %d bytes: panic: %v", c, cut, v)
					}
				}()
				s := sniffer.New(sniffer.Config{OnRecord: func(*record.Handshake) { n++ }})
				fs, err = sniffer.ReadFile(p, s, nil)
				s.Flush()
			}()
			if err != nil {
				t.Errorf("%s cut at %d bytes: ReadFile: %v", c, cut, err)
				continue
			}
			if !errors.Is(fs.Err, sniffer.ErrTruncated) && !errors.Is(fs.Err, sniffer.ErrCorruptEntry) {
				t.Errorf("%s cut at %d bytes: FileStats.Err = %v, want ErrTruncated", c, cut, fs.Err)
			}
			if n > len(full.Records) {
				t.Errorf("%s cut at %d bytes: %d records, more than the whole capture's %d", c, cut, n, len(full.Records))
			}
		}
	}
}
