package loadgen

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// goGroups are the key exchanges crypto/tls implements, in its own
// preference order (tlsparse.GoGroups): the groups an arm can offer.
var goGroups = func() []tls.CurveID {
	out := make([]tls.CurveID, len(tlsparse.GoGroups))
	for i, g := range tlsparse.GoGroups {
		out[i] = tls.CurveID(g)
	}
	return out
}()

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
	// Resume is the share of requests that offer a session ticket from an
	// earlier handshake of the arm (TLS 1.3 PSK with (EC)DHE, so the group
	// is still negotiated); 0 means every handshake is full.
	Resume float64 `json:"resume,omitempty"`
}

// GroupNames returns the arm's groups by IANA name, in the order given.
func (a Arm) GroupNames() []string {
	out := make([]string, len(a.Groups))
	for i, g := range a.Groups {
		out[i] = GroupName(g)
	}
	return out
}

// ParseArm parses "name=group,group[;resume=SHARE]": SHARE is a fraction
// (0.5) or a percentage (50%) of requests that resume.
func ParseArm(s string) (Arm, error) {
	s, opts, _ := strings.Cut(s, ";")
	name, list, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(list) == "" {
		return Arm{}, fmt.Errorf("%w: arm %q: want name=group[,group...][;resume=SHARE]", ErrUsage, s)
	}
	a := Arm{Name: name}
	for _, o := range strings.Split(opts, ";") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		k, v, _ := strings.Cut(o, "=")
		if strings.TrimSpace(k) != "resume" {
			return Arm{}, fmt.Errorf("%w: arm %q: unknown option %q (want resume=SHARE)", ErrUsage, name, o)
		}
		v = strings.TrimSpace(v)
		scale := 1.0
		if p, ok := strings.CutSuffix(v, "%"); ok {
			v, scale = p, 100
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f/scale < 0 || f/scale > 1 {
			return Arm{}, fmt.Errorf("%w: arm %q: resume %q: want a share from 0 to 1, or 0%% to 100%%", ErrUsage, name, v)
		}
		a.Resume = f / scale
	}
	for _, g := range strings.Split(list, ",") {
		id, err := ParseGroup(g)
		if err != nil {
			return Arm{}, fmt.Errorf("arm %q: %w", name, err)
		}
		a.Groups = append(a.Groups, id)
	}
	return a, nil
}
