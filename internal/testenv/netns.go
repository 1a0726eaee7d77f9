package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
)

var seq atomic.Int32

// Pair is two network namespaces joined by a veth pair: S (server side,
// 10.77.N.1) and C (client side, 10.77.N.2).
type Pair struct {
	S, C         string // namespace names
	SIf, CIf     string // veth names inside them
	SAddr, CAddr string
}

// NewPairE creates the namespaces and veth with the given MTU, with
// segmentation and receive offloads off (where ethtool is installed) so a
// capture shows wire-sized segments. Close deletes them; on an error
// nothing is left behind.
func NewPairE(mtu int) (*Pair, error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	if _, err := LookBin("ip"); err != nil {
		return nil, err
	}
	n := int(seq.Add(1)) + os.Getpid()%200
	p := &Pair{
		S: fmt.Sprintf("pqw%d-s-%d", os.Getpid(), n), C: fmt.Sprintf("pqw%d-c-%d", os.Getpid(), n),
		SIf: "veth-s", CIf: "veth-c",
		SAddr: fmt.Sprintf("10.77.%d.1", n%250), CAddr: fmt.Sprintf("10.77.%d.2", n%250),
	}
	// The veth is made here under temporary names, then each end is moved
	// into its namespace and renamed.
	tmp := fmt.Sprintf("pqv%d", n)
	err := ip([]string{"netns", "add", p.S},
		[]string{"netns", "add", p.C},
		[]string{"link", "add", tmp + "a", "type", "veth", "peer", "name", tmp + "b"})
	if err == nil {
		if err = ip([]string{"link", "set", tmp + "a", "netns", p.S}); err != nil {
			// Both ends are still here (deleting one deletes the other);
			// once one is in a namespace, deleting that takes them away.
			exec.Command("ip", "link", "del", tmp+"a").Run()
		}
	}
	if err == nil {
		err = ip([]string{"link", "set", tmp + "b", "netns", p.C},
			[]string{"-n", p.S, "link", "set", tmp + "a", "name", p.SIf},
			[]string{"-n", p.C, "link", "set", tmp + "b", "name", p.CIf},
			[]string{"-n", p.S, "link", "set", p.SIf, "mtu", fmt.Sprint(mtu), "up"},
			[]string{"-n", p.C, "link", "set", p.CIf, "mtu", fmt.Sprint(mtu), "up"},
			[]string{"-n", p.S, "link", "set", "lo", "up"},
			[]string{"-n", p.C, "link", "set", "lo", "up"},
			[]string{"-n", p.S, "addr", "add", p.SAddr + "/24", "dev", p.SIf},
			[]string{"-n", p.C, "addr", "add", p.CAddr + "/24", "dev", p.CIf})
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	// Disable offloads so the capture shows wire-sized segments.
	if _, err := exec.LookPath("ethtool"); err == nil {
		exec.Command("ip", "netns", "exec", p.S, "ethtool", "-K", p.SIf, "tso", "off", "gso", "off", "gro", "off").Run()
		exec.Command("ip", "netns", "exec", p.C, "ethtool", "-K", p.CIf, "tso", "off", "gso", "off", "gro", "off").Run()
	}
	return p, nil
}

// ip runs ip with each argument list in turn, stopping at the first that
// fails.
func ip(cmds ...[]string) error {
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// Close deletes both namespaces, and the veth with them.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range []string{p.S, p.C} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, bytes.TrimSpace(out)))
		}
	}
	return errors.Join(errs...)
}

// InNS runs fn on an OS thread switched into namespace ns; sockets created
// by fn belong to ns and keep working from any goroutine afterwards.
func InNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left locked and dies with the goroutine, so its
		// namespace never leaks to other goroutines.
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a TCP listener inside namespace ns ("" = current).
func Listen(ns, addr string) (net.Listener, error) {
	if ns == "" {
		return net.Listen("tcp", addr)
	}
	var ln net.Listener
	err := InNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return })
	return ln, err
}

// Dial opens a TCP connection from namespace ns ("" = current).
func Dial(ns, addr string, timeout time.Duration) (net.Conn, error) {
	if ns == "" {
		return net.DialTimeout("tcp", addr, timeout)
	}
	var c net.Conn
	err := InNS(ns, func() (err error) { c, err = net.DialTimeout("tcp", addr, timeout); return })
	return c, err
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Cmd returns a command run inside namespace ns ("" = current).
func Cmd(ctx context.Context, ns string, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Output runs a command and returns combined output, for diagnostics.
func Output(cmd *exec.Cmd) string {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	_ = cmd.Run()
	return b.String()
}
