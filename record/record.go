// Package record defines the handshake record of SPEC.md: one per TCP or QUIC
// connection that carried a ClientHello. Every producer (sniffer) and every
// sink (JSONL, Kafka, Prometheus) shares this one type.
package record

import (
	"encoding/json"
	"net/netip"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// KeyShare is one ClientHello key_share entry.
type KeyShare struct {
	Group string `json:"group"`
	Bytes int    `json:"bytes"`
}

// Log is the access-log line joined to a handshake.
type Log struct {
	Source    string `json:"source"` // "nginx" or "caddy"
	Status    int    `json:"status,omitempty"`
	Method    string `json:"method,omitempty"`
	Host      string `json:"host,omitempty"`
	Path      string `json:"path,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
	PID       int    `json:"pid,omitempty"`
	SSLCurve  string `json:"ssl_curve,omitempty"`
}

// Generation identifies the server process generation that accepted the connection.
type Generation struct {
	ID        string `json:"id"`
	MasterPID int    `json:"master_pid,omitempty"`
	WorkerPID int    `json:"worker_pid,omitempty"`
	Exe       string `json:"exe,omitempty"`
	ExeSHA256 string `json:"exe_sha256,omitempty"`
	OpenSSL   string `json:"openssl,omitempty"`
	// Pod is the Kubernetes pod the generation's main process runs in
	// (from its cgroup), nil when none: the record's pod unless its log
	// line named one (see Handshake.ServerPod). Not part of the
	// generation's JSON.
	Pod *Pod `json:"-"`
}

// Pod names the Kubernetes pod of the server that served a handshake:
// its namespace, name and UID, and the container's name, each where known
// (a cgroup path names the UID and the container's ID only; the pod's log
// directory, /var/log/pods/NAMESPACE_NAME_UID/CONTAINER/, the rest).
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
	Container string `json:"container,omitempty"`
	// ContainerID is the runtime's ID of the container (64 hex digits),
	// from the cgroup path; not serialised.
	ContainerID string `json:"-"`
}

// GenerationNginx is the kind of an nginx generation, the first part of its
// ID ("nginx-<12 hex digits of the binary's SHA-256>-<master pid>"); another
// server's ID begins with its process name.
const GenerationNginx = "nginx"

// Nginx reports whether g is a generation of nginx.
func (g *Generation) Nginx() bool { return strings.HasPrefix(g.ID, GenerationNginx+"-") }

// Outcome values.
const (
	OutcomeOK        = "ok"
	OutcomeAlert     = "alert"
	OutcomeReset     = "reset"
	OutcomeTimeout   = "timeout"
	OutcomeTruncated = "truncated"
	// OutcomeIncomplete: the ClientHello started (a plausible header on a
	// connection whose SYN was captured) but never completed before the
	// connection was reset, closed, timed out or evicted. Not a server's
	// failure.
	OutcomeIncomplete = "incomplete"
)

// GroupMissing values: why a completed handshake (outcome ok) has no group.
const (
	// GroupMissingResumed: a resumed TLS 1.2 session, no key exchange on
	// the wire.
	GroupMissingResumed = "resumed"
	// GroupMissingNoKeyExchange: the negotiation has none (TLS 1.2 RSA key
	// transport or another suite without (EC)DHE, TLS 1.3 psk_ke).
	GroupMissingNoKeyExchange = "no_key_exchange"
	// GroupMissingUnknown: the message that carries the group was not
	// captured or not parsed, or names no group.
	GroupMissingUnknown = "unknown"
)

// GroupLabel is the group metrics label h with: its group; for a
// completed handshake without one, why (a GroupMissing value, unknown when
// none is set); "none" for a handshake that did not complete.
func GroupLabel(h *Handshake) string {
	switch {
	case h.Group != "":
		return h.Group
	case h.Outcome != OutcomeOK:
		return "none"
	case h.GroupMissing == GroupMissingResumed, h.GroupMissing == GroupMissingNoKeyExchange:
		return h.GroupMissing
	}
	return GroupMissingUnknown
}

// Transport values.
const (
	TransportTCP  = "tcp"
	TransportQUIC = "quic"
)

// Handshake is the record of SPEC.md. Field names are fixed; absent values are
// omitted, never faked. Generation may be shared by many records (the
// attribution hands out the tracker's own): never change it in place, set a
// copy.
type Handshake struct {
	TS        time.Time `json:"ts"`
	Transport string    `json:"transport"`
	// Client is the client's address and port. The sniffer leaves it
	// empty when ClientAddr and ClientPort say the same (see ClientField):
	// read it with ClientText or AppendClient. Frontend is the ip:port
	// the client dialled when it differs from Server: a Service VIP, a
	// NodePort, a LoadBalancer address. The merge of a handshake's views
	// (package merge) sets it from the view before the node's NAT; empty
	// when no view said otherwise.
	Client                  string      `json:"client"`
	Server                  string      `json:"server"`
	Frontend                string      `json:"frontend,omitempty"`
	SNI                     string      `json:"sni,omitempty"`
	ALPN                    []string    `json:"alpn,omitempty"`
	OfferedGroups           []string    `json:"offered_groups,omitempty"`
	KeyShares               []KeyShare  `json:"key_shares,omitempty"`
	PQOffered               bool        `json:"pq_offered"`
	Version                 string      `json:"version,omitempty"`
	Cipher                  string      `json:"cipher,omitempty"`
	Group                   string      `json:"group,omitempty"`
	PQ                      bool        `json:"pq"`
	HRR                     bool        `json:"hrr"`
	HRRGroup                string      `json:"hrr_group,omitempty"`
	ClientHelloBytes        int         `json:"client_hello_bytes,omitempty"`
	ServerHelloBytes        int         `json:"server_hello_bytes,omitempty"`
	ClientHelloSegments     int         `json:"client_hello_segments,omitempty"`
	ClientHelloWireSegments int         `json:"client_hello_wire_segments,omitempty"`
	GroupMissing            string      `json:"group_missing,omitempty"` // GroupMissing* values
	Resumed                 bool        `json:"resumed,omitempty"`
	Outcome                 string      `json:"outcome"`
	Alert                   string      `json:"alert,omitempty"`
	HandshakeRTTMicros      int64       `json:"handshake_rtt_us,omitempty"`
	JA4                     string      `json:"ja4,omitempty"`
	Log                     *Log        `json:"log,omitempty"`
	Generation              *Generation `json:"generation,omitempty"`
	// Pod is the pod that served the handshake: set by the access-log
	// join from the container log's directory; when nil, the encoders
	// write the generation's (ServerPod).
	Pod *Pod `json:"pod,omitempty"`
	// Node is the node the agent observed the record on (Kubernetes node
	// name, else the host name); ID is unique per record across nodes and
	// agent restarts, so that consumers of at-least-once delivery can drop
	// duplicates. Live mode only: analyze leaves both empty.
	Node string `json:"node,omitempty"`
	ID   string `json:"id,omitempty"`
	// IDPrefix and IDSeq are an ID not formatted yet: the agent numbers its
	// records, and the text ("<IDPrefix><IDSeq as 16 hex digits>") is
	// written where it is needed (AppendID, RecordID), so a record costs
	// no string of its own. ID, when set, is the ID.
	IDPrefix string `json:"-"`
	IDSeq    uint64 `json:"-"`

	// Fields below are internal to pqwatch (not part of the SPEC record) and
	// never serialised. They let joins and forecasts work without re-parsing.
	ClientAddr [16]byte `json:"-"` // IPv4-mapped when IPv4
	ServerAddr [16]byte `json:"-"` // IPv4-mapped when IPv4; zero when ServerPort is
	ClientPort uint16   `json:"-"`
	ServerPort uint16   `json:"-"`
	// FlowStart is the time of the connection's SYN (QUIC: its first
	// Initial) when the capture saw the connection begin: the server took
	// it after that. Zero when unknown (the capture began mid-connection,
	// records read from JSON).
	FlowStart   time.Time `json:"-"`
	OfferedIDs  []uint16  `json:"-"` // supported_groups codepoints, GREASE removed
	KeyShareIDs []uint16  `json:"-"` // key_share codepoints, GREASE removed
	// GroupID and HRRGroupID are the codepoints (tlsparse.Group) of Group
	// and HRRGroup, so that what reads a record never resolves a name:
	// whoever sets a name sets its codepoint (SetGroup, SetHRRGroup), a
	// reader of records from JSON calls FillIDs. 0 when the name is empty
	// or has no codepoint (a TLS 1.2 server's own DHE prime, "dhe2048").
	GroupID    uint16 `json:"-"`
	HRRGroupID uint16 `json:"-"`
	// View is what tells this sighting of the handshake apart from a
	// sighting of another one, and where on the path it was seen (see
	// View): the merge of a handshake's views reads it.
	View View `json:"-"`
	// Peer is the client as the server saw it, when the merge of views
	// replaced Client with the client's side of a NAT (a masquerading
	// Service): the address the server's socket and its access log name.
	// Zero when they are the same. Read it with ServerSeenClient.
	Peer netip.AddrPort `json:"-"`
}

// View identifies the handshake a record saw and says where on its path
// the capture saw it. A node sees one handshake several times (before its
// NAT on the uplink, after it on a bridge and a pod's veth): the views
// share the ClientHello's random and, for TCP, the sequence number of the
// ClientHello's first byte (NAT rewrites addresses and ports, not
// sequence numbers), for QUIC the client's first Destination Connection
// ID; their TTLs tell which view is nearer the server (each routing hop
// takes one off).
type View struct {
	Random [32]byte // the ClientHello's random
	// DCID is, for QUIC, the Destination Connection ID of the client's
	// first Initial (DCIDLen bytes of it).
	DCID    [20]byte
	DCIDLen uint8
	// TTL is the IPv4 TTL or IPv6 hop limit of the packet that carried
	// the ClientHello's first byte.
	TTL uint8
	// Known says Random (and Seq or DCID) are filled: a ClientHello cut
	// short before its random has no identity, and is never merged.
	Known bool
	// Seq is, for TCP, the sequence number of the ClientHello's first
	// byte.
	Seq uint32
}

// ServerPod is the pod that served the handshake: Pod, else the
// generation's; nil when neither names one.
func (h *Handshake) ServerPod() *Pod {
	if h.Pod != nil {
		return h.Pod
	}
	if h.Generation != nil {
		return h.Generation.Pod
	}
	return nil
}

// SetGroup sets the negotiated group g: its registry name, its codepoint
// and whether it is post-quantum.
func (h *Handshake) SetGroup(g tlsparse.Group) {
	h.Group, h.GroupID, h.PQ = g.String(), uint16(g), g.IsPQ()
}

// SetHRRGroup sets the group a HelloRetryRequest asked for.
func (h *Handshake) SetHRRGroup(g tlsparse.Group) {
	h.HRRGroup, h.HRRGroupID = g.String(), uint16(g)
}

// FillIDs sets the codepoints of a record read from JSON from its group
// names, as the sniffer sets them: OfferedIDs and KeyShareIDs when empty
// (names the registry does not know are left out), GroupID and HRRGroupID
// when 0.
func (h *Handshake) FillIDs() {
	if len(h.OfferedIDs) == 0 && len(h.OfferedGroups) > 0 {
		h.OfferedIDs = make([]uint16, 0, len(h.OfferedGroups))
		for _, n := range h.OfferedGroups {
			if g, ok := tlsparse.ParseGroup(n); ok {
				h.OfferedIDs = append(h.OfferedIDs, uint16(g))
			}
		}
	}
	if len(h.KeyShareIDs) == 0 && len(h.KeyShares) > 0 {
		h.KeyShareIDs = make([]uint16, 0, len(h.KeyShares))
		for _, ks := range h.KeyShares {
			if g, ok := tlsparse.ParseGroup(ks.Group); ok {
				h.KeyShareIDs = append(h.KeyShareIDs, uint16(g))
			}
		}
	}
	if h.GroupID == 0 && h.Group != "" {
		h.GroupID = GroupCode(h.Group)
	}
	if h.HRRGroupID == 0 && h.HRRGroup != "" {
		h.HRRGroupID = GroupCode(h.HRRGroup)
	}
}

// GroupCode is the codepoint of a group name as records spell it (the
// registry's names, "0x" and hex digits for the rest); 0 for a name
// without one.
func GroupCode(name string) uint16 {
	if g, ok := tlsparse.ParseGroup(name); ok {
		return uint16(g)
	}
	return 0
}

// HasID says whether the record has an ID (ID or IDSeq set).
func (h *Handshake) HasID() bool { return h.ID != "" || h.IDSeq != 0 }

// AppendID appends the record's ID to dst (nothing when it has none).
func (h *Handshake) AppendID(dst []byte) []byte {
	if h.ID != "" || h.IDSeq == 0 {
		return append(dst, h.ID...)
	}
	dst = append(dst, h.IDPrefix...)
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(h.IDSeq>>shift)&0xf])
	}
	return dst
}

// IDLen is the length of the record's ID.
func (h *Handshake) IDLen() int {
	if h.ID != "" || h.IDSeq == 0 {
		return len(h.ID)
	}
	return len(h.IDPrefix) + 16
}

// RecordID is the record's ID as a string ("" when it has none).
func (h *Handshake) RecordID() string {
	if h.ID != "" || h.IDSeq == 0 {
		return h.ID
	}
	var b [64]byte
	return string(h.AppendID(b[:0]))
}

// ClientField is the Client text for a record whose ClientAddr and
// ClientPort hold ap: empty when AppendClient writes ap's text from them
// (so a record costs no string of its own), else ap's text (port 0, an
// IPv4-mapped IPv6 address or a zone, which the fields cannot tell).
func ClientField(ap netip.AddrPort) string {
	if a := ap.Addr(); ap.Port() == 0 || a.Is4In6() || a.Zone() != "" || !a.IsValid() {
		return ap.String()
	}
	return ""
}

// clientInFields says Client is left to ClientAddr and ClientPort.
func (h *Handshake) clientInFields() bool { return h.Client == "" && h.ClientPort != 0 }

// ClientAddrPort is the client's address and port: from ClientAddr and
// ClientPort when Client is left to them, else parsed from Client (the
// zero AddrPort when it does not parse).
func (h *Handshake) ClientAddrPort() netip.AddrPort {
	if h.clientInFields() {
		return netip.AddrPortFrom(netip.AddrFrom16(h.ClientAddr).Unmap(), h.ClientPort)
	}
	ap, _ := netip.ParseAddrPort(h.Client)
	return ap
}

// ServerSeenClient is the client's address and port as the server saw
// them: Peer when a NAT rewrote them, else the client's. The attribution's
// socket lookups and the access-log join match on it.
func (h *Handshake) ServerSeenClient() netip.AddrPort {
	if h.Peer.IsValid() {
		return h.Peer
	}
	return h.ClientAddrPort()
}

// AppendClient appends the client's address text to dst: Client, else
// ClientAddr and ClientPort written out.
func (h *Handshake) AppendClient(dst []byte) []byte {
	if !h.clientInFields() {
		return append(dst, h.Client...)
	}
	return h.ClientAddrPort().AppendTo(dst)
}

// ClientText is the client's address text (see AppendClient).
func (h *Handshake) ClientText() string {
	if !h.clientInFields() {
		return h.Client
	}
	var b [64]byte
	return string(h.AppendClient(b[:0]))
}

// Sink consumes records. Implementations must copy what they keep beyond the call.
type Sink interface {
	Write(h *Handshake) error
}

// TimeFormat is the record's timestamp layout: RFC 3339, UTC, nanoseconds
// always printed (fixed width, so lines sort as text).
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// MarshalJSON writes ts with all nine fractional digits.
func (h Handshake) MarshalJSON() ([]byte, error) {
	type plain Handshake
	h.ID = h.RecordID()
	h.Client = h.ClientText()
	h.Pod = h.ServerPod()
	return json.Marshal(struct {
		TS string `json:"ts"`
		plain
	}{h.TS.UTC().Format(TimeFormat), plain(h)})
}

// SinkFunc adapts a function to Sink; it never fails.
type SinkFunc func(h *Handshake)

// Write calls f(h).
func (f SinkFunc) Write(h *Handshake) error {
	f(h)
	return nil
}
