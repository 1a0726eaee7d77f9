package report

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// Expectation is one -expect-policy: the policy a server is declared to
// run. Server is "ADDR:PORT" (as records name servers), ":PORT" (any
// address on that port) or "" (every server).
type Expectation struct {
	Server string
	Policy forecast.Policy
}

// ParseExpectation reads "ADDR:PORT=POLICY", ":PORT=POLICY" (also
// "*:PORT=POLICY") or "POLICY" (every server); POLICY is forecast's syntax
// (forecast.ParsePolicy: a name such as go, caddy, openssl35, or a group
// list with an optional mode= prefix). ADDR is an IP literal, IPv6 in
// brackets.
func ParseExpectation(s string) (Expectation, error) {
	if head, rest, ok := strings.Cut(s, "="); ok && strings.Contains(head, ":") {
		if server, isServer, err := parseServer(head); isServer {
			if err != nil {
				return Expectation{}, err
			}
			p, err := forecast.ParsePolicy(rest)
			if err != nil {
				return Expectation{}, fmt.Errorf("%s: %w", head, err)
			}
			return Expectation{Server: server, Policy: p}, nil
		}
	}
	p, err := forecast.ParsePolicy(s)
	if err != nil {
		return Expectation{}, err
	}
	return Expectation{Policy: p}, nil
}

// parseServer reads head as ADDR:PORT or :PORT; isServer is false when
// head is not meant as one (a group list such as X25519:P-256).
func parseServer(head string) (server string, isServer bool, err error) {
	i := strings.LastIndexByte(head, ':')
	port, perr := strconv.ParseUint(head[i+1:], 10, 16)
	if perr != nil {
		return "", false, nil
	}
	addr := strings.TrimSpace(head[:i])
	if addr == "" || addr == "*" {
		return ":" + strconv.FormatUint(port, 10), true, nil
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(head))
	if err != nil {
		return "", true, fmt.Errorf("server %q: want ADDR:PORT with an IP address, [v6]:PORT or :PORT", head)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), true, nil
}

// String renders e the way ParseExpectation reads it.
func (e Expectation) String() string {
	if e.Server == "" {
		return e.Policy.String()
	}
	return e.Server + "=" + e.Policy.String()
}

// Expectations are the declared policies; the most specific one applies
// (ADDR:PORT, then :PORT, then every server).
type Expectations []Expectation

// For returns the policy declared for server (a record's "ADDR:PORT").
func (es Expectations) For(server string) (forecast.Policy, bool) {
	port := ""
	if i := strings.LastIndexByte(server, ':'); i >= 0 {
		port = server[i:]
	}
	best, rank := -1, 0
	for i, e := range es {
		r := 0
		switch e.Server {
		case server:
			r = 3
		case port:
			r = 2
		case "":
			r = 1
		}
		if r > rank {
			best, rank = i, r
		}
	}
	if best < 0 {
		return forecast.Policy{}, false
	}
	return es[best].Policy, true
}

// Ports are the ports the expectations name (ADDR:PORT and :PORT), for
// bounded metric labels.
func (es Expectations) Ports() []uint16 {
	var ps []uint16
	for _, e := range es {
		if i := strings.LastIndexByte(e.Server, ':'); i >= 0 {
			if p, err := strconv.ParseUint(e.Server[i+1:], 10, 16); err == nil && !slices.Contains(ps, uint16(p)) {
				ps = append(ps, uint16(p))
			}
		}
	}
	return ps
}

// Violation kinds (the reason label of pqwatch_policy_violations_total), a
// bounded set.
const (
	// ViolationClassical: the policy predicts a PQ group and the server
	// chose a classical one (with or without an HRR): the class of
	// OpenSSL's CVE-2026-2673, a server configured for hybrid that
	// silently picks X25519.
	ViolationClassical = "classical_instead_of_pq"
	// ViolationPQ: the policy predicts a classical group, the server chose
	// a PQ one.
	ViolationPQ = "pq_instead_of_classical"
	// ViolationGroup: another group of the same kind (PQ or classical).
	ViolationGroup = "other_group"
	// ViolationHRR: the predicted group, but after an HRR the policy does
	// not predict (the client had sent its share).
	ViolationHRR = "unexpected_hrr"
	// ViolationNoHRR: the predicted group without the HRR the policy
	// predicts (the client had sent no share for it).
	ViolationNoHRR = "missing_hrr"
	// ViolationOutside: the policy predicts no mutual group (the handshake
	// fails) and the server chose one.
	ViolationOutside = "group_outside_policy"
	// ViolationVersion: a TLS 1.3 client was served TLS 1.2 (or the
	// reverse).
	ViolationVersion = "tls_version"
)

// ViolationKinds lists every violation kind.
var ViolationKinds = []string{ViolationClassical, ViolationPQ, ViolationGroup, ViolationHRR, ViolationNoHRR, ViolationOutside, ViolationVersion}

// Why a covered record could not be checked (PolicyCheck.Unchecked).
const (
	UncheckedNoClientHello = "no ClientHello"
	// UncheckedNoChoice: the server's choice is not on the wire (failed
	// before a ServerHello, TLS 1.2 without a parsed key exchange,
	// resumed, psk_ke); the reason goes on with the record's outcome in
	// parentheses: "(alert:handshake_failure)", "(timeout)", "(ok,
	// group_missing resumed)".
	UncheckedNoChoice = "no ServerHello or HRR with a group"
	UncheckedFolded   = "offer folded in the rollup" // a rollup's other class: no offer to predict from
	// UncheckedDHE: TLS 1.2 with a finite-field DHE suite where the
	// policy predicts an ECDHE group: the server chose a cipher suite, not
	// a group, which -expect-policy does not declare.
	UncheckedDHE = "TLS 1.2 finite-field DHE suite (a cipher-suite choice)"
)

// PolicyResult is one record checked against its server's declared policy.
type PolicyResult struct {
	Covered bool // the record's server has a declared policy
	Checked bool // and the server's choice could be compared
	// Unchecked says why a covered record was not checked.
	Unchecked string
	// Kind is the violation kind ("" when the server did what the policy
	// predicts); Reason says it in words, e.g. "policy predicts
	// X25519MLKEM768 (client sent its share), server chose x25519 without
	// HRR".
	Kind, Reason string
	Expected     forecast.Outcome
}

// CheckPolicy checks r against the policy es declares for its server. It
// keeps no state and is safe for concurrent use.
func CheckPolicy(es Expectations, r *record.Handshake) PolicyResult {
	p, ok := es.For(r.Server)
	if !ok {
		return PolicyResult{}
	}
	res := PolicyResult{Covered: true}
	o := forecast.Predict(p, r)
	res.Expected = o
	if o.Kind == forecast.Unknown {
		res.Unchecked = UncheckedNoClientHello
		return res
	}
	// What the server chose: its final ServerHello's group, else the
	// group of its HelloRetryRequest.
	obs, obsHRR, obsName := r.GroupID, r.HRR, r.Group
	if r.Group == "" && r.HRRGroup != "" {
		obs, obsName = r.HRRGroupID, r.HRRGroup
	}
	predTLS12 := o.Reason == forecast.ReasonTLS12
	if r.Version == "TLS1.2" && tlsparse.FiniteField(r.Group) {
		// A DHE suite: no ECDHE group on the wire, as with RSA key
		// transport. As predicted when the policy finds no group in
		// common; otherwise the server's choice was its cipher suite's.
		res.Checked = predTLS12 && o.Group == 0
		if !res.Checked {
			res.Unchecked = UncheckedDHE
		}
		return res
	}
	switch {
	case obsName == "" && o.Kind == forecast.Fail && r.Outcome != record.OutcomeOK:
		// No mutual group and the handshake failed: as predicted.
		res.Checked = true
		return res
	case obsName == "" && predTLS12 && o.Group == 0 && r.Version == "TLS1.2" && r.GroupMissing == record.GroupMissingNoKeyExchange:
		// TLS 1.2 without ECDHE on both sides.
		res.Checked = true
		return res
	case obsName == "":
		why := r.Outcome
		switch {
		case r.Alert != "":
			why += ":" + r.Alert
		case r.GroupMissing != "":
			why += ", group_missing " + r.GroupMissing
		}
		res.Unchecked = UncheckedNoChoice + " (" + why + ")"
		return res
	}
	res.Checked = true
	obsTLS12 := r.Version == "TLS1.2"
	isPQ := func(g uint16) bool { return tlsparse.Group(g).IsPQ() }
	switch {
	case o.Kind == forecast.Fail:
		res.Kind = ViolationOutside
	case predTLS12 != obsTLS12 && r.Version != "":
		res.Kind = ViolationVersion
	case obs != o.Group || obs == 0: // obs 0: a group the registry does not know, or none predicted
		switch {
		case isPQ(o.Group) && !isPQ(obs):
			res.Kind = ViolationClassical
		case !isPQ(o.Group) && isPQ(obs):
			res.Kind = ViolationPQ
		default:
			res.Kind = ViolationGroup
		}
	case obsHRR && !o.HRR:
		res.Kind = ViolationHRR
	case !obsHRR && o.HRR:
		res.Kind = ViolationNoHRR
	default:
		return res
	}
	res.Reason = predictedText(o) + ", " + observedText(r, obsName, obsHRR, obsTLS12)
	return res
}

// predictedText says what the policy predicts, and why.
func predictedText(o forecast.Outcome) string {
	g := tlsparse.Group(o.Group).String()
	switch {
	case o.Kind == forecast.Fail:
		return "policy predicts no mutual group (the handshake fails)"
	case o.Reason == forecast.ReasonTLS12 && o.Group == 0:
		return "policy predicts TLS 1.2 without ECDHE (no group in common)"
	case o.Reason == forecast.ReasonTLS12:
		return "policy predicts TLS 1.2 with " + g + " (the client's first group the policy lists)"
	case o.HRR:
		return "policy predicts an HRR for " + g + " (client sent no share for it)"
	}
	return "policy predicts " + g + " (client sent its share)"
}

// observedText says what the server did.
func observedText(r *record.Handshake, group string, hrr, tls12 bool) string {
	switch {
	case tls12:
		return "server negotiated TLS 1.2 with " + group
	case r.Group == "":
		return "server sent an HRR for " + group + " (no ServerHello followed)"
	case hrr:
		s := "server chose " + group + " after an HRR"
		if r.HRRGroup != "" && r.HRRGroup != group {
			s += " for " + r.HRRGroup
		}
		return s
	}
	return "server chose " + group + " without HRR"
}

// Bounds of the policy section.
const (
	MaxPolicyServers = 1000 // servers with their own row; later ones count under "(other)"
	MaxPolicyReasons = 100  // distinct reasons per server row; later ones count under "(other)"
	PolicyListed     = 100  // violations listed in full (JSON; the text shows 20)
)

// PolicyServer is one server's row of the policy check.
type PolicyServer struct {
	Policy     string         `json:"policy"`
	Checked    int            `json:"checked"`
	Matched    int            `json:"matched"`
	Violations int            `json:"violations"`
	Reasons    map[string]int `json:"reasons"` // Reason -> count
}

// PolicyViolation is one listed violation, with what its ClientHello said.
// From a rollup offer class it stands for Count handshakes and has no ts,
// client, SNI or JA4.
type PolicyViolation struct {
	Count         int       `json:"count"`
	TS            time.Time `json:"ts,omitzero"`
	Client        string    `json:"client,omitempty"`
	Server        string    `json:"server"`
	SNI           string    `json:"sni,omitempty"`
	JA4           string    `json:"ja4,omitempty"`
	OfferedGroups []string  `json:"offered_groups"`
	KeyShares     []string  `json:"key_shares"`
	Version       string    `json:"version,omitempty"`
	Group         string    `json:"group,omitempty"`
	HRR           bool      `json:"hrr"`
	HRRGroup      string    `json:"hrr_group,omitempty"`
	Expected      string    `json:"expected_group"` // "none": no mutual group, or TLS 1.2 without ECDHE
	ExpectedHRR   bool      `json:"expected_hrr"`
	Kind          string    `json:"kind"`
	Reason        string    `json:"reason"`
}

// PolicyCheck is the `policy` section: every record of a server with a
// declared policy, checked against what that policy predicts for its
// ClientHello. Not safe for concurrent use (Summary and Plan lock).
type PolicyCheck struct {
	Expect     []string `json:"expect"`     // the declarations, as ParseExpectation reads them
	Handshakes int      `json:"handshakes"` // records seen
	Covered    int      `json:"covered"`    // of a server with a declared policy
	Checked    int      `json:"checked"`
	Matched    int      `json:"matched"`
	Violations int      `json:"violations"`
	// Unchecked counts the covered records that could not be checked, by
	// why (Unchecked* values).
	Unchecked map[string]int `json:"unchecked"`
	// ByKind counts the violations by kind (Violation* values).
	ByKind   map[string]int           `json:"violations_by_kind"`
	ByServer map[string]*PolicyServer `json:"by_server"`
	// First lists the first PolicyListed violations in the order seen.
	First           []PolicyViolation `json:"first_violations"`
	ServersOverflow int               `json:"servers_overflow,omitempty"`

	exp Expectations
}

// NewPolicyCheck returns an empty check of es.
func NewPolicyCheck(es Expectations) *PolicyCheck {
	pc := &PolicyCheck{exp: es, Unchecked: map[string]int{}, ByKind: map[string]int{}, ByServer: map[string]*PolicyServer{}, First: []PolicyViolation{}}
	for _, e := range es {
		pc.Expect = append(pc.Expect, e.String())
	}
	return pc
}

// Add checks one record (OfferedIDs and KeyShareIDs filled).
func (pc *PolicyCheck) Add(r *record.Handshake) PolicyResult { return pc.add(r, 1) }

// AddClass checks the c.Handshakes handshakes of a rollup offer class, r
// being its record (OfferClass.record, sizes set): as many records with
// those fields would be checked, but that a class carries no hrr_group
// and no group_missing, so its HRRs without a ServerHello and its TLS 1.2
// handshakes without ECDHE are not checkable; a folded class (Other) has
// no offer to predict from.
func (pc *PolicyCheck) AddClass(c *OfferClass, r *record.Handshake) {
	if !c.Other {
		pc.add(r, c.Handshakes)
		return
	}
	pc.Handshakes += c.Handshakes
	if _, ok := pc.exp.For(r.Server); ok {
		pc.Covered += c.Handshakes
		pc.Unchecked[UncheckedFolded] += c.Handshakes
	}
}

// add checks r, standing for n handshakes.
func (pc *PolicyCheck) add(r *record.Handshake, n int) PolicyResult {
	pc.Handshakes += n
	res := CheckPolicy(pc.exp, r)
	if !res.Covered {
		return res
	}
	pc.Covered += n
	if !res.Checked {
		pc.Unchecked[res.Unchecked] += n
		return res
	}
	pc.Checked += n
	name := r.Server
	row := pc.ByServer[name]
	if row == nil {
		if len(pc.ByServer) >= MaxPolicyServers {
			pc.ServersOverflow += n
			name = "(other)"
			row = pc.ByServer[name]
		}
		if row == nil {
			p, _ := pc.exp.For(r.Server)
			row = &PolicyServer{Policy: p.String(), Reasons: map[string]int{}}
			if name == "(other)" {
				row.Policy = ""
			}
			pc.ByServer[name] = row
		}
	}
	row.Checked += n
	if res.Kind == "" {
		pc.Matched += n
		row.Matched += n
		return res
	}
	pc.Violations += n
	row.Violations += n
	pc.ByKind[res.Kind] += n
	reason := res.Reason
	if _, seen := row.Reasons[reason]; !seen && len(row.Reasons) >= MaxPolicyReasons {
		reason = "(other)"
	}
	row.Reasons[reason] += n
	if len(pc.First) < PolicyListed {
		v := PolicyViolation{Count: n, TS: r.TS, Client: r.ClientText(), Server: r.Server, SNI: r.SNI, JA4: r.JA4,
			OfferedGroups: groupNames(r.OfferedIDs), KeyShares: groupNames(r.KeyShareIDs),
			Version: r.Version, Group: r.Group, HRR: r.HRR, HRRGroup: r.HRRGroup,
			Expected: "none", ExpectedHRR: res.Expected.HRR, Kind: res.Kind, Reason: res.Reason}
		if res.Expected.Group != 0 {
			v.Expected = tlsparse.Group(res.Expected.Group).String()
		}
		pc.First = append(pc.First, v)
	}
	return res
}

func groupNames(gs []uint16) []string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = tlsparse.Group(g).String()
	}
	return s
}

// Text renders the policy check section of the text reports.
func (pc *PolicyCheck) Text() string {
	var b strings.Builder
	b.WriteString("policy check\n")
	for _, e := range pc.Expect {
		fmt.Fprintf(&b, "  %-12s %s\n", "declared", e)
	}
	fmt.Fprintf(&b, "  %-12s %d of %d handshakes are of a server with a declared policy\n", "covered", pc.Covered, pc.Handshakes)
	fmt.Fprintf(&b, "  %-12s %d", "checked", pc.Checked)
	if n := pc.Covered - pc.Checked; n > 0 {
		fmt.Fprintf(&b, " (%d not checkable: %s)", n, kv(pc.Unchecked))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  %-12s %d\n", "matched", pc.Matched)
	fmt.Fprintf(&b, "  %-12s %d", "violations", pc.Violations)
	if pc.Violations > 0 {
		fmt.Fprintf(&b, " (%s)", kv(pc.ByKind))
	}
	b.WriteString("\n")
	servers := make([]string, 0, len(pc.ByServer))
	for s := range pc.ByServer {
		servers = append(servers, s)
	}
	slices.SortFunc(servers, func(a, c string) int {
		return cmp.Or(cmp.Compare(pc.ByServer[c].Violations, pc.ByServer[a].Violations), cmp.Compare(a, c))
	})
	for i, s := range servers {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more servers\n", len(servers)-i)
			break
		}
		row := pc.ByServer[s]
		fmt.Fprintf(&b, "  server %s (policy %s): %d checked, %d matched, %d violations\n", s, row.Policy, row.Checked, row.Matched, row.Violations)
		for _, k := range sortedByCount(row.Reasons) {
			fmt.Fprintf(&b, "    %-6d %s\n", row.Reasons[k], k)
		}
	}
	if len(pc.First) > 0 {
		b.WriteString("  first violations\n")
		for i, v := range pc.First {
			if i == 20 {
				fmt.Fprintf(&b, "    ... %d more listed in -format json\n", len(pc.First)-i)
				break
			}
			if v.Client == "" { // a rollup offer class
				fmt.Fprintf(&b, "    %d handshakes -> %s (rollup offer class) offered [%s] shares [%s]: %s\n", v.Count, v.Server,
					strings.Join(v.OfferedGroups, ","), strings.Join(v.KeyShares, ","), v.Reason)
				continue
			}
			fmt.Fprintf(&b, "    %s %s -> %s sni %q ja4 %s offered [%s] shares [%s]: %s\n", v.TS.UTC().Format("2006-01-02T15:04:05.000000Z"), v.Client, v.Server, v.SNI, v.JA4,
				strings.Join(v.OfferedGroups, ","), strings.Join(v.KeyShares, ","), v.Reason)
		}
	}
	return b.String()
}
