package logjoin

import "github.com/pqwatch/pqwatch/tlsparse"

// IANAGroupName maps a group name as nginx logs it ($ssl_curve) to the IANA
// name pqwatch records use (tlsparse.IANAName).
func IANAGroupName(s string) string { return tlsparse.IANAName(s) }
