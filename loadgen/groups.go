package loadgen

import (
	"crypto/tls"
	"fmt"
	"strings"
)

// groupNames maps the key exchanges crypto/tls (Go 1.26) implements to their
// IANA TLS Supported Groups names, as SPEC.md prints them.
var groupNames = map[tls.CurveID]string{
	tls.CurveP256:          "secp256r1",
	tls.CurveP384:          "secp384r1",
	tls.CurveP521:          "secp521r1",
	tls.X25519:             "x25519",
	tls.X25519MLKEM768:     "X25519MLKEM768",
	tls.SecP256r1MLKEM768:  "SecP256r1MLKEM768",
	tls.SecP384r1MLKEM1024: "SecP384r1MLKEM1024",
}

// groupAliases accepts the IANA name (any case) and the Go and OpenSSL
// spellings users are likely to type.
var groupAliases = map[string]tls.CurveID{
	"p256": tls.CurveP256, "p-256": tls.CurveP256, "curvep256": tls.CurveP256, "prime256v1": tls.CurveP256,
	"p384": tls.CurveP384, "p-384": tls.CurveP384, "curvep384": tls.CurveP384,
	"p521": tls.CurveP521, "p-521": tls.CurveP521, "curvep521": tls.CurveP521,
}

// GroupName returns the IANA name of a key exchange group, or "0x" and four
// lower-case hex digits for values it does not know.
func GroupName(id tls.CurveID) string {
	if n, ok := groupNames[id]; ok {
		return n
	}
	return fmt.Sprintf("0x%04x", uint16(id))
}

// IsPQ reports whether the group is a post-quantum or hybrid group.
func IsPQ(id tls.CurveID) bool {
	switch id {
	case tls.X25519MLKEM768, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024:
		return true
	}
	return false
}

// ParseGroup resolves a group name that crypto/tls can offer.
func ParseGroup(s string) (tls.CurveID, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for id, n := range groupNames {
		if strings.ToLower(n) == k {
			return id, nil
		}
	}
	if id, ok := groupAliases[k]; ok {
		return id, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnsupportedGroup, s)
}

// Arm is one side of an A/B experiment: a name and the key exchange groups
// its clients offer.
//
// crypto/tls ignores the order of Config.CurvePreferences (Go 1.24+): the
// groups form a set, offered in Go's internal order (PQ hybrids first). The
// client sends one key share for the first group of that order, plus an
// x25519 (or secp256r1) share next to a hybrid when that classical group is
// in the set too. A HelloRetryRequest therefore happens only when the server
// supports none of the groups a share was sent for.
type Arm struct {
	Name   string        `json:"name"`
	Groups []tls.CurveID `json:"-"`
}

// GroupNames returns the arm's groups by IANA name, in the order given.
func (a Arm) GroupNames() []string {
	out := make([]string, len(a.Groups))
	for i, g := range a.Groups {
		out[i] = GroupName(g)
	}
	return out
}

// ParseArm parses "name=group,group".
func ParseArm(s string) (Arm, error) {
	name, list, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(list) == "" {
		return Arm{}, fmt.Errorf("%w: arm %q: want name=group[,group...]", ErrUsage, s)
	}
	a := Arm{Name: name}
	for _, g := range strings.Split(list, ",") {
		id, err := ParseGroup(g)
		if err != nil {
			return Arm{}, fmt.Errorf("arm %q: %w", name, err)
		}
		a.Groups = append(a.Groups, id)
	}
	return a, nil
}
