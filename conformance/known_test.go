package conformance

// knownDisagreements lists every field where pqwatch and another tool
// differ today, with why we believe the other tool is wrong or defines the
// field differently. DISAGREEMENTS.md summarises them for humans. Keep the
// entries sorted by tool, capture, connection and field.
var knownDisagreements = []known{}
