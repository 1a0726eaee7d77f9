package pcapgen

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// Respond serves ln with a minimal HTTPS responder until ln is closed:
// each connection gets a full TLS handshake with cfg, one "200 ok"
// response after the request headers, and is closed. The demo and the
// live tests use it as their Go server.
func Respond(ln net.Listener, cfg *tls.Config) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			s := tls.Server(c, cfg)
			_ = s.SetDeadline(time.Now().Add(5 * time.Second))
			if s.Handshake() != nil {
				return
			}
			br := bufio.NewReader(s)
			for {
				l, err := br.ReadString('\n')
				if err != nil || l == "\r\n" {
					break
				}
			}
			fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		}()
	}
}
