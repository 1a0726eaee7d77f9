package conformance

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestDump prints pqwatch's records and counters for the captures named in
// $PQWATCH_DUMP (comma-separated, relative to the corpus root): a tool for
// investigating a disagreement, silent otherwise.
func TestDump(t *testing.T) {
	names := os.Getenv("PQWATCH_DUMP")
	if names == "" {
		t.Skip("set PQWATCH_DUMP=capture[,capture] to print records")
	}
	corpus(t)
	for _, n := range strings.Split(names, ",") {
		r := run(t, n)
		t.Logf("%s: file %+v err %v panic %q", n, r.File, r.Err, r.Panic)
		st, _ := json.Marshal(r.Stats)
		t.Logf("stats %s", st)
		for _, h := range r.Records {
			b, _ := json.Marshal(h)
			t.Logf("%s", b)
		}
	}
}
