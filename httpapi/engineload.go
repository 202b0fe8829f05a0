package httpapi

import (
	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
)

// EngineLoad is what the host's scrape of one worker's engine last read
// (vLLM's vllm:num_requests_waiting, vllm:num_requests_running,
// vllm:kv_cache_usage_perc, or SGLang's sglang:num_queue_reqs,
// sglang:num_running_reqs, sglang:token_usage; httpapi/engines), shown in
// GET /loads beside the booked load as the kvselect extension field
// "engine". The booked load stays the scheduling signal: this one is for
// the operator. Has* say whether the engine exports the family.
type EngineLoad struct {
	// Answering: the last scrape succeeded. A worker whose engine does not
	// answer is out of selection (core.Service.SetEngineAvailable).
	Answering                     bool
	Waiting, Running, KVUsage     float64
	HasWaiting, HasRunning, HasKV bool
}

// engineLoadJSON is EngineLoad on the wire; absent families are omitted.
type engineLoadJSON struct {
	Answering bool     `json:"answering"`
	Waiting   *float64 `json:"num_requests_waiting,omitempty"`
	Running   *float64 `json:"num_requests_running,omitempty"`
	KVUsage   *float64 `json:"kv_cache_usage_perc,omitempty"`
}

// loadJSON is one /loads row with the engine extension.
type loadJSON struct {
	core.PotentialLoad
	Engine *engineLoadJSON `json:"engine,omitempty"`
}

type partitionLoadsJSON struct {
	ModelName        string     `json:"model_name"`
	RoutingGroup     string     `json:"routing_group"`
	Loads            []loadJSON `json:"loads"`
	PendingCount     int64      `json:"pending_count"`
	PendingISLTokens int64      `json:"pending_isl_tokens"`
}

// writeLoads answers GET /loads: core's rows, each with its worker's
// engine load when Config.EngineLoads knows it (every rank of a worker
// carries the worker's one sample: an engine reports per process), and
// answering false for a row core holds out of selection.
func (s *Server) writeLoads(ctx *fasthttp.RequestCtx, model, group string) {
	pls := s.svc.Loads(model, group)
	if s.cfg.EngineLoads == nil {
		s.writeValue(ctx, 200, pls)
		return
	}
	out := make([]partitionLoadsJSON, len(pls))
	for i, pl := range pls {
		o := partitionLoadsJSON{ModelName: pl.ModelName, RoutingGroup: pl.RoutingGroup, Loads: make([]loadJSON, len(pl.Loads)), PendingCount: pl.PendingCount, PendingISLTokens: pl.PendingISLTokens}
		for j, l := range pl.Loads {
			o.Loads[j].PotentialLoad = l
			el, ok := s.cfg.EngineLoads(l.WorkerID)
			if !ok && !l.EngineDown {
				continue
			}
			e := &engineLoadJSON{Answering: el.Answering && !l.EngineDown}
			if el.HasWaiting {
				e.Waiting = &el.Waiting
			}
			if el.HasRunning {
				e.Running = &el.Running
			}
			if el.HasKV {
				e.KVUsage = &el.KVUsage
			}
			o.Loads[j].Engine = e
		}
		out[i] = o
	}
	s.writeValue(ctx, 200, out)
}
