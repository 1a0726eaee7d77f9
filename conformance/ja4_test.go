package conformance

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

// ja4Ref is one connection's JA4 in a reference output.
type ja4Ref struct {
	conn, ja4 string
}

// foxioPython reads FoxIO's python/test/testdata/<capture>.json: one object
// per stream (and more for HTTP), "JA4.1" being the stream's first
// ClientHello.
func foxioPython(t *testing.T, path string) []ja4Ref {
	t.Helper()
	var rows []map[string]any
	readJSON(t, path, &rows)
	var out []ja4Ref
	for _, r := range rows {
		j, _ := r["JA4.1"].(string)
		src, _ := r["src"].(string)
		port, _ := r["srcport"].(string)
		if j != "" && src != "" {
			out = append(out, ja4Ref{hostPort(src, port), j})
		}
	}
	return out
}

// foxioRust reads the rust insta snapshot (a YAML list, one item per
// stream: src, src_port, ja4).
func foxioRust(t *testing.T, path string) []ja4Ref {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ja4Ref
	var src, port, ja4 string
	flush := func() {
		if src != "" && ja4 != "" {
			out = append(out, ja4Ref{hostPort(src, port), ja4})
		}
		src, port, ja4 = "", "", ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "- ") {
			flush()
			line = "  " + line[2:]
		}
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue // only the item's own keys
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch k {
		case "src":
			src = v
		case "src_port":
			port = v
		case "ja4":
			ja4 = v
		}
	}
	flush()
	return out
}

// compareJA4 matches reference rows to records by client ip:port and the
// JA4 transport letter ('t' TCP, 'q' QUIC).
func compareJA4(ty *tally, capture string, recs []*record.Handshake, refs []ja4Ref, field string) {
	idx := byClient(recs)
	for _, ref := range refs {
		want := record.TransportTCP
		if strings.HasPrefix(ref.ja4, "q") {
			want = record.TransportQUIC
		}
		var h *record.Handshake
		for _, c := range idx[ref.conn] {
			if c.Transport == want {
				h = c
				break
			}
		}
		ty.captures[capture] = true
		if h == nil {
			ty.eq(capture, ref.conn, field, "absent", ref.ja4)
			continue
		}
		ty.conns++
		ty.eq(capture, ref.conn, field, unset(h.JA4), ref.ja4)
	}
}

// TestFoxIOJA4 compares every JA4 that FoxIO's reference implementations
// (Python ja4.py and the Rust crate) print for their own captures, TCP 't'
// and QUIC 'q' alike.
func TestFoxIOJA4(t *testing.T) {
	root := corpus(t)
	ty := newTally("foxio")
	emap := loadExpectedMap(t, root)
	var captures []string
	for c := range emap {
		captures = append(captures, c)
	}
	sort.Strings(captures)
	for _, capture := range captures {
		for _, o := range emap[capture] {
			var refs []ja4Ref
			var field string
			switch o[1] {
			case "JA4+ (python ja4.py JSON)":
				refs, field = foxioPython(t, filepath.Join(root, o[0])), "ja4(python)"
			case "JA4+ (rust insta snapshot)":
				refs, field = foxioRust(t, filepath.Join(root, o[0])), "ja4(rust)"
			default:
				continue
			}
			if len(refs) == 0 {
				ty.skip("no_ja4_in_reference")
				continue
			}
			compareJA4(ty, capture, run(t, capture).Records, refs, field)
		}
	}
	ty.check(t)
}

// arkimeVersion maps Arkime's tls.version to pqwatch's.
func arkimeVersion(v string) string {
	switch v {
	case "TLSv1":
		return "TLS1.0"
	case "TLSv1.1":
		return "TLS1.1"
	case "TLSv1.2":
		return "TLS1.2"
	case "TLSv1.3":
		return "TLS1.3"
	case "SSLv3":
		return "SSL3.0"
	}
	return v
}

// TestArkime compares Arkime's session JSON (tests/pcap/<f>.test): per
// session with a single tls.ja4, the JA4; with a single tls.cipher and
// tls.version, those too. Sessions are matched by source ip:port.
func TestArkime(t *testing.T) {
	root := corpus(t)
	ty := newTally("arkime")
	emap := loadExpectedMap(t, root)
	var captures []string
	for c := range emap {
		captures = append(captures, c)
	}
	sort.Strings(captures)
	type tlsInfo struct {
		Cipher  []string `json:"cipher"`
		Version []string `json:"version"`
		JA4     []string `json:"ja4"`
	}
	type session struct {
		Body struct {
			Source struct {
				IP   string `json:"ip"`
				Port int    `json:"port"`
			} `json:"source"`
			Protocol []string `json:"protocol"`
			TLS      *tlsInfo `json:"tls"`
		} `json:"body"`
	}
	for _, capture := range captures {
		for _, o := range emap[capture] {
			if !strings.HasPrefix(o[1], "Arkime session JSON") {
				continue
			}
			var doc struct {
				Sessions []session `json:"sessions3"`
			}
			readJSON(t, filepath.Join(root, o[0]), &doc)
			idx := byClient(run(t, capture).Records)
			for _, s := range doc.Sessions {
				tl := s.Body.TLS
				if tl == nil || len(tl.JA4)+len(tl.Cipher)+len(tl.Version) == 0 {
					continue
				}
				if slices.Contains(s.Body.Protocol, "dtls") {
					ty.skip("dtls")
					continue
				}
				conn := hostPort(s.Body.Source.IP, itoa(s.Body.Source.Port))
				ty.captures[capture] = true
				hs := idx[conn]
				if len(hs) == 0 {
					ty.eq(capture, conn, "record", "absent", "present")
					continue
				}
				h := hs[0]
				for _, c := range hs {
					if len(tl.JA4) == 1 && c.JA4 == tl.JA4[0] {
						h = c // a QUIC and a TCP session can share the port
					}
				}
				ty.conns++
				if len(tl.JA4) == 1 {
					ty.eq(capture, conn, "ja4", unset(h.JA4), tl.JA4[0])
				} else if len(tl.JA4) > 1 {
					ty.skip("several_ja4_in_session")
				}
				if len(tl.Cipher) == 1 {
					ty.eq(capture, conn, "cipher", unset(h.Cipher), tl.Cipher[0])
				}
				if len(tl.Version) == 1 {
					ty.eq(capture, conn, "version", unset(h.Version), arkimeVersion(tl.Version[0]))
				}
			}
		}
	}
	ty.check(t)
}
