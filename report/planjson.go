package report

import (
	"encoding/binary"
	"math/bits"
	"time"
	"unicode/utf8"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// PlanDecoder reads, from a record's JSON line, the fields the plan uses
// (Add, the forecast, the costs, the policy check), without reflection:
// the rest of the line is checked and skipped, nothing allocated for it.
// Strings the plan keeps (node, server, SNI, JA4, group names...) are
// interned in bounded tables, and offered_groups and key_shares arrays
// decoded once per distinct text (their group ids with them, as record.FillIDs
// sets them), so a line in the steady state allocates nothing.
//
// It is exact or it declines: Decode returns false for any line it does
// not read exactly as encoding/json into record.Handshake would (an
// escape in a string it keeps, null, a key matching a field only without
// regard to case, a duplicate key, a value of another type, a timestamp
// other than UTC's "Z", invalid JSON...), and the caller decodes that
// line with encoding/json (the reference; FuzzPlanDecoder compares them).
// What it returns is read-only: slices and the Log are shared with later
// records.
type PlanDecoder struct {
	// Client decodes the client field (a string of its own per record);
	// else it is left empty. Only the policy check's listed violations
	// read it.
	Client bool

	strs   map[string]planStr
	groups map[string]planGroups
	shares map[string]planShares
	log    record.Log
	last   [pfSkipString]planStr // each field's last string
	lastID [pfSkipString]uint16  // group and hrr_group: the last string's codepoint

	// recent holds, per array or object field, the last texts read and
	// what was made of them: a value that starts with one of them is that
	// value (an array's or an object's text ends where it closes), read
	// without scanning it again.
	recent [pfSkipGeneration + 1][planRecent]planRecentValue
	turn   [pfSkipGeneration + 1]uint8

	cache [1 << planCacheBits]planStr // planCacheSlot
	day   planDay

	// class is the last record's PlanClass, valid unless noClass.
	class   PlanClass
	noClass bool
}

// PlanClass names what a record a PlanDecoder read shares with others:
// every field it sets but the record's own (ts, client, id), each string
// and array by its number in the decoder's tables. Records of one class
// from one decoder are the same record but for those (Plan.AddClass).
type PlanClass [pcWords]uint32

// The words of a PlanClass: the strings' and arrays' numbers (0: absent),
// then the flags and integers.
const (
	pcServer = iota
	pcSNI
	pcVersion
	pcGroup
	pcHRRGroup
	pcGroupMissing
	pcOutcome
	pcAlert
	pcJA4
	pcNode
	pcUA
	pcOffered
	pcShares
	pcFlags
	pcCHBytes
	pcSHBytes
	pcWireSegs
	pcWords
)

// The flags of PlanClass[pcFlags].
const (
	pcfPQOffered = 1 << iota
	pcfPQ
	pcfHRR
	pcfLog
)

// planStr is an interned string and its number (0: not in the table).
type planStr struct {
	s  string
	id uint32
}

// Bounds of a PlanDecoder's tables: past them a value is decoded afresh.
const (
	planCacheBits  = 10
	planMaxStrings = 1 << 16
	planMaxArrays  = 1 << 12
)

// planRecent is how many texts of a field recent keeps.
const planRecent = 4

type planRecentValue struct {
	raw    []byte
	groups planGroups
	shares planShares
}

// recentValue returns the entry of field f whose text s's value starts
// with, and skips that text; nil when none.
func (d *PlanDecoder) recentValue(s *planScan, f planField) *planRecentValue {
	b := s.b[s.i:]
	for i := range d.recent[f] {
		v := &d.recent[f][i]
		if n := len(v.raw); n > 0 && len(b) >= n && b[0] == v.raw[0] && b[n-1] == v.raw[n-1] && string(b[:n]) == string(v.raw) {
			s.i += n
			return v
		}
	}
	return nil
}

// remember keeps raw (copied) as a text of field f, in turn.
func (d *PlanDecoder) remember(f planField, raw []byte) *planRecentValue {
	v := &d.recent[f][d.turn[f]%planRecent]
	d.turn[f]++
	v.raw = append(v.raw[:0], raw...)
	return v
}

type planGroups struct {
	names []string
	ids   []uint16
	num   uint32 // its number (0: not in the table)
}

type planShares struct {
	shares []record.KeyShare
	ids    []uint16
	num    uint32
}

// NewPlanDecoder returns a decoder with empty tables.
func NewPlanDecoder() *PlanDecoder {
	return &PlanDecoder{strs: map[string]planStr{}, groups: map[string]planGroups{}, shares: map[string]planShares{}}
}

// Class returns the class of the record the last Decode read, ok when it
// has one (every string and array it keeps in the decoder's tables, its
// integers within 32 bits).
func (d *PlanDecoder) Class() (PlanClass, bool) { return d.class, !d.noClass }

// classWord sets word w of the class to a number, no class when it is 0.
func (d *PlanDecoder) classWord(w int, num uint32) {
	if num == 0 {
		d.noClass = true
	}
	d.class[w] = num
}

// classInt sets word w of the class to an integer, no class when it does
// not fit.
func (d *PlanDecoder) classInt(w int, v int) {
	if v < 0 || v >= 1<<32 {
		d.noClass = true
	}
	d.class[w] = uint32(v)
}

// planField numbers the record's JSON fields: the ones the plan reads, then
// the ones it skips (checked for their type only).
type planField uint8

const (
	pfNone planField = iota
	pfTS
	pfClient
	pfServer
	pfSNI
	pfOffered
	pfShares
	pfPQOffered
	pfVersion
	pfGroup
	pfPQ
	pfHRR
	pfHRRGroup
	pfCHBytes
	pfSHBytes
	pfWireSegs
	pfGroupMissing
	pfOutcome
	pfAlert
	pfJA4
	pfLog
	pfNode
	pfID
	// skipped, type-checked
	pfSkipString
	pfSkipInt
	pfSkipBool
	pfSkipStrings
	pfSkipGeneration
)

// planFields maps every JSON name of record.Handshake to its field.
var planFields = map[string]planField{
	"ts": pfTS, "transport": pfSkipString, "client": pfClient, "server": pfServer, "frontend": pfSkipString,
	"sni": pfSNI, "alpn": pfSkipStrings, "offered_groups": pfOffered, "key_shares": pfShares,
	"pq_offered": pfPQOffered, "version": pfVersion, "cipher": pfSkipString, "group": pfGroup, "pq": pfPQ,
	"hrr": pfHRR, "hrr_group": pfHRRGroup, "client_hello_bytes": pfCHBytes, "server_hello_bytes": pfSHBytes,
	"client_hello_segments": pfSkipInt, "client_hello_wire_segments": pfWireSegs, "group_missing": pfGroupMissing,
	"resumed": pfSkipBool, "outcome": pfOutcome, "alert": pfAlert, "handshake_rtt_us": pfSkipInt, "ja4": pfJA4,
	"log": pfLog, "generation": pfSkipGeneration, "node": pfNode, "id": pfID,
}

// planClassWord and planClassFlag are the PlanClass word of each string
// field and the flag of each boolean one.
var (
	planClassWord = [pfSkipString]int{
		pfServer: pcServer, pfSNI: pcSNI, pfVersion: pcVersion, pfGroup: pcGroup, pfHRRGroup: pcHRRGroup,
		pfGroupMissing: pcGroupMissing, pfOutcome: pcOutcome, pfAlert: pcAlert, pfJA4: pcJA4, pfNode: pcNode,
	}
	planClassFlag = [pfSkipGeneration + 1]uint32{pfPQOffered: pcfPQOffered, pfPQ: pcfPQ, pfHRR: pcfHRR}
)

// planOrder is the record's fields in the order its writer writes them
// (record.Handshake's MarshalJSON), each as `"name":`, with its first 8
// bytes as a little-endian word (head) and the mask of those that are
// the literal's.
var planOrder = func() []planKeyLit {
	names := []string{"ts", "transport", "client", "server", "frontend", "sni", "alpn", "offered_groups", "key_shares",
		"pq_offered", "version", "cipher", "group", "pq", "hrr", "hrr_group", "client_hello_bytes", "server_hello_bytes",
		"client_hello_segments", "client_hello_wire_segments", "group_missing", "resumed", "outcome", "alert",
		"handshake_rtt_us", "ja4", "log", "generation", "node", "id"}
	o := make([]planKeyLit, len(names))
	for i, n := range names {
		lit := `"` + n + `":`
		var pad [8]byte
		copy(pad[:], lit)
		o[i] = planKeyLit{lit: lit, f: planFields[n], head: binary.LittleEndian.Uint64(pad[:]), mask: ^uint64(0) >> (64 - 8*min(len(lit), 8))}
	}
	return o
}()

type planKeyLit struct {
	lit        string
	f          planField
	head, mask uint64
}

// planNextKey reads a key and its colon when they are, byte for byte, one
// of planOrder's from *next on (the writer's order, fields left out by
// omitempty skipped): false leaves s as it was, for the general path.
func planNextKey(s *planScan, next *int) (planField, bool) {
	b := s.b[s.i:]
	if len(b) < 8 {
		return 0, false
	}
	x := binary.LittleEndian.Uint64(b)
	for j := *next; j < len(planOrder); j++ {
		k := &planOrder[j]
		if x&k.mask == k.head && len(b) >= len(k.lit) && (len(k.lit) <= 8 || string(b[8:len(k.lit)]) == k.lit[8:]) {
			s.i += len(k.lit)
			*next = j + 1
			return k.f, true
		}
	}
	return 0, false
}

// planFieldOf is planFields[key], by a switch (no hashing).
func planFieldOf(key []byte) planField {
	switch string(key) {
	case "ts":
		return pfTS
	case "transport", "frontend", "cipher":
		return pfSkipString
	case "client":
		return pfClient
	case "server":
		return pfServer
	case "sni":
		return pfSNI
	case "alpn":
		return pfSkipStrings
	case "offered_groups":
		return pfOffered
	case "key_shares":
		return pfShares
	case "pq_offered":
		return pfPQOffered
	case "version":
		return pfVersion
	case "group":
		return pfGroup
	case "pq":
		return pfPQ
	case "hrr":
		return pfHRR
	case "hrr_group":
		return pfHRRGroup
	case "client_hello_bytes":
		return pfCHBytes
	case "server_hello_bytes":
		return pfSHBytes
	case "client_hello_segments", "handshake_rtt_us":
		return pfSkipInt
	case "client_hello_wire_segments":
		return pfWireSegs
	case "group_missing":
		return pfGroupMissing
	case "resumed":
		return pfSkipBool
	case "outcome":
		return pfOutcome
	case "alert":
		return pfAlert
	case "ja4":
		return pfJA4
	case "log":
		return pfLog
	case "generation":
		return pfSkipGeneration
	case "node":
		return pfNode
	case "id":
		return pfID
	}
	return pfNone
}

// The nested objects' fields: 's' a string, 'i' an int; user_agent is
// the one the plan reads.
var (
	planLogFields = map[string]byte{"source": 's', "status": 'i', "method": 's', "host": 's', "path": 's', "user_agent": 'u', "pid": 'i', "ssl_curve": 's'}
	planGenFields = map[string]byte{"id": 's', "master_pid": 'i', "worker_pid": 'i', "exe": 's', "exe_sha256": 's', "openssl": 's'}
	planKSFields  = map[string]byte{"group": 's', "bytes": 'i'}
)

// planNestedOf is fields[key] (0: none) for the maps above, by a switch
// (no hashing).
func planNestedOf(key []byte, fields map[string]byte) byte {
	switch len(fields) {
	case len(planKSFields):
		switch string(key) {
		case "group":
			return 's'
		case "bytes":
			return 'i'
		}
	case len(planLogFields):
		switch string(key) {
		case "source", "method", "host", "path", "ssl_curve":
			return 's'
		case "status", "pid":
			return 'i'
		case "user_agent":
			return 'u'
		}
	case len(planGenFields):
		switch string(key) {
		case "id", "exe", "exe_sha256", "openssl":
			return 's'
		case "master_pid", "worker_pid":
			return 'i'
		}
	}
	return 0
}

// planScan is one line's scan: buf from i.
type planScan struct {
	b  []byte
	i  int
	ok bool
}

// Decode sets r (zeroed first) from line and reports whether it did so
// exactly; false: decode line with encoding/json instead.
func (d *PlanDecoder) Decode(line []byte, r *record.Handshake) bool {
	*r = record.Handshake{}
	d.class, d.noClass = PlanClass{}, false
	s := planScan{b: line, ok: true}
	s.ws()
	if !s.byte('{') {
		return false
	}
	var seen uint64
	next := 0 // the record's writer's next key in planOrder
	s.ws()
	if s.peek() == '}' {
		s.i++
	} else {
		for s.ok {
			if s.i < len(s.b) && s.b[s.i] <= ' ' {
				s.ws()
			}
			f, ok := planNextKey(&s, &next)
			if !ok {
				key, ok := s.key()
				if !ok {
					return false
				}
				if f = planFieldOf(key); f == pfNone && planFoldMatch(key, planFields) {
					return false // encoding/json matches it regardless of case
				}
				s.ws()
				if !s.byte(':') {
					return false
				}
			}
			if f != pfNone && f < pfSkipString { // a skipped field may repeat: only its type counts
				if seen&(1<<f) != 0 {
					return false
				}
				seen |= 1 << f
			}
			if s.i < len(s.b) && s.b[s.i] <= ' ' {
				s.ws()
			}
			if !d.field(&s, f, r) {
				return false
			}
			if s.i < len(s.b) && s.b[s.i] == ',' { // compact JSON: no space
				s.i++
				continue
			}
			s.ws()
			if s.peek() == ',' {
				s.i++
				continue
			}
			if !s.byte('}') {
				return false
			}
			break
		}
	}
	s.ws()
	return s.ok && s.i == len(s.b)
}

// field reads the value of field f into r.
func (d *PlanDecoder) field(s *planScan, f planField, r *record.Handshake) bool {
	switch f {
	case pfNone:
		return s.skipValue(0)
	case pfTS:
		v, ok := s.rawString()
		if !ok {
			return false
		}
		r.TS, ok = planParseTime(v, &d.day)
		return ok
	case pfClient:
		if !d.Client {
			return s.skipString()
		}
		v, ok := s.rawString()
		if !ok || !utf8.Valid(v) {
			return false // encoding/json replaces invalid UTF-8
		}
		r.Client = string(v)
		return true
	case pfID:
		v, ok := s.rawString()
		if !ok {
			return false
		}
		return planSetID(r, v, d)
	case pfServer, pfSNI, pfVersion, pfGroup, pfHRRGroup, pfGroupMissing, pfOutcome, pfAlert, pfJA4, pfNode:
		raw, ok := s.rawString()
		if !ok {
			return false
		}
		ps := d.last[f]
		if string(raw) != ps.s || ps.id == 0 {
			if ps, ok = d.intern(raw); !ok {
				return false
			}
			d.last[f] = ps
			if f == pfGroup || f == pfHRRGroup {
				d.lastID[f] = record.GroupCode(ps.s)
			}
		}
		v := ps.s
		d.classWord(planClassWord[f], ps.id)
		switch f {
		case pfServer:
			r.Server = v
		case pfSNI:
			r.SNI = v
		case pfVersion:
			r.Version = v
		case pfGroup:
			r.Group, r.GroupID = v, d.lastID[f]
		case pfHRRGroup:
			r.HRRGroup, r.HRRGroupID = v, d.lastID[f]
		case pfGroupMissing:
			r.GroupMissing = v
		case pfOutcome:
			r.Outcome = v
		case pfAlert:
			r.Alert = v
		case pfJA4:
			r.JA4 = v
		case pfNode:
			r.Node = v
		}
		return true
	case pfPQOffered, pfPQ, pfHRR, pfSkipBool:
		v, ok := s.boolean()
		switch f {
		case pfPQOffered:
			r.PQOffered = v
		case pfPQ:
			r.PQ = v
		case pfHRR:
			r.HRR = v
		}
		if v {
			d.class[pcFlags] |= planClassFlag[f]
		}
		return ok
	case pfCHBytes, pfSHBytes, pfWireSegs, pfSkipInt:
		v, ok := s.integer()
		switch f {
		case pfCHBytes:
			r.ClientHelloBytes = v
			d.classInt(pcCHBytes, v)
		case pfSHBytes:
			r.ServerHelloBytes = v
			d.classInt(pcSHBytes, v)
		case pfWireSegs:
			r.ClientHelloWireSegments = v
			d.classInt(pcWireSegs, v)
		}
		return ok
	case pfSkipString:
		return s.skipString()
	case pfSkipStrings:
		return s.stringArray(nil)
	case pfOffered:
		return d.offered(s, r)
	case pfShares:
		return d.keyShares(s, r)
	case pfLog:
		d.log = record.Log{}
		r.Log = &d.log
		d.class[pcFlags] |= pcfLog
		d.class[pcUA] = 0
		return d.object(s, planLogFields, &d.log.UserAgent)
	case pfSkipGeneration:
		if d.recentValue(s, f) != nil {
			return true
		}
		start := s.i
		if !d.object(s, planGenFields, nil) {
			return false
		}
		d.remember(f, s.b[start:s.i])
		return true
	}
	return false
}

// object reads an object of fields (see planLogFields); the 'u' field's
// string goes to *ua.
func (d *PlanDecoder) object(s *planScan, fields map[string]byte, ua *string) bool {
	if !s.byte('{') {
		return false
	}
	s.ws()
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		s.ws()
		key, ok := s.key()
		if !ok {
			return false
		}
		kind := planNestedOf(key, fields)
		if kind == 0 && planFoldMatchByte(key, fields) {
			return false
		}
		s.ws()
		if !s.byte(':') {
			return false
		}
		s.ws()
		switch kind {
		case 's':
			ok = s.skipString()
		case 'i':
			_, ok = s.integer()
		case 'u':
			var ps planStr
			ps, ok = d.str(s)
			*ua = ps.s
			d.classWord(pcUA, ps.id)
		default:
			ok = s.skipValue(0)
		}
		if !ok {
			return false
		}
		s.ws()
		if s.peek() == ',' {
			s.i++
			continue
		}
		return s.byte('}')
	}
}

// offered reads offered_groups: its names and, as record.FillIDs, their ids;
// once per distinct array text.
func (d *PlanDecoder) offered(s *planScan, r *record.Handshake) bool {
	if v := d.recentValue(s, pfOffered); v != nil {
		r.OfferedGroups, r.OfferedIDs = v.groups.names, v.groups.ids
		d.classWord(pcOffered, v.groups.num)
		return true
	}
	start := s.i
	if !s.stringArray(nil) {
		return false
	}
	raw := s.b[start:s.i]
	if g, ok := d.groups[string(raw)]; ok {
		r.OfferedGroups, r.OfferedIDs = g.names, g.ids
		d.classWord(pcOffered, g.num)
		d.remember(pfOffered, raw).groups = g
		return true
	}
	var g planGroups
	sub := planScan{b: raw, ok: true}
	if !sub.stringArray(func(v []byte) bool {
		name, ok := d.intern(v)
		g.names = append(g.names, name.s)
		return ok
	}) {
		return false
	}
	if g.names == nil {
		g.names = []string{}
	}
	for _, n := range g.names {
		if id, ok := tlsparse.ParseGroup(n); ok {
			g.ids = append(g.ids, uint16(id))
		}
	}
	if len(g.names) > 0 && g.ids == nil {
		g.ids = []uint16{}
	}
	if len(d.groups) < planMaxArrays {
		g.num = uint32(len(d.groups) + 1)
		d.groups[string(raw)] = g
		d.remember(pfOffered, raw).groups = g
	}
	r.OfferedGroups, r.OfferedIDs = g.names, g.ids
	d.classWord(pcOffered, g.num)
	return true
}

// keyShares reads key_shares: the entries and, as record.FillIDs, their ids;
// once per distinct array text.
func (d *PlanDecoder) keyShares(s *planScan, r *record.Handshake) bool {
	if v := d.recentValue(s, pfShares); v != nil {
		r.KeyShares, r.KeyShareIDs = v.shares.shares, v.shares.ids
		d.classWord(pcShares, v.shares.num)
		return true
	}
	start := s.i
	if !s.byte('[') {
		return false
	}
	s.ws()
	if s.peek() == ']' {
		s.i++
	} else {
		for {
			s.ws()
			if !d.object(s, planKSFields, nil) {
				return false
			}
			s.ws()
			if s.peek() == ',' {
				s.i++
				continue
			}
			if !s.byte(']') {
				return false
			}
			break
		}
	}
	raw := s.b[start:s.i]
	if v, ok := d.shares[string(raw)]; ok {
		r.KeyShares, r.KeyShareIDs = v.shares, v.ids
		d.classWord(pcShares, v.num)
		d.remember(pfShares, raw).shares = v
		return true
	}
	// Read again, keeping the entries (last value of a repeated key, as
	// encoding/json).
	var v planShares
	sub := planScan{b: raw, ok: true}
	sub.byte('[')
	v.shares = []record.KeyShare{}
	for sub.ws(); sub.peek() != ']'; sub.ws() {
		var ks record.KeyShare
		sub.byte('{')
		for sub.ws(); sub.peek() != '}'; sub.ws() {
			key, _ := sub.key()
			sub.ws()
			sub.byte(':')
			sub.ws()
			switch string(key) {
			case "group":
				ps, ok := d.str(&sub)
				if !ok {
					return false
				}
				ks.Group = ps.s
			case "bytes":
				ks.Bytes, _ = sub.integer()
			default:
				sub.skipValue(0)
			}
			sub.ws()
			if sub.peek() == ',' {
				sub.i++
			}
		}
		sub.i++
		v.shares = append(v.shares, ks)
		sub.ws()
		if sub.peek() == ',' {
			sub.i++
		}
	}
	if !sub.ok {
		return false
	}
	for _, ks := range v.shares {
		if id, ok := tlsparse.ParseGroup(ks.Group); ok {
			v.ids = append(v.ids, uint16(id))
		}
	}
	if len(v.shares) > 0 && v.ids == nil {
		v.ids = []uint16{}
	}
	if len(d.shares) < planMaxArrays {
		v.num = uint32(len(d.shares) + 1)
		d.shares[string(raw)] = v
		d.remember(pfShares, raw).shares = v
	}
	r.KeyShares, r.KeyShareIDs = v.shares, v.ids
	d.classWord(pcShares, v.num)
	return true
}

// str reads a string the plan keeps, interned.
func (d *PlanDecoder) str(s *planScan) (planStr, bool) {
	v, ok := s.rawString()
	if !ok {
		return planStr{}, false
	}
	return d.intern(v)
}

// intern returns v as a string and its number: from the table, else added
// to it while it has room (number 0 past it). Only strings without escapes
// reach it; invalid UTF-8 is declined (encoding/json replaces it).
func (d *PlanDecoder) intern(v []byte) (planStr, bool) {
	e := &d.cache[planCacheSlot(v)]
	if e.id != 0 && e.s == string(v) {
		return *e, true
	}
	if t, ok := d.strs[string(v)]; ok {
		*e = t
		return t, true
	}
	for _, c := range v {
		if c >= utf8.RuneSelf {
			if !utf8.Valid(v) {
				return planStr{}, false
			}
			break
		}
	}
	t := planStr{s: string(v)}
	if len(d.strs) < planMaxStrings {
		t.id = uint32(len(d.strs) + 1)
		d.strs[t.s] = t
		*e = t
	}
	return t, true
}

// planCacheSlot is v's slot in a PlanDecoder's cache of interned strings
// (in front of its table: the nodes' names and the agents' id prefixes
// come round in turn), from v's length and its first and last 8 bytes.
func planCacheSlot(v []byte) int {
	var a, b uint64
	if len(v) >= 8 {
		a, b = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[len(v)-8:])
	} else {
		for _, c := range v {
			a = a<<8 | uint64(c)
		}
	}
	h := (a*0x9e3779b97f4a7c15 ^ b) * 0xc2b2ae3d27d4eb4f
	return int((h ^ uint64(len(v))) >> (64 - planCacheBits))
}

// planSetID sets r's id: an id of the agent's form "<prefix>-<16
// lower-case hex digits>" (its sequence not 0) as IDPrefix and IDSeq (the
// prefix interned), which AppendID writes back as the same text; any
// other as ID. False for invalid UTF-8 (encoding/json replaces it).
func planSetID(r *record.Handshake, v []byte, d *PlanDecoder) bool {
	if seq, ok := planIDSeq(v); ok {
		p, ok := d.intern(v[:len(v)-16])
		r.IDPrefix, r.IDSeq = p.s, seq
		return ok
	}
	if !utf8.Valid(v) {
		return false
	}
	r.ID = string(v)
	return true
}

// planIDSeq is the sequence number of an id of the agent's form (as JSON
// text or as a record's string): ok when v ends in '-' and 16 lower-case
// hex digits, not all 0.
func planIDSeq[T string | []byte](v T) (uint64, bool) {
	if len(v) < 17 || v[len(v)-17] != '-' {
		return 0, false
	}
	var seq uint64
	for i := len(v) - 16; i < len(v); i++ {
		c := v[i]
		switch {
		case '0' <= c && c <= '9':
			seq = seq<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			seq = seq<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return seq, seq != 0
}

// planFoldMatch reports whether key, not a field name, is one but for
// case (ASCII keys only reach here).
func planFoldMatch(key []byte, fields map[string]planField) bool {
	var buf [64]byte
	l, changed := planLower(key, buf[:0])
	if !changed {
		return false
	}
	_, ok := fields[string(l)]
	return ok
}

func planFoldMatchByte(key []byte, fields map[string]byte) bool {
	var buf [64]byte
	l, changed := planLower(key, buf[:0])
	if !changed {
		return false
	}
	_, ok := fields[string(l)]
	return ok
}

func planLower(key, dst []byte) ([]byte, bool) {
	changed := false
	for _, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
			changed = true
		}
		dst = append(dst, c)
	}
	return dst, changed
}

// planDay is the date the last timestamp had, and its midnight in Unix
// seconds (set: it was a valid date).
type planDay struct {
	date [10]byte
	unix int64
	set  bool
}

// planParseTime parses "YYYY-MM-DDTHH:MM:SS[.fraction]Z" as
// time.Time.UnmarshalJSON would (strict RFC 3339, UTC); false for any
// other form (an offset, a leap second...), which the caller leaves to it.
// A timestamp of day's date takes its midnight from day; day is set to
// the date of each other one read.
func planParseTime(v []byte, day *planDay) (time.Time, bool) {
	if len(v) < 20 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' || v[len(v)-1] != 'Z' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	hour, ok4 := num(v[11:13])
	minute, ok5 := num(v[14:16])
	sec, ok6 := num(v[17:19])
	if !(ok4 && ok5 && ok6) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	if !day.set || string(v[:10]) != string(day.date[:]) {
		year, ok1 := num(v[0:4])
		month, ok2 := num(v[5:7])
		mday, ok3 := num(v[8:10])
		if !(ok1 && ok2 && ok3) || month < 1 || month > 12 || mday < 1 {
			return time.Time{}, false
		}
		midnight := time.Date(year, time.Month(month), mday, 0, 0, 0, 0, time.UTC)
		if mday > 28 && midnight.Day() != mday {
			return time.Time{}, false
		}
		copy(day.date[:], v[:10])
		day.unix, day.set = midnight.Unix(), true
	}
	ns := 0
	if frac := v[19 : len(v)-1]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return time.Time{}, false
		}
		n, ok := num(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		ns = n
	}
	return time.Unix(day.unix+int64(hour*3600+minute*60+sec), int64(ns)).UTC(), true
}

func (s *planScan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *planScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c or fails the scan.
func (s *planScan) byte(c byte) bool {
	if s.ok && s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	s.ok = false
	return false
}

// rawString reads a string without escapes or control characters and
// returns its bytes; an escape fails it (the caller declines the line).
func (s *planScan) rawString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	n := planPlainEnd(s.b[s.i:])
	if n < 0 {
		s.ok = false
		return nil, false
	}
	v := s.b[s.i : s.i+n]
	s.i += n + 1
	return v, true
}

// planPlain reports whether b has no '\\' and no control character, 8
// bytes at a time.
func planPlain(b []byte) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		y := x ^ (lo * '\\')
		// a zero byte of y ('\\'), or a byte of x below 0x20
		if ((y-lo)&^y|(x-lo*0x20)&^x)&hi != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c == '\\' || c < 0x20 {
			return false
		}
	}
	return true
}

// planPlainEnd is the index of the first '"' of b when no '\\' and no
// control character comes before it, else -1: one pass, 8 bytes at a
// time (the lowest flagged byte of each word is exact).
func planPlainEnd(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (lo * '"')
		e := x ^ (lo * '\\')
		m := ((q-lo)&^q | (e-lo)&^e | (x-lo*0x20)&^x) & hi
		if m != 0 {
			j := i + bits.TrailingZeros64(m)/8
			if b[j] == '"' {
				return j
			}
			return -1
		}
	}
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i
		case c == '\\' || c < 0x20:
			return -1
		}
	}
	return -1
}

// key reads an object key: ASCII without escapes, else it fails (the
// caller declines: encoding/json folds non-ASCII keys its own way).
func (s *planScan) key() ([]byte, bool) {
	v, ok := s.rawString()
	if !ok {
		return nil, false
	}
	if planFieldOf(v) != pfNone {
		return v, true // a field's name: ASCII
	}
	for _, c := range v {
		if c >= utf8.RuneSelf {
			s.ok = false
			return nil, false
		}
	}
	return v, true
}

// skipString checks and skips a JSON string, escapes included.
func (s *planScan) skipString() bool {
	if !s.byte('"') {
		return false
	}
	if n := planPlainEnd(s.b[s.i:]); n >= 0 {
		s.i += n + 1
		return true
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			s.ok = false
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				s.ok = false
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if s.i+4 >= len(s.b) {
					s.ok = false
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						s.ok = false
						return false
					}
				}
				s.i += 4
			default:
				s.ok = false
				return false
			}
		}
		s.i++
	}
	s.ok = false
	return false
}

// stringArray reads an array of strings (fn, when set, gets each one's
// bytes, which must have no escapes).
func (s *planScan) stringArray(fn func([]byte) bool) bool {
	if !s.byte('[') {
		return false
	}
	s.ws()
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		s.ws()
		if fn == nil {
			if !s.skipString() {
				return false
			}
		} else {
			v, ok := s.rawString()
			if !ok || !fn(v) {
				s.ok = false
				return false
			}
		}
		s.ws()
		if s.peek() == ',' {
			s.i++
			continue
		}
		return s.byte(']')
	}
}

func (s *planScan) boolean() (bool, bool) {
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, true
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, true
	}
	s.ok = false
	return false, false
}

// integer reads an integer as encoding/json reads one into an int: no
// fraction or exponent; up to 18 digits here (longer: declined).
func (s *planScan) integer() (int, bool) {
	neg := false
	if s.peek() == '-' {
		neg = true
		s.i++
	}
	start := s.i
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 18 || digits > 1 && s.b[start] == '0' {
		s.ok = false
		return 0, false
	}
	if c := s.peek(); c == '.' || c == 'e' || c == 'E' {
		s.ok = false
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// skipValue checks and skips any JSON value (depth bounded: a line
// nested past 1000 levels is declined; encoding/json allows 10000).
func (s *planScan) skipValue(depth int) bool {
	if depth > 1000 {
		s.ok = false
		return false
	}
	switch c := s.peek(); {
	case c == '"':
		return s.skipString()
	case c == '{':
		s.i++
		s.ws()
		if s.peek() == '}' {
			s.i++
			return true
		}
		for {
			s.ws()
			if !s.skipString() {
				return false
			}
			s.ws()
			if !s.byte(':') {
				return false
			}
			s.ws()
			if !s.skipValue(depth + 1) {
				return false
			}
			s.ws()
			if s.peek() == ',' {
				s.i++
				continue
			}
			return s.byte('}')
		}
	case c == '[':
		s.i++
		s.ws()
		if s.peek() == ']' {
			s.i++
			return true
		}
		for {
			s.ws()
			if !s.skipValue(depth + 1) {
				return false
			}
			s.ws()
			if s.peek() == ',' {
				s.i++
				continue
			}
			return s.byte(']')
		}
	case c == 't' || c == 'f':
		_, ok := s.boolean()
		return ok
	case c == 'n':
		if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
			s.i += 4
			return true
		}
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	s.ok = false
	return false
}

// number checks and skips a JSON number.
func (s *planScan) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	start := s.i
	n := digits()
	if n == 0 || n > 1 && s.b[start] == '0' {
		s.ok = false
		return false
	}
	if s.peek() == '.' {
		s.i++
		if digits() == 0 {
			s.ok = false
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if digits() == 0 {
			s.ok = false
			return false
		}
	}
	return true
}
