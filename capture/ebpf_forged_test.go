//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package capture

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pqwatch/pqwatch/pcapgen"
)

// TestForgedSegmentsDecideNothing: segments forged by someone who does not
// see the connection (right addresses and ports, a sequence number outside
// the window) are put before the real ServerHello: an alert from the
// server's side and from the client's, and a copy of the ServerHello
// itself. None of them may decide the flow, or the real ServerHello and
// the rest of the handshake would be dropped in the kernel: the filter
// keeps exactly the real packets it keeps without them.
func TestForgedSegmentsDecideNothing(t *testing.T) {
	testEBPF(t, nil) // skips where the eBPF filter cannot load
	var buf bytes.Buffer
	client := pcapgen.Client{Name: "forged", SNI: "pqwatch.test", Curves: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}}
	if _, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: []pcapgen.Client{client}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "c.pcap")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	replay(t, p, func(fr []byte) bool { frames = append(frames, bytes.Clone(fr)); return false })

	// The TCP header of an Ethernet/IPv4 frame, and its payload.
	tcp := func(fr []byte) (hdr, payload []byte) {
		ip := fr[14:]
		h := ip[int(ip[0]&15)*4:]
		return h, h[int(h[12]>>4)*4:]
	}
	sh := -1
	for i, fr := range frames {
		if _, pl := tcp(fr); len(pl) > 5 && pl[0] == 0x16 && pl[5] == 2 {
			sh = i
			break
		}
	}
	if sh < 0 {
		t.Fatal("no ServerHello in the generated capture")
	}
	forge := func(from []byte, payload []byte) []byte {
		fr := bytes.Clone(from)
		h, _ := tcp(fr)
		off := len(fr) - len(h) + int(h[12]>>4)*4
		fr = append(fr[:off], payload...)
		binary.BigEndian.PutUint16(fr[16:], uint16(len(fr)-14)) // IPv4 total length
		h, _ = tcp(fr)
		binary.BigEndian.PutUint32(h[4:], binary.BigEndian.Uint32(h[4:])+1<<20) // far outside the window
		h[13] = 0x18                                                            // PSH ACK
		return fr
	}
	alert := []byte{0x15, 3, 3, 0, 2, 2, 40}
	_, shPayload := tcp(frames[sh])
	serverFrame, clientFrame := frames[sh], frames[sh-1] // the ServerHello, and the ClientHello before it
	if _, pl := tcp(clientFrame); len(pl) == 0 || pl[0] != 0x16 {
		// The frame before the ServerHello is an ACK: find the ClientHello.
		for i := sh - 1; i >= 0; i-- {
			if _, pl := tcp(frames[i]); len(pl) > 5 && pl[0] == 0x16 && pl[5] == 1 {
				clientFrame = frames[i]
				break
			}
		}
	}
	forged := [][]byte{forge(serverFrame, alert), forge(clientFrame, alert), forge(serverFrame, shPayload)}

	keptReal := func(inject bool) []int {
		f := testEBPF(t, nil) // a fresh flow map
		var kept []int
		for i, fr := range frames {
			if inject && i == sh {
				for _, x := range forged {
					f.run(t, x)
				}
			}
			if f.run(t, fr) {
				kept = append(kept, i)
			}
		}
		return kept
	}
	clean, attacked := keptReal(false), keptReal(true)
	t.Logf("real packets kept: %v without the forged segments, %v with them (of %d; the ServerHello is #%d)", clean, attacked, len(frames), sh)
	if !equalInts(clean, attacked) {
		t.Errorf("forged out-of-window segments changed what the filter keeps: %v, want %v", attacked, clean)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
