package sniffer

import (
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer/quic"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// quicConn turns one finished QUIC connection into a record.
func (s *Sniffer) quicConn(c *quic.Conn) {
	if !c.ClientHelloStarted {
		// No ClientHello from CRYPTO offset 0: no handshake to record.
		s.errs[errQUICNoClientHello]++
		return
	}
	r := &record.Handshake{
		TS:                  c.FirstTS.UTC(),
		FlowStart:           c.FirstTS,
		Transport:           record.TransportQUIC,
		Client:              record.ClientField(c.Client),
		Server:              c.Server.String(),
		ClientHelloSegments: c.ClientHelloPackets,
		ClientAddr:          c.Client.Addr().As16(),
		ServerAddr:          c.Server.Addr().As16(),
		ClientPort:          c.Client.Port(),
		ServerPort:          c.Server.Port(),
		View:                record.View{DCID: c.DCID, DCIDLen: c.DCIDLen, TTL: c.TTL},
	}
	if len(c.ClientHello) >= 4 {
		r.ClientHelloBytes = handshakeLen(c.ClientHello)
		if err := s.ch.Parse(c.ClientHello); err != nil {
			// Complete but not a real ClientHello: no record.
			s.errs[errClientHello]++
			return
		}
		s.fillClientHello(r, &s.ch, 'q')
		r.View.Known = copy(r.View.Random[:], s.ch.Random) == len(r.View.Random) && c.DCIDLen > 0
	}
	if len(c.HelloRetryRequest) >= 4 {
		r.HRR = true
		if err := s.sh.Parse(c.HelloRetryRequest); err == nil && s.sh.Group != 0 {
			r.SetHRRGroup(s.sh.Group)
		}
	}
	switch {
	case len(c.ServerHello) >= 4:
		r.Outcome = record.OutcomeOK
		if !c.ServerHelloTS.IsZero() && !c.FirstTS.IsZero() {
			r.HandshakeRTTMicros = max(0, c.ServerHelloTS.Sub(c.FirstTS).Microseconds())
		}
		// QUIC carries TLS 1.3 only (RFC 9001 §4.2): a ServerHello that
		// negotiates anything else parsed from noise, not from a server.
		if err := s.sh.Parse(c.ServerHello); err != nil || s.sh.Version != tlsparse.VersionTLS13 {
			s.errs[errServerHello]++
			r.GroupMissing = record.GroupMissingUnknown
			break
		}
		r.ServerHelloBytes = handshakeLen(c.ServerHello)
		r.Version = tlsparse.VersionName(s.sh.Version)
		r.Cipher = tlsparse.CipherSuiteName(s.sh.CipherSuite)
		r.Resumed = s.sh.PSK
		if s.sh.Group != 0 {
			r.SetGroup(s.sh.Group)
		} else {
			r.GroupMissing = groupMissing13(s.sh.Version, s.sh.PSK)
		}
	case c.Closed != "":
		r.Outcome = record.OutcomeAlert
		r.Alert = quicAlert(c.Closed)
	case s.flushing || c.MemoryEvicted:
		// The capture ended (Flush) before the ServerHello, like TCP, or
		// the connection was dropped to stay within the memory budget.
		r.Outcome = record.OutcomeTruncated
	case c.ClientHelloTruncated:
		// Expired or evicted before the ClientHello itself completed.
		r.Outcome = record.OutcomeIncomplete
	default:
		r.Outcome = record.OutcomeTimeout
	}
	s.emit(r)
}

// quicAlert maps a QUIC CONNECTION_CLOSE code to the TLS alert it carries
// (RFC 9001 §4.8: 0x0100 + alert), or returns the code as is.
func quicAlert(code string) string {
	var v uint64
	for _, c := range code[min(2, len(code)):] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return code
		}
	}
	if v >= 0x100 && v <= 0x1ff {
		return tlsparse.AlertName(uint8(v - 0x100))
	}
	return code
}
