package conformance

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// hexGroupName turns tshark's "0x001d" into pqwatch's group name; ok is
// false for GREASE and unparsable values.
func hexGroupName(h string) (string, bool) {
	v, err := strconv.ParseUint(strings.TrimPrefix(h, "0x"), 16, 16)
	if err != nil || tlsparse.IsGREASE(uint16(v)) {
		return "", false
	}
	return tlsparse.Group(v).String(), true
}

// set renders a set of names sorted and comma-joined ("-" when empty).
func set(m map[string]bool) string {
	if len(m) == 0 {
		return "-"
	}
	s := make([]string, 0, len(m))
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func hexSet(hs []string) string {
	m := map[string]bool{}
	for _, h := range hs {
		if n, ok := hexGroupName(h); ok {
			m[n] = true
		}
	}
	return set(m)
}

// TestTshark compares every capture tshark 4.0 could read with its summary
// in analysis.json. tshark's numbers are per capture (counts and value
// sets), so the comparison is per capture too:
//
//   - records: one pqwatch record per connection; tshark counts ClientHello
//     messages, so a connection with a HelloRetryRequest counts twice there
//     (records = ch - hrr). DTLS is out of pqwatch's scope and not counted.
//   - quic_records: QUIC records vs ClientHellos tshark decrypted from
//     Initials.
//   - ch_key_share: the set of ClientHello key_share groups; pqwatch keeps
//     the first ClientHello's, so the HRR group stands in for the second.
//   - sh_key_share: the set of groups of TLS 1.3 ServerHellos.
//   - hrr, hrr_group: HelloRetryRequest count and selected groups.
//   - supported_groups, sni: sets over the capture.
func TestTshark(t *testing.T) {
	root := corpus(t)
	ty := newTally("tshark")
	for _, e := range loadAnalysis(t, root) {
		if e.TsharkRC != 0 {
			ty.skip("tshark_refused")
			continue
		}
		if e.CH == 0 && e.QUICCH == 0 {
			// Nothing to compare but that pqwatch found no ClientHello
			// either; tshark misses some (QUIC drafts, multi-Initial).
			r := run(t, e.File)
			if n := len(r.Records); n > 0 {
				ty.notes = append(ty.notes, fmt.Sprintf("%s: %d records where tshark 4.0 saw no ClientHello", e.File, n))
			}
			ty.skip("no_client_hello")
			continue
		}
		r := run(t, e.File)
		ty.captures[e.File] = true
		ty.conns++
		var quicN, hrrN int
		ks, sg, shg, hrrg, sni := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, h := range r.Records {
			if h.Transport == record.TransportQUIC {
				quicN++
			}
			for _, k := range h.KeyShares {
				ks[k.Group] = true
			}
			for _, g := range h.OfferedGroups {
				sg[g] = true
			}
			if h.HRR {
				hrrN++
				if h.HRRGroup != "" {
					hrrg[h.HRRGroup] = true
					ks[h.HRRGroup] = true
				}
			}
			if h.Version == "TLS1.3" && h.Group != "" && h.Outcome == record.OutcomeOK {
				shg[h.Group] = true
			}
			if h.SNI != "" {
				sni[h.SNI] = true
			}
		}
		theirSNI := map[string]bool{}
		for _, s := range e.SNI {
			theirSNI[s] = true
		}
		ty.eq(e.File, "", "records", strconv.Itoa(len(r.Records)), strconv.Itoa(e.CH-e.HRR))
		ty.eq(e.File, "", "quic_records", strconv.Itoa(quicN), strconv.Itoa(e.QUICCH))
		ty.eq(e.File, "", "ch_key_share", set(ks), hexSet(e.CHKeyShare))
		ty.eq(e.File, "", "supported_groups", set(sg), hexSet(e.CHGroups))
		ty.eq(e.File, "", "sh_key_share", set(shg), hexSet(e.SHKeyShare))
		ty.eq(e.File, "", "hrr", strconv.Itoa(hrrN), strconv.Itoa(e.HRR))
		ty.eq(e.File, "", "hrr_group", set(hrrg), hexSet(e.HRRSelected))
		if len(e.SNI) >= 30 {
			// analysis.json keeps the first 30 names (sorted): a subset.
			missing := map[string]bool{}
			for n := range theirSNI {
				if !sni[n] {
					missing[n] = true
				}
			}
			ty.eq(e.File, "", "sni_subset_missing", set(missing), "-")
		} else {
			ty.eq(e.File, "", "sni", set(sni), set(theirSNI))
		}
	}
	ty.check(t)
}
