package agent

import (
	"strings"
	"testing"
)

func TestErrorSummary(t *testing.T) {
	for in, want := range map[string]string{
		`SSL_CTX_set1_groups_list("X25519MLKEM768") failed`: `"SSL_CTX_set1_groups_list(\"X25519MLKEM768\") failed"`,
		"secret\x1b[2J\n\x00":                               `"secret\x1b[2J\n\x00"`,
	} {
		if got := errorSummary([]byte(in)); got != want {
			t.Errorf("errorSummary(%q) = %s, want %s", in, got, want)
		}
	}
	long := strings.Repeat("k", 1000)
	if got := errorSummary([]byte(long)); len(got) > maxErrorMsg+40 || !strings.HasSuffix(got, "(840 bytes more)") {
		t.Errorf("long message: %q", got)
	}
}
