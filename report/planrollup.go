package report

import (
	"hash/maphash"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// RollupStats counts what a plan read from rollup rows.
type RollupStats struct {
	// Rows counts every row given to AddRollup; Duplicates of them had a
	// node, server and window already seen (at-least-once delivery) and
	// were dropped.
	Rows       int `json:"rows_read"`
	Duplicates int `json:"rows_duplicate_dropped"`
	// WithoutClasses counts rows with handshakes but no offer classes (an
	// agent older than them): their Handshakes are in Unplanned.
	WithoutClasses int `json:"rows_without_offer_classes"`
	// Unplanned counts handshakes of rows without offer classes (counted
	// nowhere else) and any difference between a row's handshakes and its
	// classes' sum.
	Unplanned int `json:"handshakes_unplanned"`
	// OtherOffer counts handshakes of folded offer classes (OfferClass.Other):
	// today's figures count them, the forecast calls them unknown.
	OtherOffer int `json:"handshakes_offer_other"`
}

// AddRollup counts one rollup row: each of its offer classes as its
// Handshakes records would be counted by Add, in the fleet, the row's node
// and its server (rollups carry no SNI: the top SNIs and the user-agent
// tail need records). A row whose node, server and window were seen
// before is dropped.
func (pl *Plan) AddRollup(row *RollupRow) {
	if len(pl.pending) > 0 {
		pl.flush()
	}
	if pl.Rollups == nil {
		pl.Rollups = &RollupStats{}
	}
	st := pl.Rollups
	st.Rows++
	var h maphash.Hash
	h.SetSeed(pl.seed)
	h.WriteString("rollup\x00")
	h.WriteString(row.Node)
	h.WriteByte(0)
	h.WriteString(row.Server)
	h.WriteByte(0)
	h.WriteString(row.Start.UTC().Format(record.TimeFormat))
	h.WriteString(row.End.UTC().Format(record.TimeFormat))
	if pl.seenKey(h.Sum64()) {
		st.Duplicates++
		return
	}
	if !row.Start.IsZero() && (pl.WindowStart.IsZero() || row.Start.Before(pl.WindowStart)) {
		pl.WindowStart = row.Start
	}
	if row.End.After(pl.WindowEnd) {
		pl.WindowEnd = row.End
	}
	if len(row.OfferClasses) == 0 {
		if row.Handshakes > 0 {
			st.WithoutClasses++
			st.Unplanned += row.Handshakes
		}
		return
	}
	node := row.Node
	if node == "" {
		node = PlanNoNode
	}
	scopes := [...]*PlanFigures{pl.PlanFigures, pl.row(pl.Nodes, node), pl.row(pl.Servers, row.Server)}
	sum := 0
	for i := range row.OfferClasses {
		c := &row.OfferClasses[i]
		if c.Handshakes <= 0 {
			continue
		}
		sum += c.Handshakes
		if row.Node == "" {
			pl.NoNode += c.Handshakes
		}
		if c.Other {
			st.OtherOffer += c.Handshakes
		}
		r := c.record(row.Server)
		o, w := predictClass(pl.policy, c, &r)
		if pl.PolicyCheck != nil {
			pl.PolicyCheck.AddClass(c, &r)
		}
		var cost recordCost
		if len(pl.Costs) > 0 {
			cost = planRecordCost(pl.table(row.Server), &r, o)
		}
		fail := pl.failure(&r)
		for _, f := range scopes {
			f.add(&r, o, cost, w, fail)
		}
		if stayClassical(o) {
			count(pl.families, tailKey{key: w.TailKey}, classicalReason(&pl.policy, &r, o), w.N, &pl.FamiliesOverflow)
		}
	}
	if d := row.Handshakes - sum; d > 0 {
		st.Unplanned += d
	}
}

// record is a record of c's class: the fields the forecast and the plan
// read, sizes left 0 (predictClass sets them).
func (c *OfferClass) record(server string) record.Handshake {
	r := record.Handshake{
		Server: server, OfferedGroups: c.OfferedGroups,
		Outcome: c.Outcome, Alert: c.Alert, Version: c.Version, Group: c.Group, PQ: c.PQ, HRR: c.HRR,
	}
	if c.ClientMaxVersion != "" {
		r.JA4 = "t" + c.ClientMaxVersion // the forecast reads JA4's version digits only
	}
	r.FillIDs()
	for _, name := range c.KeyShareGroups {
		if g, ok := tlsparse.ParseGroup(name); ok {
			r.KeyShareIDs = append(r.KeyShareIDs, uint16(g))
		}
	}
	for _, g := range r.OfferedIDs {
		if tlsparse.Group(g).IsPQ() {
			r.PQOffered = true
		}
	}
	return r
}

// predictClass predicts the handshakes of c (r is c.record) under p: the
// outcome each of them gets (the same for all: it depends only on the
// class's fields and on whether the sizes are zero) and their weight,
// whose byte sums are exact. The byte model (forecast's bytesModel) is
// affine in the observed ServerHello size x and in the ClientHello size
// without its key_share entries y, with the class's zero/non-zero pattern
// fixed; so the sum over the class is n·f(x0, y0) + fx·(Σx − n·x0) +
// fy·(Σy − n·y0), with x0, y0 the means rounded down (at least 1, so the
// non-zero branches hold) and fx, fy the differences at x0+1 and y0+1.
func predictClass(p forecast.Policy, c *OfferClass, r *record.Handshake) (forecast.Outcome, weight) {
	n := int64(c.Handshakes)
	var x0, y0, sx, sy int64
	if c.ServerHello {
		sx = c.ServerHelloBytes
		x0 = max(sx/n, 1)
	}
	if c.ClientHello {
		sy = c.ClientHelloBytes - c.KeyShareBytes
		y0 = max(sy/n, 1)
	}
	at := func(x, y int64) forecast.Outcome {
		r.ServerHelloBytes, r.ClientHelloBytes = int(x), int(y)
		return forecast.Predict(p, r)
	}
	o := at(x0, y0)
	growth, hrr := n*int64(o.ServerHelloGrowth), n*int64(o.HRRBytes)
	if c.ServerHello {
		ox := at(x0+1, y0)
		growth += int64(ox.ServerHelloGrowth-o.ServerHelloGrowth) * (sx - n*x0)
		hrr += int64(ox.HRRBytes-o.HRRBytes) * (sx - n*x0)
	}
	if c.ClientHello {
		oy := at(x0, y0+1)
		hrr += int64(oy.HRRBytes-o.HRRBytes) * (sy - n*y0)
	}
	at(x0, y0) // leave r as predicted
	return o, weight{
		N: c.Handshakes, Growth: growth, HRRBytes: hrr,
		WireKnown: c.WireSegmentsKnown, MultiSegment: c.MultiSegment, TailKey: c.Family(),
	}
}
