package perf

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestRouteMetrics(t *testing.T) {
	r := NewRegistry()
	rt := r.Route("/select")
	rt.Observe(200, time.Millisecond)
	rt.Observe(503, time.Microsecond)
	rt.Observe(418, time.Microsecond)
	r.OnScrape(func(w io.Writer) { WriteGauge(w, Label("kvselect_x", "tier", "device"), 3) })
	var b bytes.Buffer
	r.WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		`kvselect_http_requests_total{route="/select",code="200"} 1`,
		`kvselect_http_requests_total{route="/select",code="503"} 1`,
		`kvselect_http_requests_total{route="/select",code="other"} 1`,
		`kvselect_http_request_duration_seconds_count{route="/select"} 3`,
		`kvselect_x{tier="device"} 3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestObserveAllocs(t *testing.T) {
	rt := NewRegistry().Route("/x")
	if n := testing.AllocsPerRun(1000, func() { rt.Observe(200, time.Microsecond) }); n != 0 {
		t.Fatalf("Observe allocates %v times", n)
	}
}
