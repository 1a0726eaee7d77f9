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

// FuzzJoinerAccounting drives the joiner with an arbitrary sequence of
// handshakes, lines (with and without ports, with long fields) and clock
// steps under a small budget: every handshake is emitted exactly once by
// Flush, the bytes counted equal the sum over the stored entries, and they
// never pass the budget.
func FuzzJoinerAccounting(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{1, 1, 1, 0, 0, 0, 2, 255, 3, 3, 3, 1, 0, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const budget = 64 << 10
		emitted := map[*record.Handshake]int{}
		var added []*record.Handshake
		j := New(Options{MaxPending: 50, MaxPendingBytes: budget, Emit: func(h *record.Handshake) { emitted[h]++ }})
		now := t0
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, ops[i+1]
			addr := fmt.Sprintf("10.0.0.%d", arg%4)
			port := uint16(arg % 8)
			at := now.Sub(t0) + time.Duration(arg%16)*time.Second - 4*time.Second
			switch op {
			case 0:
				h := hs(addr, 1000+port, at, "x25519")
				if arg&0x80 != 0 {
					h.Outcome = record.OutcomeReset
				}
				added = append(added, h)
				j.AddHandshake(h, now)
			case 1, 2:
				p := uint16(0)
				if op == 1 {
					p = 1000 + port
				}
				l := line(addr, p, at, "/"+strings.Repeat("x", int(arg)*40))
				j.AddLine(l, now)
			case 3:
				now = now.Add(time.Duration(arg) * time.Second)
				j.Tick(now)
			}
			checkAccounting(t, j, budget)
		}
		j.Flush()
		checkAccounting(t, j, budget)
		for _, h := range added {
			if emitted[h] != 1 {
				t.Fatalf("handshake %s emitted %d times", h.ClientText(), emitted[h])
			}
		}
	})
}

func checkAccounting(t *testing.T, j *Joiner, budget int) {
	t.Helper()
	sum, n := 0, 0
	seen := map[*entry]bool{}
	for _, m := range []map[key][]*entry{j.hsByKey, j.lineByKey} {
		for _, es := range m {
			for _, e := range es {
				if !seen[e] {
					seen[e] = true
					sum += e.bytes
					n++
				}
			}
		}
	}
	for _, es := range j.lineAddr {
		for _, e := range es {
			if !seen[e] {
				seen[e] = true
				sum += e.bytes
				n++
			}
		}
	}
	if sum != j.bytes || n != j.live {
		t.Fatalf("counted %d bytes in %d entries, the stored entries hold %d in %d", j.bytes, j.live, sum, n)
	}
	if j.bytes > budget {
		t.Fatalf("%d bytes stored, over the %d budget", j.bytes, budget)
	}
}
