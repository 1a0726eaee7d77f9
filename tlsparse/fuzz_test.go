package tlsparse

import (
	"errors"
	"testing"
)

// seedClientHellos adds every ClientHello of the table tests to f.
func seedClientHellos(f *testing.F) {
	for _, tc := range chCases {
		f.Add(tc.msg(f))
	}
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 0})
}

func checkErr(t *testing.T, err error) {
	if err == nil {
		return
	}
	for _, s := range []error{ErrTruncated, ErrMalformed, ErrNotClientHello, ErrNotServerHello, ErrNotServerKeyExchange} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps no sentinel", err)
}

func FuzzParseClientHello(f *testing.F) {
	seedClientHellos(f)
	var ch ClientHello
	f.Fuzz(func(t *testing.T, msg []byte) {
		err := ch.Parse(msg)
		checkErr(t, err)
		if err != nil {
			return
		}
		if ch.Length > len(msg) || ch.Length < HandshakeHeaderLen {
			t.Fatalf("Length %d of %d bytes", ch.Length, len(msg))
		}
		for _, ks := range ch.KeyShares {
			if ks.Len < 0 || ks.Len > len(msg) {
				t.Fatalf("key share %+v", ks)
			}
		}
		_ = ch.PQOffered()
	})
}

func FuzzParseServerHello(f *testing.F) {
	for _, tc := range shCases {
		f.Add(tc.msg(f))
	}
	f.Add([]byte{2, 0, 0, 0})
	var sh ServerHello
	f.Fuzz(func(t *testing.T, msg []byte) {
		err := sh.Parse(msg)
		checkErr(t, err)
		if err != nil {
			return
		}
		if sh.Length > len(msg) || (sh.HRR && sh.KeyShareLen != 0) {
			t.Fatalf("inconsistent %+v for %d bytes", sh, len(msg))
		}
		_ = sh.Group.String()
		_ = CipherSuiteName(sh.CipherSuite)
	})
}

func FuzzParseServerKeyExchange(f *testing.F) {
	f.Add(ecdheSKE(GroupX25519, 32))
	f.Add(ecdheSKE(GroupSecp384r1, 97))
	f.Add(dheSKE(256))
	f.Add(dheSKE(768))
	f.Add(handshakeMsg(TypeServerKeyExchange, []byte{1, 0, 0}))
	f.Add(handshakeMsg(TypeServerKeyExchange, []byte{3, 0, 0x1d, 0}))
	f.Fuzz(func(t *testing.T, msg []byte) {
		g, ok, err := ParseServerKeyExchangeGroup(msg)
		checkErr(t, err)
		if (err != nil || !ok) && g != 0 {
			t.Fatalf("group %v with ok=%v err=%v", g, ok, err)
		}
		dg, name, dok := ParseServerKeyExchangeDHE(msg)
		if dok && ok || dok != (name != "") || dg != 0 && name != dg.String() {
			t.Fatalf("DHE %v %q %v, ECDHE %v %v", dg, name, dok, g, ok)
		}
	})
}

// FuzzJA4 checks AppendJA4 and AppendJA4R against the string-based reference
// implementation on every ClientHello the parser accepts.
func FuzzJA4(f *testing.F) {
	seedClientHellos(f)
	var ch ClientHello
	var dst []byte
	cache := &JA4Cache{Max: 8} // small: fills and starts over while fuzzing
	f.Fuzz(func(t *testing.T, msg []byte) {
		if ch.Parse(msg) != nil {
			return
		}
		for _, tr := range []byte{TransportTCP, TransportQUIC} {
			dst = AppendJA4(dst[:0], &ch, tr)
			want, wantRaw := refJA4(&ch, tr)
			if string(dst) != want || len(dst) != JA4Len {
				t.Fatalf("JA4 %s, reference %s", dst, want)
			}
			for range 2 { // a miss, then a hit
				if got := cache.JA4(&ch, tr); got != want {
					t.Fatalf("JA4Cache %s, reference %s", got, want)
				}
			}
			if raw := AppendJA4R(nil, &ch, tr); string(raw) != wantRaw {
				t.Fatalf("JA4_r %s, reference %s", raw, wantRaw)
			}
		}
	})
}
