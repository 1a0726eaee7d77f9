package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The addresses of a KubeNode. Every one of them lives only inside the
// namespaces the node creates, so two nodes (two tests) never meet.
const (
	KubeClientAddr = "10.198.0.1" // the client outside the cluster, on the node's uplink
	KubeNodeAddr   = "10.198.0.2" // the node's address on its uplink (a NodePort's or externalIP's)
	KubeBridgeAddr = "10.199.0.1" // cni0: the pods' gateway, and what MASQUERADE makes of a client
	KubePodCIDR    = "10.199.0.0/24"
	KubeClusterIP  = "10.96.0.10" // a Service's ClusterIP (no interface has it: kube-proxy's DNAT does)
)

// KubeNode is a Kubernetes node in miniature, as the DaemonSet's agent sees
// it (hostNetwork: the node's network namespace; hostPID: the host's PID
// namespace):
//
//	Client  eth0 10.198.0.1/24 ──veth── Node  eth0 10.198.0.2/24 (uplink)
//	                                          cni0 10.199.0.1/24 (bridge), ip_forward on,
//	                                          iptables -t nat as kube-proxy's iptables mode
//	                                          writes it (Expose)
//	                                          vethXXXXXXXX ──┐ one bridge port per pod
//	Pod     eth0 10.199.0.N/24, default via 10.199.0.1 ───────┘
//
// A pod (StartPodE) is a network namespace on the bridge, optionally with a
// server (Debian's nginx, or Caddy) in a PID namespace of its own whose
// stdout and stderr a runtime stand-in writes to
// DIR/var/log/pods/NAMESPACE_POD_UID/CONTAINER/0.log in containerd's CRI
// format or Docker's json-file format. No kernel module is loaded: IPVS is
// reported absent by IPVS when the kernel lacks it.
//
// Close stops the pods and deletes every namespace (veths, the bridge and
// the iptables rules, which live in the node's namespace, go with them).
type KubeNode struct {
	Client string // namespace of the client outside the cluster
	Node   string // the node's network namespace
	Uplink string // the node's uplink interface (eth0)
	Bridge string // the pods' bridge (cni0)
	Dir    string // holds var/log/pods

	mu       sync.Mutex
	nextPod  int // pods started, for unique namespace names
	pods     []*Pod
	services map[string]*KubeService
	id       string
}

// NewKubeNodeE creates the client and node namespaces, the uplink veth and
// the bridge, with the kube-proxy chains installed but no Service yet.
// dir receives the pods' logs (var/log/pods) and their servers' files.
// On an error nothing is left behind.
func NewKubeNodeE(dir string) (*KubeNode, error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	if _, err := LookBin("ip", "iptables-restore", "iptables"); err != nil {
		return nil, err
	}
	n := int(seq.Add(1))
	id := fmt.Sprintf("pqk%d-%d", os.Getpid(), n)
	k := &KubeNode{
		Client: id + "-client", Node: id + "-node", Uplink: "eth0", Bridge: "cni0", Dir: dir,
		services: map[string]*KubeService{}, id: id,
	}
	err := ip([]string{"netns", "add", k.Node}, []string{"netns", "add", k.Client})
	if err == nil {
		// The veth is made inside the node's namespace, so no name is ever
		// taken in the caller's.
		err = ip([]string{"-n", k.Node, "link", "add", k.Uplink, "type", "veth", "peer", "name", "eth0", "netns", k.Client},
			[]string{"-n", k.Node, "link", "add", k.Bridge, "type", "bridge"},
			[]string{"-n", k.Node, "addr", "add", KubeNodeAddr + "/24", "dev", k.Uplink},
			[]string{"-n", k.Node, "addr", "add", KubeBridgeAddr + "/24", "dev", k.Bridge},
			[]string{"-n", k.Node, "link", "set", "lo", "up"},
			[]string{"-n", k.Node, "link", "set", k.Uplink, "up"},
			[]string{"-n", k.Node, "link", "set", k.Bridge, "up"},
			[]string{"-n", k.Client, "addr", "add", KubeClientAddr + "/24", "dev", "eth0"},
			[]string{"-n", k.Client, "link", "set", "lo", "up"},
			[]string{"-n", k.Client, "link", "set", "eth0", "up"},
			// The client reaches the pod network and the ClusterIP range
			// through the node, as a router upstream of a node would route.
			[]string{"-n", k.Client, "route", "add", KubePodCIDR, "via", KubeNodeAddr},
			[]string{"-n", k.Client, "route", "add", "10.96.0.0/12", "via", KubeNodeAddr})
	}
	if err == nil {
		err = k.sysctl("net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1")
	}
	if err == nil {
		err = k.iptablesRestore(false, kubeProxyBase)
	}
	if err != nil {
		k.Close()
		return nil, err
	}
	if _, err := exec.LookPath("ethtool"); err == nil {
		// Wire-sized segments in the capture, as NewPairE.
		exec.Command("ip", "netns", "exec", k.Node, "ethtool", "-K", k.Uplink, "tso", "off", "gso", "off", "gro", "off").Run()
		exec.Command("ip", "netns", "exec", k.Client, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "off").Run()
	}
	return k, nil
}

// usedAddr reports whether a pod of k has 10.199.0.i; k.mu is held.
func (k *KubeNode) usedAddr(i int) bool {
	a := fmt.Sprintf("10.199.0.%d", i)
	return slices.ContainsFunc(k.pods, func(p *Pod) bool { return p.Addr == a })
}

// sysctl sets kernel parameters inside the node's network namespace only
// (they are per namespace).
func (k *KubeNode) sysctl(kv ...string) error {
	for _, s := range kv {
		if out, err := exec.Command("ip", "netns", "exec", k.Node, "sysctl", "-q", "-w", s).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s in %s: %v: %s", s, k.Node, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// iptablesRestore feeds rules to iptables-restore in the node's namespace
// (with --noflush: the chains it declares are flushed, the rest kept).
func (k *KubeNode) iptablesRestore(noflush bool, rules string) error {
	args := []string{"netns", "exec", k.Node, "iptables-restore", "-w"}
	if noflush {
		args = append(args, "--noflush")
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore in %s: %v: %s\nrules:\n%s", k.Node, err, bytes.TrimSpace(out), rules)
	}
	return nil
}

// NAT returns `iptables -t nat -S` in the node's namespace, for a test's
// failure message.
func (k *KubeNode) NAT() string {
	return Output(exec.Command("ip", "netns", "exec", k.Node, "iptables", "-w", "-t", "nat", "-S"))
}

// kubeProxyBase is what kube-proxy's iptables mode writes before any
// Service: the hooks into the built-in chains and the masquerade mark.
const kubeProxyBase = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
`

// KubeService is one port of a Service as kube-proxy's iptables mode
// programs it: a ClusterIP and an external address (the node's own, as a
// NodePort or an externalIP reaches it) DNATed to one endpoint.
type KubeService struct {
	Name       string // "namespace/service:port", as in kube-proxy's comments
	ClusterIP  string // e.g. KubeClusterIP; "" for none
	ExternalIP string // e.g. KubeNodeAddr; "" for none
	Port       int    // the Service's port on both, e.g. 443
	Endpoint   string // the pod's ip:port, e.g. "10.199.0.2:8443"
	// Local is externalTrafficPolicy: Local: external clients keep their
	// address. false is Cluster (the default): they are masqueraded to
	// the node's address on the pod network (KUBE-MARK-MASQ, then
	// MASQUERADE in KUBE-POSTROUTING), so the pod sees 10.199.0.1.
	Local bool
}

// chain is kube-proxy's chain name: the prefix and the first 16 characters
// of the base32 SHA-256 of what it names (servicePortChainName).
func kubeChain(prefix, s string) string {
	h := sha256.Sum256([]byte(s))
	return prefix + base32.StdEncoding.EncodeToString(h[:])[:16]
}

// chains are the service's chains: SVC, EXT, SVL and its endpoint's SEP.
func (s *KubeService) chains() (svc, ext, svl, sep string) {
	return kubeChain("KUBE-SVC-", s.Name+"tcp"), kubeChain("KUBE-EXT-", s.Name+"tcp"),
		kubeChain("KUBE-SVL-", s.Name+"tcp"), kubeChain("KUBE-SEP-", s.Name+"tcp"+s.Endpoint)
}

// jumps are the service's rules in KUBE-SERVICES, without the -A/-I/-D.
func (s *KubeService) jumps() []string {
	svc, ext, _, _ := s.chains()
	var j []string
	if s.ExternalIP != "" {
		j = append(j, fmt.Sprintf("KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"%s external IP\" -m tcp --dport %d -j %s", s.ExternalIP, s.Name, s.Port, ext))
	}
	if s.ClusterIP != "" {
		j = append(j, fmt.Sprintf("KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport %d -j %s", s.ClusterIP, s.Name, s.Port, svc))
	}
	return j
}

// rules renders the service's chains (declaring them flushes them), and
// its KUBE-SERVICES jumps when jumps is set (the first time; a policy
// change rewrites its own chains only). The jumps go before the NodePort
// rule, which must stay last.
func (s *KubeService) rules(jumps bool) (string, error) {
	ep, err := netip.ParseAddrPort(s.Endpoint)
	if err != nil {
		return "", fmt.Errorf("service %s: endpoint: %w", s.Name, err)
	}
	svc, ext, svl, sep := s.chains()
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range []string{svc, ext, svl, sep} {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	if jumps {
		for _, j := range s.jumps() {
			fmt.Fprintf(&b, "-I %s\n", strings.Replace(j, "KUBE-SERVICES", "KUBE-SERVICES 1", 1))
		}
	}
	if s.ClusterIP != "" {
		// Traffic to the ClusterIP from outside the pod network is
		// masqueraded (kube-proxy's --cluster-cidr rule).
		fmt.Fprintf(&b, "-A %s ! -s %s -d %s/32 -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport %d -j KUBE-MARK-MASQ\n", svc, KubePodCIDR, s.ClusterIP, s.Name, s.Port)
	}
	fmt.Fprintf(&b, "-A %s -m comment --comment \"%s -> %s\" -j %s\n", svc, s.Name, s.Endpoint, sep)
	fmt.Fprintf(&b, "-A %s -m comment --comment \"%s -> %s\" -j %s\n", svl, s.Name, s.Endpoint, sep)
	if s.Local {
		fmt.Fprintf(&b, "-A %s -j %s\n", ext, svl)
	} else {
		fmt.Fprintf(&b, "-A %s -m comment --comment \"masquerade traffic for %s external destinations\" -j KUBE-MARK-MASQ\n", ext, s.Name)
		fmt.Fprintf(&b, "-A %s -j %s\n", ext, svc)
	}
	// Hairpin: the endpoint reaching itself through the Service.
	fmt.Fprintf(&b, "-A %s -s %s/32 -m comment --comment \"%s\" -j KUBE-MARK-MASQ\n", sep, ep.Addr(), s.Name)
	fmt.Fprintf(&b, "-A %s -p tcp -m comment --comment \"%s\" -m tcp -j DNAT --to-destination %s\n", sep, s.Name, s.Endpoint)
	b.WriteString("COMMIT\n")
	return b.String(), nil
}

// ExposeE programs the Service's rules in the node's namespace.
func (k *KubeNode) ExposeE(s KubeService) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.services[s.Name]; ok {
		return fmt.Errorf("service %s is already exposed", s.Name)
	}
	r, err := s.rules(true)
	if err != nil {
		return err
	}
	if err := k.iptablesRestore(true, r); err != nil {
		return err
	}
	k.services[s.Name] = &s
	return nil
}

// SetExternalTrafficPolicyE switches an exposed Service between
// externalTrafficPolicy Local (local true: the pod sees the client's own
// address) and Cluster (the client is masqueraded to KubeBridgeAddr), by
// rewriting its chains as kube-proxy does. Connections already tracked
// keep their translation.
func (k *KubeNode) SetExternalTrafficPolicyE(service string, local bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.services[service]
	if !ok {
		return fmt.Errorf("service %s is not exposed", service)
	}
	c := *s
	c.Local = local
	r, err := c.rules(false)
	if err != nil {
		return err
	}
	if err := k.iptablesRestore(true, r); err != nil {
		return err
	}
	*s = c
	return nil
}

// UnexposeE removes a Service's rules, as kube-proxy does when it is
// deleted: its KUBE-SERVICES jumps, then its chains.
func (k *KubeNode) UnexposeE(service string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.services[service]
	if !ok {
		return fmt.Errorf("service %s is not exposed", service)
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, j := range s.jumps() {
		fmt.Fprintf(&b, "-D %s\n", j)
	}
	svc, ext, svl, sep := s.chains()
	for _, c := range []string{svc, ext, svl, sep} {
		fmt.Fprintf(&b, "-F %s\n", c)
	}
	for _, c := range []string{ext, svc, svl, sep} {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	if err := k.iptablesRestore(true, b.String()); err != nil {
		return err
	}
	delete(k.services, service)
	return nil
}

// IPVS returns nil when the kernel can run kube-proxy's IPVS mode in the
// node's namespace, else an ErrMissing error saying why (no module is ever
// loaded to get it).
func (k *KubeNode) IPVS() error {
	out, err := exec.Command("ip", "netns", "exec", k.Node, "cat", "/proc/net/ip_vs").CombinedOutput()
	if err != nil {
		return missingError(fmt.Sprintf("kube-proxy's IPVS mode needs the kernel's IP_VS (/proc/net/ip_vs: %s); this kernel has none, and tests load no modules", bytes.TrimSpace(out)))
	}
	return nil
}

// Close stops every pod still running and deletes the namespaces: veths,
// the bridge and the iptables rules go with them.
func (k *KubeNode) Close() error {
	k.mu.Lock()
	pods := append([]*Pod(nil), k.pods...)
	k.mu.Unlock()
	var errs []error
	for _, p := range pods {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range []string{k.Client, k.Node} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such file")) {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, bytes.TrimSpace(out)))
		}
	}
	return errors.Join(errs...)
}

// Container log wrappings the runtime stand-in writes.
const (
	WrapCRI      = "cri"       // containerd, CRI-O: TIME STREAM P|F LINE
	WrapJSONFile = "json-file" // Docker: {"log":"LINE\n","stream":"stdout","time":"TIME"}
)

// PodOptions describe a pod of a KubeNode.
type PodOptions struct {
	Name      string // pod name, e.g. "web-0"
	Namespace string // Kubernetes namespace, "" = "default"
	Container string // container name, "" = the server's name ("nginx", "caddy")
	// Server is what runs in the pod: "nginx" (Debian's /usr/sbin/nginx),
	// "caddy", or "" for none (a client pod: a network namespace only).
	Server string
	Port   int    // the server's port, 0 = 8443
	Wrap   string // WrapCRI ("" too) or WrapJSONFile
	// NginxLogFormat is the access log's log_format ("" =
	// RecommendedLogFormat); the access log goes to /dev/stdout and the
	// error log to stderr, as the official image has them.
	NginxLogFormat string
	Workers        int // nginx worker_processes, 0 = 1
}

// Pod is a pod of a KubeNode: a network namespace on the node's bridge
// and, with a server, the server in a PID namespace of its own
// (unshare --pid --fork --mount-proc), its output written by a runtime
// stand-in to LogPath.
type Pod struct {
	NS   string // network namespace
	Addr string // its address on the pod network, 10.199.0.N
	Port int    // the server's port

	// The pod's Kubernetes names, as in its log directory.
	Name, Namespace, UID, Container string

	Dir     string // the server's files (config, certificate)
	LogPath string // DIR/var/log/pods/NAMESPACE_NAME_UID/CONTAINER/0.log; "" without a server
	// PID is the server's process in the caller's PID namespace (the
	// nginx master; PID 1 in the pod's own). Never read a pid file
	// written inside the pod for it: it holds the pod's numbering.
	PID int

	node    *KubeNode
	server  string
	cmd     *exec.Cmd // ip netns exec ... unshare ... SERVER
	exited  chan struct{}
	waitErr error
	copies  sync.WaitGroup
	logf    *os.File
	logMu   sync.Mutex
	once    sync.Once
	closeEr error
}

// StartPodE makes a pod: its network namespace on the bridge (default
// route via cni0) and, with o.Server, the server, returning once it
// accepts TCP connections on Addr:Port (a bare connect: nothing is logged).
// ctx bounds the start only. Close stops it and deletes the namespace.
func (k *KubeNode) StartPodE(ctx context.Context, o PodOptions) (*Pod, error) {
	if o.Name == "" {
		return nil, errors.New("pod: no name")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Container == "" {
		o.Container = o.Server
	}
	if o.Port == 0 {
		o.Port = 8443
	}
	switch o.Wrap {
	case "":
		o.Wrap = WrapCRI
	case WrapCRI, WrapJSONFile:
	default:
		return nil, fmt.Errorf("pod %s: unknown log wrapping %q", o.Name, o.Wrap)
	}
	var bin string
	switch o.Server {
	case "":
	case "nginx", "caddy":
		b, err := LookBin(o.Server, "unshare")
		if err != nil {
			return nil, err
		}
		bin = b
	default:
		return nil, fmt.Errorf("pod %s: unknown server %q", o.Name, o.Server)
	}
	uid := make([]byte, 16)
	rand.Read(uid)
	h := hex.EncodeToString(uid)
	p := &Pod{
		Port: o.Port, Name: o.Name, Namespace: o.Namespace, Container: o.Container,
		UID:  h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:],
		node: k, exited: make(chan struct{}),
	}
	// The lowest address no running pod has: a pod started after another
	// stopped gets its address, as a StatefulSet's next pod often does.
	k.mu.Lock()
	i := 2
	for ; i <= 254 && k.usedAddr(i); i++ {
	}
	if i > 254 {
		k.mu.Unlock()
		return nil, errors.New("pod: the pod network is full")
	}
	k.nextPod++
	p.NS, p.Addr = fmt.Sprintf("%s-pod%d", k.id, k.nextPod), fmt.Sprintf("10.199.0.%d", i)
	k.pods = append(k.pods, p)
	k.mu.Unlock()
	// The host side's name is a CNI plugin's: veth and 8 hex digits.
	hostIf := "veth" + h[:8]
	err := ip([]string{"netns", "add", p.NS})
	if err == nil {
		err = ip([]string{"-n", k.Node, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", p.NS},
			[]string{"-n", k.Node, "link", "set", hostIf, "master", k.Bridge},
			[]string{"-n", k.Node, "link", "set", hostIf, "up"},
			[]string{"-n", p.NS, "link", "set", "lo", "up"},
			[]string{"-n", p.NS, "addr", "add", p.Addr + "/24", "dev", "eth0"},
			[]string{"-n", p.NS, "link", "set", "eth0", "up"},
			[]string{"-n", p.NS, "route", "add", "default", "via", KubeBridgeAddr})
	}
	if err == nil {
		// A pod that had this address before had another MAC: the node
		// forgets it (the kernel would keep it for tens of seconds).
		exec.Command("ip", "-n", k.Node, "neigh", "flush", "to", p.Addr).Run()
		if _, e := exec.LookPath("ethtool"); e == nil {
			exec.Command("ip", "netns", "exec", k.Node, "ethtool", "-K", hostIf, "tso", "off", "gso", "off", "gro", "off").Run()
			exec.Command("ip", "netns", "exec", p.NS, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "off").Run()
		}
	}
	if err == nil && o.Server != "" {
		err = p.start(ctx, bin, o)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// start writes the server's files and runs it in a PID namespace of its
// own inside the pod's network namespace.
func (p *Pod) start(ctx context.Context, bin string, o PodOptions) error {
	k := p.node
	p.server = o.Server
	p.Dir = filepath.Join(k.Dir, "pods", p.NS)
	logDir := filepath.Join(k.Dir, "var", "log", "pods", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), p.Container)
	for _, d := range []string{p.Dir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	certFile, keyFile, _, err := CertE(p.Dir)
	if err != nil {
		return err
	}
	var args []string
	var env []string
	switch o.Server {
	case "nginx":
		conf, err := p.nginxConf(o, certFile, keyFile)
		if err != nil {
			return err
		}
		// -e stderr: nginx's error log before the conf is read goes where
		// the conf's goes.
		args = []string{bin, "-p", p.Dir, "-c", conf, "-e", "stderr", "-g", "daemon off;"}
	case "caddy":
		conf := filepath.Join(p.Dir, "caddy.json")
		if err := os.WriteFile(conf, []byte(caddyPodConf(p.Dir, o.Port, certFile, keyFile)), 0o644); err != nil {
			return err
		}
		args = []string{bin, "run", "--config", conf}
		env = []string{"HOME=" + p.Dir, "XDG_DATA_HOME=" + p.Dir, "XDG_CONFIG_HOME=" + p.Dir}
	}
	p.LogPath = filepath.Join(logDir, "0.log")
	if p.logf, err = os.OpenFile(p.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640); err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	// --kill-child: the server dies with unshare, whatever stops it.
	full := append([]string{"netns", "exec", p.NS, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"}, args...)
	p.cmd = exec.Command("ip", full...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = outW, errW
	err = p.cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		p.cmd = nil
		return fmt.Errorf("pod %s: %v", p.Name, err)
	}
	p.copies.Add(2)
	go p.runtimeCopy("stdout", outR, o.Wrap)
	go p.runtimeCopy("stderr", errR, o.Wrap)
	go func() { p.waitErr = p.cmd.Wait(); close(p.exited) }()

	// The server is unshare's one child; wait for it, and for its port.
	deadline := time.Now().Add(10 * time.Second)
	for ; time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.exited:
			p.copies.Wait()
			return fmt.Errorf("pod %s: %s exited (%v); its log:\n%s", p.Name, o.Server, p.waitErr, readFile(p.LogPath))
		default:
		}
		if p.PID == 0 {
			p.PID = childOf(p.cmd.Process.Pid)
			continue
		}
		c, err := Dial(p.NS, net.JoinHostPort(p.Addr, strconv.Itoa(o.Port)), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("pod %s: %s did not listen on %s:%d within 10s; its log:\n%s", p.Name, o.Server, p.Addr, o.Port, readFile(p.LogPath))
}

// childOf returns the pid of a child of pid (its only one: unshare's), 0
// while it has none.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			c, _ := strconv.Atoi(f[0])
			return c
		}
		return 0
	}
	// A kernel without CONFIG_PROC_CHILDREN: the parent in each stat.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(st, ')'); i > 0 {
			if f := strings.Fields(string(st[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				return c
			}
		}
	}
	return 0
}

// nginxConf writes the pod's nginx.conf: the access log to /dev/stdout and
// the error log to stderr, as the official image links them; the pid file
// (which will hold 1) in the pod's directory.
func (p *Pod) nginxConf(o PodOptions, certFile, keyFile string) (string, error) {
	format := o.NginxLogFormat
	if format == "" {
		format = RecommendedLogFormat
	}
	workers := max(o.Workers, 1)
	conf := fmt.Sprintf(`worker_processes %d;
pid %s;
error_log stderr notice;
events { worker_connections 512; }
http {
  access_log off;
  log_format pq %s;
  server {
    listen %d ssl;
    server_name pqwatch.test;
    ssl_certificate %s;
    ssl_certificate_key %s;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets off;
    ssl_session_cache off;
    access_log /dev/stdout pq;
    keepalive_timeout 0;
    add_header X-Pid $pid always;
    location / { return 200 "ok $pid\n"; }
  }
}
`, workers, filepath.Join(p.Dir, "nginx.pid"), format, o.Port, certFile, keyFile)
	f := filepath.Join(p.Dir, "nginx.conf")
	return f, os.WriteFile(f, []byte(conf), 0o644)
}

// caddyPodConf is a Caddy JSON config for a pod: HTTP/1.1 on :port with the
// pod's certificate, its access log (JSON) to stdout and its own log to
// stderr, as the official image has them; no admin endpoint.
func caddyPodConf(dir string, port int, certFile, keyFile string) string {
	return fmt.Sprintf(`{
  "admin": {"disabled": true},
  "storage": {"module": "file_system", "root": %q},
  "logging": {"logs": {
    "default": {"level": "ERROR", "writer": {"output": "stderr"}, "exclude": ["http.log.access.pod"]},
    "pod": {"writer": {"output": "stdout"}, "encoder": {"format": "json"}, "include": ["http.log.access.pod"]}
  }},
  "apps": {
    "http": {"servers": {"s": {
      "listen": [":%d"],
      "protocols": ["h1"],
      "automatic_https": {"disable": true},
      "tls_connection_policies": [{"protocol_min": "tls1.2"}],
      "logs": {"default_logger_name": "pod"},
      "routes": [{"handle": [{"handler": "static_response", "status_code": 200, "body": "ok\n"}]}]
    }}},
    "tls": {"certificates": {"load_files": [{"certificate": %q, "key": %q}]}}
  }
}`, filepath.Join(dir, "data"), port, certFile, keyFile)
}

// runtimeCopy is the container runtime's side of one stream: each line is
// written to the pod's log as containerd (CRI) or Docker (json-file) writes
// it, stamped with the time it was read; a line longer than 16 KiB is cut
// into partials (P; json-file: a "log" without its \n), as both do.
func (p *Pod) runtimeCopy(stream string, r *os.File, wrap string) {
	defer p.copies.Done()
	defer r.Close()
	const maxLine = 16 << 10
	buf := make([]byte, 0, maxLine)
	one := make([]byte, 64<<10)
	var out []byte
	emit := func(b []byte, full bool) {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		out = out[:0]
		if wrap == WrapJSONFile {
			out = append(out, `{"log":`...)
			s := string(b)
			if full {
				s += "\n"
			}
			out = strconv.AppendQuote(out, s)
			out = append(out, `,"stream":"`...)
			out = append(out, stream...)
			out = append(out, `","time":"`...)
			out = append(out, now...)
			out = append(out, "\"}\n"...)
		} else {
			tag := "P"
			if full {
				tag = "F"
			}
			out = append(out, now...)
			out = append(out, ' ')
			out = append(out, stream...)
			out = append(out, ' ')
			out = append(out, tag...)
			out = append(out, ' ')
			out = append(out, b...)
			out = append(out, '\n')
		}
		p.logMu.Lock()
		p.logf.Write(out)
		p.logMu.Unlock()
	}
	for {
		n, err := r.Read(one)
		for b := one[:n]; len(b) > 0; {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				buf = append(buf, b...)
				b = nil
			} else {
				buf = append(buf, b[:i]...)
				b = b[i+1:]
				for len(buf) > maxLine {
					emit(buf[:maxLine], false)
					buf = append(buf[:0], buf[maxLine:]...)
				}
				emit(buf, true)
				buf = buf[:0]
				continue
			}
			for len(buf) > maxLine {
				emit(buf[:maxLine], false)
				buf = append(buf[:0], buf[maxLine:]...)
			}
		}
		if err != nil {
			if len(buf) > 0 {
				emit(buf, false)
			}
			return
		}
	}
}

// Close stops the pod's server and deletes its network namespace. The
// server is stopped through the process the pod started (nginx: SIGQUIT
// to its master by its pid in the caller's PID namespace; Caddy:
// SIGINT), never through a pid file written inside the pod. If it has not
// exited within 5 s it is killed, and with it its PID namespace.
func (p *Pod) Close() error {
	p.once.Do(func() {
		var errs []error
		if p.cmd != nil {
			if p.PID > 0 {
				sig := syscall.SIGQUIT // nginx: finish what was accepted
				if p.server == "caddy" {
					sig = syscall.SIGINT
				}
				syscall.Kill(p.PID, sig)
			}
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				if p.PID > 0 {
					syscall.Kill(p.PID, syscall.SIGKILL)
				}
				p.cmd.Process.Kill()
				<-p.exited
				errs = append(errs, fmt.Errorf("pod %s: the server did not stop within 5s; killed", p.Name))
			}
			p.copies.Wait()
			if p.logf != nil {
				errs = append(errs, p.logf.Close())
			}
		}
		if out, err := exec.Command("ip", "netns", "del", p.NS).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such file")) {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", p.NS, err, bytes.TrimSpace(out)))
		}
		k := p.node
		k.mu.Lock()
		for i, q := range k.pods {
			if q == p {
				k.pods = append(k.pods[:i], k.pods[i+1:]...)
				break
			}
		}
		k.mu.Unlock()
		p.closeEr = errors.Join(errs...)
	})
	return p.closeEr
}

// TLSGet makes one crypto/tls handshake to addr from namespace ns ("" =
// current), certificate unchecked, SNI pqwatch.test, and one HTTP/1.1 GET
// / on it, so a server logs one access line. It returns the client's
// address as the client saw it and the response's status line; timeout
// bounds the whole exchange.
func TLSGet(ns, addr string, timeout time.Duration) (local netip.AddrPort, status string, err error) {
	c, err := Dial(ns, addr, timeout)
	if err != nil {
		return local, "", err
	}
	defer c.Close()
	local = c.LocalAddr().(*net.TCPAddr).AddrPort()
	c.SetDeadline(time.Now().Add(timeout))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "pqwatch.test"})
	if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: pqwatch.test\r\nUser-Agent: pqwatch-kubenode\r\nConnection: close\r\n\r\n"); err != nil {
		return local, "", err
	}
	resp, err := io.ReadAll(tc)
	if err != nil && len(resp) == 0 {
		return local, "", err
	}
	status, _, _ = strings.Cut(string(resp), "\r\n")
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return local, status, fmt.Errorf("GET https://%s/: %q", addr, status)
	}
	return local, status, nil
}
