// Package e2e holds end-to-end tests that put pqwatch between real peers:
// Caddy serving HTTP/3 on a loopback UDP port, headless Chromium from Debian
// forced onto QUIC, tcpdump capturing the loopback traffic and tshark giving a
// second opinion on the same capture. The tests need root (packet capture)
// and the programs they drive; without them they skip with the reason.
//
// Traffic stays on loopback and every capture is filtered to the test's own
// port. The package has no non-test code besides this comment.
package e2e
