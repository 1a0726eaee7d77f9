package tlsparse

// IANAName maps a group as another program spells it (ParseGroup: nginx's
// $ssl_curve "X25519", "prime256v1", "X25519MLKEM768", or "0x11ec" for a
// group its OpenSSL could not name) to the IANA name pqwatch records use.
// A name ParseGroup does not know comes back unchanged.
func IANAName(s string) string {
	if g, ok := ParseGroup(s); ok {
		return g.String()
	}
	return s
}
