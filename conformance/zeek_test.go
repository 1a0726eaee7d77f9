package conformance

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// zeekRow is one ssl.log line, fields by name.
type zeekRow map[string]string

// readZeekLog parses a Zeek TSV log (as written by btest baselines): the
// #fields header names the columns, "-" is unset.
func readZeekLog(t *testing.T, path string) []zeekRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fields []string
	var rows []zeekRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "#fields\t"); ok {
			fields = strings.Split(rest, "\t")
			continue
		}
		if strings.HasPrefix(line, "#") || fields == nil || line == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		r := zeekRow{}
		for i, c := range cols {
			if i < len(fields) {
				r[fields[i]] = c
			}
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// zeekVersion maps Zeek's version names to pqwatch's ("TLSv12" -> "TLS1.2").
func zeekVersion(v string) string {
	switch v {
	case "TLSv10":
		return "TLS1.0"
	case "TLSv11":
		return "TLS1.1"
	case "TLSv12":
		return "TLS1.2"
	case "TLSv13":
		return "TLS1.3"
	}
	return v
}

// unset renders an absent value the way Zeek does.
func unset(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// isZeekSSLLog picks the ssl.log baselines (ssl.log, ssl-all.log,
// ssl-out.log, ssl-tls1.2.log, mercury's ssl-*.log).
func isZeekSSLLog(p string) bool {
	b := filepath.Base(p)
	return strings.HasPrefix(b, "ssl") && strings.HasSuffix(b, ".log") &&
		(strings.HasPrefix(p, "zeek_zeek/") || strings.HasPrefix(p, "corelight_zeek-mercury-npf/"))
}

// TestZeek compares pqwatch with Zeek's ssl.log baselines. A baseline often
// covers several traces (one btest reads many pcaps), so its rows are
// matched to a capture's records by client ip:port; a row that matches no
// record is counted as missing only when the baseline belongs to that one
// capture. Compared: version, cipher, curve (group), server_name (SNI).
// DTLS rows are out of pqwatch's scope.
func TestZeek(t *testing.T) {
	root := corpus(t)
	ty := newTally("zeek")
	emap := loadExpectedMap(t, root)
	owners := map[string]int{}
	for _, outs := range emap {
		for _, o := range outs {
			if isZeekSSLLog(o[0]) {
				owners[o[0]]++
			}
		}
	}
	dtlsOnly := map[string]bool{}
	for _, e := range loadAnalysis(t, root) {
		dtlsOnly[e.File] = e.DTLSCH > 0 && e.CH == 0
	}
	captures := make([]string, 0, len(emap))
	for c := range emap {
		captures = append(captures, c)
	}
	sort.Strings(captures)
	for _, capture := range captures {
		var logs []string
		for _, o := range emap[capture] {
			if isZeekSSLLog(o[0]) {
				logs = append(logs, o[0])
			}
		}
		if len(logs) == 0 {
			continue
		}
		r := run(t, capture)
		recs := byClient(r.Records)
		done := map[string]bool{} // one comparison per connection and capture
		for _, lp := range logs {
			for _, row := range readZeekLog(t, filepath.Join(root, lp)) {
				if strings.HasPrefix(row["version"], "DTLS") || dtlsOnly[capture] {
					ty.skip("dtls")
					continue
				}
				conn := hostPort(row["id.orig_h"], row["id.orig_p"])
				if done[conn] {
					continue
				}
				hs := recs[conn]
				if len(hs) == 0 {
					if owners[lp] == 1 {
						done[conn] = true
						ty.captures[capture] = true
						ty.eq(capture, conn, "record", "absent", "present")
					} else {
						ty.skip("row_of_other_trace")
					}
					continue
				}
				done[conn] = true
				ty.captures[capture] = true
				ty.conns++
				// Zeek logs one row per connection; with port reuse we take
				// the record Zeek would describe last.
				h := hs[len(hs)-1]
				if v := row["version"]; v != "-" && v != "" {
					ty.eq(capture, conn, "version", unset(h.Version), zeekVersion(v))
				}
				if c := row["cipher"]; c != "-" && c != "" {
					ty.eq(capture, conn, "cipher", unset(h.Cipher), c)
				}
				ty.eq(capture, conn, "group", unset(h.Group), unset(strings.TrimPrefix(row["curve"], "-")))
				if sn, ok := row["server_name"]; ok {
					ty.eq(capture, conn, "sni", unset(h.SNI), unset(strings.TrimPrefix(sn, "-")))
				}
			}
		}
	}
	ty.check(t)
}
