package loadgen

import (
	"fmt"
	"slices"
	"strings"
)

// Failure is one reason requests of an arm failed for, over all its
// trials: how often, the first error text, and the fix when it is known.
type Failure struct {
	Arm      string `json:"arm"`
	Reason   string `json:"reason"`
	Count    int    `json:"count"`    // measured requests that failed for this reason
	Requests int    `json:"requests"` // measured requests of the arm
	Trials   int    `json:"trials"`   // trials with at least one such failure
	// FirstError is the error text of the first such failure.
	FirstError string `json:"first_error"`
	Fix        string `json:"fix,omitempty"`
}

// fixes maps a reason, without its stage prefix, to what usually cures it.
var fixes = []struct{ suffix, fix string }{
	{"unknown_authority", "the server's certificate is not signed by a CA loadgen trusts: pass -ca FILE (the CA, or the self-signed certificate, in PEM) or -insecure"},
	{"bad_certificate_name", "the certificate does not name the server: set -sni to a name it holds, or pass -insecure"},
	{"certificate_expired", "the certificate is expired or not yet valid (check both clocks), or pass -insecure"},
	{"certificate_invalid", "the certificate chain is not valid for a TLS server: fix it, or pass -insecure"},
	{"certificate_unverified", "the certificate did not verify: pass -ca FILE or -insecure"},
	{"not_tls", "the target does not answer TLS on that port: check -target"},
	{"refused", "nothing listens on -target"},
	{"no_port", "the client ran out of ephemeral ports: lower the rate or widen net.ipv4.ip_local_port_range"},
	{"alert_protocol_version", "the server does not offer TLS 1.3, the only version loadgen speaks"},
	{"alert_handshake_failure", "the server shares no group or cipher suite with the arm: compare its groups (nginx ssl_ecdh_curve, Caddy curves) with the arm's"},
	{"alert_unrecognized_name", "the server has no certificate for that name: set -sni"},
	{"timeout", "the server or this machine could not keep up: lower the rate, or raise -timeout"},
	{"reset", "the server closed connections: see its error log (worker_connections, open file limits)"},
	{"eof", "the server closed connections: see its error log (worker_connections, open file limits)"},
}

// FixFor returns the known fix for a failure reason, or "".
func FixFor(reason string) string {
	if strings.HasPrefix(reason, "http_4") {
		return "the server refused the request: check -path and -sni (the Host header)"
	}
	if strings.HasPrefix(reason, "http_5") {
		return "the server failed the request: see its error log"
	}
	for _, f := range fixes {
		if strings.HasSuffix(reason, "_"+f.suffix) {
			return f.fix
		}
	}
	return ""
}

// failures aggregates the failed measured requests per arm and reason,
// most frequent first within an arm, arms in their configured order.
func failures(res *Results) []Failure {
	var out []Failure
	for _, a := range res.Arms {
		byReason := map[string]*Failure{}
		requests := 0
		for _, t := range res.Trials {
			if t.Arm != a.Name {
				continue
			}
			requests += t.Requests
			for _, reason := range sortedKeys(t.ErrorReasons) {
				f := byReason[reason]
				if f == nil {
					f = &Failure{Arm: a.Name, Reason: reason, FirstError: t.ErrorSamples[reason], Fix: FixFor(reason)}
					byReason[reason] = f
				}
				f.Count += t.ErrorReasons[reason]
				f.Trials++
				if f.FirstError == "" {
					f.FirstError = t.ErrorSamples[reason]
				}
			}
		}
		var fs []Failure
		for _, f := range byReason {
			f.Requests = requests
			fs = append(fs, *f)
		}
		slices.SortFunc(fs, func(x, y Failure) int {
			if x.Count != y.Count {
				return y.Count - x.Count
			}
			return strings.Compare(x.Reason, y.Reason)
		})
		out = append(out, fs...)
	}
	return out
}

// String is the failure as one line: what failed, the first error and the
// fix.
func (f Failure) String() string {
	s := fmt.Sprintf("arm %s: %d of %d measured requests failed with %s in %d trial(s); first error: %s",
		f.Arm, f.Count, f.Requests, f.Reason, f.Trials, f.FirstError)
	if f.Fix != "" {
		s += "; fix: " + f.Fix
	}
	return s
}
