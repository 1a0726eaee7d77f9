package tlsparse

// Protocol versions as they appear on the wire.
const (
	VersionSSL30 uint16 = 0x0300
	VersionTLS10 uint16 = 0x0301
	VersionTLS11 uint16 = 0x0302
	VersionTLS12 uint16 = 0x0303
	VersionTLS13 uint16 = 0x0304
)

// VersionName returns "TLS1.3", "TLS1.2", "TLS1.1", "TLS1.0" or "SSL3.0" for
// the corresponding wire version, else "0x" and four lower-case hex digits.
func VersionName(v uint16) string {
	switch v {
	case VersionTLS13:
		return "TLS1.3"
	case VersionTLS12:
		return "TLS1.2"
	case VersionTLS11:
		return "TLS1.1"
	case VersionTLS10:
		return "TLS1.0"
	case VersionSSL30:
		return "SSL3.0"
	}
	return hex4(v)
}

// Handshake message types (IANA TLS HandshakeType registry).
const (
	TypeHelloRequest        uint8 = 0
	TypeClientHello         uint8 = 1
	TypeServerHello         uint8 = 2
	TypeHelloVerifyRequest  uint8 = 3
	TypeNewSessionTicket    uint8 = 4
	TypeEndOfEarlyData      uint8 = 5
	TypeEncryptedExtensions uint8 = 8
	TypeCertificate         uint8 = 11
	TypeServerKeyExchange   uint8 = 12
	TypeCertificateRequest  uint8 = 13
	TypeServerHelloDone     uint8 = 14
	TypeCertificateVerify   uint8 = 15
	TypeClientKeyExchange   uint8 = 16
	TypeFinished            uint8 = 20
	TypeCertificateStatus   uint8 = 22
	TypeKeyUpdate           uint8 = 24
	TypeCompressedCert      uint8 = 25
	TypeMessageHash         uint8 = 254
)

// Extension types (IANA TLS ExtensionType Values) that tlsparse interprets or
// that JA4 treats specially.
const (
	ExtServerName           uint16 = 0x0000
	ExtStatusRequest        uint16 = 0x0005
	ExtSupportedGroups      uint16 = 0x000a
	ExtECPointFormats       uint16 = 0x000b
	ExtSignatureAlgorithms  uint16 = 0x000d
	ExtALPN                 uint16 = 0x0010
	ExtSCT                  uint16 = 0x0012
	ExtPadding              uint16 = 0x0015
	ExtExtendedMasterSecret uint16 = 0x0017
	ExtCompressCertificate  uint16 = 0x001b
	ExtSessionTicket        uint16 = 0x0023
	ExtPreSharedKey         uint16 = 0x0029
	ExtEarlyData            uint16 = 0x002a
	ExtSupportedVersions    uint16 = 0x002b
	ExtCookie               uint16 = 0x002c
	ExtPSKModes             uint16 = 0x002d
	ExtKeyShare             uint16 = 0x0033
	ExtQUICTransportParams  uint16 = 0x0039
	ExtECH                  uint16 = 0xfe0d
	ExtRenegotiationInfo    uint16 = 0xff01
)

// AlertName returns the TLS alert description name of the IANA TLS Alerts
// registry (RFC 8446 section 6 and later additions), such as
// "handshake_failure" or "illegal_parameter". Descriptions the registry
// marks _RESERVED are returned without that suffix (they still occur on the
// wire from old peers). Unknown values give "0x" and two lower-case hex
// digits.
func AlertName(desc uint8) string {
	switch desc {
	case 0:
		return "close_notify"
	case 1:
		return "end_of_early_data"
	case 10:
		return "unexpected_message"
	case 20:
		return "bad_record_mac"
	case 21:
		return "decryption_failed"
	case 22:
		return "record_overflow"
	case 30:
		return "decompression_failure"
	case 40:
		return "handshake_failure"
	case 41:
		return "no_certificate"
	case 42:
		return "bad_certificate"
	case 43:
		return "unsupported_certificate"
	case 44:
		return "certificate_revoked"
	case 45:
		return "certificate_expired"
	case 46:
		return "certificate_unknown"
	case 47:
		return "illegal_parameter"
	case 48:
		return "unknown_ca"
	case 49:
		return "access_denied"
	case 50:
		return "decode_error"
	case 51:
		return "decrypt_error"
	case 52:
		return "too_many_cids_requested"
	case 60:
		return "export_restriction"
	case 70:
		return "protocol_version"
	case 71:
		return "insufficient_security"
	case 80:
		return "internal_error"
	case 86:
		return "inappropriate_fallback"
	case 90:
		return "user_canceled"
	case 100:
		return "no_renegotiation"
	case 109:
		return "missing_extension"
	case 110:
		return "unsupported_extension"
	case 111:
		return "certificate_unobtainable"
	case 112:
		return "unrecognized_name"
	case 113:
		return "bad_certificate_status_response"
	case 114:
		return "bad_certificate_hash_value"
	case 115:
		return "unknown_psk_identity"
	case 116:
		return "certificate_required"
	case 117:
		return "general_error"
	case 120:
		return "no_application_protocol"
	case 121:
		return "ech_required"
	}
	return hex2(desc)
}
