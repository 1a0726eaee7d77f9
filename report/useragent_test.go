package report

import "testing"

func TestUAFamily(t *testing.T) {
	for ua, want := range map[string]string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36":                        UAChrome,
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0":            UAEdge,
		"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0":                                                                 UAFirefox,
		"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15":                  UASafari,
		"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0 Mobile/15E148 Safari/604.1": UAChrome,
		"curl/8.5.0": UACurl, "Go-http-client/1.1": UAGo, "okhttp/4.12.0": UAOkHTTP, "python-requests/2.32.3": UAPython,
		"": UAOther, "Wget/1.21": UAOther,
	} {
		if got := UAFamily(ua); got != want {
			t.Errorf("UAFamily(%q) = %q, want %q", ua, got, want)
		}
	}
}
