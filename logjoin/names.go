package logjoin

import "github.com/pqwatch/pqwatch/tlsparse"

// IANAGroupName maps a group name as nginx logs it ($ssl_curve: "X25519",
// "prime256v1", "X25519MLKEM768", or "0x11ec" for groups its OpenSSL could
// not name) to the IANA name pqwatch records use (tlsparse.ParseGroup).
// Unknown names come back unchanged.
func IANAGroupName(s string) string {
	if g, ok := tlsparse.ParseGroup(s); ok {
		return g.String()
	}
	return s
}
