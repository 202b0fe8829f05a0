package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/httpapi/epp"
)

// TestEppServedMovesMetric: the served-elsewhere results are exported,
// each under its described family.
func TestEppServedMovesMetric(t *testing.T) {
	var b bytes.Buffer
	writeEppMetrics(&b, epp.Stats{ServedElsewhere: 6, ServedMoved: 3, ServedUnknown: 2, ServedUnmoved: 1})
	for _, want := range []string{
		"kvselect_epp_served_elsewhere_total 6\n",
		`kvselect_epp_served_moves_total{result="moved"} 3` + "\n",
		`kvselect_epp_served_moves_total{result="unknown"} 2` + "\n",
		`kvselect_epp_served_moves_total{result="unmoved"} 1` + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	described := false
	for _, d := range eppDescs {
		described = described || d.Name == "kvselect_epp_served_moves_total"
	}
	if !described {
		t.Error("kvselect_epp_served_moves_total is not described")
	}
}
