package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Capture is a running tcpdump.
type Capture struct {
	File string
	// Stderr holds tcpdump's last words (its packet counts) after Stop.
	Stderr []string
	cmd    *exec.Cmd
	done   chan error
}

// StartCaptureE runs tcpdump -i iface in namespace ns ("" = current)
// writing to file, and waits until it listens. Stop ends it.
func StartCaptureE(ns, iface, filter, file string) (*Capture, error) {
	if _, err := LookBin("tcpdump"); err != nil {
		return nil, err
	}
	c := &Capture{File: file, done: make(chan error, 1)}
	// In immediate mode libpcap sizes every ring frame to the snaplen: with
	// the default 2 MB buffer and snaplen 262144 that is 8 frames, and a
	// loaded machine drops packets. 64 KiB frames in a 64 MB buffer hold 1000.
	args := []string{"-i", iface, "-U", "--immediate-mode", "-n", "-s", "65535", "-B", "65536", "-w", c.File}
	if filter != "" {
		args = append(args, filter)
	}
	c.cmd = Cmd(context.Background(), ns, "tcpdump", args...)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			c.Stderr = append(c.Stderr, sc.Text())
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(ready)
			}
		}
		if !once {
			close(ready)
		}
		c.done <- c.cmd.Wait()
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		return nil, errors.New("tcpdump did not start")
	}
	// tcpdump says "listening on" a moment before the kernel delivers to it:
	// packets of a connection made at once were seen missing under load.
	time.Sleep(300 * time.Millisecond)
	return c, nil
}

// Stop ends the capture and waits for the file to be complete.
func (c *Capture) Stop() {
	if c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	// Let the last packets land: tcpdump may hold them for a while under
	// load. Wait until the file has stopped growing for a second (at most
	// 8 s), then stop it.
	last, stable := int64(-1), 0
	for i := 0; i < 80 && stable < 10; i++ {
		time.Sleep(100 * time.Millisecond)
		var size int64
		if st, err := os.Stat(c.File); err == nil {
			size = st.Size()
		}
		if size == last {
			stable++
		} else {
			last, stable = size, 0
		}
	}
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// TsharkHello is tshark's view of one ClientHello or ServerHello.
type TsharkHello struct {
	Frame    int
	Src, Dst string // ip:port
	Type     int    // 1 ClientHello, 2 ServerHello
	Length   int    // handshake body length (without the 4-byte header)
	Groups   []string
	HRR      bool
	Version  string
	Time     float64 // frame.time_epoch of the frame tshark shows the message in
}

const hrrRandom = "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c"

// TsharkE dissects a capture's hellos. decodeAs lists TCP ports to decode
// as TLS ("-d tcp.port==N,tls").
func TsharkE(file string, decodeAs ...int) ([]TsharkHello, error) {
	if _, err := LookBin("tshark"); err != nil {
		return nil, err
	}
	args := []string{"-r", file, "-n", "-Y", "tls.handshake.type==1 || tls.handshake.type==2",
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport", "-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport",
		"-e", "tls.handshake.type", "-e", "tls.handshake.length", "-e", "tls.handshake.extensions_key_share_group", "-e", "tls.handshake.random",
		"-e", "tls.handshake.extensions.supported_version", "-e", "frame.time_epoch"}
	for _, p := range decodeAs {
		args = append(args, "-d", fmt.Sprintf("tcp.port==%d,tls", p))
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("tshark: %v", err)
	}
	var hs []TsharkHello
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 12 {
			continue
		}
		src, dst := f[1]+f[2], f[4]+f[5]
		types := strings.Split(f[7], ",")
		lens := strings.Split(f[8], ",")
		// One frame can hold several hellos only in odd cases; take them in order.
		for i, ty := range types {
			h := TsharkHello{Src: net.JoinHostPort(src, f[3]), Dst: net.JoinHostPort(dst, f[6])}
			fmt.Sscan(f[0], &h.Frame)
			fmt.Sscan(ty, &h.Type)
			if i < len(lens) {
				fmt.Sscan(lens[i], &h.Length)
			}
			if f[9] != "" {
				h.Groups = strings.Split(f[9], ",")
			}
			h.HRR = h.Type == 2 && strings.Contains(f[10], hrrRandom) || strings.Contains(strings.ReplaceAll(f[10], ":", ""), hrrRandom)
			h.Version = f[11]
			if len(f) > 12 {
				fmt.Sscan(f[12], &h.Time)
			}
			if h.Type == 1 || h.Type == 2 {
				hs = append(hs, h)
			}
		}
	}
	return hs, nil
}
