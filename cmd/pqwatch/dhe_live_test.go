package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"

	"github.com/pqwatch/pqwatch/internal/testenv"
)

// TestDHELive: finite-field DHE as a real server offers it. Three openssl
// s_server on loopback with DHE-RSA-AES128-GCM-SHA256 only: one with
// OpenSSL 3.0's automatic parameters (for a 2048-bit RSA key, RFC 3526's
// 2048-bit MODP prime, not an RFC 7919 group), one given RFC 7919's
// ffdhe2048 (-dhparam from openssl genpkey -pkeyopt group:ffdhe2048), one a
// 1024-bit prime of its own from openssl dhparam. openssl s_client says the
// size ("Server Temp Key: DH, N bits"); tshark dissects dh_p, compared with
// the ffdhe2048 prime OpenSSL ships. pqwatch analyze must name them
// dhe2048, ffdhe2048 and dhe1024, with no group_missing.
func TestDHELive(t *testing.T) {
	if testing.Short() {
		t.Skip("live test; skipped with -short")
	}
	testenv.NeedRoot(t)
	openssl := testenv.NeedBin(t, "openssl")
	tshark := testenv.NeedBin(t, "tshark")
	testenv.NeedBin(t, "tcpdump")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	dh, ffdhe := filepath.Join(dir, "dh1024.pem"), filepath.Join(dir, "ffdhe2048.pem")
	for _, args := range [][]string{
		{"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=pqwatch.test", "-days", "1"},
		{"dhparam", "-out", dh, "1024"},
		{"genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", "group:ffdhe2048", "-out", ffdhe},
	} {
		if b, err := exec.CommandContext(ctx, openssl, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v: %s", args[0], err, b)
		}
	}
	// SECLEVEL=0 lets both ends use the 1024-bit prime.
	const cipher = "DHE-RSA-AES128-GCM-SHA256:@SECLEVEL=0"
	type server struct {
		name  string // what pqwatch must call it
		bits  int
		port  int
		extra []string
	}
	servers := []*server{
		{name: "dhe2048", bits: 2048},
		{name: "ffdhe2048", bits: 2048, extra: []string{"-dhparam", ffdhe}},
		{name: "dhe1024", bits: 1024, extra: []string{"-dhparam", dh}},
	}
	var filter []string
	for _, s := range servers {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		s.port = port
		filter = append(filter, fmt.Sprintf("tcp port %d", port))
		cmd := exec.CommandContext(ctx, openssl, append([]string{"s_server", "-accept", fmt.Sprintf("127.0.0.1:%d", port),
			"-cert", cert, "-key", key, "-tls1_2", "-cipher", cipher, "-naccept", "1"}, s.extra...)...)
		// s_server ends the connection when its stdin ends: keep it open.
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && sc.Text() != "ACCEPT" {
		}
		go io.Copy(io.Discard, stdout)
	}
	capt := testenv.StartCapture(t, "", "lo", strings.Join(filter, " or "))
	tempKey := regexp.MustCompile(`Server Temp Key: DH, (\d+) bits`)
	for _, s := range servers {
		cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", fmt.Sprintf("127.0.0.1:%d", s.port), "-tls1_2", "-cipher", cipher)
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.CombinedOutput()
		m := tempKey.FindSubmatch(out)
		if m == nil || string(m[1]) != strconv.Itoa(s.bits) || !strings.Contains(string(out), "Cipher is DHE-RSA-AES128-GCM-SHA256") {
			t.Fatalf("s_client against %s: no DHE handshake of %d bits:\n%s", s.name, s.bits, out)
		}
	}
	capt.Stop()

	// tshark: dh_p of each ServerKeyExchange; ffdhe2048's is OpenSSL's.
	out, err := os.ReadFile(ffdhe)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(out)
	if blk == nil {
		t.Fatalf("no PEM from openssl genpkey: %q", out)
	}
	der := cryptobyte.String(blk.Bytes)
	var seq, ffdhe2048 cryptobyte.String
	if !der.ReadASN1(&seq, asn1.SEQUENCE) || !seq.ReadASN1(&ffdhe2048, asn1.INTEGER) {
		t.Fatal("cannot read openssl's ffdhe2048 parameters")
	}
	ffdhe2048 = cryptobyte.String(strings.TrimLeft(string(ffdhe2048), "\x00"))
	out, err = exec.Command(tshark, "-r", capt.File, "-n", "-Y", "tls.handshake.type == 12",
		"-T", "fields", "-e", "tcp.srcport", "-e", "tls.handshake.p_len", "-e", "tls.handshake.p", "-e", "tls.handshake.g").Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("tshark: %q", l)
		}
		port, _ := strconv.Atoi(f[0])
		plen, _ := strconv.Atoi(f[1])
		p, _ := hex.DecodeString(strings.ReplaceAll(f[2], ":", ""))
		for _, s := range servers {
			if s.port != port {
				continue
			}
			seen[port] = true
			isFFDHE := string(p) == string(ffdhe2048) && f[3] == "02"
			if plen*8 != s.bits || isFFDHE != (s.name == "ffdhe2048") {
				t.Errorf("tshark on %s: p %d bytes, RFC 7919's ffdhe2048 %v (g %s)", s.name, plen, isFFDHE, f[3])
			}
		}
	}
	if len(seen) != len(servers) {
		t.Fatalf("tshark found ServerKeyExchanges for %v of %d servers: %q", seen, len(servers), out)
	}

	code, stdout, stderr := run(t, "analyze", "-format", "jsonl", capt.File)
	if code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, stderr)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		for _, s := range servers {
			if !strings.Contains(l, fmt.Sprintf(`"server":"127.0.0.1:%d"`, s.port)) {
				continue
			}
			n++
			if !strings.Contains(l, `"group":"`+s.name+`"`) || strings.Contains(l, "group_missing") || !strings.Contains(l, `"pq":false`) {
				t.Errorf("%s: %s", s.name, l)
			}
		}
	}
	if n != len(servers) {
		t.Errorf("%d records for %d handshakes:\n%s", n, len(servers), stdout)
	}
}
