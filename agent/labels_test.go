package agent

import (
	"slices"
	"testing"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/exporter"
)

// TestCaptureFilterLabels: the label values of pqwatch_capture_filter_info
// are the capture's filter kinds.
func TestCaptureFilterLabels(t *testing.T) {
	for _, k := range []string{capture.FilterClassic, capture.FilterEBPF} {
		if !slices.Contains(exporter.CaptureFilters, k) {
			t.Errorf("filter kind %q is not a label value of pqwatch_capture_filter_info (%v)", k, exporter.CaptureFilters)
		}
	}
}
