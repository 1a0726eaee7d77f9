package forecast_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// goServerChoice sends ch to a crypto/tls server with curves (nil: its
// defaults) and returns the group of its ServerHello or HelloRetryRequest
// and whether it was an HRR; ok false when it answered with an alert.
func goServerChoice(t *testing.T, cert tls.Certificate, curves []tls.CurveID, ch []byte) (g uint16, hrr, ok bool) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: curves, MinVersion: tls.VersionTLS13})
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.SetDeadline(time.Now().Add(5 * time.Second))
		srv.Handshake()
		srv.Close()
	}()
	defer func() { c.Close(); <-done }()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	rec := append([]byte{22, 3, 1, byte(len(ch) >> 8), byte(len(ch))}, ch...)
	if _, err := c.Write(rec); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if hdr[0] == 21 { // alert
		return 0, false, false
	}
	var sh tlsparse.ServerHello
	if err := sh.Parse(body); err != nil {
		t.Fatalf("server's answer: %v", err)
	}
	return uint16(sh.Group), sh.HRR, true
}

func names(gs []uint16) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = tlsparse.Group(g).String()
	}
	return strings.Join(s, ",")
}

// TestGoRuleMatchesCryptoTLS holds the go selection rule to the real thing:
// the crypto/tls server of this Go (go.mod's go1.26) answers raw
// ClientHellos, every order of supported_groups over four groups with every
// choice of up to two key shares, under four CurvePreferences (the
// default, Caddy's, classical only, and a list in an order Go ignores);
// forecast.Predict with the same groups as a go= policy must name the
// group of its ServerHello or HelloRetryRequest, the HRR, and a failure
// (alert) exactly.
func TestGoRuleMatchesCryptoTLS(t *testing.T) {
	cert, err := pcapgen.SelfSigned("pqwatch.test")
	if err != nil {
		t.Fatal(err)
	}
	const (
		mlkem  = 0x11ec
		x25519 = 0x001d
		p256   = 0x0017
		p384   = 0x0018
	)
	servers := []struct {
		spec   string
		curves []tls.CurveID
	}{
		{"go", nil},
		{"caddy", []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256}},
		{"go=x25519,secp256r1", []tls.CurveID{tls.X25519, tls.CurveP256}},
		{"go=secp384r1,secp256r1,X25519MLKEM768", []tls.CurveID{tls.CurveP384, tls.CurveP256, tls.X25519MLKEM768}},
	}
	// Client offers: every ordered pick of 1 to 3 groups out of four.
	all := []uint16{mlkem, x25519, p256, p384}
	var offers [][]uint16
	var pick func(cur []uint16)
	pick = func(cur []uint16) {
		if len(cur) > 0 {
			offers = append(offers, append([]uint16(nil), cur...))
		}
		if len(cur) == 3 {
			return
		}
		for _, g := range all {
			if !contains(cur, g) {
				pick(append(cur, g))
			}
		}
	}
	pick(nil)
	checked, hrrs, fails := 0, 0, 0
	for _, sv := range servers {
		p, err := forecast.ParsePolicy(sv.spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range offers {
			// Shares: none, one, or two (in offer order) of the offered groups.
			shareSets := [][]uint16{nil}
			for i := range off {
				shareSets = append(shareSets, []uint16{off[i]})
				for j := i + 1; j < len(off); j++ {
					shareSets = append(shareSets, []uint16{off[i], off[j]})
				}
			}
			for _, sh := range shareSets {
				if len(sh) == 0 && len(off) > 2 {
					continue // bounded: no-share cases only for short lists
				}
				ch, err := testenv.RawClientHello(off, sh, "")
				if err != nil {
					t.Fatal(err)
				}
				g, hrr, ok := goServerChoice(t, cert, sv.curves, ch)
				r := &record.Handshake{JA4: "t13d0101h1_000000000000_000000000000", OfferedIDs: off, KeyShareIDs: sh, ClientHelloBytes: len(ch)}
				o := forecast.Predict(p, r)
				want := fmt.Sprintf("%s hrr=%v", tlsparse.Group(g), hrr)
				if !ok {
					want = "fail"
					fails++
				}
				got := fmt.Sprintf("%s hrr=%v", tlsparse.Group(o.Group), o.HRR)
				if o.Kind == forecast.Fail {
					got = "fail"
				}
				if got != want {
					t.Errorf("%s: offered %s, shares [%s]: forecast %s, crypto/tls %s", sv.spec, names(off), names(sh), got, want)
				}
				checked++
				if hrr {
					hrrs++
				}
			}
		}
	}
	t.Logf("%d ClientHellos checked against crypto/tls (%d HRRs, %d failures)", checked, hrrs, fails)
	if hrrs == 0 || fails == 0 {
		t.Errorf("the grid must exercise HRRs (%d) and failures (%d)", hrrs, fails)
	}
}

func contains(l []uint16, g uint16) bool {
	for _, x := range l {
		if x == g {
			return true
		}
	}
	return false
}
