// Package forecast answers "what would turning on hybrid key exchange do to
// this traffic?" from ClientHellos a server has already seen: for a chosen
// server policy (its group preference order and selection rule) it predicts,
// per handshake, the group that server would negotiate, whether that costs a
// HelloRetryRequest, and how many bytes the ServerHello would grow.
//
// # Which clients are TLS 1.3 clients
//
// A record does not carry the client's supported_versions list, but its JA4
// does: the two digits after the transport letter are the highest version
// the client offered. A client whose JA4 says 12 or lower (or, without a
// JA4, whose ClientHello carried no key share; key_share exists only in TLS
// 1.3 ClientHellos) is a TLS 1.2-only client and stays classical whatever
// the server does ("TLS 1.2 only"). For it the server picks the first group
// in the client's supported_groups that the policy lists and that works in
// TLS 1.2 (hybrid and ML-KEM groups are TLS 1.3-only): Go's
// ecdheKeyAgreement and OpenSSL without server preference both take the
// client's order.
//
// # The TLS 1.3 selection rules
//
// RFC 8446 lets the server choose any group both sides support; choosing one
// the client sent no key share for costs a HelloRetryRequest (HRR) and one
// extra round trip. Servers differ in how they trade preference against
// that round trip, so a [Policy] names its rule ([Mode]). In every mode only
// groups that are in both the policy and the client's supported_groups are
// candidates; with none the handshake fails ("no mutual group").
//
//   - [ModeGo]: Go crypto/tls 1.24 and later, and so Caddy
//     (crypto/tls/handshake_server_tls13.go of Go 1.26: the candidates are
//     sorted stably, first those the client sent a key share for, then, as
//     the stronger key, the PQ ones). So: a PQ candidate the client sent a
//     share for; else a PQ candidate, asked for with an HRR; else a
//     candidate with a key share; else the first candidate via HRR. Go
//     orders the candidates by its own fixed preference list
//     (X25519MLKEM768, SecP256r1MLKEM768, SecP384r1MLKEM1024, x25519,
//     secp256r1, secp384r1, secp521r1), Config.CurvePreferences only
//     filters it; so [ParsePolicy] puts a go policy's groups in that order
//     (groups Go does not implement, which a Go server never picks, keep
//     their order after them). [GoPolicy] is Go 1.26's default list,
//     [CaddyPolicy] Caddy 2.11's.
//   - [ModeTuples]: OpenSSL 3.5 and later (SSL_CTX_set1_groups_list with
//     "/" tuples; ssl/statem/extensions_srvr.c tls_parse_ctos_key_share),
//     without SSL_OP_SERVER_PREFERENCE (OpenSSL's default; nginx's
//     ssl_prefer_server_ciphers off). The server walks its tuples in order
//     and stops at the first tuple holding a candidate. Inside that tuple a
//     group the client sent a key share for wins (existing key shares
//     trump preference order inside a tuple; among several, the first in
//     the client's key_share order); if the client sent none for that
//     tuple, an HRR asks for the tuple's candidate that comes first in the
//     client's supported_groups, even when the client sent a share for a
//     group of a later tuple. A list without "/" is one tuple, as in
//     OpenSSL; "a / b / c" is strict server preference.
//     [DefaultPolicy] is OpenSSL 3.5's built-in default.
//   - [ModeTuplesServer]: the same with SSL_OP_SERVER_PREFERENCE (nginx's
//     ssl_prefer_server_ciphers on): inside the tuple the share, and
//     without one the HRR, goes to the tuple's first candidate in server
//     order; a TLS 1.2 client gets the server's first group it offers.
//   - [ModeClientShare]: OpenSSL 3.0 to 3.4 (Debian bookworm's nginx): the
//     first client key share, in the client's order, for a candidate group
//     is taken; without one, an HRR asks for the first candidate in the
//     client's supported_groups order (nginx's default
//     ssl_prefer_server_ciphers off). This is the rule of most classical
//     servers in production today, so a forecast can be checked against the
//     capture it was made from.
//
// [GoPolicy] and [DefaultPolicy] agree on the outcome for the common
// populations: clients that send an X25519MLKEM768 share (browsers, Go),
// clients that list it without a share (HRR under both), and classical
// clients whose share is for x25519 or secp256r1. They differ for a client
// whose only share is for secp384r1, x448 or ffdhe* while it also lists
// x25519 or secp256r1 (OpenSSL asks for the earlier tuple with an HRR, Go
// takes the share), for clients offering only groups Go does not implement,
// and in which of two shared classical groups wins (Go: server order;
// OpenSSL: client key_share order).
//
// # Losing PQ
//
// A record that negotiated a PQ group today (its pq field) and would
// negotiate a classical one under the policy is [LosesPQ], whatever the
// reason and with or without an HRR ([Outcome].HRR says which), never
// [Classical]: a client that offers only X25519Kyber768Draft00 as its PQ
// group, served today by a server that still speaks the draft, loses PQ
// under a policy without it (and its ServerHello shrinks by 1088 bytes).
// [Outcome].Lost is the PQ group negotiated today.
//
// # The byte model
//
// Only the ServerHello changes with the group: its key_share entry carries
// the server's share (x25519 32 bytes, secp256r1 65, X25519MLKEM768 1120,
// ... see [tlsparse.Group.ServerShareSize]). ClientHellos are what they
// already are. The predicted ServerHello size is the observed ServerHello size minus the
// observed group's share plus the predicted group's share, when the
// observed handshake was TLS 1.3 with a known group. When the observed
// handshake was TLS 1.2 (the ServerHello then carries no key share) or had
// no ServerHello, a TLS 1.3 ServerHello is built from its parts: 4 header +
// 2 version + 32 random + 1+32 session id (clients send a 32-byte legacy
// session id for middlebox compatibility) + 2 suite + 1 compression + 2
// extensions length + 6 supported_versions + 8 key_share header + share.
// TLS 1.2-only clients keep their ServerHello (growth 0; the key exchange
// lives in ServerKeyExchange, which records do not measure). Differences
// between server implementations that have nothing to do with key exchange
// are outside the model: a TLS 1.2 ServerHello from OpenSSL lists three EC
// point formats where Go lists one, so it is 2 bytes longer.
//
// An HRR (predicted where the observed handshake had none) adds, as an
// estimate, the HelloRetryRequest itself (the ServerHello's size with the
// key_share entry reduced to the 2-byte selected group, 88 bytes with a
// 32-byte session id) and a second ClientHello (the first one with its key
// shares replaced by one share for the requested group).
package forecast

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// ErrPolicy is wrapped by every ParsePolicy error.
var ErrPolicy = errors.New("forecast: bad policy")

// Mode is a server's TLS 1.3 group selection rule (see the package doc).
type Mode uint8

// Modes.
const (
	ModeGo           Mode = iota // Go crypto/tls 1.24+, Caddy: PQ first, then key share, then server order
	ModeTuples                   // OpenSSL 3.5+: first tuple with a mutual group; key share wins inside it
	ModeClientShare              // OpenSSL 3.0-3.4: first acceptable client key share, else HRR in client order
	ModeTuplesServer             // OpenSSL 3.5+ with server preference: tuples, server order inside a tuple
)

var modeNames = [...]string{ModeGo: "go", ModeTuples: "openssl3.5", ModeClientShare: "openssl3.0", ModeTuplesServer: "openssl3.5-server"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode accepts "go" (also "caddy"), "openssl3.5" (also "openssl35",
// "tuples", "openssl"), "openssl3.5-server" (also "openssl35-server",
// "tuples-server") and "openssl3.0" (also "openssl30", "client-share").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "go", "caddy", "crypto/tls":
		return ModeGo, nil
	case "openssl3.5", "openssl35", "openssl", "tuples":
		return ModeTuples, nil
	case "openssl3.5-server", "openssl35-server", "tuples-server":
		return ModeTuplesServer, nil
	case "openssl3.0", "openssl30", "client-share", "clientshare":
		return ModeClientShare, nil
	}
	return 0, fmt.Errorf("%w: unknown mode %q (want go, openssl3.5, openssl3.5-server or openssl3.0)", ErrPolicy, s)
}

// Policy is a server's key exchange configuration.
type Policy struct {
	// Groups in server preference order.
	Groups []uint16
	// Tuple gives, per entry of Groups, its tuple number (ModeTuples):
	// non-decreasing from 0; nil means one tuple holding every group.
	Tuple []uint8
	Mode  Mode
}

// The groups of the built-in policies, by their registry names.
const (
	gX25519MLKEM768 = uint16(tlsparse.GroupX25519MLKEM768)
	gX25519         = uint16(tlsparse.GroupX25519)
	gSecp256r1      = uint16(tlsparse.GroupSecp256r1)
	gSecp384r1      = uint16(tlsparse.GroupSecp384r1)
	gSecp521r1      = uint16(tlsparse.GroupSecp521r1)
	gX448           = uint16(tlsparse.GroupX448)
	gFFDHE2048      = uint16(tlsparse.GroupFFDHE2048)
	gFFDHE3072      = uint16(tlsparse.GroupFFDHE3072)
	gFFDHE4096      = uint16(tlsparse.GroupFFDHE4096)
	gFFDHE6144      = uint16(tlsparse.GroupFFDHE6144)
	gFFDHE8192      = uint16(tlsparse.GroupFFDHE8192)
)

// DefaultPolicy is OpenSSL 3.5's built-in default, "?*X25519MLKEM768 /
// ?*X25519:?secp256r1 / ?X448:?secp384r1:?secp521r1 / ?ffdhe2048:?ffdhe3072".
var DefaultPolicy = Policy{
	Groups: []uint16{gX25519MLKEM768, gX25519, gSecp256r1, gX448, gSecp384r1, gSecp521r1, gFFDHE2048, gFFDHE3072},
	Tuple:  []uint8{0, 1, 1, 2, 2, 2, 3, 3},
	Mode:   ModeTuples,
}

// GoPolicy is Go 1.26 crypto/tls's default (and so Caddy's unless
// configured): every group it implements, in its order
// ([tlsparse.GoGroups]: X25519MLKEM768, SecP256r1MLKEM768,
// SecP384r1MLKEM1024, x25519, secp256r1, secp384r1, secp521r1).
var GoPolicy = Policy{Groups: goOrder(), Mode: ModeGo}

// CaddyPolicy is Caddy 2.11's default (modules/caddytls defaultCurves, set
// as CurvePreferences of Go's crypto/tls): X25519MLKEM768, x25519,
// secp256r1.
var CaddyPolicy = Policy{Groups: []uint16{gX25519MLKEM768, gX25519, gSecp256r1}, Mode: ModeGo}

// OpenSSL30Policy is OpenSSL 3.0's built-in default groups, x25519,
// secp256r1, x448, secp521r1, secp384r1, ffdhe2048 to ffdhe8192, under its
// client-share rule.
var OpenSSL30Policy = Policy{
	Groups: []uint16{gX25519, gSecp256r1, gX448, gSecp521r1, gSecp384r1, gFFDHE2048, gFFDHE3072, gFFDHE4096, gFFDHE6144, gFFDHE8192},
	Mode:   ModeClientShare,
}

// NamedPolicy returns the built-in policy called name (case-insensitive):
// "go" ([GoPolicy]), "caddy" ([CaddyPolicy]), "openssl35" or "openssl3.5"
// ([DefaultPolicy]), "openssl30" or "openssl3.0" ([OpenSSL30Policy]).
func NamedPolicy(name string) (Policy, bool) {
	var p Policy
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "go":
		p = GoPolicy
	case "caddy":
		p = CaddyPolicy
	case "openssl35", "openssl3.5":
		p = DefaultPolicy
	case "openssl30", "openssl3.0":
		p = OpenSSL30Policy
	default:
		return Policy{}, false
	}
	p.Groups = slices.Clone(p.Groups)
	p.Tuple = slices.Clone(p.Tuple)
	return p, true
}

// goOrder is Go's fixed group preference as codepoints.
func goOrder() []uint16 {
	out := make([]uint16, len(tlsparse.GoGroups))
	for i, g := range tlsparse.GoGroups {
		out[i] = uint16(g)
	}
	return out
}

// goRank is g's place in Go's preference ([tlsparse.GoGroups]),
// len(tlsparse.GoGroups) for a group Go does not implement.
func goRank(g uint16) int {
	for i, x := range tlsparse.GoGroups {
		if uint16(x) == g {
			return i
		}
	}
	return len(tlsparse.GoGroups)
}

// ParsePolicy reads a server preference list: group names separated by ","
// or ":" (IANA names, OpenSSL aliases such as X25519, P-256, prime256v1, or
// 0x hex codepoints), case-insensitive. "/" separates OpenSSL 3.5 tuples and
// makes the policy ModeTuples; otherwise it is ModeGo. OpenSSL's "*" and "?"
// prefixes are accepted and ignored. An optional "mode=" prefix ("go=",
// "caddy=", "openssl3.5=", "openssl3.0=") picks the mode explicitly. A
// name of [NamedPolicy] alone ("go", "caddy", "openssl35", "openssl30") is
// that built-in policy. In mode go the groups are put in Go's own order
// (see the package doc) and tuples are dropped: Go has none.
func ParsePolicy(s string) (Policy, error) {
	if p, ok := NamedPolicy(s); ok {
		return p, nil
	}
	var p Policy
	mode, explicit := ModeGo, false
	if i := strings.IndexByte(s, '='); i >= 0 {
		m, err := ParseMode(s[:i])
		if err != nil {
			return Policy{}, err
		}
		mode, explicit, s = m, true, s[i+1:]
	}
	tuples := strings.Contains(s, "/")
	tuple := -1
	for part := range strings.SplitSeq(s, "/") {
		if strings.Trim(part, ",: ") != "" {
			tuple++ // empty tuples are dropped, numbers stay dense
		}
		if tuple > 255 {
			return Policy{}, fmt.Errorf("%w: too many tuples", ErrPolicy)
		}
		for name := range strings.FieldsFuncSeq(part, func(r rune) bool { return r == ',' || r == ':' || r == ' ' }) {
			name = strings.TrimLeft(name, "*?")
			gp, ok := tlsparse.ParseGroup(name)
			g := uint16(gp)
			if !ok {
				return Policy{}, fmt.Errorf("%w: unknown group %q", ErrPolicy, name)
			}
			if tlsparse.IsGREASE(g) {
				return Policy{}, fmt.Errorf("%w: GREASE value %q is not a group", ErrPolicy, name)
			}
			if p.index(g) >= 0 {
				continue
			}
			p.Groups = append(p.Groups, g)
			p.Tuple = append(p.Tuple, uint8(tuple))
		}
	}
	if len(p.Groups) == 0 {
		return Policy{}, fmt.Errorf("%w: no groups", ErrPolicy)
	}
	if !tuples || p.Tuple[len(p.Tuple)-1] == 0 {
		p.Tuple = nil // one tuple
	}
	switch {
	case explicit:
		p.Mode = mode
	case tuples:
		p.Mode = ModeTuples
	}
	if p.Mode == ModeGo {
		p.Tuple = nil
		slices.SortStableFunc(p.Groups, func(a, b uint16) int { return goRank(a) - goRank(b) })
	}
	return p, nil
}

// String renders the policy the way ParsePolicy reads it.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(p.Mode.String())
	b.WriteByte('=')
	for i, g := range p.Groups {
		if i > 0 {
			if p.Tuple != nil && p.Tuple[i] != p.Tuple[i-1] {
				b.WriteString(" / ")
			} else {
				b.WriteByte(',')
			}
		}
		b.WriteString(tlsparse.Group(g).String())
	}
	return b.String()
}

func (p *Policy) index(g uint16) int {
	for i, x := range p.Groups {
		if x == g {
			return i
		}
	}
	return -1
}

func (p *Policy) tuple(i int) int {
	if i >= len(p.Tuple) {
		return 0
	}
	return int(p.Tuple[i])
}

// Kind is a predicted outcome.
type Kind uint8

// Kinds, one per handshake: they partition the predictions. Their String
// values (but "unknown") are the metric label values.
const (
	Unknown   Kind = iota // the record has no ClientHello to predict from
	PQ                    // a PQ or hybrid group, no extra round trip
	HRR                   // a HelloRetryRequest (one extra round trip); Group may be PQ or not (not: classical today too)
	Classical             // a classical group (or TLS 1.2), as today
	Fail                  // no group in common: the handshake would fail
	// LosesPQ: the record negotiated a PQ group today (Outcome.Lost) and
	// would negotiate a classical one under the policy, whatever the
	// reason, with or without an HRR (Outcome.HRR). It is never Classical.
	LosesPQ
)

var kindNames = [...]string{Unknown: "unknown", PQ: "pq", HRR: "hrr", Classical: "classical", Fail: "fail", LosesPQ: "loses_pq"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists every Kind, a bounded metric label set.
var Kinds = []Kind{PQ, HRR, Classical, LosesPQ, Fail, Unknown}

// Reasons, a bounded set.
const (
	ReasonPQShare        = "client sent a PQ key share"
	ReasonPQNoShare      = "client lists a PQ group but sent no share for it"
	ReasonNoShare        = "client sent no key share the server would take"
	ReasonNoPQOffered    = "client offers no PQ group"
	ReasonNoMutualPQ     = "client's PQ groups are not in the policy"
	ReasonPolicyClassic  = "policy prefers a classical group"
	ReasonTLS12          = "TLS 1.2 only"
	ReasonNoMutualGroup  = "no mutual group"
	ReasonNoClientHello  = "no ClientHello"
	ReasonClassicalShare = "client sent a share for a classical group" // ModeClientShare: its first acceptable share is classical
)

// Outcome is one handshake's prediction.
type Outcome struct {
	Kind Kind
	// Group is the group the server would finally negotiate (after the HRR
	// when HRR is set); 0 for Fail, Unknown and non-ECDHE TLS 1.2.
	Group uint16
	// Lost is, when Kind is LosesPQ, the PQ group the record negotiated
	// today (0 if its name is not in the registry); 0 otherwise.
	Lost uint16
	// HRR: the server would first send a HelloRetryRequest (one extra
	// round trip). Set for every Kind HRR, and for a LosesPQ reached
	// through one.
	HRR bool
	// Reason is one of the Reason constants: for PQ and HRR why the key
	// share was or was not there, for Classical and LosesPQ why the
	// handshake does not end in a PQ group.
	Reason string
	// ServerHelloBytes is the predicted final ServerHello, header
	// included; 0 when it cannot be predicted (a group without a known
	// share size). Modeled reports that the record also has an observed
	// ServerHello, so ServerHelloGrowth (predicted minus observed) means
	// something; it is negative when the ServerHello would shrink (a
	// LosesPQ from X25519MLKEM768 to x25519: -1088).
	ServerHelloBytes  int
	ServerHelloGrowth int
	Modeled           bool
	// HRRBytes estimates the bytes an HRR adds that the observed handshake
	// did not have: the HelloRetryRequest plus the second ClientHello. 0
	// unless HRR is set and the observed handshake had no HRR.
	HRRBytes int
}

// tls13Client reports whether the ClientHello offered TLS 1.3.
func tls13Client(r *record.Handshake) bool {
	if len(r.JA4) >= 3 {
		return r.JA4[1] == '1' && r.JA4[2] == '3'
	}
	return len(r.KeyShareIDs) > 0
}

func has(list []uint16, g uint16) bool {
	for _, x := range list {
		if x == g {
			return true
		}
	}
	return false
}

func isPQ(g uint16) bool { return tlsparse.Group(g).IsPQ() }

// Predict tells what a server with policy p would do with r's ClientHello.
// It allocates nothing.
func Predict(p Policy, r *record.Handshake) Outcome {
	if r.ClientHelloBytes == 0 && len(r.OfferedIDs) == 0 && len(r.KeyShareIDs) == 0 {
		return Outcome{Kind: Unknown, Reason: ReasonNoClientHello}
	}
	var o Outcome
	if !tls13Client(r) {
		o = predictTLS12(&p, r)
	} else {
		g, hrr := select13(&p, r)
		o = classify(&p, r, g, hrr)
	}
	if r.PQ && (o.Kind == Classical || o.Kind == HRR && !isPQ(o.Group)) {
		// PQ today, classical under p: whatever the reason, a loss.
		if o.Kind == HRR {
			o.Reason = ClassicalReason(&p, r)
		}
		o.Kind = LosesPQ
		o.Lost = r.GroupID
	}
	bytesModel(&o, r)
	return o
}

func predictTLS12(p *Policy, r *record.Handshake) Outcome {
	if p.Mode == ModeTuplesServer { // server preference
		for _, g := range p.Groups {
			if !isPQ(g) && has(r.OfferedIDs, g) {
				return Outcome{Kind: Classical, Group: g, Reason: ReasonTLS12}
			}
		}
		return Outcome{Kind: Classical, Reason: ReasonTLS12}
	}
	for _, g := range r.OfferedIDs {
		if !isPQ(g) && p.index(g) >= 0 {
			return Outcome{Kind: Classical, Group: g, Reason: ReasonTLS12}
		}
	}
	// No ECDHE group in common: RSA or DHE key exchange, still classical.
	return Outcome{Kind: Classical, Reason: ReasonTLS12}
}

// select13 returns the group a TLS 1.3 server with policy p picks, and
// whether it needs an HRR for it; 0 when there is no mutual group.
func select13(p *Policy, r *record.Handshake) (g uint16, hrr bool) {
	offered, shares := r.OfferedIDs, r.KeyShareIDs
	mutual := func(g uint16) bool { return has(offered, g) }
	switch p.Mode {
	case ModeGo:
		// PQ with share, PQ without share, share, first mutual.
		var pqNoShare, firstShare, first uint16
		for _, g := range p.Groups {
			if !mutual(g) {
				continue
			}
			s := has(shares, g)
			switch {
			case isPQ(g) && s:
				return g, false
			case isPQ(g):
				if pqNoShare == 0 {
					pqNoShare = g
				}
			case s:
				if firstShare == 0 {
					firstShare = g
				}
			}
			if first == 0 {
				first = g
			}
		}
		switch {
		case pqNoShare != 0:
			return pqNoShare, true
		case firstShare != 0:
			return firstShare, false
		}
		return first, first != 0
	case ModeTuples, ModeTuplesServer:
		server := p.Mode == ModeTuplesServer
		for i := 0; i < len(p.Groups); {
			t := p.tuple(i)
			j := i
			for j < len(p.Groups) && p.tuple(j) == t {
				j++
			}
			tup := p.Groups[i:j]
			if server {
				for _, g := range tup { // server order
					if mutual(g) && has(shares, g) {
						return g, false
					}
				}
				for _, g := range tup {
					if mutual(g) {
						return g, true
					}
				}
			} else {
				for _, g := range shares { // client key_share order
					if mutual(g) && has(tup, g) {
						return g, false
					}
				}
				for _, g := range offered { // client supported_groups order
					if has(tup, g) {
						return g, true
					}
				}
			}
			i = j
		}
		return 0, false
	default: // ModeClientShare
		for _, g := range shares {
			if mutual(g) && p.index(g) >= 0 {
				return g, false
			}
		}
		for _, g := range offered {
			if p.index(g) >= 0 {
				return g, true
			}
		}
		return 0, false
	}
}

func classify(p *Policy, r *record.Handshake, g uint16, hrr bool) Outcome {
	if g == 0 {
		return Outcome{Kind: Fail, Reason: ReasonNoMutualGroup}
	}
	o := Outcome{Group: g, HRR: hrr}
	switch {
	case hrr:
		o.Kind = HRR
		if isPQ(g) {
			o.Reason = ReasonPQNoShare
		} else {
			o.Reason = ReasonNoShare
		}
	case isPQ(g):
		o.Kind, o.Reason = PQ, ReasonPQShare
	default:
		o.Kind = Classical
		o.Reason = ClassicalReason(p, r)
	}
	return o
}

// ClassicalReason says why a handshake does not end in a PQ group under p,
// whether it stays classical or loses PQ (one of the Reason constants).
func ClassicalReason(p *Policy, r *record.Handshake) string {
	offersPQ, mutualPQ := false, false
	for _, g := range r.OfferedIDs {
		if isPQ(g) {
			offersPQ = true
			if p.index(g) >= 0 {
				mutualPQ = true
			}
		}
	}
	switch {
	case !offersPQ:
		return ReasonNoPQOffered
	case !mutualPQ:
		return ReasonNoMutualPQ
	case p.Mode == ModeClientShare:
		return ReasonClassicalShare
	}
	return ReasonPolicyClassic
}

// Fixed TLS 1.3 ServerHello parts (see the package doc).
const (
	sh13Fixed     = 4 + 2 + 32 + 1 + 2 + 1 + 2 + 6 + 8 // without session id and share
	compatSession = 32
)

// bytesModel fills the byte fields of o.
func bytesModel(o *Outcome, r *record.Handshake) {
	if o.Kind == Unknown || o.Kind == Fail {
		return
	}
	if o.Reason == ReasonTLS12 {
		if r.ServerHelloBytes > 0 {
			o.ServerHelloBytes, o.Modeled = r.ServerHelloBytes, true
		}
		return
	}
	g := tlsparse.Group(o.Group)
	newShare := g.ServerShareSize()
	if newShare == 0 {
		return
	}
	var sh int
	if obsShare := tlsparse.Group(r.GroupID).ServerShareSize(); r.Version == "TLS1.3" && r.ServerHelloBytes > 0 && obsShare > 0 {
		sh = r.ServerHelloBytes - obsShare + newShare
	} else {
		sh = sh13Fixed + compatSession + newShare
	}
	o.ServerHelloBytes, o.Modeled = sh, true
	if r.ServerHelloBytes > 0 {
		o.ServerHelloGrowth = sh - r.ServerHelloBytes
	} else {
		o.Modeled = false
	}
	if o.HRR && !r.HRR {
		hrrMsg := HelloRetryRequestSize(sh, o.Group)
		chShare := g.ClientShareSize()
		ch2 := r.ClientHelloBytes + 4 + chShare
		for _, ks := range r.KeyShares {
			ch2 -= 4 + ks.Bytes
		}
		if r.ClientHelloBytes == 0 || chShare == 0 || ch2 < 0 {
			ch2 = 0
		}
		o.HRRBytes = hrrMsg + ch2
	}
}

// HelloRetryRequestSize is the size of the HelloRetryRequest a server
// sends before a TLS 1.3 ServerHello of shBytes bytes for group g: the same
// message with the key_share entry (group, length, share) cut down to the
// 2-byte selected group. 88 bytes for a 32-byte session id.
func HelloRetryRequestSize(shBytes int, g uint16) int {
	return shBytes - 2 - tlsparse.Group(g).ServerShareSize()
}
