package report

import (
	"bytes"
	"cmp"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// CycloneDX 1.7: the parts of the BOM the inventory writes (field names as
// in bom-1.7.schema.json).
type (
	// BOM is a CycloneDX document.
	BOM struct {
		Schema       string      `json:"$schema"`
		BOMFormat    string      `json:"bomFormat"`
		SpecVersion  string      `json:"specVersion"`
		SerialNumber string      `json:"serialNumber,omitempty"`
		Version      int         `json:"version"`
		Metadata     BOMMetadata `json:"metadata"`
		Components   []Component `json:"components"`
	}
	BOMMetadata struct {
		Timestamp  string         `json:"timestamp,omitempty"`
		Lifecycles []BOMLifecycle `json:"lifecycles,omitempty"`
		Tools      *BOMTools      `json:"tools,omitempty"`
		Properties []Property     `json:"properties,omitempty"`
	}
	BOMLifecycle struct {
		Phase string `json:"phase"`
	}
	BOMTools struct {
		Components []Component `json:"components"`
	}
	Component struct {
		Type             string            `json:"type"`
		BOMRef           string            `json:"bom-ref,omitempty"`
		Name             string            `json:"name"`
		Version          string            `json:"version,omitempty"`
		Description      string            `json:"description,omitempty"`
		CryptoProperties *CryptoProperties `json:"cryptoProperties,omitempty"`
		Properties       []Property        `json:"properties,omitempty"`
		Components       []Component       `json:"components,omitempty"`
	}
	CryptoProperties struct {
		AssetType          string              `json:"assetType"`
		ProtocolProperties *ProtocolProperties `json:"protocolProperties,omitempty"`
	}
	ProtocolProperties struct {
		Type         string        `json:"type"`
		Version      string        `json:"version,omitempty"`
		CipherSuites []CipherSuite `json:"cipherSuites,omitempty"`
	}
	CipherSuite struct {
		Name        string   `json:"name"`
		Identifiers []string `json:"identifiers,omitempty"`
		TLSGroups   []string `json:"tlsGroups,omitempty"`
	}
	Property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
)

// CycloneDXSchema is the $schema the inventory's BOM names.
const CycloneDXSchema = "http://cyclonedx.org/schema/bom-1.7.schema.json"

// inventoryNamespace is the UUIDv5 namespace of the BOM serial numbers:
// the UUIDv5 of "https://github.com/pqwatch/pqwatch/inventory" in the URL
// namespace (RFC 9562).
var inventoryNamespace = uuidV5([16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8},
	[]byte("https://github.com/pqwatch/pqwatch/inventory"))

// uuidV5 is RFC 9562's name-based UUID (SHA-1) of name in namespace ns.
func uuidV5(ns [16]byte, name []byte) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write(name)
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

func uuidString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// cipherSuiteIDs maps IANA names to codepoints.
var cipherSuiteIDs = sync.OnceValue(func() map[string]uint16 {
	m := map[string]uint16{}
	for v := range 1 << 16 {
		if n := tlsparse.CipherSuiteName(uint16(v)); !strings.HasPrefix(n, "0x") {
			m[n] = uint16(v)
		}
	}
	return m
})

// suiteIdentifiers are the two bytes of a suite's codepoint as CycloneDX
// writes them ("0x13", "0x01"); nil when the name is unknown.
func suiteIdentifiers(name string) []string {
	id, ok := cipherSuiteIDs()[name]
	if !ok {
		v, err := strconv.ParseUint(strings.TrimPrefix(name, "0x"), 16, 16)
		if !strings.HasPrefix(name, "0x") || err != nil {
			return nil
		}
		id = uint16(v)
	}
	return []string{fmt.Sprintf("0x%02X", id>>8), fmt.Sprintf("0x%02X", id&0xff)}
}

// protocolVersion is a record version as CycloneDX's protocol version
// ("TLS1.3" -> "1.3"); "" when not a TLS or SSL version name.
func protocolVersion(v string) string {
	for _, p := range []string{"TLS", "SSL"} {
		if s, ok := strings.CutPrefix(v, p); ok {
			return s
		}
	}
	return ""
}

// versionRank orders versions newest first.
func versionRank(v string) int {
	switch v {
	case "TLS1.3":
		return 0
	case "TLS1.2":
		return 1
	case "TLS1.1":
		return 2
	case "TLS1.0":
		return 3
	case "SSL3.0":
		return 4
	}
	return 5
}

// BOM builds the CycloneDX 1.7 document of the inventory: one
// cryptographic-asset component (assetType protocol) per endpoint, with the
// newest version it negotiated and that version's cipher suites and groups
// in its protocolProperties, a nested component per older version, and
// pqwatch's own facts as pqwatch:* properties. The same records give the
// same bytes: the serial number is the UUIDv5 of the document without it,
// the timestamp is the last record's ts; tool is pqwatch at version.
func (inv *Inventory) BOM(version string) ([]byte, error) {
	bom := BOM{Schema: CycloneDXSchema, BOMFormat: "CycloneDX", SpecVersion: "1.7", Version: 1, Components: []Component{}}
	if !inv.Last.IsZero() {
		bom.Metadata.Timestamp = inv.Last.UTC().Format(time.RFC3339Nano)
	}
	bom.Metadata.Lifecycles = []BOMLifecycle{{Phase: "operations"}}
	bom.Metadata.Tools = &BOMTools{Components: []Component{{Type: "application", Name: "pqwatch", Version: version}}}
	mp := &bom.Metadata.Properties
	prop(mp, "pqwatch:records_read", inv.Read)
	prop(mp, "pqwatch:handshakes", inv.Records)
	prop(mp, "pqwatch:duplicates_dropped", inv.Duplicates)
	if inv.IDsUnchecked > 0 {
		prop(mp, "pqwatch:ids_unchecked", inv.IDsUnchecked)
	}
	prop(mp, "pqwatch:endpoints", len(inv.endpoints))
	prop(mp, "pqwatch:endpoints_cap", inv.limit())
	prop(mp, "pqwatch:overflow_handshakes", inv.OverflowHandshakes)
	if !inv.First.IsZero() {
		propS(mp, "pqwatch:first_seen", inv.First.UTC().Format(time.RFC3339Nano))
		propS(mp, "pqwatch:last_seen", inv.Last.UTC().Format(time.RFC3339Nano))
	}
	for _, e := range inv.Endpoints() {
		bom.Components = append(bom.Components, e.component())
	}
	b, err := json.Marshal(bom)
	if err != nil {
		return nil, err
	}
	bom.SerialNumber = "urn:uuid:" + uuidString(uuidV5(inventoryNamespace, b))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(bom); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func prop(ps *[]Property, name string, v int) {
	*ps = append(*ps, Property{Name: name, Value: strconv.Itoa(v)})
}

func propS(ps *[]Property, name, v string) { *ps = append(*ps, Property{Name: name, Value: v}) }

func propF(ps *[]Property, name string, v float64) {
	*ps = append(*ps, Property{Name: name, Value: strconv.FormatFloat(v, 'f', 4, 64)})
}

// propCounts adds one property per name of c, "pqwatch:PREFIX:NAME" =
// count, most counted first; overflow as PREFIX_overflow.
func propCounts(ps *[]Property, prefix string, c *counted) {
	for _, n := range c.ranked() {
		prop(ps, "pqwatch:"+prefix+":"+n, c.n[n])
	}
	if c.overflow > 0 {
		prop(ps, "pqwatch:"+prefix+"_overflow", c.overflow)
	}
}

// propNames adds one property per name of c (repeated name, one value
// each), most counted first.
func propNames(ps *[]Property, name string, c *counted) {
	for _, n := range c.ranked() {
		propS(ps, "pqwatch:"+name, n)
	}
	if c.overflow > 0 {
		prop(ps, "pqwatch:"+name+"_overflow", c.overflow)
	}
}

func (e *Endpoint) bomRef() string {
	return "pqwatch:endpoint:" + e.Node + "/" + e.Transport + "/" + e.Endpoint
}

// versions are the versions of e's suites and completed records, newest
// first.
func (e *Endpoint) versions() []string {
	seen := map[string]bool{}
	for k := range e.suites {
		seen[k.version] = true
	}
	for v := range e.Versions.n {
		if protocolVersion(v) != "" {
			seen[v] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(versionRank(a), versionRank(b)), cmp.Compare(a, b)) })
	return out
}

// protocol is the protocolProperties of e's records of version v.
func (e *Endpoint) protocol(v string) *ProtocolProperties {
	pp := &ProtocolProperties{Type: "tls", Version: protocolVersion(v)}
	var keys []suiteKey
	for k := range e.suites {
		if k.version == v {
			keys = append(keys, k)
		}
	}
	total := func(k suiteKey) int {
		n := 0
		for _, c := range e.suites[k].n {
			n += c
		}
		return n
	}
	slices.SortFunc(keys, func(a, b suiteKey) int {
		return cmp.Or(cmp.Compare(total(b), total(a)), cmp.Compare(a.cipher, b.cipher))
	})
	for _, k := range keys {
		cs := CipherSuite{Name: k.cipher, Identifiers: suiteIdentifiers(k.cipher)}
		for _, g := range e.suites[k].ranked() {
			if g != "" {
				cs.TLSGroups = append(cs.TLSGroups, g)
			}
		}
		pp.CipherSuites = append(pp.CipherSuites, cs)
	}
	return pp
}

func (e *Endpoint) component() Component {
	c := Component{
		Type: "cryptographic-asset", BOMRef: e.bomRef(), Name: e.Endpoint,
		Description: fmt.Sprintf("TLS endpoint %s (%s) as node %s observed it on the wire", e.Endpoint, e.Transport, e.Node),
	}
	vs := e.versions()
	c.CryptoProperties = &CryptoProperties{AssetType: "protocol", ProtocolProperties: &ProtocolProperties{Type: "tls"}}
	if len(vs) > 0 {
		c.CryptoProperties.ProtocolProperties = e.protocol(vs[0])
		for _, v := range vs[1:] {
			c.Components = append(c.Components, Component{
				Type: "cryptographic-asset", BOMRef: e.bomRef() + "/" + v, Name: e.Endpoint + " " + v,
				CryptoProperties: &CryptoProperties{AssetType: "protocol", ProtocolProperties: e.protocol(v)},
				Properties:       []Property{{Name: "pqwatch:handshakes", Value: strconv.Itoa(e.Versions.n[v])}},
			})
		}
	}
	ps := &c.Properties
	propS(ps, "pqwatch:node", e.Node)
	propS(ps, "pqwatch:transport", e.Transport)
	if e.Frontend {
		propS(ps, "pqwatch:frontend", e.Endpoint)
	}
	propNames(ps, "server", &e.Servers)
	propNames(ps, "sni", &e.SNIs)
	propNames(ps, "generation", &e.Generations)
	propNames(ps, "server_binary", &e.Binaries)
	propNames(ps, "tls_library", &e.Libraries)
	prop(ps, "pqwatch:handshakes", e.Handshakes)
	prop(ps, "pqwatch:completed", e.Completed)
	prop(ps, "pqwatch:hybrid", e.PQ)
	propF(ps, "pqwatch:hybrid_share", e.HybridShare())
	prop(ps, "pqwatch:pq_offered", e.PQOffered)
	prop(ps, "pqwatch:pq_offered_negotiated_classical", e.PQOfferedClassical)
	propF(ps, "pqwatch:pq_offered_negotiated_classical_share", e.OfferedClassicalShare())
	prop(ps, "pqwatch:hrr", e.HRR)
	prop(ps, "pqwatch:resumed", e.Resumed)
	if !e.First.IsZero() {
		propS(ps, "pqwatch:first_seen", e.First.UTC().Format(time.RFC3339Nano))
		propS(ps, "pqwatch:last_seen", e.Last.UTC().Format(time.RFC3339Nano))
	}
	propCounts(ps, "version", &e.Versions)
	propCounts(ps, "negotiated_group", &e.Groups)
	propCounts(ps, "offered_group", &e.Offered)
	propCounts(ps, "outcome", &e.Outcomes)
	return c
}
