package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync/atomic"

	"github.com/pqwatch/pqwatch/record"
)

// IDs stamps every record with the node's name and an ID unique across
// nodes and restarts: a random 64-bit prefix drawn when the agent starts and
// a counter, 16 hex digits each ("9f3c2a1b0d4e5f60-000000000000002a"). Two
// agent starts share a prefix with probability 2^-64 per pair; within one,
// the counter does not repeat. The fixed width keeps one agent's IDs in
// order when sorted as text.
type IDs struct {
	node   string
	prefix string // 16 hex digits and '-'
	n      atomic.Uint64
}

// NewIDs draws a new prefix for node ("" takes the host name).
func NewIDs(node string) *IDs {
	if node == "" {
		node, _ = os.Hostname()
	}
	ids := &IDs{node: node}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
	ids.prefix = hex.EncodeToString(b[:]) + "-"
	return ids
}

// stamp sets r's Node and ID: the ID as its prefix and number, formatted
// by whoever writes it (record.Handshake.AppendID), so stamping allocates
// nothing. It is safe for concurrent use.
func (ids *IDs) stamp(r *record.Handshake) {
	r.Node, r.IDPrefix, r.IDSeq = ids.node, ids.prefix, ids.n.Add(1)
}
