package conformance

// Reasons for the known disagreements. Each says why we believe the other
// tool is wrong, why the definitions differ, or, plainly, where pqwatch's
// scope ends (those are candidates for future work, see DISAGREEMENTS.md).
const (
	whyCHNotCaptured = "definitions differ: the ClientHello segment is not in the capture (tshark: \"ACKed unseen segment\"); pqwatch writes a record only for a connection whose ClientHello it saw, Arkime opens a session from the server side"
	whySSLv2Hello    = "scope: SSLv2-format ClientHello (RFC 5246 E.2) carries no extensions, hence no groups or key shares; " +
		"pqwatch records TLS-record ClientHellos only, tshark/Zeek/Arkime/FoxIO count the v2 hello too"
	whyDraft                 = "definitions differ: pre-RFC TLS 1.3 drafts (key_share was extension 40 up to draft 22, draft ServerHellos have another layout and version 0x7fXX); pqwatch implements RFC 8446 only, so it reports no key shares and no TLS1.3 group/cipher for draft handshakes"
	whyTsharkHRR             = "tshark 4.0 is wrong: it counts the HelloRetryRequest but dissects no ServerHello after it (sh=0); the final ServerHello is in the capture (pqwatch reads TLS_AES_256_GCM_SHA384, secp256r1, 155 bytes)"
	whyClientOnly            = "definitions differ: the capture holds client packets only; 5 connections send a second ClientHello after a HelloRetryRequest that is not captured; pqwatch writes one record per connection with the first ClientHello's key shares, tshark counts every ClientHello"
	whyOnePerConn            = "definitions differ: a second ClientHello on the same connection; pqwatch writes one record per connection (SPEC), tshark counts messages"
	whyOverflow              = "by design: a ~330 KB certificate chain precedes the ServerKeyExchange, beyond the 64 KiB MaxStreamBytes bound; pqwatch counts stream_overflow and omits the group rather than buffer without limit"
	whyMalformedSH           = "Arkime is lenient: synthetic ServerHellos with a malformed extensions block (1 stray byte; empty supported_versions/key_share bodies); pqwatch rejects them as crypto/tls would, counts malformed_server_hello and leaves version/cipher unset"
	whyOpenVPN               = "scope: TLS inside OpenVPN's control channel (P_CONTROL packets) is not TLS over TCP/QUIC; pqwatch does not unwrap it"
	whyNonASCIIALPN          = "FoxIO's Python and Rust print the older rule (\"99\" when the first ALPN byte is > 127); JA4.md now takes the hex of the first and last byte for a non-alphanumeric ALPN (0xBA 0xAD -> \"bd\")"
	whySuricataJA4Underscore = "Suricata is wrong: this ClientHello has no signature_algorithms and Suricata hashes the extension list with a trailing '_'; FoxIO's JA4.md says the string then ends without '_' (sha256 of \"0005,000a,000b,0017,0023,ff01\" = c39ab67fec8e); this filter also needs tls.version=TLSv1, see whySuricataClientVersion"
	whyPartialCH             = "definitions differ: the connection's only ClientHello record is cut short (its header says 69 bytes, 64 follow, then the flow goes idle); pqwatch writes a record for a ClientHello that never completes (client_hello_bytes from its header, outcome incomplete: its SYN was captured) because a hybrid hello whose second segment never arrives is what an operator must see, tshark dissects no ClientHello"
	whyMalformedCH           = "by design: a one-packet ClientHello whose body does not parse (its extensions overrun the message); pqwatch writes a record only for a real ClientHello and counts malformed_client_hello, tshark dissects what it can"
	whyZeekDHE               = "definitions differ: Zeek's curve column names elliptic curves only; a TLS 1.2 DHE ServerKeyExchange carries a prime (here 1024 bits, tshark: p_len 128, g 2, not an RFC 7919 prime), which pqwatch names ffdhe* when it is RFC 7919's and otherwise dhe and its size in bits"
	whySuricataClientVersion = "definitions differ: with no ServerHello (server closed after the ClientHello) Suricata's tls.version is the ClientHello's version; pqwatch's version is the negotiated one only, absent here"
)

// knownDisagreements lists every field where pqwatch and another tool
// differ today. DISAGREEMENTS.md summarises them for humans. Regenerate
// candidates with: go test ./conformance -conformance.dump
var knownDisagreements = []known{
	{disagreement{"arkime", "arkime_arkime/tests/pcap/arkime_synthetic.pcap", "10.9.10.1:49601", "cipher", "-", "TLS_AES_128_GCM_SHA256"}, whyMalformedSH},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/arkime_synthetic.pcap", "10.9.10.1:49601", "version", "-", "TLS1.2"}, whyMalformedSH},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/arkime_synthetic.pcap", "10.9.19.1:49621", "cipher", "-", "TLS_AES_256_GCM_SHA384"}, whyMalformedSH},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/arkime_synthetic.pcap", "10.9.19.1:49621", "version", "-", "TLS1.2"}, whyMalformedSH},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/https2-301-get.pcap", "10.180.156.141:50754", "record", "absent", "present"}, whySSLv2Hello},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/openvpn_synthetic.pcap", "203.0.113.5:51000", "record", "absent", "present"}, whyOpenVPN},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/openvpn_synthetic.pcap", "203.0.113.7:51002", "record", "absent", "present"}, whyOpenVPN},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/openvpn_synthetic.pcap", "[2001:db8:1::5]:51001", "record", "absent", "present"}, whyOpenVPN},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/openvpn_synthetic.pcap", "[2001:db8:1::7]:51003", "record", "absent", "present"}, whyOpenVPN},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/pppoe.pcap", "172.202.246.57:1063", "record", "absent", "present"}, whySSLv2Hello},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/socks4-https.pcap", "10.0.0.1:50606", "record", "absent", "present"}, whyCHNotCaptured},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/tls13.pcap", "[2001:16d8:ffce:10:aca8:353c:291d:a9b3]:62510", "cipher", "-", "TLS_AES_128_GCM_SHA256"}, whyDraft},
	{disagreement{"arkime", "arkime_arkime/tests/pcap/tls13.pcap", "[2001:16d8:ffce:10:aca8:353c:291d:a9b3]:62510", "version", "-", "TLSv1.3-draft-18"}, whyDraft},
	{disagreement{"foxio", "FoxIO-LLC_ja4/pcap/tls-non-ascii-alpn.pcapng", "192.168.1.168:50112", "ja4(python)", "t13d1516bd_8daaf6152771_e5627efa2ab1", "t13d151699_8daaf6152771_e5627efa2ab1"}, whyNonASCIIALPN},
	{disagreement{"foxio", "FoxIO-LLC_ja4/pcap/tls-non-ascii-alpn.pcapng", "192.168.1.168:50112", "ja4(rust)", "t13d1516bd_8daaf6152771_e5627efa2ab1", "t13d151699_8daaf6152771_e5627efa2ab1"}, whyNonASCIIALPN},
	{disagreement{"suricata", "OISF_suricata-verify/tests/bug-5713-01/TLSv1-Extracted-MaliciousC2.pcap", "", "bug-5713-01#1 tls tls.version=TLSv1", "0", "1"}, whySuricataClientVersion},
	{disagreement{"suricata", "OISF_suricata-verify/tests/bug-5713-01/TLSv1-Extracted-MaliciousC2.pcap", "", "bug-5713-02-ja4#1 tls tls.ja4=t10i070600_c50f5591e341_ce66f3b797c1 tls.version=TLSv1", "0", "1"}, whySuricataJA4Underscore},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft14/tls13_draft14.pcap", "", "tls13-draft14#0 tls tls.version=TLS 1.3 draft-<16", "0", "1"}, whyDraft},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft18/tls13_draft18.pcap", "", "tls13-draft18#0 tls tls.version=TLS 1.3 draft-18", "0", "1"}, whyDraft},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft19/tls13_draft19.pcap", "", "tls13-draft19#0 tls tls.sni=localhost tls.version=TLS 1.3 draft-19", "0", "3"}, whyDraft},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft22/tls13_draft22.pcap", "", "tls13-draft22#0 tls tls.sni=localhost tls.version=TLS 1.3 draft-22", "0", "1"}, whyDraft},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft23/tls13_draft23.pcap", "", "tls13-draft23#0 tls tls.version=TLS 1.3 draft-23", "0", "1"}, whyDraft},
	{disagreement{"suricata", "OISF_suricata-verify/tests/tls/tls13-draft28/tls13_draft28.pcap", "", "tls13-draft28#0 tls tls.sni=localhost tls.version=TLS 1.3 draft-28", "0", "2"}, whyDraft},
	{disagreement{"tshark", "FoxIO-LLC_ja4/pcap/tls-sni.pcapng", "", "ch_key_share", "x25519", "secp256r1,x25519"}, whyClientOnly},
	{disagreement{"tshark", "FoxIO-LLC_ja4/pcap/tls-sni.pcapng", "", "records", "79", "84"}, whyClientOnly},
	{disagreement{"tshark", "OISF_suricata-verify/tests/ssl_version_negated/input.pcap", "", "records", "5", "6"}, whySSLv2Hello},
	{disagreement{"tshark", "OISF_suricata-verify/tests/sslv2-tls-upgrade-01/ssl-v2-s1.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls-duplicate-hello/input.pcap", "", "records", "1", "2"}, whyOnePerConn},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls-altname-zero/input.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls-glupteba-mb/input.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls-glupteba/input.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft14/tls13_draft14.pcap", "", "ch_key_share", "-", "ffdhe2048,secp256r1"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft18/tls13_draft18.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft18/tls13_draft18.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft19/tls13_draft19.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft19/tls13_draft19.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft22/tls13_draft22.pcap", "", "ch_key_share", "-", "secp256r1"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft22/tls13_draft22.pcap", "", "hrr_group", "-", "secp256r1"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft22/tls13_draft22.pcap", "", "sh_key_share", "-", "secp256r1"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft23/tls13_draft23.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "OISF_suricata-verify/tests/tls/tls13-draft28/tls13_draft28.pcap", "", "sh_key_share", "-", "secp256r1"}, whyDraft},
	{disagreement{"tshark", "arkime_arkime/tests/pcap/arkime_synthetic.pcap", "", "records", "12", "11"}, whyPartialCH},
	{disagreement{"tshark", "seladb_PcapPlusPlus/Tests/Packet++Test/PacketExamples/ssl-malformed1.pcap", "", "records", "0", "1"}, whyMalformedCH},
	{disagreement{"tshark", "arkime_arkime/tests/pcap/https2-301-get.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "arkime_arkime/tests/pcap/pppoe.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "arkime_arkime/tests/pcap/tls13.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "arkime_arkime/tests/pcap/tls13.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "stanford-esrg_retina/traces/tls_ciphers.pcap", "", "records", "70", "73"}, whySSLv2Hello},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/chrome-63.0.3211.0-canary-tls_experiment.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/chrome-63.0.3211.0-canary-tls_experiment.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/hrr.pcap", "", "sh_key_share", "secp256r1", "-"}, whyTsharkHRR},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/signed_certificate_timestamp-2.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/signed_certificate_timestamp.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/ssl-v2.pcap", "", "records", "0", "1"}, whySSLv2Hello},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/ssl.v3.pcap", "", "records", "2", "3"}, whySSLv2Hello},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls-13draft19-early-data.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls-13draft19-early-data.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary-aborted.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "", "ch_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01-aborted.pcap", "", "ch_key_share", "-", "secp256r1,secp384r1,x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "", "ch_key_share", "-", "secp256r1,secp384r1,x25519"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "", "sh_key_share", "-", "secp384r1"}, whyDraft},
	{disagreement{"tshark", "zeek_zeek/testing/btest/Traces/tls/tls13draft23-chrome67.0.3368.0-canary.pcap", "", "sh_key_share", "-", "x25519"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/chrome-63.0.3211.0-canary-tls_experiment.pcap", "192.168.0.2:62873", "group", "-", "x25519"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/chrome-63.0.3211.0-canary-tls_experiment.pcap", "192.168.0.2:62873", "version", "0x7e01", "unknown-32257"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/dhe.pcap", "192.168.18.50:62277", "group", "dhe1024", "-"}, whyZeekDHE},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/pop3-starttls.pcap", "192.168.4.149:54775", "group", "dhe1024", "-"}, whyZeekDHE},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls-expired-cert.pcap", "192.168.4.149:60539", "group", "dhe1024", "-"}, whyZeekDHE},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls-fragmented-handshake.pcap.gz", "192.168.6.86:61454", "group", "-", "secp256r1"}, whyOverflow},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53994", "cipher", "-", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53994", "group", "-", "x25519"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53994", "version", "-", "TLSv13-draft14"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53996", "cipher", "-", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53996", "group", "-", "x25519"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-chrome55.0.2879.0-canary.pcap", "192.168.6.203:53996", "version", "-", "TLSv13-draft14"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36778", "cipher", "-", "TLS_CHACHA20_POLY1305_SHA256"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36778", "group", "-", "secp384r1"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36778", "version", "-", "TLSv13-draft16"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36782", "cipher", "-", "TLS_CHACHA20_POLY1305_SHA256"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36782", "group", "-", "secp384r1"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft16-ff52.a01.pcap", "192.150.187.20:36782", "version", "-", "TLSv13-draft16"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft23-chrome67.0.3368.0-canary.pcap", "192.168.86.23:63449", "group", "-", "x25519"}, whyDraft},
	{disagreement{"zeek", "zeek_zeek/testing/btest/Traces/tls/tls13draft23-chrome67.0.3368.0-canary.pcap", "192.168.86.23:63449", "version", "0x7f17", "TLSv13-draft23"}, whyDraft},
}
