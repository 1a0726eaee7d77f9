package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/agent"
	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/report"
)

// expectUsage is -expect-policy's usage line, the same in analyze, run and plan.
const expectUsage = "declared server policy to check every handshake against: `ADDR:PORT=POLICY`, :PORT=POLICY or POLICY (every server); POLICY is go, caddy, openssl35, openssl30 or a group list as in -forecast-groups (repeatable; the most specific applies)"

// registerExpect registers -expect-policy on fs.
func registerExpect(fs *flag.FlagSet, l *listFlag) { fs.Var(l, "expect-policy", expectUsage) }

// expectations parses the -expect-policy values; nil when none.
func expectations(l listFlag) (report.Expectations, error) {
	var es report.Expectations
	for _, s := range l {
		e, err := report.ParseExpectation(s)
		if err != nil {
			return nil, fmt.Errorf("-expect-policy %q: %w", s, err)
		}
		es = append(es, e)
	}
	return es, nil
}

// policyCheck is the report section for es, nil without declarations.
func policyCheck(es report.Expectations) *report.PolicyCheck {
	if len(es) == 0 {
		return nil
	}
	return report.NewPolicyCheck(es)
}

// addPolicyMetric gives the agent pqwatch_policy_violations_total and its
// sink when policies are declared: server_port labels for the declared
// ports and -ports.
func addPolicyMetric(cfg *agent.Config, es report.Expectations) {
	if len(es) == 0 {
		return
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	m := exporter.NewPolicyMetrics(cfg.Registry, append(es.Ports(), cfg.Ports...))
	cfg.Sinks = append(cfg.Sinks, exporter.PolicySink(m, es))
}

// warnPolicyUncovered says on stderr when policies were declared but no
// handshake was of a declared server (a mistyped ADDR:PORT checks nothing).
func warnPolicyUncovered(stderr io.Writer, cmd string, pc *report.PolicyCheck) {
	if pc == nil || pc.Covered > 0 || pc.Handshakes == 0 {
		return
	}
	fmt.Fprintf(stderr, "pqwatch %s: warning: -expect-policy checked nothing: none of the %d handshakes is of a declared server (%s)\n", cmd, pc.Handshakes, strings.Join(pc.Expect, "; "))
}
