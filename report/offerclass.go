package report

import (
	"cmp"
	"slices"
	"strings"

	"github.com/pqwatch/pqwatch/record"
)

// Bounds of a rollup row's offer classes.
const (
	// RollupMaxClasses bounds the distinct offer classes of one rollup row
	// (one server, one window). Past it a handshake's offer is folded into
	// an Other class that keeps today's outcome (OfferClassesOther counts
	// them), so today's figures stay exact and the forecast calls those
	// handshakes unpredictable.
	RollupMaxClasses = 256
	// An offer listing more groups or key shares than these is folded the
	// same way (no real client comes near: browsers list 4 to 8).
	rollupMaxOffered = 32
	rollupMaxShares  = 8
)

// OfferClass counts the handshakes of one rollup row that share what the
// forecast reads from a record: the ClientHello's offer (the highest version
// it offered, from JA4; supported_groups and key_share groups in the
// client's order, GREASE removed) and today's outcome (outcome, alert,
// version, group, pq, hrr). Byte sizes enter the forecast's byte model
// linearly, so their sums are enough for exact byte totals.
type OfferClass struct {
	// Other: the offer was folded (the row had RollupMaxClasses classes
	// already, or the offer was longer than any client's); the offer
	// fields are empty, Group is bounded to the common groups as in the
	// groups map.
	Other bool `json:"other,omitempty"`

	ClientMaxVersion string   `json:"client_max_version,omitempty"` // JA4's two version digits: "13", "12", ...
	OfferedGroups    []string `json:"offered_groups,omitempty"`
	KeyShareGroups   []string `json:"key_share_groups,omitempty"`
	ClientHello      bool     `json:"client_hello"` // a ClientHello size was recorded

	Outcome     string `json:"outcome"`
	Alert       string `json:"alert,omitempty"`
	Version     string `json:"version,omitempty"`
	Group       string `json:"group,omitempty"`
	PQ          bool   `json:"pq"`
	HRR         bool   `json:"hrr"`
	ServerHello bool   `json:"server_hello"` // a ServerHello size was recorded

	Handshakes int `json:"handshakes"`
	// Sums over the class: ClientHello and ServerHello bytes (header
	// included, as in the records), and the key_share entries' bytes (4
	// plus the share per entry, GREASE removed, as the byte model
	// subtracts them for a second ClientHello).
	ClientHelloBytes int64 `json:"client_hello_bytes_sum"`
	KeyShareBytes    int64 `json:"key_share_bytes_sum"`
	ServerHelloBytes int64 `json:"server_hello_bytes_sum"`
	// Of the class, those with client_hello_wire_segments, and those that
	// needed more than one segment.
	WireSegmentsKnown int `json:"client_hello_wire_segments_known"`
	MultiSegment      int `json:"client_hello_multi_segment"`
}

// classKey appends h's offer class key to b (offer folded when other).
func classKey(b []byte, h *record.Handshake, other bool) []byte {
	b = b[:0]
	bit := func(v bool) byte {
		if v {
			return '1'
		}
		return '0'
	}
	group := h.Group
	if other {
		b = append(b, '*', 0)
		group = groupLabel(group)
	} else {
		b = append(b, ja4Version(h.JA4)...)
		b = append(b, 0)
		for _, g := range h.OfferedGroups {
			b = append(b, g...)
			b = append(b, ',')
		}
		b = append(b, 0)
		for _, k := range h.KeyShares {
			b = append(b, k.Group...)
			b = append(b, ',')
		}
		b = append(b, 0, bit(h.ClientHelloBytes > 0))
	}
	b = append(b, 0)
	b = append(b, h.Outcome...)
	b = append(b, 0)
	b = append(b, h.Alert...)
	b = append(b, 0)
	b = append(b, h.Version...)
	b = append(b, 0)
	b = append(b, group...)
	return append(b, 0, bit(h.PQ), bit(h.HRR), bit(h.ServerHelloBytes > 0))
}

// ja4Version is the two version digits of a JA4 ("13"), "" without one.
func ja4Version(ja4 string) string {
	if len(ja4) < 3 {
		return ""
	}
	return ja4[1:3]
}

// addClass counts h in its offer class; buf is scratch for the key.
func (a *rollupAgg) addClass(h *record.Handshake, buf []byte) []byte {
	other := len(h.OfferedGroups) > rollupMaxOffered || len(h.KeyShares) > rollupMaxShares
	buf = classKey(buf, h, other)
	c := a.classes[string(buf)]
	if c == nil && !other && len(a.classes) >= RollupMaxClasses {
		other = true
		buf = classKey(buf, h, true)
		c = a.classes[string(buf)]
	}
	if other {
		a.classesOther++
	}
	if c == nil {
		c = &OfferClass{Other: other, Outcome: h.Outcome, Alert: h.Alert, Version: h.Version, Group: h.Group,
			PQ: h.PQ, HRR: h.HRR, ServerHello: h.ServerHelloBytes > 0}
		if other {
			c.Group = groupLabel(h.Group)
			if c.Group == "none" {
				c.Group = ""
			}
		} else {
			c.ClientMaxVersion = ja4Version(h.JA4)
			c.OfferedGroups = slices.Clone(h.OfferedGroups)
			for _, k := range h.KeyShares {
				c.KeyShareGroups = append(c.KeyShareGroups, k.Group)
			}
			c.ClientHello = h.ClientHelloBytes > 0
		}
		a.classes[string(buf)] = c
	}
	c.Handshakes++
	if !other {
		c.ClientHelloBytes += int64(h.ClientHelloBytes)
		for _, k := range h.KeyShares {
			c.KeyShareBytes += 4 + int64(k.Bytes)
		}
	}
	c.ServerHelloBytes += int64(h.ServerHelloBytes)
	if h.ClientHelloWireSegments > 0 {
		c.WireSegmentsKnown++
		if h.ClientHelloWireSegments > 1 {
			c.MultiSegment++
		}
	}
	return buf
}

// offerClasses returns a's classes, largest first (ties in key order).
func (a *rollupAgg) offerClasses() []OfferClass {
	keys := make([]string, 0, len(a.classes))
	for k := range a.classes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		return cmp.Or(cmp.Compare(a.classes[y].Handshakes, a.classes[x].Handshakes), cmp.Compare(x, y))
	})
	out := make([]OfferClass, 0, len(keys))
	for _, k := range keys {
		out = append(out, *a.classes[k])
	}
	return out
}

// Family is the class's row in a plan's classical tail: its offer, as
// "offer tlsVV [groups] shares [groups]" ("offer other" when folded).
func (c *OfferClass) Family() string {
	if c.Other {
		return "offer other"
	}
	v := "none"
	if c.ClientMaxVersion != "" {
		v = "tls" + c.ClientMaxVersion
	}
	return "offer " + v + " [" + strings.Join(c.OfferedGroups, ",") + "] shares [" + strings.Join(c.KeyShareGroups, ",") + "]"
}
