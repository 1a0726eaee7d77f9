package quic

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/crypto/cryptobyte"
)

var update = flag.Bool("update", false, "regenerate testdata/tshark_quic_clienthellos.json with tshark")

const (
	corpusDir  = "../../../shared/corpus"
	goldenFile = "testdata/tshark_quic_clienthellos.json"
)

// corpusGolden maps a capture (relative to corpusDir) to tshark's view of
// its QUIC handshake messages, each "key_share groups/body length", sorted.
type corpusGolden map[string]struct {
	ClientHellos []string `json:"client_hellos"`
	ServerHellos []string `json:"server_hellos"`
}

// quicCaptures lists the captures in which tshark saw QUIC Initial packets.
func quicCaptures(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(corpusDir, "analysis.json"))
	if err != nil {
		t.Skipf("corpus not available: %v", err)
	}
	var entries []struct {
		File         string `json:"file"`
		QUICInitials int    `json:"quic_initials"`
	}
	if err := json.Unmarshal(b, &entries); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if e.QUICInitials > 0 {
			files = append(files, e.File)
		}
	}
	return files
}

// tsharkHellos returns tshark's "groups/length" of every QUIC handshake
// message of type typ (1 ClientHello, 2 ServerHello) in file.
func tsharkHellos(t *testing.T, file, typ string) []string {
	out, err := exec.Command("tshark", "-r", filepath.Join(corpusDir, file),
		"-Y", "quic && tls.handshake.type == "+typ, "-T", "fields",
		"-e", "tls.handshake.type", "-e", "tls.handshake.extensions_key_share_group", "-e", "tls.handshake.length").Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", file, err)
	}
	var res []string
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			continue
		}
		// Several handshake messages in one frame: pick the one asked for.
		types, lengths := strings.Split(f[0], ","), strings.Split(f[2], ",")
		for i, mt := range types {
			if mt != typ || i >= len(lengths) {
				continue
			}
			var groups []string
			for g := range strings.SplitSeq(f[1], ",") {
				if n, err := strconv.Atoi(g); err == nil {
					groups = append(groups, fmt.Sprintf("0x%04x", n))
				}
			}
			res = append(res, strings.Join(groups, " ")+"/"+lengths[i])
		}
	}
	slices.Sort(res)
	return res
}

// keyShareGroups extracts the key_share group codepoints of a ClientHello
// or ServerHello message (header included). Test helper only: tlsparse owns
// TLS parsing.
func keyShareGroups(msg []byte) ([]uint16, error) {
	s := cryptobyte.String(msg)
	var body, sessID, suites, comp, exts cryptobyte.String
	var typ uint8
	if !s.ReadUint8(&typ) || !s.ReadUint24LengthPrefixed(&body) ||
		!body.Skip(2+32) || !body.ReadUint8LengthPrefixed(&sessID) {
		return nil, errors.New("malformed hello")
	}
	switch typ {
	case 1:
		if !body.ReadUint16LengthPrefixed(&suites) || !body.ReadUint8LengthPrefixed(&comp) {
			return nil, errors.New("malformed ClientHello")
		}
	case 2:
		if !body.Skip(3) {
			return nil, errors.New("malformed ServerHello")
		}
	default:
		return nil, fmt.Errorf("handshake type %d", typ)
	}
	if !body.ReadUint16LengthPrefixed(&exts) {
		return nil, errors.New("malformed extensions")
	}
	for !exts.Empty() {
		var et uint16
		var ext cryptobyte.String
		if !exts.ReadUint16(&et) || !exts.ReadUint16LengthPrefixed(&ext) {
			return nil, errors.New("malformed extension")
		}
		if et != 51 {
			continue
		}
		if typ == 2 {
			var g uint16
			if !ext.ReadUint16(&g) {
				return nil, errors.New("malformed key_share")
			}
			return []uint16{g}, nil
		}
		var shares cryptobyte.String
		if !ext.ReadUint16LengthPrefixed(&shares) {
			return nil, errors.New("malformed key_share")
		}
		var groups []uint16
		for !shares.Empty() {
			var g uint16
			var kx cryptobyte.String
			if !shares.ReadUint16(&g) || !shares.ReadUint16LengthPrefixed(&kx) {
				return nil, errors.New("malformed key_share entry")
			}
			groups = append(groups, g)
		}
		return groups, nil
	}
	return nil, nil
}

// runCapture feeds every UDP payload of a pcap or pcapng file to a fresh
// ConnTable and returns the delivered connections.
func runCapture(t *testing.T, path string) ([]*Conn, *ConnTable) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		src  gopacket.PacketDataSource
		link layers.LinkType
	)
	if r, err := pcapgo.NewReader(f); err == nil {
		src, link = r, r.LinkType()
	} else {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatalf("%s: neither pcap nor pcapng: %v", path, err)
		}
		src, link = r, r.LinkType()
	}
	var conns []*Conn
	tr := NewConnTable(Config{OnConn: func(c *Conn) { conns = append(conns, c) }})
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Logf("%s: stop reading: %v", path, err)
			break
		}
		pkt := gopacket.NewPacket(data, link, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil {
			continue
		}
		var sa, da netip.Addr
		switch ip := pkt.NetworkLayer().(type) {
		case *layers.IPv4:
			sa, _ = netip.AddrFromSlice(ip.SrcIP.To4())
			da, _ = netip.AddrFromSlice(ip.DstIP.To4())
		case *layers.IPv6:
			sa, _ = netip.AddrFromSlice(ip.SrcIP)
			da, _ = netip.AddrFromSlice(ip.DstIP)
		default:
			continue
		}
		tr.Datagram(ci.Timestamp, netip.AddrPortFrom(sa, uint16(udp.SrcPort)),
			netip.AddrPortFrom(da, uint16(udp.DstPort)), udp.Payload)
	}
	tr.Flush()
	return conns, tr
}

func TestCorpusConformance(t *testing.T) {
	files := quicCaptures(t)
	if *update {
		if _, err := exec.LookPath("tshark"); err != nil {
			t.Fatalf("-update needs tshark: %v", err)
		}
		g := corpusGolden{}
		for _, f := range files {
			e := g[f]
			e.ClientHellos = tsharkHellos(t, f, "1")
			e.ServerHellos = tsharkHellos(t, f, "2")
			g[f] = e
		}
		b, _ := json.MarshalIndent(g, "", "  ")
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	var golden corpusGolden
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		t.Run(strings.ReplaceAll(file, "/", "_"), func(t *testing.T) {
			want, ok := golden[file]
			if !ok {
				t.Fatalf("no golden entry; run with -update")
			}
			start := time.Now()
			conns, tr := runCapture(t, filepath.Join(corpusDir, file))
			var chs, shs []string
			var packets []int
			for _, c := range conns {
				if c.ClientHello != nil {
					chs = append(chs, describe(t, c.ClientHello))
					packets = append(packets, c.ClientHelloPackets)
				}
				if c.ServerHello != nil {
					shs = append(shs, describe(t, c.ServerHello))
				}
			}
			compare(t, "ClientHellos", want.ClientHellos, chs)
			compare(t, "ServerHellos", want.ServerHellos, shs)
			t.Logf("%d conns, %d ClientHellos in %v packets, %d ServerHellos, %v, stats %v",
				len(conns), len(chs), packets, len(shs), time.Since(start).Round(time.Millisecond), nonZero(tr.Stats()))
		})
	}
}

// describe renders a hello as the golden file does.
func describe(t *testing.T, msg []byte) string {
	groups, err := keyShareGroups(msg)
	if err != nil {
		t.Errorf("%v: %x", err, msg)
	}
	var gs []string
	for _, g := range groups {
		gs = append(gs, fmt.Sprintf("0x%04x", g))
	}
	return strings.Join(gs, " ") + "/" + strconv.Itoa(len(msg)-4)
}

// compare reports what tshark dissected and we did not as an error, and the
// reverse as a log line (tshark 4.0 misses some multi-packet hellos).
func compare(t *testing.T, what string, want, got []string) {
	t.Helper()
	slices.Sort(got)
	if missing := multisetDiff(want, got); len(missing) > 0 {
		t.Errorf("%s tshark dissected and we did not: %v (ours %v)", what, missing, got)
	}
	if extra := multisetDiff(got, want); len(extra) > 0 {
		t.Logf("%s we found and tshark did not: %v", what, extra)
	}
}

// multisetDiff returns the elements of a not matched in b.
func multisetDiff(a, b []string) []string {
	left := map[string]int{}
	for _, x := range b {
		left[x]++
	}
	var d []string
	for _, x := range a {
		if left[x] > 0 {
			left[x]--
			continue
		}
		d = append(d, x)
	}
	return d
}

func nonZero(m map[string]uint64) map[string]uint64 {
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}
