package httpapi

import (
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
	"slices"
)

// selectReq is a pooled decoded selection body: the core request plus the
// storage its pointers and slices use. Lifetime: acquired per request,
// released when the handler returns; strings alias the fasthttp body or
// the scanner's buffer and must not be kept (core copies what it keeps).
type selectReq struct {
	req      core.SelectRequest
	override core.Override
	pin      core.WorkerKey
	target   core.AffinityTarget
	prefs    map[string]float64
	// wctx is the request's context while it may wait (handleSelect).
	wctx waitCtx
	sc   jsonscan.Scanner
	out  core.Selection
	// rawSeq is the sequence_hashes array as the body spelled it (validated
	// i64s); nil when absent. It aliases the body.
	rawSeq []byte
	// txt is the body's text in place of token_ids (textin.go).
	txt textIn
}

// promptFields are the fields of the reference's PromptRequest, which every
// selection body flattens into itself
// (ai-dynamo/dynamo:lib/kv-router/src/services/selection/input.rs).
var promptFields = []string{"token_ids", "mm_routing_info", "block_mm_infos", "block_hashes", "sequence_hashes", "isl_tokens", "lora_name", "cache_salt", "is_eagle"}

// The field sets of the selection bodies
// (ai-dynamo/dynamo:lib/kv-router/src/services/selection/types.rs): a key
// outside a route's set is an unknown field there, skipped unread.
//
// prompt and messages (textFields) are kvselect's extension of the
// selection and query bodies (textin.go: tokenized with the model's
// --model-path tokenizer when the body has no token_ids and no
// block_hashes).
var (
	selectFields      = jsonscan.NewFieldSet(slices.Concat(promptFields, textFields, selectOwn)...)
	reserveFields     = jsonscan.NewFieldSet(slices.Concat(promptFields, textFields, selectOwn[:len(selectOwn)-1])...) // SelectAndReserveRequest: no advisory
	queryFields       = jsonscan.NewFieldSet(slices.Concat(promptFields, textFields, []string{"model_name", "routing_group", "router_config_override"})...)
	reservationFields = jsonscan.NewFieldSet(slices.Concat(promptFields, textFields, []string{"model_name", "routing_group", "selection_id", "worker_id", "dp_rank",
		"router_config_override", "expected_output_tokens", "effective_prefill_tokens", "track_prefill_tokens"})...)
)

// selectOwn are SelectRequest's own fields; advisory is last.
var selectOwn = []string{"model_name", "routing_group", "selection_id", "router_config_override", "expected_output_tokens",
	"priority_jump", "strict_priority", "session_id", "session_context", "affinity_target", "pinned_worker",
	"allowed_worker_ids", "routing_constraints", "advisory"}

// decodeSelect reads a SelectRequest body (/select).
func decodeSelect(body []byte, r *selectReq) error {
	return decodeSelectAs(body, r, selectFields)
}

// decodeSelectAs reads a selection body with the fields of fs: selectFields
// (/select), reserveFields (/select_and_reserve) or queryFields
// (/potential_loads, /overlap_scores).
func decodeSelectAs(body []byte, r *selectReq, fs *jsonscan.FieldSet) error {
	r.req.Reset()
	r.txt.reset()
	q := &r.req
	s := &r.sc
	s.Reset(body)
	var seen uint64
	err := s.Object("struct SelectRequest", func(key []byte) error {
		known, err := s.Field(fs, &seen, "", key)
		if !known || err != nil {
			if err == nil {
				err = s.Skip()
			}
			return err
		}
		if known, err := r.txt.field(s, string(key)); known {
			return err
		}
		switch string(key) {
		case "model_name":
			q.ModelName, _, err = s.Str("model_name")
		case "routing_group":
			q.RoutingGroup, _, err = s.Str("routing_group")
		case "selection_id":
			q.SelectionID, q.HasSelectionID, err = s.Str("selection_id")
		case "session_id":
			q.SessionID, q.HasSessionID, err = s.Str("session_id")
		case "router_config_override":
			q.Override, err = decodeOverride(s, &r.override)
		case "expected_output_tokens":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				var v uint64
				v, err = s.Uint("expected_output_tokens", 1<<32-1, "u32")
				q.ExpectedOutputTokens, q.HasExpectedOutputTokens = uint32(v), true
			}
		case "priority_jump":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				q.PriorityJump, err = s.Float("priority_jump")
			}
		case "strict_priority":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				var v uint64
				v, err = s.Uint("strict_priority", 1<<32-1, "u32")
				q.StrictPriority = uint32(v)
			}
		case "pinned_worker":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				_, err = decodeWorkerRank(s, "pinned_worker", "struct WorkerWithDpRank", &r.pin, true)
				q.PinnedWorker = &r.pin
			}
		case "affinity_target":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				var k core.WorkerKey
				var hasRank bool
				hasRank, err = decodeWorkerRank(s, "affinity_target", "struct WorkerAffinityTarget", &k, false)
				r.target = core.AffinityTarget{WorkerID: k.WorkerID, DPRank: k.DPRank, HasDPRank: hasRank}
				q.AffinityTarget = &r.target
			}
		case "allowed_worker_ids":
			q.AllowedWorkerIDs, q.HasAllowedWorkerIDs, err = s.U64s("allowed_worker_ids", q.AllowedWorkerIDs[:0])
		case "routing_constraints":
			err = decodeConstraints(s, &r.prefs, &q.RequiredTaints, &q.PreferredTaints)
		case "session_context":
			q.HasSessionContext, err = decodeSessionContext(s, &q.SessionContext)
		case "advisory":
			var n bool
			if n, err = s.Null(); !n && err == nil {
				q.Advisory, err = s.Boolean("advisory")
			}
		case "sequence_hashes":
			s.SkipSpace()
			start := s.Offset()
			q.SequenceHashes, q.HasSequenceHashes, err = s.I64s("sequence_hashes", q.SequenceHashes[:0])
			r.rawSeq = nil
			if q.HasSequenceHashes {
				r.rawSeq = s.Input()[start:s.Offset()]
			}
		default:
			err = decodePromptField(s, key, &q.Prompt)
		}
		return err
	})
	if err != nil {
		return bodyErr(err)
	}
	return bodyErr(s.End())
}

// echoSeq returns the body's own spelling of sequence_hashes when a booking
// response may echo it instead of formatting the hashes again: the hash
// path (no tokens, so the booked tracking hashes are the request's; a
// negative zero never gets here, the scanner rejects it as serde does).
// Formatting 128 hashes was 15% of a /select_and_reserve's CPU; copying
// them is a memmove.
func (r *selectReq) echoSeq() []byte {
	q := &r.req
	if r.rawSeq == nil || q.HasTokenIDs || len(q.RoutingTokenIDs) > 0 {
		return nil
	}
	return r.rawSeq
}

// decodePromptField reads one PromptRequest field; key is one of
// promptFields.
func decodePromptField(s *jsonscan.Scanner, key []byte, p *core.Prompt) (err error) {
	switch string(key) {
	case "token_ids":
		p.TokenIDs, p.HasTokenIDs, err = s.U32s("token_ids", p.TokenIDs[:0])
	case "block_hashes":
		p.BlockHashes, p.HasBlockHashes, err = s.I64s("block_hashes", p.BlockHashes[:0])
	case "sequence_hashes":
		p.SequenceHashes, p.HasSequenceHashes, err = s.I64s("sequence_hashes", p.SequenceHashes[:0])
	case "isl_tokens":
		var n bool
		if n, err = s.Null(); !n && err == nil {
			p.ISLTokens, err = s.Uint("isl_tokens", 1<<64-1, "usize")
			p.HasISLTokens = true
		}
	case "lora_name":
		p.LoraName, _, err = s.Str("lora_name")
	case "cache_salt":
		p.CacheSalt, _, err = s.Str("cache_salt")
	case "mm_routing_info":
		err = decodeMMRoutingInfo(s, p)
	case "block_mm_infos":
		p.BlockMMHashes, err = decodeMMInfos(s, "block_mm_infos")
	case "is_eagle":
		var n bool
		if n, err = s.Null(); !n && err == nil {
			p.IsEagle, err = s.Boolean("is_eagle")
			p.HasIsEagle = true
		}
	default:
		panic("BUG: decodePromptField called with " + string(key))
	}
	return err
}

// reserveReq is a pooled decoded /reservations body.
type reserveReq struct {
	req      core.ReservationRequest
	override core.Override
	track    bool
	sc       jsonscan.Scanner
	// txt is the body's text in place of token_ids (textin.go).
	txt textIn
}

// decodeReservation reads a ReservationRequest; selection_id is required.
func decodeReservation(body []byte, r *reserveReq) error {
	r.req.Reset()
	r.txt.reset()
	q := &r.req
	s := &r.sc
	s.Reset(body)
	hasID := false
	var seen uint64
	err := s.Object("struct ReservationRequest", func(key []byte) error {
		known, err := s.Field(reservationFields, &seen, "", key)
		if !known || err != nil {
			if err == nil {
				err = s.Skip()
			}
			return err
		}
		if known, err := r.txt.field(s, string(key)); known {
			return err
		}
		var n bool
		switch string(key) {
		case "model_name":
			q.ModelName, _, err = s.Str("model_name")
		case "routing_group":
			q.RoutingGroup, _, err = s.Str("routing_group")
		case "selection_id":
			q.SelectionID, hasID, err = s.Str("selection_id")
		case "worker_id":
			if n, err = s.Null(); !n && err == nil {
				q.WorkerID, err = s.Uint("worker_id", 1<<64-1, "u64")
				q.HasWorkerID = true
			}
		case "dp_rank":
			if n, err = s.Null(); !n && err == nil {
				var v uint64
				v, err = s.Uint("dp_rank", 1<<32-1, "u32")
				q.DPRank = uint32(v)
			}
		case "router_config_override":
			q.Override, err = decodeOverride(s, &r.override)
		case "expected_output_tokens":
			if n, err = s.Null(); !n && err == nil {
				var v uint64
				v, err = s.Uint("expected_output_tokens", 1<<32-1, "u32")
				q.ExpectedOutputTokens, q.HasExpectedOutputTokens = uint32(v), true
			}
		case "effective_prefill_tokens":
			if n, err = s.Null(); !n && err == nil {
				q.EffectivePrefillTokens, err = s.Uint("effective_prefill_tokens", 1<<64-1, "usize")
				q.HasEffectivePrefillTokens = true
			}
		case "track_prefill_tokens":
			if n, err = s.Null(); !n && err == nil {
				r.track, err = s.Boolean("track_prefill_tokens")
				q.TrackPrefillTokens = &r.track
			}
		default:
			err = decodePromptField(s, key, &q.Prompt)
		}
		return err
	})
	if err != nil {
		return bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return bodyErr(err)
	}
	if !hasID {
		return bodyErr(jsonscan.MissingField(body, objEnd, "selection_id"))
	}
	return nil
}
