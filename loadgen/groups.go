package loadgen

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// goGroups are the key exchanges crypto/tls (Go 1.26) implements: the
// groups an arm can offer.
var goGroups = []tls.CurveID{
	tls.X25519MLKEM768, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024,
	tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521,
}

// GroupName returns the IANA name of a key exchange group (tlsparse's
// registry), or "0x" and four lower-case hex digits for an unregistered one.
func GroupName(id tls.CurveID) string { return tlsparse.Group(id).String() }

// IsPQ reports whether the group is a post-quantum or hybrid group.
func IsPQ(id tls.CurveID) bool { return tlsparse.Group(id).IsPQ() }

// ParseGroup resolves a group name (IANA, OpenSSL, NIST or Go spelling, any
// case) that crypto/tls can offer.
func ParseGroup(s string) (tls.CurveID, error) {
	if g, ok := tlsparse.ParseGroup(s); ok && slices.Contains(goGroups, tls.CurveID(g)) {
		return tls.CurveID(g), nil
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
