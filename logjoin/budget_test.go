package logjoin

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/record"
)

// heapAfterGC is the live heap.
func heapAfterGC() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestPendingBytesBounded floods the joiner as a stranger can: requests
// with 8 KB user agents and paths whose handshakes were never captured
// (lines wait for a partner), and completed handshakes no line ever names
// (a handshake-only flood). Each time the live heap, measured, stays within
// the byte budget (plus a fixed allowance for the maps' buckets), and the
// evictions are counted; the bound holds because entryBytes errs high.
func TestPendingBytesBounded(t *testing.T) {
	const budget = 8 << 20
	big := strings.Repeat("A", 8<<10)
	cases := map[string]func(j *Joiner, i int){
		"lines": func(j *Joiner, i int) {
			l := line(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), uint16(1024+i%60000), time.Duration(i)*time.Microsecond, "/"+big[:4<<10])
			l.Log.UserAgent = strings.Clone(big) // each line owns its strings, as FromNginx's
			l.Log.Path = strings.Clone(l.Log.Path)
			j.AddLine(l, t0)
		},
		"handshakes": func(j *Joiner, i int) {
			h := hs(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), uint16(1024+i%60000), time.Duration(i)*time.Microsecond, "X25519MLKEM768")
			h.SNI, h.JA4 = fmt.Sprintf("host%d.example", i), fmt.Sprintf("t13d1516h2_8daaf6152771_%012d", i)
			h.ALPN = []string{"h2", "http/1.1"}
			h.OfferedGroups = []string{"X25519MLKEM768", "x25519", "secp256r1", "secp384r1"}
			h.KeyShares = []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}}
			h.OfferedIDs, h.KeyShareIDs = []uint16{4588, 29, 23, 24}, []uint16{4588, 29}
			j.AddHandshake(h, t0)
		},
	}
	for name, add := range cases {
		t.Run(name, func(t *testing.T) {
			emitted := 0
			j := New(Options{MaxPendingBytes: budget, Emit: func(*record.Handshake) { emitted++ }})
			base := heapAfterGC()
			const n = 40000
			for i := range n {
				add(j, i)
			}
			grown := heapAfterGC() - base
			st := j.Stats()
			t.Logf("%d added: %d pending, estimated %d bytes (budget %d), heap grew %d bytes, %d evicted", n, st.Pending, st.PendingBytes, budget, grown, st.Evicted)
			if st.PendingBytes > budget {
				t.Errorf("estimated %d bytes pending, over the %d budget", st.PendingBytes, budget)
			}
			if st.Evicted == 0 || int(st.Evicted)+st.Pending != n {
				t.Errorf("evicted %d + pending %d, want %d added", st.Evicted, st.Pending, n)
			}
			const buckets = 1 << 20 // the maps and queues at their peak
			if grown > budget+buckets {
				t.Errorf("heap grew %d bytes: over the %d budget (+%d for the maps)", grown, budget, buckets)
			}
			runtime.KeepAlive(j)
		})
	}
}

// TestDecidedEntriesLetGo: a handshake once emitted is no longer held
// (its record belongs to the receiver), and a decided line keeps no
// request fields; the bytes counted fall to the evidence's.
func TestDecidedEntriesLetGo(t *testing.T) {
	var got []*record.Handshake
	j := New(Options{Emit: func(h *record.Handshake) { got = append(got, h) }})
	for i := range 100 {
		j.AddHandshake(hs("10.0.0.1", uint16(2000+i), 0, "x25519"), t0)
		l := line("10.0.0.2", 0, time.Duration(i)*time.Millisecond, "/"+strings.Repeat("p", 1000))
		l.Log.UserAgent = strings.Repeat("u", 4000)
		j.AddLine(l, t0)
	}
	before := j.Stats().PendingBytes
	j.Tick(t0.Add(j.opts.MaxWait + time.Second)) // decided, not yet purged (2*MaxWait)
	st := j.Stats()
	if len(got) != 100 {
		t.Fatalf("emitted %d, want 100", len(got))
	}
	t.Logf("pending %d: %d bytes waiting, %d once decided", st.Pending, before, st.PendingBytes)
	if st.PendingBytes > st.Pending*entryOverhead {
		t.Errorf("decided entries hold %d bytes, more than %d each", st.PendingBytes, entryOverhead)
	}
	if st.Pending != 200 {
		t.Fatalf("pending %d, want the 200 decided entries kept as evidence", st.Pending)
	}
	for _, e := range j.purgeQ.q {
		if e != nil && !e.isLine && e.h != nil {
			t.Fatal("a decided handshake entry still holds its record")
		}
	}
}
