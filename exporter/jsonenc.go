package exporter

import (
	"strconv"
	"unicode/utf8"

	"github.com/pqwatch/pqwatch/record"
)

// AppendJSON appends the SPEC.md JSON encoding of h to dst and returns the
// extended slice. The output has the field names, order and omission rules of
// record.Handshake's json tags and decodes with encoding/json to an equal
// record; ts is written in UTC with record.TimeFormat. It does not allocate when dst
// has room.
func AppendJSON(dst []byte, h *record.Handshake) []byte {
	dst = append(dst, `{"ts":"`...)
	dst = h.TS.UTC().AppendFormat(dst, record.TimeFormat)
	dst = append(dst, `","transport":`...)
	dst = appendString(dst, h.Transport)
	dst = append(dst, `,"client":`...)
	if h.Client != "" {
		dst = appendString(dst, h.Client)
	} else { // the address's text needs no escaping
		dst = append(h.AppendClient(append(dst, '"')), '"')
	}
	dst = append(dst, `,"server":`...)
	dst = appendString(dst, h.Server)
	dst = appendOptString(dst, `,"frontend":`, h.Frontend)
	dst = appendOptString(dst, `,"sni":`, h.SNI)
	if len(h.ALPN) > 0 {
		dst = append(dst, `,"alpn":`...)
		dst = appendStrings(dst, h.ALPN)
	}
	if len(h.OfferedGroups) > 0 {
		dst = append(dst, `,"offered_groups":`...)
		dst = appendStrings(dst, h.OfferedGroups)
	}
	if len(h.KeyShares) > 0 {
		dst = append(dst, `,"key_shares":[`...)
		for i, ks := range h.KeyShares {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"group":`...)
			dst = appendString(dst, ks.Group)
			dst = append(dst, `,"bytes":`...)
			dst = strconv.AppendInt(dst, int64(ks.Bytes), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"pq_offered":`...)
	dst = strconv.AppendBool(dst, h.PQOffered)
	dst = appendOptString(dst, `,"version":`, h.Version)
	dst = appendOptString(dst, `,"cipher":`, h.Cipher)
	dst = appendOptString(dst, `,"group":`, h.Group)
	dst = append(dst, `,"pq":`...)
	dst = strconv.AppendBool(dst, h.PQ)
	dst = append(dst, `,"hrr":`...)
	dst = strconv.AppendBool(dst, h.HRR)
	dst = appendOptString(dst, `,"hrr_group":`, h.HRRGroup)
	dst = appendOptInt(dst, `,"client_hello_bytes":`, int64(h.ClientHelloBytes))
	dst = appendOptInt(dst, `,"server_hello_bytes":`, int64(h.ServerHelloBytes))
	dst = appendOptInt(dst, `,"client_hello_segments":`, int64(h.ClientHelloSegments))
	dst = appendOptInt(dst, `,"client_hello_wire_segments":`, int64(h.ClientHelloWireSegments))
	dst = appendOptString(dst, `,"group_missing":`, h.GroupMissing)
	if h.Resumed {
		dst = append(dst, `,"resumed":true`...)
	}
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, h.Outcome)
	dst = appendOptString(dst, `,"alert":`, h.Alert)
	dst = appendOptInt(dst, `,"handshake_rtt_us":`, h.HandshakeRTTMicros)
	dst = appendOptString(dst, `,"ja4":`, h.JA4)
	if l := h.Log; l != nil {
		dst = append(dst, `,"log":{"source":`...)
		dst = appendString(dst, l.Source)
		dst = appendOptInt(dst, `,"status":`, int64(l.Status))
		dst = appendOptString(dst, `,"method":`, l.Method)
		dst = appendOptString(dst, `,"host":`, l.Host)
		dst = appendOptString(dst, `,"path":`, l.Path)
		dst = appendOptString(dst, `,"user_agent":`, l.UserAgent)
		dst = appendOptInt(dst, `,"pid":`, int64(l.PID))
		dst = appendOptString(dst, `,"ssl_curve":`, l.SSLCurve)
		dst = append(dst, '}')
	}
	if g := h.Generation; g != nil {
		dst = append(dst, `,"generation":{"id":`...)
		dst = appendString(dst, g.ID)
		dst = appendOptInt(dst, `,"master_pid":`, int64(g.MasterPID))
		dst = appendOptInt(dst, `,"worker_pid":`, int64(g.WorkerPID))
		dst = appendOptString(dst, `,"exe":`, g.Exe)
		dst = appendOptString(dst, `,"exe_sha256":`, g.ExeSHA256)
		dst = appendOptString(dst, `,"openssl":`, g.OpenSSL)
		dst = append(dst, '}')
	}
	if p := h.ServerPod(); p != nil {
		dst = append(dst, `,"pod":{`...)
		n := len(dst)
		dst = appendOptString(dst, `,"namespace":`, p.Namespace)
		dst = appendOptString(dst, `,"name":`, p.Name)
		dst = appendOptString(dst, `,"uid":`, p.UID)
		dst = appendOptString(dst, `,"container":`, p.Container)
		if len(dst) > n {
			// The first field's comma goes: {"namespace":...
			copy(dst[n:], dst[n+1:])
			dst = dst[:len(dst)-1]
		}
		dst = append(dst, '}')
	}
	dst = appendOptString(dst, `,"node":`, h.Node)
	if h.HasID() {
		// The agent's IDs are hex digits and a dash: nothing to escape.
		dst = append(dst, `,"id":`...)
		if h.ID != "" {
			dst = appendString(dst, h.ID)
		} else {
			dst = append(dst, '"')
			dst = h.AppendID(dst)
			dst = append(dst, '"')
		}
	}
	return append(dst, '}')
}

func appendOptString(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	dst = append(dst, key...)
	return appendString(dst, s)
}

func appendOptInt(dst []byte, key string, v int64) []byte {
	if v == 0 {
		return dst
	}
	dst = append(dst, key...)
	return strconv.AppendInt(dst, v, 10)
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s)
	}
	return append(dst, ']')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Like encoding/json it escapes
// control characters, U+2028 and U+2029, and replaces invalid UTF-8 with
// U+FFFD; it leaves <, > and & as they are.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
