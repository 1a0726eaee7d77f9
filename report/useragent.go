package report

import "strings"

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
