package conformance

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

// suricataFilter is one `- filter:` check of a suricata-verify test.yaml:
// the number of eve.json events whose fields match.
type suricataFilter struct {
	count int
	match map[string]string
	other bool // a key we cannot evaluate (lt-version, not-has-key, lists...)
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

func unquote(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return v
}

// readSuricataChecks parses the filter checks of a test.yaml. It reads just
// the subset of YAML that suricata-verify uses for filters; anything else
// marks the filter as not evaluable. skipTest is true when the whole test
// targets older Suricata versions (top-level requires: lt-version).
func readSuricataChecks(t *testing.T, path string) (filters []suricataFilter, skipTest bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), " \t")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		lines = append(lines, l)
	}
	inRequires := false
	for _, l := range lines {
		if indentOf(l) == 0 {
			inRequires = strings.HasPrefix(l, "requires:")
		} else if inRequires && strings.HasPrefix(strings.TrimSpace(l), "lt-version:") {
			skipTest = true
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) != "- filter:" {
			continue
		}
		base := indentOf(l)
		f := suricataFilter{count: -1, match: map[string]string{}}
		var path []struct {
			ind int
			key string
		}
		inMatch := -1
		for i+1 < len(lines) && indentOf(lines[i+1]) > base {
			i++
			s := lines[i]
			ind := indentOf(s)
			k, v, _ := strings.Cut(strings.TrimSpace(s), ":")
			v = unquote(v)
			if strings.HasPrefix(k, "- ") {
				f.other = true
				continue
			}
			if inMatch >= 0 && ind > inMatch {
				for len(path) > 0 && path[len(path)-1].ind >= ind {
					path = path[:len(path)-1]
				}
				if v == "" {
					path = append(path, struct {
						ind int
						key string
					}{ind, k})
					continue
				}
				full := k
				if len(path) > 0 {
					var ks []string
					for _, p := range path {
						ks = append(ks, p.key)
					}
					full = strings.Join(ks, ".") + "." + k
				}
				f.match[full] = v
				continue
			}
			inMatch = -1
			switch k {
			case "count":
				n, err := strconv.Atoi(v)
				if err != nil {
					f.other = true
				}
				f.count = n
			case "match":
				inMatch = ind
				path = nil
			case "min-version", "requires", "version":
				// applies to current Suricata
			default:
				f.other = true // lt-version, not-has-key, has-key, ...
			}
		}
		filters = append(filters, f)
	}
	return filters, skipTest
}

// suricataVersion maps pqwatch's version to Suricata's eve tls.version.
func suricataVersion(v string) string {
	switch v {
	case "TLS1.0":
		return "TLSv1"
	case "TLS1.1":
		return "TLS 1.1"
	case "TLS1.2":
		return "TLS 1.2"
	case "TLS1.3":
		return "TLS 1.3"
	case "SSL3.0":
		return "SSLv3"
	}
	return v
}

// eveField gives the eve.json value of key for record h, ok false when
// pqwatch has no such field.
func eveField(h *record.Handshake, key string) (string, bool) {
	tls := h.Transport == record.TransportTCP
	switch key {
	case "event_type":
		if tls {
			return "tls", true
		}
		return "quic", true
	case "proto":
		if tls {
			return "TCP", true
		}
		return "UDP", true
	case "tls.sni", "quic.sni":
		return h.SNI, (key == "tls.sni") == tls
	case "tls.version":
		return suricataVersion(h.Version), tls
	case "tls.ja4", "quic.ja4":
		return h.JA4, (key == "tls.ja4") == tls
	case "src_port":
		return strconv.Itoa(int(h.ClientPort)), true
	case "dest_port":
		return strconv.Itoa(int(h.ServerPort)), true
	}
	return "", false
}

// TestSuricata evaluates the suricata-verify filter checks whose match keys
// pqwatch can answer (event_type tls/quic; tls.sni, tls.version, tls.ja4,
// quic.sni, quic.ja4, ports) against pqwatch's records. Suricata logs one
// tls event per TCP session, so tls counts are compared exactly; it logs
// quic events per packet, so quic checks compare presence (count > 0).
func TestSuricata(t *testing.T) {
	root := corpus(t)
	ty := newTally("suricata")
	emap := loadExpectedMap(t, root)
	var captures []string
	for c := range emap {
		captures = append(captures, c)
	}
	sort.Strings(captures)
	for _, capture := range captures {
		for _, o := range emap[capture] {
			if !strings.HasPrefix(o[1], "suricata-verify") {
				continue
			}
			filters, skipTest := readSuricataChecks(t, filepath.Join(root, o[0]))
			if skipTest {
				ty.skip("older_suricata_only")
				continue
			}
			test := filepath.Base(filepath.Dir(o[0]))
			for fi, f := range filters {
				et := f.match["event_type"]
				if f.other || f.count < 0 || (et != "tls" && et != "quic") || len(f.match) < 2 {
					ty.skip("filter_not_comparable")
					continue
				}
				ok := true
				for k := range f.match {
					if k == "event_type" {
						continue
					}
					if _, has := eveField(&record.Handshake{Transport: map[string]string{"tls": "tcp", "quic": "quic"}[et]}, k); !has {
						ok = false
					}
				}
				if !ok {
					ty.skip("filter_not_comparable")
					continue
				}
				n := 0
				for _, h := range run(t, capture).Records {
					all := true
					for k, want := range f.match {
						if got, has := eveField(h, k); !has || got != want {
							all = false
							break
						}
					}
					if all {
						n++
					}
				}
				ty.captures[capture] = true
				ty.conns++
				var keys []string
				for k, v := range f.match {
					if k != "event_type" {
						keys = append(keys, k+"="+v)
					}
				}
				sort.Strings(keys)
				field := test + "#" + strconv.Itoa(fi) + " " + et + " " + strings.Join(keys, " ")
				if et == "quic" {
					ty.eq(capture, "", field, strconv.FormatBool(n > 0), strconv.FormatBool(f.count > 0))
				} else {
					ty.eq(capture, "", field, strconv.Itoa(n), strconv.Itoa(f.count))
				}
			}
		}
	}
	ty.check(t)
}
