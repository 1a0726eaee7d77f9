package capture

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pqwatch/pqwatch/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
)

// TestLinkListUnderChurn: links created and deleted in a namespace while
// the capture lists them (as containers start and stop on a node) never
// make the list fail: an interrupted dump is dumped again. A CI run failed
// a capture's start with "list links: results may be incomplete or
// inconsistent" while other tests made and removed veths. Bounded: 4 s,
// veth pairs in a namespace of the test's own
// (testenv's pair).
func TestLinkListUnderChurn(t *testing.T) {
	p := testenv.NewPair(t, 1500)
	ns, err := netns.GetFromName(p.S)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 20 { // enough links that a dump spans several messages
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("keep%da", i)}, PeerName: fmt.Sprintf("keep%db", i)}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the churn, on a handle of its own
		defer close(done)
		hc, err := netlink.NewHandleAt(ns)
		if err != nil {
			return
		}
		defer hc.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("churn%da", i%8)}, PeerName: fmt.Sprintf("churn%db", i%8)}
			hc.LinkAdd(l)
			hc.LinkDel(l)
		}
	}()
	raw, lists, deadline := 0, 0, time.Now().Add(4*time.Second)
	for ; time.Now().Before(deadline) && lists < 400; lists++ {
		if _, err := h.LinkList(); errors.Is(err, nl.ErrDumpInterrupted) {
			raw++
		}
		links, err := linkList(h)
		if err != nil {
			close(stop)
			<-done
			t.Fatalf("list %d: %v", lists, err)
		}
		if len(links) < 42 {
			t.Errorf("list %d: %d links, want the 40 kept, lo and the pair's veth at least", lists, len(links))
		}
	}
	close(stop)
	<-done
	t.Logf("%d lists under churn; %d plain dumps were interrupted", lists, raw)
}
