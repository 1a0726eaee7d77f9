package tlsparse

import "testing"

// TestGolden checks that every golden capture is present and parses as the
// message type it is named for. Run with -update to recapture them from a
// live crypto/tls handshake.
func TestGolden(t *testing.T) {
	for _, g := range goldenCaptures {
		t.Run(g.name, func(t *testing.T) {
			msg := loadGolden(t, g.name)
			var err error
			switch g.typ {
			case TypeClientHello:
				var ch ClientHello
				err = ch.Parse(msg)
			case TypeServerHello:
				var sh ServerHello
				err = sh.Parse(msg)
			case TypeServerKeyExchange:
				_, _, err = ParseServerKeyExchangeGroup(msg)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
