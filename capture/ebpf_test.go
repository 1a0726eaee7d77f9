//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package capture

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	ebpfasm "github.com/cilium/ebpf/asm"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/net/bpf"

	"github.com/pqwatch/pqwatch/pcapgen"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// TestFilterObjectCurrent regenerates the socket filter with bpf2go and
// compares it with the committed object and bindings (CI has clang; skipped
// without it).
func TestFilterObjectCurrent(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("needs clang to regenerate the socket filter:", err)
	}
	if testing.Short() {
		t.Skip("builds bpf2go: skipped in -short mode")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "github.com/cilium/ebpf/cmd/bpf2go", "-cc", "clang", "-cflags", "-O2 -g -Wall -Werror",
		"-target", "bpfel", "-tags", "linux", "-output-dir", dir, "-go-package", "capture", "filter", "bpf/filter.c")
	cmd.Env = append(os.Environ(), "GOPACKAGE=capture")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"filter_bpfel.o", "filter_bpfel.go"} {
		got, err1 := os.ReadFile(filepath.Join(dir, f))
		want, err2 := os.ReadFile(f)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what bpf/filter.c generates: run go generate ./capture", f)
		}
	}
}

// testEBPF loads the filter (every port, no loopback check) or skips
// saying why.
func testEBPF(t testing.TB, ports []uint16) *ebpfFilter {
	t.Helper()
	f, err := loadEBPF(ports)
	if err != nil {
		t.Skip("eBPF socket filter not loadable here (needs root or CAP_BPF):", err)
	}
	t.Cleanup(f.close)
	return f
}

// run passes an Ethernet frame through the program (BPF_PROG_TEST_RUN: the
// kernel strips the Ethernet header, as on a packet socket's network
// offset) and reports whether it was kept.
func (f *ebpfFilter) run(t testing.TB, frame []byte) bool {
	t.Helper()
	p, err := f.prog(loopNone, LinkRaw) // the test run's data starts at the IP header
	if err != nil {
		t.Fatal(err)
	}
	// BPF_PROG_TEST_RUN takes at most a page less the skb's overhead: a
	// longer frame is cut, which the program sees as a packet whose IP
	// length runs past its end (reads there fail: nothing is decided from
	// them).
	if len(frame) > maxTestRun {
		frame = frame[:maxTestRun]
	}
	ret, err := p.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("test run of a %d-byte frame: %v", len(frame), err)
	}
	return ret != 0
}

const maxTestRun = 3584

// TestEBPFNoiseLikeClassic: packet by packet, with no flow decided, the eBPF
// filter keeps and drops what the classic filter does.
func TestEBPFNoiseLikeClassic(t *testing.T) {
	appData := []byte{0x17, 0x03, 0x03, 0x00, 0x20, 1, 2, 3}
	payloads := [][]byte{nil, appData, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}, {0x17, 0x03}, {0x9a, 0x17, 0x03, 0x03},
		[]byte("EHLO x\r\n"), {0x14, 3, 3, 0, 1, 1, 0x17, 3, 3, 0, 0x35, 9}, {0x14, 3, 3, 0, 1, 1, 0x16, 3, 3, 2, 0, 1},
		{0x14, 3, 3, 0, 1, 1, 0x16, 3, 3, 0, 0x28}, {0x14, 3, 3, 0, 1, 1}, {0x14, 3, 3, 0, 1, 1, 0x17, 3},
		{0x14, 3, 3, 0, 2, 1, 1, 0x17, 3, 3}}
	for _, ports := range [][]uint16{{443}, nil} {
		f := testEBPF(t, ports)
		classic, err := FilterWith(LinkEthernet, ports, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, v6 := range []bool{false, true} {
			for _, opts := range []bool{false, true} {
				for _, dport := range []uint16{443, 80} {
					for _, fl := range []tcpSpec{{}, {fin: true}, {rst: true}, {udp: true}} {
						for _, pl := range payloads {
							s := fl
							s.v6, s.ipOpts, s.dport, s.payload = v6, opts && !v6, dport, pl
							frame := tcpFrame(t, s)
							if got, want := f.run(t, frame), runFilter(t, classic, frame); got != want {
								t.Errorf("ports %v v6 %v opts %v dport %d fin %v rst %v udp %v payload % x: eBPF keeps %v, classic %v",
									ports, v6, opts, dport, s.fin, s.rst, s.udp, pl, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// frameOf makes an Ethernet frame of a captured packet (the program reads
// from the network header, as on a packet socket), or nil for link types
// it does not handle.
func frameOf(link int, data []byte) []byte {
	eth := func(l3 []byte) []byte {
		if len(l3) == 0 {
			return nil
		}
		et := uint16(ethIPv4)
		if l3[0]>>4 == 6 {
			et = ethIPv6
		}
		return append(binary.BigEndian.AppendUint16(make([]byte, 12, 14+len(l3)), et), l3...)
	}
	switch layers.LinkType(link) {
	case layers.LinkTypeEthernet:
		return data
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12:
		return eth(data)
	case layers.LinkTypeLinuxSLL:
		if len(data) < 16 {
			return nil
		}
		return eth(data[16:])
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		if len(data) < 4 {
			return nil
		}
		return eth(data[4:])
	}
	return nil
}

// filtered is what a sniffer made of the packets a filter kept.
type filtered struct {
	kept    int
	records []string
	errs    map[string]uint64
}

// replay feeds a capture's packets through keep and the kept ones into a
// fresh sniffer.
func replay(t *testing.T, path string, keep func(frame []byte) bool) (filtered, error) {
	fh, err := os.Open(path)
	if err != nil {
		return filtered{}, err
	}
	defer fh.Close()
	var next func() ([]byte, time.Time, error)
	var link int
	if r, err := pcapgo.NewReader(fh); err == nil {
		link = int(r.LinkType())
		next = func() ([]byte, time.Time, error) {
			d, ci, err := r.ReadPacketData()
			return d, ci.Timestamp, err
		}
	} else {
		fh.Seek(0, io.SeekStart)
		r, err := pcapgo.NewNgReader(fh, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return filtered{}, err
		}
		link = int(r.LinkType())
		next = func() ([]byte, time.Time, error) {
			d, ci, err := r.ReadPacketData()
			return d, ci.Timestamp, err
		}
	}
	var out filtered
	var recs []*record.Handshake
	s := sniffer.New(sniffer.Config{OnRecord: func(h *record.Handshake) { recs = append(recs, h) }})
	for {
		d, ts, err := next()
		if err != nil {
			break // io.EOF, or a damaged tail: both filters see the same packets
		}
		fr := frameOf(link, d)
		if fr == nil {
			return filtered{}, fmt.Errorf("link type %d", link)
		}
		if len(fr) < 14 || keep(fr) {
			out.kept++
			s.Packet(ts, link, d)
		}
	}
	s.Flush()
	out.errs = s.Stats().Errors
	slices.SortFunc(recs, func(a, b *record.Handshake) int {
		return cmp.Or(a.TS.Compare(b.TS), cmp.Compare(a.ClientText(), b.ClientText()), cmp.Compare(a.Server, b.Server))
	})
	for _, r := range recs {
		b, _ := json.Marshal(r)
		out.records = append(out.records, string(b))
	}
	return out, nil
}

// equivalence compares the classic and the eBPF filter on one capture.
func equivalence(t *testing.T, path string) (classic, ebpfRes filtered, ok bool) {
	t.Helper()
	prog, err := FilterWith(LinkEthernet, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	ins, _ := bpf.Disassemble(prog)
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	classic, err = replay(t, path, func(fr []byte) bool { n, _ := vm.Run(fr); return n > 0 })
	if err != nil {
		return classic, ebpfRes, false
	}
	f := testEBPF(t, nil) // fresh flow map per capture
	ebpfRes, err = replay(t, path, func(fr []byte) bool { return f.run(t, fr) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(classic.records, ebpfRes.records) {
		t.Errorf("%s: records differ between the classic and the eBPF filter:\nclassic:\n%s\neBPF:\n%s", path,
			strings.Join(classic.records, "\n"), strings.Join(ebpfRes.records, "\n"))
	}
	if fmt.Sprint(classic.errs) != fmt.Sprint(ebpfRes.errs) {
		t.Errorf("%s: sniffer errors differ: classic %v, eBPF %v", path, classic.errs, ebpfRes.errs)
	}
	return classic, ebpfRes, true
}

// TestEBPFRecordsUnchanged: over generated captures of every handshake kind
// (at three MSS values, so that ServerHellos split over segments too), the
// testdata capture and the public corpus when present, the sniffer makes
// the same records and counts the same errors from the packets the eBPF
// filter keeps as from those the classic filter keeps.
func TestEBPFRecordsUnchanged(t *testing.T) {
	testEBPF(t, nil)
	dir := t.TempDir()
	var files []string
	for _, mss := range []int{1460, 536, 100} {
		p := filepath.Join(dir, fmt.Sprintf("gen-%d.pcap", mss))
		var buf bytes.Buffer
		clients := pcapgen.DefaultClients(10)
		clients = append(clients, pcapgen.Client{Name: "bulk", BulkBytes: 20000, SNI: "x"},
			pcapgen.Client{Name: "tls12bulk", MaxTLS: tls.VersionTLS12, BulkBytes: 20000, SNI: "x"})
		if _, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: clients, MSS: mss}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	files = append(files, "../testdata/handshakes.pcap")
	filepath.WalkDir("../../shared/corpus", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".pcap") || strings.HasSuffix(p, ".pcapng") || strings.HasSuffix(p, ".cap")) {
			files = append(files, p)
		}
		return nil
	})
	var kc, ke, recs, skipped int
	for _, p := range files {
		c, e, ok := equivalence(t, p)
		if !ok {
			skipped++
			continue
		}
		kc += c.kept
		ke += e.kept
		recs += len(c.records)
	}
	t.Logf("%d captures (%d skipped: unreadable or another link type), %d records: the classic filter kept %d packets, the eBPF filter %d",
		len(files)-skipped, skipped, recs, kc, ke)
}

// TestPacketsPerHandshake states, for each kind of handshake, how many of
// its packets reach user space with the classic and with the eBPF filter: a
// generated capture of one connection (Ethernet MSS; crypto/tls on both
// sides, each TLS write its own segments; the client sends one request, the
// server answers with a short body or with 20 kB). The figures are exact and
// checked, and the records the sniffer makes are the same with both.
func TestPacketsPerHandshake(t *testing.T) {
	testEBPF(t, nil)
	kinds := []struct {
		name   string
		client pcapgen.Client
		want   [4]int // classic, eBPF; short answer then 20 kB answer
	}{
		{"TLS 1.3 (X25519MLKEM768)", pcapgen.Client{Curves: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}}, [4]int{8, 5, 19, 5}},
		{"TLS 1.3 (X25519)", pcapgen.Client{Curves: []tls.CurveID{tls.X25519}}, [4]int{6, 4, 17, 4}},
		{"TLS 1.3 after HelloRetryRequest", pcapgen.Client{Curves: []tls.CurveID{tls.CurveP256, tls.CurveP384}}, [4]int{10, 8, 21, 8}},
		{"TLS 1.2", pcapgen.Client{Curves: []tls.CurveID{tls.X25519, tls.CurveP256}, MaxTLS: tls.VersionTLS12}, [4]int{10, 5, 21, 5}},
		{"failed (handshake_failure alert)", pcapgen.Client{Curves: []tls.CurveID{tls.CurveP256}}, [4]int{6, 4, 6, 4}},
	}
	for _, k := range kinds {
		var got [4]int
		for i, bulk := range []int{0, 20000} {
			k.client.Name, k.client.SNI, k.client.BulkBytes = k.name, "pqwatch.test", bulk
			var buf bytes.Buffer
			if _, err := pcapgen.Generate(context.Background(), &buf, pcapgen.Config{ServerCurves: pcapgen.DemoServerCurves, Clients: []pcapgen.Client{k.client}}); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "c.pcap")
			if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			c, e, _ := equivalence(t, p)
			if len(c.records) != 1 {
				t.Fatalf("%s: %d records, want 1", k.name, len(c.records))
			}
			got[2*i], got[2*i+1] = c.kept, e.kept
			t.Logf("%-34s answer %5d B: packets reaching user space: classic filter %2d, eBPF filter %2d (of %d on the wire)", k.name, bulk, c.kept, e.kept, countPackets(t, p))
		}
		if got != k.want {
			t.Errorf("%s: kept %v (classic, eBPF; short answer, 20 kB), want %v", k.name, got, k.want)
		}
	}
}

func countPackets(t *testing.T, path string) int {
	n := 0
	replay(t, path, func([]byte) bool { n++; return false })
	return n
}

// BenchmarkEBPFFilterRun is the socket filter's own run time per packet
// (BPF_PROG_TEST_RUN, repeated in the kernel), by kind of packet: the cost
// it adds to every packet of the captured interfaces.
func BenchmarkEBPFFilterRun(b *testing.B) {
	f := testEBPF(b, []uint16{443})
	p, err := f.prog(loopNone, LinkRaw)
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	kinds := []struct {
		name string
		s    tcpSpec
	}{
		{"other port", tcpSpec{dport: 80}},
		{"pure ACK", tcpSpec{dport: 443}},
		{"application data", tcpSpec{dport: 443, payload: []byte{0x17, 3, 3, 0, 0x20, 1, 2, 3, 4, 5}}},
		{"handshake record", tcpSpec{dport: 443, payload: []byte{0x16, 3, 1, 2, 0, 1, 0, 1, 0xfc, 3, 3}}},
		{"FIN", tcpSpec{dport: 443, fin: true}},
	}
	for _, k := range kinds {
		frame := tcpFrame(t, k.s)
		b.Run(k.name, func(b *testing.B) {
			_, d, err := p.Benchmark(frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/run")
		})
	}
}

// BenchmarkEBPFTrivialRun is BPF_PROG_TEST_RUN's own cost per run (a
// program that only returns 0), to read BenchmarkEBPFFilterRun against.
func BenchmarkEBPFTrivialRun(b *testing.B) {
	testEBPF(b, nil)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: ebpfasm.Instructions{ebpfasm.Mov.Imm(ebpfasm.R0, 0), ebpfasm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	frame := tcpFrame(&testing.T{}, tcpSpec{dport: 80})
	_, d, err := p.Benchmark(frame, b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(d.Nanoseconds()), "ns/run")
}
