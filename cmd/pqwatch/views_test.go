package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/pqwatch/pqwatch/pcapgen"
)

// nodeCapture writes, as `tcpdump -i any -w` on a Kubernetes node does
// (Linux cooked v2), every packet of real handshakes to the Service
// address svc twice: as the uplink sees it (client -> svc, the client's
// packets with TTL 64) and, 20 µs later, as the pod's bridge sees it after
// kube-proxy's DNAT (client -> pod, TTL 63). The clients in snat are
// masqueraded to the node's address on the bridge. It returns the clients'
// addresses.
func nodeCapture(t *testing.T, path string, svc, pod, node netip.AddrPort, snat map[int]bool, n int) []netip.AddrPort {
	t.Helper()
	var buf bytes.Buffer
	res, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{Server: svc, ServerCurves: pcapgen.DemoServerCurves, Clients: pcapgen.DefaultClients(n)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgen.NewReaderForTest(&buf)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeLinuxSLL2); err != nil {
		t.Fatal(err)
	}
	var clients []netip.AddrPort
	index := map[netip.AddrPort]int{}
	for _, r := range res {
		index[r.ClientAddr] = len(clients)
		clients = append(clients, r.ClientAddr)
	}
	write := func(ts time.Time, ifindex uint32, ip *layers.IPv4, tcp *layers.TCP, payload []byte) {
		_ = tcp.SetNetworkLayerForChecksum(ip)
		sb := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, tcp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		// SLL2: protocol, reserved, interface index, ARPHRD_ETHER, packet
		// type, address length, address.
		hdr := binary.BigEndian.AppendUint16(nil, 0x0800)
		hdr = append(hdr, 0, 0)
		hdr = binary.BigEndian.AppendUint32(hdr, ifindex)
		hdr = append(hdr, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0)
		frame := append(hdr, sb.Bytes()...)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
			t.Fatal(err)
		}
	}
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatal("pcapgen wrote a frame that is not IPv4/TCP")
		}
		payload := append([]byte(nil), tcp.Payload...)
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.SrcIP.To4())), uint16(tcp.SrcPort))
		toServer := src != svc
		client := src
		if !toServer {
			client = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.DstIP.To4())), uint16(tcp.DstPort))
		}
		// The uplink: as the client sent it.
		up, upTCP := *ip, *tcp
		up.TTL = 64
		if !toServer {
			up.TTL = 63 // the pod's reply, routed once
		}
		write(ci.Timestamp, 2, &up, &upTCP, payload)
		// The bridge, after DNAT (and SNAT for some).
		br, brTCP := *ip, *tcp
		br.TTL = 63
		if !toServer {
			br.TTL = 64
		}
		cl := client
		if snat[index[client]] {
			cl = netip.AddrPortFrom(node.Addr(), client.Port()+1000)
		}
		if toServer {
			br.SrcIP, brTCP.SrcPort = cl.Addr().AsSlice(), layers.TCPPort(cl.Port())
			br.DstIP, brTCP.DstPort = pod.Addr().AsSlice(), layers.TCPPort(pod.Port())
		} else {
			br.SrcIP, brTCP.SrcPort = pod.Addr().AsSlice(), layers.TCPPort(pod.Port())
			br.DstIP, brTCP.DstPort = cl.Addr().AsSlice(), layers.TCPPort(cl.Port())
		}
		write(ci.Timestamp.Add(20*time.Microsecond), 5, &br, &brTCP, payload)
	}
	return clients
}

// TestAnalyzeNodeViews: a `tcpdump -i any` capture on a node, where every
// handshake is seen before kube-proxy's DNAT (on the uplink) and after it
// (on the pod's bridge), gives one record per handshake: the pod's view
// (server, outcome, group), with the Service address as frontend and the
// real client, also for a client the node masqueraded.
func TestAnalyzeNodeViews(t *testing.T) {
	svc := netip.MustParseAddrPort("10.198.0.2:443")
	pod := netip.MustParseAddrPort("10.199.0.2:8443")
	node := netip.MustParseAddrPort("10.199.0.1:0")
	path := filepath.Join(t.TempDir(), "any.pcap")
	const n = 5
	clients := nodeCapture(t, path, svc, pod, node, map[int]bool{1: true, 3: true}, n)

	code, stdout, stderr := run(t, "analyze", "-format", "jsonl", path)
	if code != 0 {
		t.Fatalf("analyze exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != n {
		t.Fatalf("%d records for %d handshakes seen twice:\n%s", len(lines), n, stdout)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		var r struct {
			TS, Client, Server, Frontend, Outcome string
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Server != pod.String() || r.Frontend != svc.String() || r.Outcome == "" {
			t.Errorf("record %d: server %s frontend %s outcome %s, want %s via %s", i, r.Server, r.Frontend, r.Outcome, pod, svc)
		}
		seen[r.Client] = true
		if !strings.Contains(l, `"frontend":"10.198.0.2:443","sni"`) {
			t.Errorf("record %d: frontend not after server: %s", i, l)
		}
	}
	for _, c := range clients {
		if !seen[c.String()] {
			t.Errorf("no record has the real client %s (records' clients: %v)", c, seen)
		}
	}

	// The summary counts each handshake once.
	code, stdout, _ = run(t, "analyze", "-format", "json", path)
	var sum struct {
		Handshakes  int
		ViewsMerged int `json:"views_merged"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); code != 0 || err != nil || sum.Handshakes != n || sum.ViewsMerged != n {
		t.Errorf("summary: exit %d, %v, handshakes %d, views merged %d, want %d and %d", code, err, sum.Handshakes, sum.ViewsMerged, n, n)
	}
	if code, stdout, _ = run(t, "analyze", path); code != 0 || !strings.Contains(stdout, fmt.Sprintf("views merged       %d (", n)) {
		t.Errorf("text summary (exit %d) does not say %d views were merged:\n%s", code, n, stdout)
	}
}
