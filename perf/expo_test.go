package perf

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/perf/promcheck"
)

// TestExpositionGroupsFamilies: a labelled family written by two scrape
// writers, the route handles and the runtime metrics come out as one block
// per family under one HELP and one TYPE, with the described texts, and
// pass the strict check.
func TestExpositionGroupsFamilies(t *testing.T) {
	r := NewRegistry()
	r.Route("POST /select").Observe(200, time.Millisecond)
	r.Describe(Desc{"kvselect_x_total", Counter, "Xs, by reason."}, Desc{"kvselect_y", Gauge, "A y."})
	r.OnScrape(func(w io.Writer) {
		WriteCounter(w, Label("kvselect_x_total", "reason", "a"), 1)
		WriteGauge(w, "kvselect_y", 2)
	})
	r.OnScrape(func(w io.Writer) { WriteCounter(w, Label("kvselect_x_total", "reason", "b"), 3) })
	var b bytes.Buffer
	r.WritePrometheus(&b)
	out := b.String()
	fams, problems := promcheck.Check(b.Bytes())
	if len(problems) > 0 {
		t.Fatalf("problems: %v\n%s", problems, out)
	}
	if got := len(fams["kvselect_x_total"].GetMetric()); got != 2 {
		t.Errorf("kvselect_x_total has %d series, want 2", got)
	}
	for _, want := range []string{
		"# HELP kvselect_x_total Xs, by reason.\n# TYPE kvselect_x_total counter\nkvselect_x_total{reason=\"a\"} 1\nkvselect_x_total{reason=\"b\"} 3\n",
		"# TYPE kvselect_http_request_duration_seconds histogram\n",
		"# TYPE go_goroutines gauge\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "# TYPE kvselect_http_requests_total "); n != 1 {
		t.Errorf("%d TYPE lines for kvselect_http_requests_total", n)
	}
}

// TestExpositionKeepsUndescribedVisible: a family nobody described keeps
// an empty HELP, so the strict check (and the scrape tests) catch it.
func TestExpositionKeepsUndescribedVisible(t *testing.T) {
	r := NewRegistry()
	r.OnScrape(func(w io.Writer) { WriteGauge(w, "kvselect_undescribed", 1) })
	var b bytes.Buffer
	r.WritePrometheus(&b)
	_, problems := promcheck.Check(b.Bytes())
	if !strings.Contains(strings.Join(problems, "\n"), "kvselect_undescribed: no # HELP") {
		t.Fatalf("problems %v do not name the undescribed family", problems)
	}
}

func TestDescribeConflictPanics(t *testing.T) {
	r := NewRegistry()
	r.Describe(Desc{"kvselect_z", Gauge, "Z."})
	r.Describe(Desc{"kvselect_z", Gauge, "Z."}) // the same again is fine
	defer func() {
		if recover() == nil {
			t.Fatal("a conflicting description did not panic")
		}
	}()
	r.Describe(Desc{"kvselect_z", Counter, "Z."})
}
