package exporter

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// ECSVersion is the Elastic Common Schema release the ECS view of the
// record follows (its field names and types: docs/contract.md).
const ECSVersion = "9.4.0"

// ECS is the record in Elastic Common Schema names (and OpenTelemetry's,
// where ECS and OTel agree): ECS fields where ECS has one, pqwatch's own
// facts under pqwatch.*. Marshalled as nested objects, as Beats and
// Elastic Agent write ECS.
type ECS struct {
	Timestamp string       `json:"@timestamp"`
	ECS       ecsVersion   `json:"ecs"`
	Event     *ecsEvent    `json:"event,omitempty"`
	Network   ecsNetwork   `json:"network"`
	Client    ecsEndpoint  `json:"client"`
	Server    ecsEndpoint  `json:"server"`
	TLS       ecsTLS       `json:"tls"`
	Observer  *ecsObserver `json:"observer,omitempty"`
	HTTP      *ecsHTTP     `json:"http,omitempty"`
	URL       *ecsURL      `json:"url,omitempty"`
	UserAgent *ecsUA       `json:"user_agent,omitempty"`
	Process   *ecsProcess  `json:"process,omitempty"`
	PQWatch   ECSPQWatch   `json:"pqwatch"`
}

type (
	ecsVersion struct {
		Version string `json:"version"`
	}
	ecsEvent struct {
		ID string `json:"id,omitempty"`
	}
	ecsNetwork struct {
		Transport string `json:"transport,omitempty"`
	}
	// ecsEndpoint: ip and port when the record's address parses as one
	// (no zone), else the text as address.
	ecsEndpoint struct {
		Address string `json:"address,omitempty"`
		IP      string `json:"ip,omitempty"`
		Port    int    `json:"port,omitempty"`
	}
	ecsTLS struct {
		Version         string        `json:"version,omitempty"`
		VersionProtocol string        `json:"version_protocol,omitempty"`
		Cipher          string        `json:"cipher,omitempty"`
		Curve           string        `json:"curve,omitempty"`
		Resumed         *bool         `json:"resumed,omitempty"`
		Established     bool          `json:"established"`
		Client          *ecsTLSClient `json:"client,omitempty"`
	}
	ecsTLSClient struct {
		ServerName string `json:"server_name,omitempty"`
	}
	ecsObserver struct {
		Hostname string `json:"hostname,omitempty"`
	}
	ecsHTTP struct {
		Request  *ecsHTTPRequest  `json:"request,omitempty"`
		Response *ecsHTTPResponse `json:"response,omitempty"`
	}
	ecsHTTPRequest struct {
		Method string `json:"method,omitempty"`
	}
	ecsHTTPResponse struct {
		StatusCode int `json:"status_code,omitempty"`
	}
	ecsURL struct {
		Domain   string `json:"domain,omitempty"`
		Original string `json:"original,omitempty"`
	}
	ecsUA struct {
		Original string `json:"original,omitempty"`
	}
	ecsProcess struct {
		Executable string   `json:"executable,omitempty"`
		PID        int      `json:"pid,omitempty"`
		Hash       *ecsHash `json:"hash,omitempty"`
	}
	ecsHash struct {
		SHA256 string `json:"sha256,omitempty"`
	}
)

// ECSPQWatch are pqwatch's own facts: the record's fields ECS has no name
// for, under their record names.
type ECSPQWatch struct {
	Transport               string            `json:"transport"`
	Frontend                string            `json:"frontend,omitempty"`
	ALPN                    []string          `json:"alpn,omitempty"`
	OfferedGroups           []string          `json:"offered_groups,omitempty"`
	KeyShares               []record.KeyShare `json:"key_shares,omitempty"`
	PQOffered               bool              `json:"pq_offered"`
	Version                 string            `json:"version,omitempty"` // only a version ECS cannot spell (0x....)
	PQ                      bool              `json:"pq"`
	HRR                     bool              `json:"hrr"`
	HRRGroup                string            `json:"hrr_group,omitempty"`
	ClientHelloBytes        int               `json:"client_hello_bytes,omitempty"`
	ServerHelloBytes        int               `json:"server_hello_bytes,omitempty"`
	ClientHelloSegments     int               `json:"client_hello_segments,omitempty"`
	ClientHelloWireSegments int               `json:"client_hello_wire_segments,omitempty"`
	GroupMissing            string            `json:"group_missing,omitempty"`
	Outcome                 string            `json:"outcome"`
	Alert                   string            `json:"alert,omitempty"`
	HandshakeRTTMicros      int64             `json:"handshake_rtt_us,omitempty"`
	JA4                     string            `json:"ja4,omitempty"`
	Log                     *ECSLog           `json:"log,omitempty"`
	Generation              *ECSGeneration    `json:"generation,omitempty"`
	Pod                     *record.Pod       `json:"pod,omitempty"`
}

// ECSLog is the joined log line's part ECS has no name for.
type ECSLog struct {
	Source   string `json:"source"`
	PID      int    `json:"pid,omitempty"`
	SSLCurve string `json:"ssl_curve,omitempty"`
}

// ECSGeneration is the generation's part ECS has no name for.
type ECSGeneration struct {
	ID        string `json:"id"`
	MasterPID int    `json:"master_pid,omitempty"`
	OpenSSL   string `json:"openssl,omitempty"`
}

// ecsVersionOf splits a record version into ECS's tls.version_protocol and
// tls.version ("TLS1.3" -> "tls", "1.3"); ok is false for a version ECS
// cannot spell.
func ecsVersionOf(v string) (protocol, version string, ok bool) {
	for _, p := range []string{"TLS", "SSL"} {
		if s, found := strings.CutPrefix(v, p); found && s != "" {
			return strings.ToLower(p), s, true
		}
	}
	return "", "", false
}

func ecsAddr(text string, ap netip.AddrPort) ecsEndpoint {
	if ap.IsValid() && ap.Addr().Zone() == "" && ap.Port() != 0 && ap.String() == text {
		return ecsEndpoint{IP: ap.Addr().String(), Port: int(ap.Port())}
	}
	return ecsEndpoint{Address: text}
}

// ToECS is h's ECS view.
func ToECS(h *record.Handshake) ECS {
	e := ECS{Timestamp: h.TS.UTC().Format(record.TimeFormat), ECS: ecsVersion{ECSVersion}}
	if h.HasID() {
		e.Event = &ecsEvent{ID: h.RecordID()}
	}
	switch h.Transport {
	case record.TransportTCP:
		e.Network.Transport = "tcp"
	case record.TransportQUIC:
		e.Network.Transport = "udp"
	}
	client := h.ClientText()
	e.Client = ecsAddr(client, h.ClientAddrPort())
	sap, _ := netip.ParseAddrPort(h.Server)
	e.Server = ecsAddr(h.Server, sap)
	if p, v, ok := ecsVersionOf(h.Version); ok {
		e.TLS.VersionProtocol, e.TLS.Version = p, v
	}
	e.TLS.Cipher, e.TLS.Curve = h.Cipher, h.Group
	e.TLS.Established = h.Outcome == record.OutcomeOK
	if e.TLS.Established {
		r := h.Resumed
		e.TLS.Resumed = &r
	}
	if h.SNI != "" {
		e.TLS.Client = &ecsTLSClient{ServerName: h.SNI}
	}
	if h.Node != "" {
		e.Observer = &ecsObserver{Hostname: h.Node}
	}
	p := &e.PQWatch
	*p = ECSPQWatch{
		Transport: h.Transport, Frontend: h.Frontend, ALPN: h.ALPN, OfferedGroups: h.OfferedGroups, KeyShares: h.KeyShares,
		PQOffered: h.PQOffered, PQ: h.PQ, HRR: h.HRR, HRRGroup: h.HRRGroup,
		ClientHelloBytes: h.ClientHelloBytes, ServerHelloBytes: h.ServerHelloBytes,
		ClientHelloSegments: h.ClientHelloSegments, ClientHelloWireSegments: h.ClientHelloWireSegments,
		GroupMissing: h.GroupMissing, Outcome: h.Outcome, Alert: h.Alert, HandshakeRTTMicros: h.HandshakeRTTMicros, JA4: h.JA4,
	}
	if _, _, ok := ecsVersionOf(h.Version); !ok {
		p.Version = h.Version
	}
	p.Pod = h.ServerPod()
	if l := h.Log; l != nil {
		p.Log = &ECSLog{Source: l.Source, PID: l.PID, SSLCurve: l.SSLCurve}
		if l.Method != "" || l.Status != 0 {
			e.HTTP = &ecsHTTP{}
			if l.Method != "" {
				e.HTTP.Request = &ecsHTTPRequest{Method: l.Method}
			}
			if l.Status != 0 {
				e.HTTP.Response = &ecsHTTPResponse{StatusCode: l.Status}
			}
		}
		if l.Host != "" || l.Path != "" {
			e.URL = &ecsURL{Domain: l.Host, Original: l.Path}
		}
		if l.UserAgent != "" {
			e.UserAgent = &ecsUA{Original: l.UserAgent}
		}
	}
	if g := h.Generation; g != nil {
		p.Generation = &ECSGeneration{ID: g.ID, MasterPID: g.MasterPID, OpenSSL: g.OpenSSL}
		if g.Exe != "" || g.WorkerPID != 0 || g.ExeSHA256 != "" {
			e.Process = &ecsProcess{Executable: g.Exe, PID: g.WorkerPID}
			if g.ExeSHA256 != "" {
				e.Process.Hash = &ecsHash{SHA256: g.ExeSHA256}
			}
		}
	}
	return e
}

// AppendECS appends h's ECS view as one JSON object (no newline): the
// JSONL sink's encoder for -format ecs-jsonl.
func AppendECS(dst []byte, h *record.Handshake) []byte {
	b, err := json.Marshal(ToECS(h))
	if err != nil { // cannot happen: strings, numbers and bools only
		panic(err)
	}
	return append(dst, b...)
}

// ParseECS reads an ECS line back into the record it was written from,
// its groups' codepoints filled from their names (record.Handshake.FillIDs).
func ParseECS(line []byte) (*record.Handshake, error) {
	var e ECS
	if err := json.Unmarshal(line, &e); err != nil {
		return nil, err
	}
	if e.ECS.Version == "" || e.PQWatch.Outcome == "" {
		return nil, errors.New("exporter: not an ECS record of pqwatch (no ecs.version or pqwatch.outcome)")
	}
	ts, err := time.Parse(time.RFC3339Nano, e.Timestamp)
	if err != nil {
		return nil, err
	}
	p := e.PQWatch
	h := &record.Handshake{
		TS: ts, Transport: p.Transport, Client: ecsText(e.Client), Server: ecsText(e.Server), Frontend: p.Frontend,
		ALPN: p.ALPN, OfferedGroups: p.OfferedGroups, KeyShares: p.KeyShares, PQOffered: p.PQOffered,
		Version: p.Version, Cipher: e.TLS.Cipher, Group: e.TLS.Curve, PQ: p.PQ, HRR: p.HRR, HRRGroup: p.HRRGroup,
		ClientHelloBytes: p.ClientHelloBytes, ServerHelloBytes: p.ServerHelloBytes,
		ClientHelloSegments: p.ClientHelloSegments, ClientHelloWireSegments: p.ClientHelloWireSegments,
		GroupMissing: p.GroupMissing, Outcome: p.Outcome, Alert: p.Alert, HandshakeRTTMicros: p.HandshakeRTTMicros, JA4: p.JA4,
	}
	if p.Pod != nil {
		h.Pod = p.Pod
	}
	if e.TLS.Version != "" {
		h.Version = strings.ToUpper(e.TLS.VersionProtocol) + e.TLS.Version
	}
	if e.TLS.Resumed != nil {
		h.Resumed = *e.TLS.Resumed
	}
	if e.TLS.Client != nil {
		h.SNI = e.TLS.Client.ServerName
	}
	if e.Observer != nil {
		h.Node = e.Observer.Hostname
	}
	if e.Event != nil {
		h.ID = e.Event.ID
	}
	if l := p.Log; l != nil {
		h.Log = &record.Log{Source: l.Source, PID: l.PID, SSLCurve: l.SSLCurve}
		if e.HTTP != nil && e.HTTP.Request != nil {
			h.Log.Method = e.HTTP.Request.Method
		}
		if e.HTTP != nil && e.HTTP.Response != nil {
			h.Log.Status = e.HTTP.Response.StatusCode
		}
		if e.URL != nil {
			h.Log.Host, h.Log.Path = e.URL.Domain, e.URL.Original
		}
		if e.UserAgent != nil {
			h.Log.UserAgent = e.UserAgent.Original
		}
	}
	if g := p.Generation; g != nil {
		h.Generation = &record.Generation{ID: g.ID, MasterPID: g.MasterPID, OpenSSL: g.OpenSSL}
		if pr := e.Process; pr != nil {
			h.Generation.Exe, h.Generation.WorkerPID = pr.Executable, pr.PID
			if pr.Hash != nil {
				h.Generation.ExeSHA256 = pr.Hash.SHA256
			}
		}
	}
	h.FillIDs()
	return h, nil
}

func ecsText(e ecsEndpoint) string {
	if e.IP == "" {
		return e.Address
	}
	a, err := netip.ParseAddr(e.IP)
	if err != nil {
		return e.IP
	}
	return netip.AddrPortFrom(a, uint16(e.Port)).String()
}

// IsECS says whether a JSON line is the ECS view (it has @timestamp)
// rather than the record.
func IsECS(line []byte) bool {
	return bytes.Contains(line[:min(len(line), 64)], []byte(`"@timestamp"`))
}
