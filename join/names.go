package join

import (
	"strconv"
	"strings"
)

// opensslToIANA maps the group names nginx prints in $ssl_curve (OpenSSL
// short names) to the IANA TLS Supported Groups names of SPEC.md.
var opensslToIANA = map[string]string{
	"x25519":                   "x25519",
	"x448":                     "x448",
	"prime256v1":               "secp256r1",
	"p-256":                    "secp256r1",
	"secp256r1":                "secp256r1",
	"secp384r1":                "secp384r1",
	"p-384":                    "secp384r1",
	"secp521r1":                "secp521r1",
	"p-521":                    "secp521r1",
	"ffdhe2048":                "ffdhe2048",
	"ffdhe3072":                "ffdhe3072",
	"ffdhe4096":                "ffdhe4096",
	"ffdhe6144":                "ffdhe6144",
	"ffdhe8192":                "ffdhe8192",
	"brainpoolp256r1":          "brainpoolP256r1",
	"brainpoolp384r1":          "brainpoolP384r1",
	"brainpoolp512r1":          "brainpoolP512r1",
	"x25519mlkem768":           "X25519MLKEM768",
	"secp256r1mlkem768":        "SecP256r1MLKEM768",
	"secp384r1mlkem1024":       "SecP384r1MLKEM1024",
	"curvesm2mlkem768":         "curveSM2MLKEM768",
	"mlkem512":                 "MLKEM512",
	"mlkem768":                 "MLKEM768",
	"mlkem1024":                "MLKEM1024",
	"x25519kyber768draft00":    "X25519Kyber768Draft00",
	"secp256r1kyber768draft00": "SecP256r1Kyber768Draft00",
}

var codepointNames = map[uint16]string{
	0x0017: "secp256r1", 0x0018: "secp384r1", 0x0019: "secp521r1", 0x001d: "x25519", 0x001e: "x448",
	0x0100: "ffdhe2048", 0x0101: "ffdhe3072", 0x0102: "ffdhe4096", 0x0103: "ffdhe6144", 0x0104: "ffdhe8192",
	0x11ec: "X25519MLKEM768", 0x11eb: "SecP256r1MLKEM768", 0x11ed: "SecP384r1MLKEM1024", 0x11ee: "curveSM2MLKEM768",
	0x0200: "MLKEM512", 0x0201: "MLKEM768", 0x0202: "MLKEM1024", 0x6399: "X25519Kyber768Draft00",
	0x639a: "SecP256r1Kyber768Draft00",
}

// IANAGroupName maps a group name as nginx logs it ($ssl_curve: "X25519",
// "prime256v1", "X25519MLKEM768", or "0x11ec" for groups its OpenSSL could
// not name) to the IANA name pqwatch records use. Unknown names come back
// unchanged.
func IANAGroupName(s string) string {
	if n, ok := opensslToIANA[strings.ToLower(s)]; ok {
		return n
	}
	if len(s) == 6 && (strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X")) {
		if v, err := strconv.ParseUint(s[2:], 16, 16); err == nil {
			if n, ok := codepointNames[uint16(v)]; ok {
				return n
			}
			return "0x" + strings.ToLower(s[2:])
		}
	}
	return s
}

// User-agent families for the "PQ share by user-agent family" report.
const (
	UAChrome  = "Chrome"
	UAFirefox = "Firefox"
	UASafari  = "Safari"
	UAEdge    = "Edge"
	UACurl    = "curl"
	UAGo      = "Go-http-client"
	UAOkHTTP  = "okhttp"
	UAPython  = "python-requests"
	UAOther   = "other"
)

// UAFamilies lists every family UAFamily returns (a bounded label set).
var UAFamilies = []string{UAChrome, UAFirefox, UASafari, UAEdge, UACurl, UAGo, UAOkHTTP, UAPython, UAOther}

// UAFamily classifies a User-Agent header into one of UAFamilies. Chromium
// derivatives other than Edge (Opera, Brave, Samsung Internet) count as
// Chrome; iOS browsers report their brand (CriOS, FxiOS, EdgiOS).
func UAFamily(ua string) string {
	switch {
	case ua == "":
		return UAOther
	case strings.HasPrefix(ua, "curl/"):
		return UACurl
	case strings.HasPrefix(ua, "Go-http-client/"):
		return UAGo
	case strings.HasPrefix(ua, "okhttp/"):
		return UAOkHTTP
	case strings.HasPrefix(ua, "python-requests/"):
		return UAPython
	case strings.Contains(ua, "Edg/") || strings.Contains(ua, "EdgA/") || strings.Contains(ua, "EdgiOS/") || strings.Contains(ua, "Edge/"):
		return UAEdge
	case strings.Contains(ua, "Firefox/") || strings.Contains(ua, "FxiOS/"):
		return UAFirefox
	case strings.Contains(ua, "Chrome/") || strings.Contains(ua, "CriOS/") || strings.Contains(ua, "Chromium/"):
		return UAChrome
	case strings.Contains(ua, "Safari/") && strings.Contains(ua, "Version/"):
		return UASafari
	}
	return UAOther
}
