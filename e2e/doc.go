// Package e2e holds end-to-end tests that put pqwatch between real peers:
// Caddy serving HTTP/3 on a loopback UDP port, headless Chromium from Debian
// forced onto QUIC, tcpdump capturing the loopback traffic and tshark giving a
// second opinion on the same capture; and hostile UDP (random datagrams and
// Initials that authenticate but carry garbage) captured the same way. The
// live tests need root (packet capture) and the programs they drive; without
// them they skip with the reason. Packets the tests build themselves are
// sealed with Initial keys derived here from RFC 9001/9369, not with
// pqwatch's own key schedule.
//
// Traffic stays on loopback and every capture is filtered to the test's own
// port. The package has no non-test code besides this comment.
package e2e
