package httpapi

import (
	"slices"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
)

// selectReq is a pooled decoded selection body: the core request plus the
// storage its pointers and slices use. Lifetime: acquired per request,
// released when the handler returns; strings alias the fasthttp body or
// strbuf and must not be kept (core copies what it keeps).
type selectReq struct {
	req      core.SelectRequest
	override core.Override
	pin      core.WorkerKey
	prefs    map[string]float64
	sc       scanner
	out      core.Selection
	// rawSeq is the sequence_hashes array as the body spelled it (validated
	// i64s); nil when absent. It aliases the body.
	rawSeq []byte
}

// decodeSelect reads a SelectRequest body (also the body of /potential_loads
// and /overlap_scores, whose extra fields are ignored there).
func decodeSelect(body []byte, r *selectReq) error {
	r.req.Reset()
	q := &r.req
	s := &r.sc
	*s = scanner{b: body, strbuf: s.strbuf[:0]}
	err := s.object("struct SelectRequest", func(key []byte) error {
		var err error
		switch string(key) {
		case "model_name":
			q.ModelName, _, err = s.str("model_name")
		case "routing_group":
			q.RoutingGroup, _, err = s.str("routing_group")
		case "selection_id":
			q.SelectionID, q.HasSelectionID, err = s.str("selection_id")
		case "session_id":
			q.SessionID, _, err = s.str("session_id")
		case "router_config_override":
			q.Override, err = decodeOverride(s, &r.override)
		case "expected_output_tokens":
			var n bool
			if n, err = s.null(); !n && err == nil {
				var v uint64
				v, err = s.uint("expected_output_tokens", 1<<32-1, "u32")
				q.ExpectedOutputTokens, q.HasExpectedOutputTokens = uint32(v), true
			}
		case "priority_jump":
			var n bool
			if n, err = s.null(); !n && err == nil {
				q.PriorityJump, err = s.float("priority_jump")
			}
		case "strict_priority":
			var n bool
			if n, err = s.null(); !n && err == nil {
				var v uint64
				v, err = s.uint("strict_priority", 1<<32-1, "u32")
				q.StrictPriority = uint32(v)
			}
		case "pinned_worker":
			var n bool
			if n, err = s.null(); !n && err == nil {
				err = decodeWorkerRank(s, "pinned_worker", &r.pin, true)
				q.PinnedWorker = &r.pin
			}
		case "affinity_target":
			var n bool
			if n, err = s.null(); !n && err == nil {
				var k core.WorkerKey
				err = decodeWorkerRank(s, "affinity_target", &k, false)
			}
		case "allowed_worker_ids":
			q.AllowedWorkerIDs, q.HasAllowedWorkerIDs, err = s.u64s("allowed_worker_ids", q.AllowedWorkerIDs[:0])
		case "routing_constraints":
			err = decodeConstraints(s, r)
		case "session_context":
			err = decodeSessionContext(s)
		case "advisory":
			var n bool
			if n, err = s.null(); !n && err == nil {
				q.Advisory, err = s.boolean("advisory")
			}
		case "sequence_hashes":
			s.ws()
			start := s.i
			q.SequenceHashes, q.HasSequenceHashes, err = s.i64s("sequence_hashes", q.SequenceHashes[:0])
			r.rawSeq = nil
			if q.HasSequenceHashes {
				r.rawSeq = s.b[start:s.i]
			}
		default:
			var handled bool
			handled, err = decodePromptField(s, key, &q.Prompt)
			if !handled {
				err = s.skip()
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.end()
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

// decodePromptField reads one PromptRequest field; handled is false for any
// other key.
func decodePromptField(s *scanner, key []byte, p *core.Prompt) (handled bool, err error) {
	switch string(key) {
	case "token_ids":
		p.TokenIDs, p.HasTokenIDs, err = s.u32s("token_ids", p.TokenIDs[:0])
	case "block_hashes":
		p.BlockHashes, p.HasBlockHashes, err = s.i64s("block_hashes", p.BlockHashes[:0])
	case "sequence_hashes":
		p.SequenceHashes, p.HasSequenceHashes, err = s.i64s("sequence_hashes", p.SequenceHashes[:0])
	case "isl_tokens":
		var n bool
		if n, err = s.null(); !n && err == nil {
			p.ISLTokens, err = s.uint("isl_tokens", 1<<64-1, "usize")
			p.HasISLTokens = true
		}
	case "lora_name":
		p.LoraName, _, err = s.str("lora_name")
	case "cache_salt":
		p.CacheSalt, _, err = s.str("cache_salt")
	case "mm_routing_info":
		var n bool
		if n, err = s.null(); !n && err == nil {
			err = s.object("struct MmRoutingInfo", func(k []byte) error {
				var err error
				switch string(k) {
				case "routing_token_ids":
					p.RoutingTokenIDs, _, err = s.u32s("routing_token_ids", p.RoutingTokenIDs[:0])
				case "block_mm_infos":
					p.RoutingBlockMMHashes, err = decodeMMInfos(s, "mm_routing_info.block_mm_infos")
				default:
					err = s.skip()
				}
				return err
			})
		}
	case "block_mm_infos":
		p.BlockMMHashes, err = decodeMMInfos(s, "block_mm_infos")
	case "is_eagle":
		var n bool
		if n, err = s.null(); !n && err == nil {
			p.IsEagle, err = s.boolean("is_eagle")
			p.HasIsEagle = true
		}
	default:
		return false, nil
	}
	return true, err
}

// mmInfo is one BlockExtraInfo of block_mm_infos.
type mmInfo struct {
	MMObjects []struct {
		MMHash  uint64      `json:"mm_hash"`
		Offsets [][2]uint64 `json:"offsets"`
	} `json:"mm_objects"`
}

// decodeMMInfos decodes block_mm_infos (an array of BlockExtraInfo or null)
// with go-json into the per-block mm hashes (rare path, allocates).
func decodeMMInfos(s *scanner, field string) ([][]uint64, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	if c := s.peek(); c != '[' {
		if err := s.skip(); err != nil {
			return nil, err
		}
		return nil, s.typeErr(field, "invalid type: "+kindName(c)+", expected a sequence")
	}
	raw, err := s.raw()
	if err != nil {
		return nil, err
	}
	var infos []*mmInfo
	if err := json.Unmarshal(raw, &infos); err != nil {
		return nil, &decodeError{422, dataPrefix + field + ": " + err.Error()}
	}
	out := make([][]uint64, len(infos))
	for i, in := range infos {
		if in == nil {
			continue
		}
		for _, o := range in.MMObjects {
			out[i] = append(out[i], o.MMHash)
		}
	}
	return out, nil
}

// decodeOverride decodes router_config_override with go-json into ov (rare
// path).
func decodeOverride(s *scanner, ov *core.Override) (*core.Override, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	if c := s.peek(); c != '{' {
		if err := s.skip(); err != nil {
			return nil, err
		}
		return nil, s.typeErr("router_config_override", "invalid type: "+kindName(c)+", expected struct RouterConfigOverride")
	}
	raw, err := s.raw()
	if err != nil {
		return nil, err
	}
	*ov = core.Override{}
	if err := json.Unmarshal(raw, ov); err != nil {
		return nil, &decodeError{422, dataPrefix + "router_config_override: " + err.Error()}
	}
	return ov, nil
}

// decodeWorkerRank reads {worker_id, dp_rank}; dp_rank is required when
// needRank.
func decodeWorkerRank(s *scanner, field string, k *core.WorkerKey, needRank bool) error {
	var hasID, hasRank bool
	err := s.object("struct "+field, func(key []byte) error {
		switch string(key) {
		case "worker_id":
			v, err := s.uint(field+".worker_id", 1<<64-1, "u64")
			k.WorkerID, hasID = v, true
			return err
		case "dp_rank":
			if n, err := s.null(); n || err != nil {
				return err
			}
			v, err := s.uint(field+".dp_rank", 1<<32-1, "u32")
			k.DPRank, hasRank = uint32(v), true
			return err
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	if !hasID {
		return s.typeErr(field, "missing field `worker_id`")
	}
	if needRank && !hasRank {
		return s.typeErr(field, "missing field `dp_rank`")
	}
	return nil
}

// decodeConstraints reads routing_constraints.
func decodeConstraints(s *scanner, r *selectReq) error {
	if n, err := s.null(); n || err != nil {
		return err
	}
	q := &r.req
	return s.object("struct RoutingConstraints", func(key []byte) error {
		switch string(key) {
		case "required_taints":
			_, err := s.array("routing_constraints.required_taints", "a sequence", func() error {
				v, _, err := s.str("routing_constraints.required_taints")
				q.RequiredTaints = append(q.RequiredTaints, v)
				return err
			})
			return err
		case "preferred_taints":
			if n, err := s.null(); n || err != nil {
				return err
			}
			if r.prefs == nil {
				r.prefs = map[string]float64{}
			}
			clear(r.prefs)
			err := s.object("a map", func(k []byte) error {
				w, err := s.float("routing_constraints.preferred_taints")
				r.prefs[string(k)] = w
				return err
			})
			if err != nil {
				return err
			}
			for t, w := range r.prefs {
				q.PreferredTaints = append(q.PreferredTaints, core.PreferredTaint{Taint: t, Weight: w})
			}
			slices.SortFunc(q.PreferredTaints, func(a, b core.PreferredTaint) int { return strings.Compare(a.Taint, b.Taint) })
			return nil
		}
		return s.skip()
	})
}

// decodeSessionContext validates session_context (session_id required);
// the content is ignored until session affinity lands.
func decodeSessionContext(s *scanner) error {
	if n, err := s.null(); n || err != nil {
		return err
	}
	has := false
	err := s.object("struct SessionContext", func(key []byte) error {
		switch string(key) {
		case "session_id":
			_, set, err := s.str("session_context.session_id")
			has = has || set
			return err
		case "parent_session_id":
			_, _, err := s.str("session_context.parent_session_id")
			return err
		case "session_final":
			if n, err := s.null(); n || err != nil {
				return err
			}
			_, err := s.boolean("session_context.session_final")
			return err
		case "input_trigger":
			v, set, err := s.str("session_context.input_trigger")
			if err == nil && set && v != "user_message" && v != "tool_result" && v != "other" {
				return s.typeErr("session_context.input_trigger", "unknown variant `"+v+"`, expected one of `user_message`, `tool_result`, `other`")
			}
			return err
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	if !has {
		return s.typeErr("session_context", "missing field `session_id`")
	}
	return nil
}

// reserveReq is a pooled decoded /reservations body.
type reserveReq struct {
	req      core.ReservationRequest
	override core.Override
	track    bool
	sc       scanner
}

// decodeReservation reads a ReservationRequest; selection_id is required.
func decodeReservation(body []byte, r *reserveReq) error {
	r.req.Reset()
	q := &r.req
	s := &r.sc
	*s = scanner{b: body, strbuf: s.strbuf[:0]}
	hasID := false
	err := s.object("struct ReservationRequest", func(key []byte) error {
		var err error
		var n bool
		switch string(key) {
		case "model_name":
			q.ModelName, _, err = s.str("model_name")
		case "routing_group":
			q.RoutingGroup, _, err = s.str("routing_group")
		case "selection_id":
			q.SelectionID, hasID, err = s.str("selection_id")
		case "worker_id":
			if n, err = s.null(); !n && err == nil {
				q.WorkerID, err = s.uint("worker_id", 1<<64-1, "u64")
				q.HasWorkerID = true
			}
		case "dp_rank":
			if n, err = s.null(); !n && err == nil {
				var v uint64
				v, err = s.uint("dp_rank", 1<<32-1, "u32")
				q.DPRank = uint32(v)
			}
		case "router_config_override":
			q.Override, err = decodeOverride(s, &r.override)
		case "expected_output_tokens":
			if n, err = s.null(); !n && err == nil {
				var v uint64
				v, err = s.uint("expected_output_tokens", 1<<32-1, "u32")
				q.ExpectedOutputTokens, q.HasExpectedOutputTokens = uint32(v), true
			}
		case "effective_prefill_tokens":
			if n, err = s.null(); !n && err == nil {
				q.EffectivePrefillTokens, err = s.uint("effective_prefill_tokens", 1<<64-1, "usize")
				q.HasEffectivePrefillTokens = true
			}
		case "track_prefill_tokens":
			if n, err = s.null(); !n && err == nil {
				r.track, err = s.boolean("track_prefill_tokens")
				q.TrackPrefillTokens = &r.track
			}
		default:
			var handled bool
			handled, err = decodePromptField(s, key, &q.Prompt)
			if !handled {
				err = s.skip()
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := s.end(); err != nil {
		return err
	}
	if !hasID {
		return missingField(body, "selection_id")
	}
	return nil
}

// workerBody is the wire form of POST /workers: worker_id is required, so
// it is a pointer that shadows the embedded core.WorkerSpec's field.
type workerBody struct {
	WorkerID *uint64 `json:"worker_id"`
	core.WorkerSpec
}

// outputBlockBody is the body of /output_block.
type outputBlockBody struct {
	DecayFraction *float64 `json:"decay_fraction"`
}

// peerBody is the body of the replica_sync peer routes.
type peerBody struct {
	Endpoint *string `json:"endpoint"`
}

// decodeJSON decodes a body with go-json into v (the cold routes),
// classifying errors as axum's Json extractor does: syntax 400, data 422.
// v's strings are copies (go-json copies by default).
func decodeJSON(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	if _, ok := err.(*json.SyntaxError); ok {
		return &decodeError{400, syntaxPrefix + err.Error()}
	}
	// go-json reports some syntax problems of truncated input as other
	// error types; re-check with a validating scan.
	s := scanner{b: body}
	if serr := s.skip(); serr != nil {
		return serr
	}
	if serr := s.end(); serr != nil {
		return serr
	}
	return &decodeError{422, dataPrefix + err.Error()}
}
