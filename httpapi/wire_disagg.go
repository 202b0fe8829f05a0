package httpapi

import (
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
	"slices"
)

// disaggReq is a pooled decoded /disagg/plan body (kvselect's
// DisaggPlanRequest: Dynamo's coordinator has no HTTP surface; its
// DisaggRequest is ishandhanani/dynamo:lib/kv-router/src/services/
// selection/coordinator.rs). Lifetime as selectReq: acquired per request,
// released when the handler returns; strings alias the body or the
// scanner's buffer, and core copies the whole request into the plan.
type disaggReq struct {
	req                 core.DisaggRequest
	prefillOv, decodeOv core.Override
	pin                 core.WorkerKey
	affinity            core.AffinityTarget
	prefs               map[string]float64
	sc                  jsonscan.Scanner
	// txt is the body's text in place of token_ids (textin.go).
	txt textIn
}

// disaggFields are DisaggPlanRequest's fields: the prompt flattened in, as
// in /select_and_reserve.
var disaggFields = jsonscan.NewFieldSet(append(slices.Concat(promptFields, textFields), "selection_id", "model_name", "prefill_routing_group",
	"decode_routing_group", "expected_output_tokens", "session_context", "session_id", "affinity_target",
	"pinned_prefill_worker", "allowed_worker_ids", "routing_constraints", "prefill_router_config_override",
	"decode_router_config_override", "order", "prefill_failure", "defer_decode")...)

// reset empties r for the pool, dropping every reference into a body and
// keeping the slices' capacity.
func (r *disaggReq) reset() {
	q := &r.req
	pr := q.Prompt
	pr.Reset()
	clear(q.RequiredTaints)
	clear(q.PreferredTaints)
	*q = core.DisaggRequest{Prompt: pr, AllowedWorkerIDs: q.AllowedWorkerIDs[:0],
		RequiredTaints: q.RequiredTaints[:0], PreferredTaints: q.PreferredTaints[:0]}
	r.sc.Reset(nil)
	r.txt.reset()
}

// retained is what the pooled request keeps between requests.
func (r *disaggReq) retained() int {
	return r.req.Prompt.RetainedBytes() + 8*cap(r.req.AllowedWorkerIDs) + r.sc.Retained()
}

// decodeDisagg reads a DisaggPlanRequest. Syntax and type errors are the
// scanner's (400, 422); then the values serde cannot check are validated
// (400): a selection_id given empty, and the order and prefill_failure
// names, which take hyphens for underscores and ignore case, like Dynamo's
// EPP settings (DYN_EPP_DISAGG_ORDER, DYN_EPP_DISAGG_PREFILL_FAILURE). The
// rest (a '/' in the id, equal routing groups, defer_decode with the
// decode-anchored order, the prompt and the overrides) is core's.
func decodeDisagg(body []byte, r *disaggReq) error {
	r.reset()
	q := &r.req
	s := &r.sc
	s.Reset(body)
	var seen uint64
	var order, failure, ctxSession, session string
	var hasOrder, hasFailure, hasID bool
	err := s.Object("struct DisaggPlanRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(disaggFields, &seen, "", key)); done {
			return err
		}
		var err error
		var n bool
		if known, err := r.txt.field(s, string(key)); known {
			return err
		}
		switch string(key) {
		case "selection_id":
			q.SelectionID, hasID, err = s.Str("selection_id")
		case "model_name":
			q.ModelName, _, err = s.Str("model_name")
		case "prefill_routing_group":
			q.PrefillRoutingGroup, _, err = s.Str("prefill_routing_group")
		case "decode_routing_group":
			q.DecodeRoutingGroup, _, err = s.Str("decode_routing_group")
		case "expected_output_tokens":
			if n, err = s.Null(); !n && err == nil {
				var v uint64
				v, err = s.Uint("expected_output_tokens", 1<<32-1, "u32")
				q.ExpectedOutputTokens, q.HasExpectedOutputTokens = uint32(v), true
			}
		case "session_id":
			session, _, err = s.Str("session_id")
		case "session_context":
			var sc core.SessionContext
			if _, err = decodeSessionContext(s, &sc); err == nil {
				ctxSession = sc.SessionID
			}
		case "affinity_target":
			if n, err = s.Null(); !n && err == nil {
				var k core.WorkerKey
				var hasRank bool
				hasRank, err = decodeWorkerRank(s, "affinity_target", "struct WorkerAffinityTarget", &k, false)
				r.affinity = core.AffinityTarget{WorkerID: k.WorkerID, DPRank: k.DPRank, HasDPRank: hasRank}
				q.AffinityTarget = &r.affinity
			}
		case "pinned_prefill_worker":
			if n, err = s.Null(); !n && err == nil {
				_, err = decodeWorkerRank(s, "pinned_prefill_worker", "struct WorkerWithDpRank", &r.pin, true)
				q.PinnedPrefillWorker = &r.pin
			}
		case "allowed_worker_ids":
			q.AllowedWorkerIDs, q.HasAllowedWorkerIDs, err = s.U64s("allowed_worker_ids", q.AllowedWorkerIDs[:0])
		case "routing_constraints":
			err = decodeConstraints(s, &r.prefs, &q.RequiredTaints, &q.PreferredTaints)
		case "prefill_router_config_override":
			q.PrefillOverride, err = decodeOverride(s, &r.prefillOv)
		case "decode_router_config_override":
			q.DecodeOverride, err = decodeOverride(s, &r.decodeOv)
		case "order":
			order, hasOrder, err = s.Str("order")
		case "prefill_failure":
			failure, hasFailure, err = s.Str("prefill_failure")
		case "defer_decode":
			if n, err = s.Null(); !n && err == nil {
				q.DeferDecode, err = s.Boolean("defer_decode")
			}
		default:
			err = decodePromptField(s, key, &q.Prompt)
		}
		return err
	})
	if err != nil {
		return bodyErr(err)
	}
	if err := s.End(); err != nil {
		return bodyErr(err)
	}
	// session_id is a session context holding only that id.
	q.SessionID = session
	if ctxSession != "" {
		q.SessionID = ctxSession
	}
	if hasID && q.SelectionID == "" {
		return &decodeError{400, "selection_id must not be empty"}
	}
	if hasOrder {
		v, ok := core.ParseDisaggOrder(order)
		if !ok {
			return &decodeError{400, "order must be `decode_anchored` or `prefill_anchored`, got `" + jsonscan.Echo([]byte(order)) + "`"}
		}
		q.Order = v
	}
	if hasFailure {
		v, ok := core.ParsePrefillFailurePolicy(failure)
		if !ok {
			return &decodeError{400, "prefill_failure must be `free_decode` or `bypass_on_decode`, got `" + jsonscan.Echo([]byte(failure)) + "`"}
		}
		q.PrefillFailure = v
	}
	return nil
}
