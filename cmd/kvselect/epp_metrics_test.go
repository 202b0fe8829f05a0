package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvselect/kvselect/httpapi/epp"
	"github.com/kvselect/kvselect/perf"
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
	_, r := eppSend(t, ctx, c, body)
	return int(r.GetImmediateResponse().GetStatus().GetCode())
}

// TestEppGIERequestMetrics drives completed streams through a `kvselect
// epp` binary (prompts of token ids, SSE and JSON responses, with and
// without usage) and reads GIE's per-request histograms as Prometheus
// does: each counts the streams it must, with the sums of what was sent
// (bytes, the prompts' tokens, the output tokens), per pair of the body's
// model and the targeted one.
func TestEppGIERequestMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.1:8000","block_size":4}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEppProc(t, "--workers-file", file, "--model-name", "m", "--kv-events=false")
	p.eventually("the file's worker", func() bool { _, code := p.get("/ready"); return code == 200 })
	c := p.client()
	events := func(n int, usage string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		if usage != "" {
			b.WriteString(`data: {"choices":[],"usage":` + usage + "}\n\n")
		}
		return b.String() + "data: [DONE]\n\n"
	}
	streams := []struct {
		body, resp string
		sse        bool
	}{
		{`{"model":"m","prompt":[1,2,3,4,5,6]}`, events(4, ""), true},
		{`{"model":"m","prompt":[1,2,3,4,5,6,7]}`, events(3, `{"prompt_tokens":7,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}`), true},
		{`{"model":"client-x","prompt":[1,2,3]}`, `{"choices":[{"text":"ab"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, false},
	}
	for _, s := range streams {
		_, st, cancel := eppPick(t, c, s.body)
		eppRespond(t, st, s.resp, s.sse)
		cancel()
	}
	// One more routed and dropped before its response: its request size
	// only. And one refused: nothing.
	dropped := `{"model":"m","prompt":[1,2,3,4,5]}`
	if _, _, cancel := eppPick(t, c, dropped); true {
		cancel()
	}
	if code := eppImmediate(t, c, "not json"); code != 400 {
		t.Fatalf("a body that is not JSON: %d", code)
	}

	type hist struct {
		count uint64
		sum   float64
	}
	// byPair reads a histogram family's series by model_name/target_model_name.
	byPair := func(f *dto.MetricFamily) map[string]hist {
		out := map[string]hist{}
		for _, m := range f.GetMetric() {
			var model, target string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "model_name":
					model = l.GetValue()
				case "target_model_name":
					target = l.GetValue()
				}
			}
			out[model+"/"+target] = hist{m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()}
		}
		return out
	}
	var fams map[string]*dto.MetricFamily
	p.eventually("every stream observed", func() bool {
		body, _ := p.get("/metrics")
		var problems []string
		fams, problems = promcheck.Check([]byte(body))
		for _, pr := range problems {
			t.Error(pr)
		}
		f := fams["inference_objective_request_sizes"]
		s := fams["inference_extension_scheduler_e2e_duration_seconds"]
		return f != nil && s != nil && byPair(f)["m/m"].count == 3 && s.GetMetric()[0].GetHistogram().GetSampleCount() == 4
	})
	for _, name := range []string{"inference_objective_request_duration_seconds", "inference_objective_request_sizes", "inference_objective_response_sizes",
		"inference_objective_input_tokens", "inference_objective_output_tokens", "inference_objective_prompt_cached_tokens",
		"inference_objective_normalized_time_per_output_token_seconds", "inference_objective_request_ttft_seconds", "inference_objective_request_tpot_seconds",
		"inference_extension_scheduler_e2e_duration_seconds"} {
		if f := fams[name]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s: not a histogram family: %v", name, f)
		}
	}
	get := func(name, pair string) hist { return byPair(fams[name])[pair] }
	sizes := float64(len(streams[0].body) + len(streams[1].body) + len(dropped))
	want := []struct {
		name, pair string
		count      uint64
		sum        float64 // -1: not checked (a time)
	}{
		{"inference_objective_request_sizes", "m/m", 3, sizes},
		{"inference_objective_request_sizes", "client-x/m", 1, float64(len(streams[2].body))},
		{"inference_objective_request_duration_seconds", "m/m", 2, -1},
		{"inference_objective_request_duration_seconds", "client-x/m", 1, -1},
		{"inference_objective_response_sizes", "m/m", 2, float64(len(streams[0].resp) + len(streams[1].resp))},
		{"inference_objective_response_sizes", "client-x/m", 1, float64(len(streams[2].resp))},
		{"inference_objective_input_tokens", "m/m", 2, 6 + 7},
		{"inference_objective_input_tokens", "client-x/m", 1, 3},
		{"inference_objective_output_tokens", "m/m", 2, 4 + 10},
		{"inference_objective_output_tokens", "client-x/m", 1, 2},
		{"inference_objective_prompt_cached_tokens", "m/m", 1, 4},
		{"inference_objective_normalized_time_per_output_token_seconds", "m/m", 2, -1},
		{"inference_objective_request_ttft_seconds", "m/m", 2, -1},
		{"inference_objective_request_tpot_seconds", "m/m", 2, -1},
		{"inference_objective_request_tpot_seconds", "client-x/m", 1, -1},
	}
	for _, w := range want {
		h := get(w.name, w.pair)
		if h.count != w.count || (w.sum >= 0 && h.sum != w.sum) || (w.sum < 0 && !(h.sum > 0)) {
			t.Errorf("%s{%s}: count %d sum %v, want %d and %v", w.name, w.pair, h.count, h.sum, w.count, w.sum)
		}
	}
	if h := get("inference_objective_prompt_cached_tokens", "client-x/m"); h.count != 0 {
		t.Errorf("cached tokens recorded without usage reporting them: %+v", h)
	}
	if v := fams["kvselect_epp_gie_label_pairs"].GetMetric()[0].GetGauge().GetValue(); v != 2 {
		t.Errorf("label pairs %v, want 2", v)
	}
	if v := fams["kvselect_epp_gie_label_pairs_limit"].GetMetric()[0].GetGauge().GetValue(); v != gieLabelLimit {
		t.Errorf("label pairs limit %v", v)
	}
}

// eppRespond plays the response side of a picked stream: its headers
// (SSE or JSON), then resp as one last chunk, reading the answers, then
// closes the stream.
func eppRespond(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient, resp string, sse bool) {
	t.Helper()
	ct := "application/json"
	if sse {
		ct = "text/event-stream"
	}
	hdr := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte(ct)}}}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdr}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(resp), EndOfStream: true}}},
	} {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err == nil {
		t.Fatal("the stream stayed open after the gateway closed it")
	}
}

// TestGIERequestLabelBound: the pairs with series of their own stop at
// the limit, the rest and any name that is no printable UTF-8 of at most
// gieLabelMax bytes are recorded under "other" and counted; a name with
// the text format's escapes stays exact; the exposition parses; TPOT and
// NTPOT follow upstream's formulas; and a request of a known pair
// allocates nothing.
func TestGIERequestLabelBound(t *testing.T) {
	g := newGIERequests(3)
	obs := func(model string) *epp.Observation {
		return &epp.Observation{Model: model, TargetModel: "m", Outcome: epp.OutcomeRouted, Completed: true, FirstChunk: true,
			Duration: 3 * time.Second, TTFT: time.Second, OutputTokens: 5, InputTokens: 2, RequestBytes: 10}
	}
	for _, m := range []string{"a", `q"uo\te`, "c", "d", "e", "bad\x01name", strings.Repeat("x", gieLabelMax+1), "\xff"} {
		g.ObserveRequest(obs(m))
	}
	g.ObserveRequest(&epp.Observation{Model: gieOther, TargetModel: gieOther, Outcome: epp.OutcomeRouted})
	reg := perf.NewRegistry()
	reg.Describe(gieRequestDescs...)
	reg.OnScrape(g.write)
	var b bytes.Buffer
	reg.WritePrometheus(&b)
	fams, problems := promcheck.Check(b.Bytes())
	for _, pr := range problems {
		t.Error(pr)
	}
	got := map[string]uint64{}
	for _, m := range fams["inference_objective_request_sizes"].GetMetric() {
		var model string
		for _, l := range m.GetLabel() {
			if l.GetName() == "model_name" {
				model = l.GetValue()
			}
		}
		got[model] = m.GetHistogram().GetSampleCount()
	}
	if len(got) != 4 || got["a"] != 1 || got[`q"uo\te`] != 1 || got["c"] != 1 || got[gieOther] != 6 {
		t.Fatalf("series by model_name %v: want a, the quoted name and c alone, 6 under other", got)
	}
	if v := fams["kvselect_epp_gie_label_overflow_total"].GetMetric()[0].GetCounter().GetValue(); v != 5 {
		t.Errorf("overflow %v, want 5 (d, e and three bad names; \"other\" itself is no overflow)", v)
	}
	if v := fams["kvselect_epp_gie_label_pairs"].GetMetric()[0].GetGauge().GetValue(); v != 3 {
		t.Errorf("pairs %v, want 3", v)
	}
	for _, m := range fams["inference_objective_request_tpot_seconds"].GetMetric() {
		if h := m.GetHistogram(); h.GetSampleSum() != 0.5*float64(h.GetSampleCount()) {
			t.Errorf("tpot: sum %v of %d, want 0.5 each ((3s - 1s) / 4)", h.GetSampleSum(), h.GetSampleCount())
		}
	}
	for _, m := range fams["inference_objective_normalized_time_per_output_token_seconds"].GetMetric() {
		if h := m.GetHistogram(); math.Abs(h.GetSampleSum()-0.6*float64(h.GetSampleCount())) > 1e-9 {
			t.Errorf("ntpot: sum %v of %d, want 0.6 each (3s / 5)", h.GetSampleSum(), h.GetSampleCount())
		}
	}
	known := obs("a")
	if n := testing.AllocsPerRun(100, func() { g.ObserveRequest(known) }); n != 0 {
		t.Errorf("a known pair's request allocates %v times", n)
	}
}
