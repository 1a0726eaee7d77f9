package tlsparse

import "encoding/binary"

// JA4Cache remembers JA4 fingerprints by their exact inputs. The same client
// software sends ClientHellos that differ only in randoms, session ids, key
// shares and server names, none of which JA4 reads; the cache turns the two
// sorts and two SHA-256 of each fingerprint into one map lookup. A cached
// answer is the fingerprint of identical inputs, never an approximation.
// Memory is bounded: a full cache is emptied and refilled. Not safe for
// concurrent use.
type JA4Cache struct {
	m   map[string]string
	key []byte
	Max int // entries; 0 = 4096
}

// JA4 returns the JA4 fingerprint of ch, as AppendJA4 computes it.
func (c *JA4Cache) JA4(ch *ClientHello, transport byte) string {
	// The key: JA4's first part (version, SNI presence, counts, ALPN
	// characters), then the raw cipher, extension and signature algorithm
	// lists, each prefixed by its length.
	k := appendJA4A(c.key[:0], ch, transport)
	k = appendU16s(k, ch.CipherSuites)
	k = appendU16s(k, ch.Extensions)
	k = appendU16s(k, ch.SignatureAlgorithms)
	c.key = k
	if v, ok := c.m[string(k)]; ok {
		return v
	}
	v := string(AppendJA4(nil, ch, transport))
	max := c.Max
	if max <= 0 {
		max = 4096
	}
	if c.m == nil || len(c.m) >= max {
		c.m = make(map[string]string, 64)
	}
	c.m[string(k)] = v
	return v
}

func appendU16s(dst []byte, v []uint16) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	for _, x := range v {
		dst = binary.BigEndian.AppendUint16(dst, x)
	}
	return dst
}

// Interner returns one shared string per distinct byte string, so records
// from the same clients share their SNI and ALPN strings instead of
// allocating them again. Memory is bounded: when full it starts over.
// Not safe for concurrent use.
type Interner struct {
	m   map[string]string
	Max int // entries; 0 = 4096
	// MaxLen: longer strings are not kept (allocated each time); 0 = 256.
	MaxLen int
}

// String returns b as a string, shared with earlier calls for equal bytes.
func (in *Interner) String(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	maxLen := in.MaxLen
	if maxLen <= 0 {
		maxLen = 256
	}
	if len(b) > maxLen {
		return s
	}
	max := in.Max
	if max <= 0 {
		max = 4096
	}
	if in.m == nil || len(in.m) >= max {
		in.m = make(map[string]string, 64)
	}
	in.m[s] = s
	return s
}
