package main

import (
	"io"
	"runtime/debug"
	"strconv"

	"github.com/kvselect/kvselect/httpapi/epp"
	"github.com/kvselect/kvselect/perf"
)

// The Gateway API Inference Extension's EPP metric names, for the ones
// kvselect computes, with GIE's labels and types
// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metrics/metrics.go
// at 04a97e67, the names llm-d still emits as deprecated twins), so that
// GIE's dashboards and alerts read a `kvselect epp` unchanged. kvselect's
// own kvselect_epp_* families stay beside them, with the finer outcomes.
//
// Not exported: the per-request histograms (request_duration_seconds,
// request_sizes, response_sizes, input_tokens, output_tokens,
// normalized_time_per_output_token_seconds) and the scheduler and plugin
// latencies, which need an observation on the ext_proc stream that
// httpapi/epp does not record; inference_objective_running_requests is
// the streams open now.
//
// Labels: model_name and target_model_name are both the model every pick
// targets (--model-name; the body's model is not a label, which bounds the
// series to one); name is the InferencePool (--pool-name), else the
// model.

var gieDescs = []perf.Desc{
	{Name: "inference_objective_request_total", Kind: perf.Counter, Help: "Counter of inference objective requests broken out for each model and target model (GIE's name): every ext_proc request answered, routed or refused."},
	{Name: "inference_objective_request_error_total", Kind: perf.Counter, Help: "Counter of inference objective requests errors broken out for each model and target model (GIE's name), by GIE's error_code: BadRequest (400, 413), InferencePoolResourceExhausted (429), ServiceUnavailable (503), Internal (500)."},
	{Name: "inference_objective_running_requests", Kind: perf.Gauge, Help: "Inference objective number of running requests in each model (GIE's name): ext_proc streams open now."},
	{Name: "inference_pool_average_kv_cache_utilization", Kind: perf.Gauge, Help: "The average kv cache utilization for an inference server pool (GIE's name): over the workers whose engine answered the last scrape (--engine-metrics-interval)."},
	{Name: "inference_pool_average_queue_size", Kind: perf.Gauge, Help: "The average number of requests pending in the model server queue (GIE's name): vllm:num_requests_waiting (sglang:num_queue_reqs) over the workers whose engine answered the last scrape."},
	{Name: "inference_pool_ready_pods", Kind: perf.Gauge, Help: "The number of ready pods in the inference server pool (GIE's name): the schedulable workers."},
	{Name: "inference_extension_info", Kind: perf.Gauge, Help: "General information of the current build of Inference Extension (GIE's name): kvselect's commit and version."},
}

// gieErrorCodes maps httpapi/epp's error outcomes to GIE's error codes
// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/util/error:
// BadRequest, InferencePoolResourceExhausted, ServiceUnavailable,
// Internal); the other outcomes are not errors.
var gieErrorCodes = map[string]string{
	"bad_request": "BadRequest", "too_large": "BadRequest", "overloaded": "InferencePoolResourceExhausted",
	"unavailable": "ServiceUnavailable", "internal": "Internal",
}

// gieLabels are the constant label values of the GIE families.
type gieLabels struct {
	model, pool   string
	commit, build string
}

func newGIELabels(model, pool string, b buildInfo) gieLabels {
	l := gieLabels{model: model, pool: pool, build: b.version}
	if l.pool == "" {
		l.pool = model
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				l.commit = s.Value
			}
		}
	}
	return l
}

// writeGIEMetrics writes the GIE families; scrape is nil without
// --engine-metrics-interval (the pool averages are then absent, as GIE
// has no value without metrics either).
func writeGIEMetrics(w io.Writer, l gieLabels, st epp.Stats, readyPods int, scrape *engineScrape) {
	models := `model_name=` + strconv.Quote(l.model) + `,target_model_name=` + strconv.Quote(l.model)
	var total uint64
	errs := map[string]uint64{}
	for i, name := range epp.OutcomeNames {
		if name == "abandoned" { // the stream ended before any answer
			continue
		}
		total += st.Requests[i]
		if code, ok := gieErrorCodes[name]; ok {
			errs[code] += st.Requests[i]
		}
	}
	perf.WriteCounter(w, `inference_objective_request_total{`+models+`}`, total)
	for _, code := range []string{"BadRequest", "InferencePoolResourceExhausted", "ServiceUnavailable", "Internal"} {
		perf.WriteCounter(w, `inference_objective_request_error_total{`+models+`,error_code="`+code+`"}`, errs[code])
	}
	perf.WriteGauge(w, perf.Label("inference_objective_running_requests", "model_name", l.model), float64(st.Active))
	perf.WriteGauge(w, perf.Label("inference_pool_ready_pods", "name", l.pool), float64(readyPods))
	if scrape != nil {
		if t := scrape.totals(); t.hasKV || t.hasQueue {
			if t.hasKV {
				perf.WriteGauge(w, perf.Label("inference_pool_average_kv_cache_utilization", "name", l.pool), t.avgKV)
			}
			if t.hasQueue {
				perf.WriteGauge(w, perf.Label("inference_pool_average_queue_size", "name", l.pool), t.avgQueue)
			}
		}
	}
	perf.WriteGauge(w, `inference_extension_info{commit=`+strconv.Quote(l.commit)+`,build_ref=`+strconv.Quote(l.build)+`}`, 1)
}
