// Package conformance checks pqwatch's sniffer against the expected outputs
// of other tools over a corpus of public captures (../../shared/corpus, see
// its INDEX.md): Zeek ssl.log baselines, FoxIO's JA4 reference outputs,
// Arkime session JSON, Suricata-verify eve.json checks and tshark 4.0's
// per-capture summary (analysis.json).
//
// The package holds tests only. Every field that agrees today is asserted;
// every field that does not is listed in knownDisagreements (see
// DISAGREEMENTS.md) with the reason we believe the other tool is wrong or
// defines the field differently. A new disagreement, or a listed one that
// no longer occurs, fails the test. The tests skip when the corpus is absent;
// its files are read in place and never copied into the repository.
package conformance
