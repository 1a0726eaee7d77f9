package quic

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return binary.BigEndian.AppendUint16(b, uint16(v)|0x4000)
	case v < 1<<30:
		return binary.BigEndian.AppendUint32(b, uint32(v)|0x80000000)
	}
	return binary.BigEndian.AppendUint64(b, v|0xc0<<56)
}

// cryptoFrame encodes a CRYPTO frame.
func cryptoFrame(off uint64, data []byte) []byte {
	b := appendVarint([]byte{FrameCrypto}, off)
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

// closeFrame encodes a transport CONNECTION_CLOSE frame.
func closeFrame(code uint64) []byte {
	b := appendVarint([]byte{FrameConnectionClose}, code)
	return append(b, 0x06, 0) // frame type CRYPTO, empty reason
}

// longType returns the type bits of a long header packet type.
func longType(version uint32, typ PacketType) byte {
	if version == Version2 {
		return byte((typ + 1) & 3)
	}
	return byte(typ)
}

// sealPacket builds a protected long header packet of the given type with a
// 2-byte packet number. frames are padded so the packet is at least minLen
// bytes and has room for the header protection sample.
func sealPacket(t testing.TB, k *Keys, version uint32, typ PacketType, dcid, scid, token []byte, pn uint64, frames []byte, minLen int) []byte {
	t.Helper()
	const pnLen = 2
	hdr := []byte{0xc0 | longType(version, typ)<<4 | (pnLen - 1)}
	hdr = binary.BigEndian.AppendUint32(hdr, version)
	hdr = append(hdr, byte(len(dcid)))
	hdr = append(hdr, dcid...)
	hdr = append(hdr, byte(len(scid)))
	hdr = append(hdr, scid...)
	if typ == PacketInitial {
		hdr = appendVarint(hdr, uint64(len(token)))
		hdr = append(hdr, token...)
	}
	payload := append([]byte(nil), frames...)
	for len(payload) < 4 || len(hdr)+2+pnLen+len(payload)+16 < minLen {
		payload = append(payload, 0)
	}
	length := pnLen + len(payload) + 16
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(length)|0x4000)
	pnOff := len(hdr)
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(pn))
	nonce := k.IV
	for i := range 8 {
		nonce[11-i] ^= byte(pn >> (8 * i))
	}
	pkt := k.aead.Seal(hdr, nonce[:], payload, hdr)
	var mask [16]byte
	k.hp.Encrypt(mask[:], pkt[pnOff+4:pnOff+20])
	pkt[0] ^= mask[0] & 0x0f
	for i := range pnLen {
		pkt[pnOff+i] ^= mask[1+i]
	}
	return pkt
}

// handshakeMsg builds a TLS handshake message of type typ with a body of n
// bytes, the body filled with a recognisable pattern.
func handshakeMsg(typ byte, n int) []byte {
	b := []byte{typ, byte(n >> 16), byte(n >> 8), byte(n)}
	for i := range n {
		b = append(b, byte(i*7+int(typ)))
	}
	return b
}
