package httpapi

import (
	"io"
	"strconv"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
)

// Families under the names Dynamo's router exports
// (ai-dynamo/dynamo:lib/llm/src/kv_router/metrics.rs, the names from
// lib/runtime/src/metrics/prometheus_names.rs), beside kvselect's own, so
// a dashboard built on a Dynamo frontend keeps working. Their labels are
// the reference's: worker_id and dp_rank as decimal strings, worker_type
// "prefill" for a prefill pool and "decode" otherwise (an aggregated
// worker's selector label), model the partition's model_name,
// policy_class the router queue's class. A worker that leaves loses its
// series (the reference removes them rather than set them to 0).
var dynamoDescs = []perf.Desc{
	{Name: "dynamo_frontend_worker_active_decode_blocks", Kind: perf.Gauge, Help: "Active KV cache decode blocks per worker"},
	{Name: "dynamo_frontend_worker_active_prefill_tokens", Kind: perf.Gauge, Help: "Active prefill tokens queued per worker"},
	{Name: "dynamo_component_router_worker_registered", Kind: perf.Gauge, Help: "Whether the router currently has this worker/dp_rank registered (1 = registered)"},
	{Name: "dynamo_frontend_router_queue_pending_requests", Kind: perf.Gauge, Help: "Number of requests pending in the router scheduler queue"},
	{Name: "dynamo_frontend_router_queue_pending_isl_tokens", Kind: perf.Gauge, Help: "Sum of isl_tokens for requests pending in the router scheduler queue"},
	{Name: "dynamo_frontend_router_queue_pending_cached_tokens", Kind: perf.Gauge, Help: "Estimated cached tokens for requests pending in the router scheduler queue"},
	{Name: "dynamo_frontend_router_queue_backpressure_total", Kind: perf.Counter, Help: "Total number of router scheduler queue backpressure rejections"},
}

// dynamoReasons are the backpressure reasons by sched.QueueLimitKind
// (lib/llm/src/kv_router/metrics.rs), in the order of
// core.QueueClassStats.Rejected (requests, raw ISL tokens, cached tokens).
var dynamoReasons = [len(core.QueueClassStats{}.Rejected)]string{"request_limit", "raw_isl_token_limit", "cached_token_limit"}

// workerType is the reference's worker_type label of a routing group.
func workerType(group string) string {
	if group == core.DefaultPrefillRoutingGroup {
		return "prefill"
	}
	return "decode"
}

// writeDynamoStats writes the families of dynamoDescs.
func (s *Server) writeDynamoStats(w io.Writer, q *core.QueueStats) {
	for _, pl := range s.svc.Loads("", "") {
		wt := workerType(pl.RoutingGroup)
		for _, l := range pl.Loads {
			id, rank := strconv.FormatUint(l.WorkerID, 10), strconv.FormatUint(uint64(l.DPRank), 10)
			lbl := `{worker_id="` + id + `",dp_rank="` + rank + `",worker_type="` + wt + `"}`
			perf.WriteGaugeUint(w, `dynamo_frontend_worker_active_decode_blocks`+lbl, uint64(max(l.PotentialDecodeBlocks, 0)))
			perf.WriteGaugeUint(w, `dynamo_frontend_worker_active_prefill_tokens`+lbl, uint64(max(l.PotentialPrefillTokens, 0)))
			perf.WriteGaugeUint(w, `dynamo_component_router_worker_registered{router_worker_id="`+id+`",dp_rank="`+rank+`",worker_type="`+wt+`"}`, 1)
		}
	}
	for _, c := range q.Classes {
		lbl := `model=` + strconv.Quote(c.ModelName) + `,worker_type="` + workerType(c.RoutingGroup) + `",policy_class=` + strconv.Quote(c.Class)
		perf.WriteGaugeUint(w, `dynamo_frontend_router_queue_pending_requests{`+lbl+`}`, uint64(max(c.Requests, 0)))
		perf.WriteGaugeUint(w, `dynamo_frontend_router_queue_pending_isl_tokens{`+lbl+`}`, uint64(max(c.RawISLTokens, 0)))
		perf.WriteGaugeUint(w, `dynamo_frontend_router_queue_pending_cached_tokens{`+lbl+`}`, uint64(max(c.CachedTokens, 0)))
		for k, n := range c.Rejected {
			perf.WriteCounter(w, `dynamo_frontend_router_queue_backpressure_total{`+lbl+`,reason="`+dynamoReasons[k]+`"}`, n)
		}
	}
}
