package main

import (
	"cmp"
	"io"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
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
// The per-request histograms are below (gieRequests); not exported: the
// plugin latencies and the latency predictor's families.
// inference_objective_running_requests is the streams open now.
//
// Labels of the counters and gauges here: model_name and
// target_model_name are both the model every pick targets (--model-name;
// the body's model is not a label of these, which bounds them to one
// series); name is the InferencePool (--pool-name), else the model.

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

// GIE's per-request histograms, from the observations httpapi/epp makes on
// each stream (epp.Observer): names, label sets and bucket bounds as
// kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metrics/metrics.go
// declares them (at 1748e829, the last commit with the EPP in that
// repository; 32778 is upstream's bound, kept so that dashboards read
// the same le values), recorded when upstream records them
// (pkg/epp/handlers/server.go and response.go, and the predicted-latency
// plugin's requestcontrol_hooks.go for TTFT and TPOT):
//
//   - request_sizes: every routed request, its body's bytes;
//   - at the response's end: request_duration_seconds (request headers
//     to the response's end), response_sizes, input_tokens and
//     output_tokens (when > 0), prompt_cached_tokens (when the usage
//     reports it), normalized_time_per_output_token_seconds (duration
//     over output tokens), request_ttft_seconds (request headers to the
//     first response chunk) and request_tpot_seconds ((duration - TTFT)
//     over the output tokens after the first, when there are 2 or more);
//   - inference_extension_scheduler_e2e_duration_seconds: every call of
//     the selection, a wait in the router queue included, unlabelled.
//
// A stream dropped before its response ended records only its request
// size. Labels: model_name is the body's model (the target when it names
// none), target_model_name the model the pick targeted. Both come from
// clients, so the pairs are bounded (gieLabelLimit, then "other", counted
// in kvselect_epp_gie_label_overflow_total); a name that is no printable
// UTF-8 of at most gieLabelMax bytes is "other" too.
//
// The histograms are fixed-bucket, allocation-free on update
// (VictoriaMetrics' PrometheusHistogram, as perf's route latencies); the
// per-request path is one read-locked map lookup and the updates.

// gieLabelLimit bounds the (model_name, target_model_name) pairs with
// series of their own; gieLabelMax a label value's bytes.
const (
	gieLabelLimit = 1000
	gieLabelMax   = 256
	gieOther      = "other"
)

// Upstream's bucket bounds.
var (
	gieLatencyBuckets = []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
		8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	gieTPOTBuckets = []float64{0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2,
		0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60, 90, 120, 180, 270, 360}
	gieRequestSizeBuckets = []float64{64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
		131072, 262144, 524288, 1048576, 2097152, 4194304, 8388608,
		16777216, 33554432, 67108864, 134217728, 268435456, 536870912, 1073741824}
	gieResponseSizeBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536}
	gieInputTokenBuckets   = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576}
	gieOutputTokenBuckets  = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
	gieNTPOTBuckets        = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0}
	gieSchedulerBuckets    = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}
)

var gieRequestDescs = []perf.Desc{
	{Name: "inference_objective_request_duration_seconds", Kind: perf.Histogram, Help: "Inference objective response latency distribution in seconds for each model and target model (GIE's name): request headers to the response's end."},
	{Name: "inference_objective_request_sizes", Kind: perf.Histogram, Help: "Inference objective requests size distribution in bytes for each model and target model (GIE's name)."},
	{Name: "inference_objective_response_sizes", Kind: perf.Histogram, Help: "Inference objective responses size distribution in bytes for each model and target model (GIE's name)."},
	{Name: "inference_objective_input_tokens", Kind: perf.Histogram, Help: "Inference objective input token count distribution for requests in each model (GIE's name): usage.prompt_tokens, else the prompt as the EPP tokenized it."},
	{Name: "inference_objective_output_tokens", Kind: perf.Histogram, Help: "Inference objective output token count distribution for requests in each model (GIE's name): usage.completion_tokens, else the SSE events counted."},
	{Name: "inference_objective_prompt_cached_tokens", Kind: perf.Histogram, Help: "Inference objective prompt cached token count distribution for requests in each model (GIE's name): usage.prompt_tokens_details.cached_tokens."},
	{Name: "inference_objective_normalized_time_per_output_token_seconds", Kind: perf.Histogram, Help: "Inference objective latency divided by number of output tokens in seconds for each model and target model (GIE's name)."},
	{Name: "inference_objective_request_ttft_seconds", Kind: perf.Histogram, Help: "Inference model TTFT distribution in seconds for each model and target model (GIE's name): request headers to the first response body chunk."},
	{Name: "inference_objective_request_tpot_seconds", Kind: perf.Histogram, Help: "Inference model TPOT distribution in seconds for each model and target model (GIE's name): (duration - TTFT) over the output tokens after the first."},
	{Name: "inference_extension_scheduler_e2e_duration_seconds", Kind: perf.Histogram, Help: "End-to-end scheduling latency distribution in seconds (GIE's name): the selection and booking, a wait in the router queue included."},
	{Name: "kvselect_epp_gie_label_pairs", Kind: perf.Gauge, Help: "(model_name, target_model_name) pairs with GIE per-request series of their own."},
	{Name: "kvselect_epp_gie_label_pairs_limit", Kind: perf.Gauge, Help: "The pairs with series of their own at most; a request of another pair is recorded under model_name and target_model_name \"other\"."},
	{Name: "kvselect_epp_gie_label_overflow_total", Kind: perf.Counter, Help: "Requests recorded under \"other\": their pair came past the limit, or a model name was no printable UTF-8 of at most 256 bytes."},
}

// gieRequests is the epp.Observer of GIE's per-request histograms. Safe
// for concurrent use.
type gieRequests struct {
	set   *metrics.Set
	sched *metrics.PrometheusHistogram
	limit int
	// mu guards series, which only grows, to limit pairs; other is the
	// overflow's series, made at the first overflow.
	mu       sync.RWMutex
	series   map[giePair]*gieSeries
	other    atomic.Pointer[gieSeries]
	overflow atomic.Uint64
}

type giePair struct{ model, target string }

// gieSeries are one pair's histograms.
type gieSeries struct {
	duration, reqSize, respSize, input, output, cached, ntpot, ttft, tpot *metrics.PrometheusHistogram
}

func newGIERequests(limit int) *gieRequests {
	g := &gieRequests{set: metrics.NewSet(), limit: limit, series: map[giePair]*gieSeries{}}
	g.sched = g.set.NewPrometheusHistogramExt("inference_extension_scheduler_e2e_duration_seconds", gieSchedulerBuckets)
	return g
}

func (g *gieRequests) newSeries(p giePair) *gieSeries {
	l := `{model_name=` + strconv.Quote(p.model) + `,target_model_name=` + strconv.Quote(p.target) + `}`
	h := func(name string, b []float64) *metrics.PrometheusHistogram {
		return g.set.NewPrometheusHistogramExt(name+l, b)
	}
	return &gieSeries{
		duration: h("inference_objective_request_duration_seconds", gieLatencyBuckets),
		reqSize:  h("inference_objective_request_sizes", gieRequestSizeBuckets),
		respSize: h("inference_objective_response_sizes", gieResponseSizeBuckets),
		input:    h("inference_objective_input_tokens", gieInputTokenBuckets),
		output:   h("inference_objective_output_tokens", gieOutputTokenBuckets),
		cached:   h("inference_objective_prompt_cached_tokens", gieInputTokenBuckets),
		ntpot:    h("inference_objective_normalized_time_per_output_token_seconds", gieNTPOTBuckets),
		ttft:     h("inference_objective_request_ttft_seconds", gieLatencyBuckets),
		tpot:     h("inference_objective_request_tpot_seconds", gieTPOTBuckets),
	}
}

// gieLabelOK reports whether s can be a label value as it is: printable
// UTF-8 (which strconv.Quote leaves unescaped but for " and \, the text
// format's own escapes) of at most gieLabelMax bytes.
func gieLabelOK(s string) bool {
	if len(s) > gieLabelMax || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// seriesOf is the pair's series: its own, made at its first request while
// fewer than limit pairs have theirs, else the overflow's ("other", which
// a pair named "other" shares).
func (g *gieRequests) seriesOf(model, target string) *gieSeries {
	p := giePair{model, target}
	g.mu.RLock()
	s, full := g.series[p], len(g.series) >= g.limit
	g.mu.RUnlock()
	if s != nil {
		return s
	}
	if p == (giePair{gieOther, gieOther}) {
		return g.otherSeries()
	}
	if full || !gieLabelOK(model) || !gieLabelOK(target) {
		g.overflow.Add(1)
		return g.otherSeries()
	}
	g.mu.Lock()
	if s = g.series[p]; s == nil && len(g.series) < g.limit {
		// The names may alias a pooled request body: the map keeps copies.
		p = giePair{strings.Clone(model), strings.Clone(target)}
		s = g.newSeries(p)
		g.series[p] = s
	}
	g.mu.Unlock()
	if s == nil {
		g.overflow.Add(1)
		return g.otherSeries()
	}
	return s
}

// otherSeries is the overflow's series, made at its first use.
func (g *gieRequests) otherSeries() *gieSeries {
	if s := g.other.Load(); s != nil {
		return s
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.other.Load(); s != nil {
		return s
	}
	s := g.newSeries(giePair{gieOther, gieOther})
	g.other.Store(s)
	return s
}

// ObserveRequest records one request (epp.Observer).
func (g *gieRequests) ObserveRequest(o *epp.Observation) {
	if o.Scheduled {
		g.sched.Update(o.Scheduling.Seconds())
	}
	if o.Outcome != epp.OutcomeRouted && o.Outcome != epp.OutcomeRoutedUnbooked {
		return
	}
	s := g.seriesOf(cmp.Or(o.Model, o.TargetModel), o.TargetModel)
	s.reqSize.Update(float64(o.RequestBytes))
	if !o.Completed {
		return
	}
	d := o.Duration.Seconds()
	s.duration.Update(d)
	s.respSize.Update(float64(o.ResponseBytes))
	if o.InputTokens > 0 {
		s.input.Update(float64(o.InputTokens))
	}
	if o.HasCachedTokens {
		s.cached.Update(float64(o.CachedTokens))
	}
	if o.OutputTokens > 0 {
		s.output.Update(float64(o.OutputTokens))
		s.ntpot.Update(d / float64(o.OutputTokens))
	}
	if o.FirstChunk {
		ttft := o.TTFT.Seconds()
		s.ttft.Update(ttft)
		if o.OutputTokens > 1 {
			s.tpot.Update((d - ttft) / float64(o.OutputTokens-1))
		}
	}
}

// write writes the histograms and the label bound's gauges.
func (g *gieRequests) write(w io.Writer) {
	g.set.WritePrometheus(w)
	g.mu.RLock()
	n := len(g.series)
	g.mu.RUnlock()
	perf.WriteGaugeUint(w, "kvselect_epp_gie_label_pairs", uint64(n))
	perf.WriteGaugeUint(w, "kvselect_epp_gie_label_pairs_limit", uint64(g.limit))
	perf.WriteCounter(w, "kvselect_epp_gie_label_overflow_total", g.overflow.Load())
}
