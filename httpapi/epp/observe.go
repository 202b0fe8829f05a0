package epp

import (
	"cmp"
	"time"

	"github.com/kvselect/kvselect/core"
)

// Observation is what one request's stream measured, handed to
// Config.Observer when the stream ends: the raw observations behind GIE's
// per-request histograms
// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metrics/metrics.go,
// fed by its pkg/epp/handlers/server.go and response.go), which the host
// turns into metrics. Times are on the monotonic clock and measured from
// Received, the stream's first message (the request headers).
//
// Invariant: every request counted in Stats.Requests is observed exactly
// once, with that outcome; a stream that ends before its request headers
// is not a request and is not observed.
type Observation struct {
	// Model is the body's model ("" when the body names none or was not
	// parsed); TargetModel the model the pick targeted (Config.ModelName,
	// else the body's, else core's default partition). Both come from
	// clients: a host labelling series with them must bound them.
	Model, TargetModel string
	// Outcome is the request's outcome (OutcomeNames).
	Outcome int
	// RequestBytes is the request body's size when it was picked.
	RequestBytes int
	// Scheduled: the selection was asked (a pick, booked or not, a plan,
	// or one refused by it); Scheduling is how long it took, a wait in
	// core's router queue included.
	Scheduled  bool
	Scheduling time.Duration
	// Completed: the response of a routed request ended (its
	// end_of_stream or trailers). Duration, ResponseBytes and the token
	// counts are final only then; a stream dropped mid-response leaves
	// Completed false.
	Completed bool
	Duration  time.Duration
	// FirstChunk: a non-empty response body chunk arrived, TTFT after
	// Received (the prefill-complete moment of the booking).
	FirstChunk bool
	TTFT       time.Duration
	// ResponseBytes counts the response body's bytes as they passed.
	ResponseBytes int64
	// InputTokens is the response's usage.prompt_tokens, else the prompt's
	// tokens as the pick tokenized them (0: unknown, as a pick without a
	// tokenizer).
	InputTokens int64
	// OutputTokens is usage.completion_tokens, else the SSE data events
	// counted (one per decode step): the count the output blocks follow
	// (0 for a request without a booking).
	OutputTokens int64
	// CachedTokens is usage.prompt_tokens_details.cached_tokens, when the
	// response reports it (HasCachedTokens).
	CachedTokens    int64
	HasCachedTokens bool
}

// Observer receives every request's Observation. ObserveRequest runs on
// the stream's goroutine after its booking is freed, so it must be fast
// and must not block; o is valid only during the call (the stream and its
// Observation are pooled).
type Observer interface {
	ObserveRequest(o *Observation)
}

// noOutcome is an Observation's Outcome before the request has one.
const noOutcome = -1

// count counts the request's outcome, once (the observation's too).
func (st *stream) count(outcome int) {
	st.s.stats.requests[outcome].Add(1)
	st.obs.Outcome = outcome
}

// routed reports whether the request was answered a destination.
func (st *stream) routed() bool {
	return st.obs.Outcome == OutcomeRouted || st.obs.Outcome == OutcomeRoutedUnbooked
}

// since is the time from the stream's first message to now.
func (st *stream) since() time.Duration { return time.Since(st.received) }

// scheduled records one call of the selection that began at start.
func (st *stream) scheduled(start time.Time) {
	st.obs.Scheduled, st.obs.Scheduling = true, time.Since(start)
}

// firstChunk records the response's first non-empty body chunk.
func (st *stream) firstChunk() {
	if !st.obs.FirstChunk {
		st.obs.FirstChunk, st.obs.TTFT = true, st.since()
	}
}

// completed records the end of a routed request's response.
func (st *stream) completed() {
	if st.routed() && !st.obs.Completed {
		st.obs.Completed, st.obs.Duration = true, st.since()
	}
}

// usage records what a usage object reported beside completion_tokens.
func (st *stream) usage(u usageCounts) {
	if u.prompt >= 0 {
		st.usagePrompt = u.prompt
	}
	if u.cached >= 0 {
		st.obs.CachedTokens, st.obs.HasCachedTokens = u.cached, true
	}
}

// observe hands the request's observation to the Observer, if any and if
// the stream was a request.
func (st *stream) observe() {
	o := st.s.cfg.Observer
	if o == nil || st.obs.Outcome == noOutcome {
		return
	}
	st.obs.Model = st.req.model
	st.obs.TargetModel = cmp.Or(st.model(), core.DefaultPartition)
	st.obs.InputTokens = st.promptTokens
	if st.usagePrompt >= 0 {
		st.obs.InputTokens = st.usagePrompt
	}
	st.obs.OutputTokens = st.tokens
	o.ObserveRequest(&st.obs)
}
