package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvselect/kvselect/perf/promcheck"
	dto "github.com/prometheus/client_model/go"
)

// TestEppGIEMetrics scrapes a `kvselect epp` binary after one routed
// request and one refused (a body that is not JSON: 400) and reads the
// exposition as Prometheus does (promcheck): GIE's EPP families are
// there with GIE's types and labels and the values the requests made,
// beside kvselect's own.
func TestEppGIEMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.1:8000","block_size":4}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEppProc(t, "--workers-file", file, "--model-name", "m", "--kv-events=false")
	p.eventually("the file's worker", func() bool { _, code := p.get("/ready"); return code == 200 })
	c := p.client()
	if d, _, cancel := eppPick(t, c, `{"model":"m","prompt":[1,2,3,4,5]}`); d != "127.0.0.1:8000" {
		t.Fatalf("picked %q", d)
	} else {
		cancel()
	}
	if code := eppImmediate(t, c, "not json"); code != 400 {
		t.Fatalf("a body that is not JSON: %d", code)
	}
	var fams map[string]*dto.MetricFamily
	p.eventually("both requests counted", func() bool {
		body, _ := p.get("/metrics")
		var problems []string
		fams, problems = promcheck.Check([]byte(body))
		for _, pr := range problems {
			t.Error(pr)
		}
		f := fams["inference_objective_request_total"]
		return f != nil && f.GetMetric()[0].GetCounter().GetValue() == 2
	})
	want := []struct {
		name   string
		typ    dto.MetricType
		labels []string
	}{
		{"inference_objective_request_total", dto.MetricType_COUNTER, []string{"model_name", "target_model_name"}},
		{"inference_objective_request_error_total", dto.MetricType_COUNTER, []string{"model_name", "target_model_name", "error_code"}},
		{"inference_objective_running_requests", dto.MetricType_GAUGE, []string{"model_name"}},
		{"inference_pool_ready_pods", dto.MetricType_GAUGE, []string{"name"}},
		{"inference_extension_info", dto.MetricType_GAUGE, []string{"commit", "build_ref"}},
		{"kvselect_epp_requests_total", dto.MetricType_COUNTER, []string{"outcome"}},
	}
	for _, w := range want {
		f := fams[w.name]
		if f == nil {
			t.Errorf("no family %s", w.name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s is a %v, want %v", w.name, f.GetType(), w.typ)
		}
		for _, m := range f.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			if len(got) != len(w.labels) {
				t.Errorf("%s labels %v, want %v", w.name, got, w.labels)
			}
			for _, l := range m.GetLabel() {
				if (l.GetName() == "model_name" || l.GetName() == "target_model_name") && l.GetValue() != "m" {
					t.Errorf("%s %s=%q, want m", w.name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	errs := map[string]float64{}
	for _, m := range fams["inference_objective_request_error_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "error_code" {
				errs[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if errs["BadRequest"] != 1 || errs["ServiceUnavailable"] != 0 {
		t.Errorf("errors by code %v, want one BadRequest", errs)
	}
	if v := fams["inference_pool_ready_pods"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("ready pods %v, want 1", v)
	}
}

// eppImmediate sends one request whose body the EPP refuses and returns
// the status of its ImmediateResponse (0 when it routed).
func eppImmediate(t *testing.T, c extprocv3.ExternalProcessorClient, body string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: "content-type", RawValue: []byte("application/json")}}}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return int(r.GetImmediateResponse().GetStatus().GetCode())
}
