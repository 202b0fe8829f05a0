package httpapi

import (
	"slices"
	"strconv"
	"strings"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
)

// The nested structs of the selection bodies, with the reference's field
// names (ai-dynamo/dynamo:lib/kv-router/src/services/selection/types.rs,
// input.rs, lib/kv-router/src/protocols.rs and scheduling/config.rs).
var (
	workerRankFields     = jsonscan.NewFieldSet("worker_id", "dp_rank")
	constraintFields     = jsonscan.NewFieldSet("required_taints", "preferred_taints")
	sessionContextFields = jsonscan.NewFieldSet("session_id", "parent_session_id", "session_final", "input_trigger", "agent_headers")
	mmRoutingInfoFields  = jsonscan.NewFieldSet("routing_token_ids", "block_mm_infos")
	blockExtraInfoFields = jsonscan.NewFieldSet("mm_objects")
	mmObjectFields       = jsonscan.NewFieldSet("mm_hash", "offsets")
	overrideFields       = jsonscan.NewFieldSet("overlap_score_credit", "prefill_load_scale", "overlap_score_weight", "router_temperature",
		"assume_kv_reuse", "track_prefill_tokens", "shared_cache_multiplier", "routing_policy")
)

// decodeOverride reads router_config_override (RouterConfigOverrideSerde:
// every field an optional number or boolean) into ov, plus kvselect's own
// routing_policy (a string aliasing the body, like every string of a
// request).
func decodeOverride(s *jsonscan.Scanner, ov *core.Override) (*core.Override, error) {
	if n, err := s.Null(); n || err != nil {
		return nil, err
	}
	*ov = core.Override{}
	var seen uint64
	err := s.Object("struct RouterConfigOverride", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(overrideFields, &seen, "router_config_override", key)); done {
			return err
		}
		if n, err := s.Null(); n || err != nil {
			return err
		}
		path := "router_config_override." + string(key)
		var f **float64
		switch string(key) {
		case "overlap_score_credit":
			f = &ov.OverlapScoreCredit
		case "prefill_load_scale":
			f = &ov.PrefillLoadScale
		case "overlap_score_weight":
			f = &ov.OverlapScoreWeight
		case "router_temperature":
			f = &ov.RouterTemperature
		case "shared_cache_multiplier":
			f = &ov.SharedCacheMultiplier
		case "routing_policy":
			v, _, err := s.Str(path)
			ov.RoutingPolicy = v
			return err
		case "assume_kv_reuse", "track_prefill_tokens":
			v, err := s.Boolean(path)
			if string(key) == "assume_kv_reuse" {
				ov.AssumeKVReuse = &v
			} else {
				ov.TrackPrefillTokens = &v
			}
			return err
		}
		v, err := s.Float(path)
		*f = &v
		return err
	})
	if err != nil {
		return nil, err
	}
	return ov, nil
}

// decodeWorkerRank reads a {worker_id, dp_rank} pin (typeName names the
// reference's struct); dp_rank is required when needRank. hasRank reports
// whether dp_rank was given (not null).
func decodeWorkerRank(s *jsonscan.Scanner, field, typeName string, k *core.WorkerKey, needRank bool) (hasRank bool, err error) {
	var hasID bool
	var seen uint64
	err = s.Object(typeName, func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(workerRankFields, &seen, field, key)); done {
			return err
		}
		switch string(key) {
		case "worker_id":
			v, err := s.Uint(field+".worker_id", 1<<64-1, "u64")
			k.WorkerID, hasID = v, true
			return err
		default: // dp_rank
			if n, err := s.Null(); n || err != nil {
				return err
			}
			v, err := s.Uint(field+".dp_rank", 1<<32-1, "u32")
			k.DPRank, hasRank = uint32(v), true
			return err
		}
	})
	if err != nil {
		return false, err
	}
	if !hasID {
		return false, s.TypeErr(field, "missing field `worker_id`")
	}
	if needRank && !hasRank {
		return false, s.TypeErr(field, "missing field `dp_rank`")
	}
	return hasRank, nil
}

// decodeConstraints reads routing_constraints into required and preferred
// (appended; preferred sorted by taint), with *prefs as the scratch map of
// the pooled request. preferred_taints is a map: a repeated taint keeps the
// last weight, as serde's HashMap does.
func decodeConstraints(s *jsonscan.Scanner, prefs *map[string]float64, required *[]string, preferred *[]core.PreferredTaint) error {
	if n, err := s.Null(); n || err != nil {
		return err
	}
	var seen uint64
	return s.Object("struct RoutingConstraints", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(constraintFields, &seen, "routing_constraints", key)); done {
			return err
		}
		if string(key) == "required_taints" {
			_, err := s.Array("routing_constraints.required_taints", "a sequence", func() error {
				v, _, err := s.Str("routing_constraints.required_taints")
				*required = append(*required, v)
				return err
			})
			return err
		}
		if n, err := s.Null(); n || err != nil {
			return err
		}
		if *prefs == nil {
			*prefs = map[string]float64{}
		}
		m := *prefs
		clear(m)
		err := s.Object("a map", func(k []byte) error {
			w, err := s.Float("routing_constraints.preferred_taints")
			m[string(k)] = w
			return err
		})
		if err != nil {
			return err
		}
		for t, w := range m {
			*preferred = append(*preferred, core.PreferredTaint{Taint: t, Weight: w})
		}
		slices.SortFunc(*preferred, func(a, b core.PreferredTaint) int { return strings.Compare(a.Taint, b.Taint) })
		return nil
	})
}

// decodeSessionContext reads session_context into c, whole: session_id
// (required), parent_session_id, session_final, input_trigger (one of
// user_message, tool_result, other) and agent_headers (header name to an
// ordered list of values, kept in the body's order, never interpreted).
// set is false for null. Strings alias the body or the scanner's buffer.
func decodeSessionContext(s *jsonscan.Scanner, c *core.SessionContext) (set bool, err error) {
	if n, err := s.Null(); n || err != nil {
		return false, err
	}
	c.Reset()
	has := false
	var seen uint64
	err = s.Object("struct SelectionSessionContext", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(sessionContextFields, &seen, "session_context", key)); done {
			return err
		}
		switch string(key) {
		case "session_id":
			v, set, err := s.Str("session_context.session_id")
			if set {
				c.SessionID, has = v, true
			}
			return err
		case "parent_session_id":
			var err error
			c.ParentSessionID, c.HasParent, err = s.Str("session_context.parent_session_id")
			return err
		case "session_final":
			if n, err := s.Null(); n || err != nil {
				return err
			}
			var err error
			c.SessionFinal, err = s.Boolean("session_context.session_final")
			c.HasSessionFinal = true
			return err
		case "agent_headers":
			return decodeAgentHeaders(s, c)
		default: // input_trigger
			v, set, err := s.Str("session_context.input_trigger")
			if err == nil && set && v != "user_message" && v != "tool_result" && v != "other" {
				return s.TypeErr("session_context.input_trigger", "unknown variant `"+jsonscan.Echo([]byte(v))+"`, expected one of `user_message`, `tool_result`, `other`")
			}
			c.InputTrigger = v
			return err
		}
	})
	if err != nil {
		return false, err
	}
	if !has {
		return false, s.TypeErr("session_context", "missing field `session_id`")
	}
	return true, nil
}

// decodeAgentHeaders reads agent_headers: {name: [value, ...]} (null: none).
func decodeAgentHeaders(s *jsonscan.Scanner, c *core.SessionContext) error {
	if n, err := s.Null(); n || err != nil {
		return err
	}
	return s.Object("a map", func(key []byte) error {
		h := core.AgentHeader{Name: b2s(key)}
		_, err := s.Array("session_context.agent_headers", "a sequence", func() error {
			v, set, err := s.Str("session_context.agent_headers")
			if err == nil && !set {
				err = s.TypeErr("session_context.agent_headers", "invalid type: null, expected a string")
			}
			h.Values = append(h.Values, v)
			return err
		})
		c.AgentHeaders = append(c.AgentHeaders, h)
		return err
	})
}

// decodeMMRoutingInfo reads mm_routing_info (MmRoutingInfoRequest:
// routing_token_ids required, block_mm_infos defaulting to empty).
func decodeMMRoutingInfo(s *jsonscan.Scanner, p *core.Prompt) error {
	if n, err := s.Null(); n || err != nil {
		return err
	}
	var seen uint64
	hasTokens := false
	err := s.Object("struct MmRoutingInfoRequest", func(k []byte) error {
		if done, err := s.SkipUnknown(s.Field(mmRoutingInfoFields, &seen, "mm_routing_info", k)); done {
			return err
		}
		var err error
		if string(k) == "routing_token_ids" {
			p.RoutingTokenIDs, hasTokens, err = s.U32s("mm_routing_info.routing_token_ids", p.RoutingTokenIDs[:0])
			if err == nil && !hasTokens {
				err = s.TypeErr("mm_routing_info.routing_token_ids", "invalid type: null, expected a sequence")
			}
		} else {
			p.RoutingBlockMMHashes, err = decodeMMInfos(s, "mm_routing_info.block_mm_infos")
		}
		return err
	})
	if err != nil {
		return err
	}
	if !hasTokens {
		return s.TypeErr("mm_routing_info", "missing field `routing_token_ids`")
	}
	return nil
}

// decodeMMInfos reads block_mm_infos, an array of BlockExtraInfo or null
// ({mm_objects: [{mm_hash: u64, offsets: [[usize, usize], ...]}]}, every
// field required), into the per-block mm hashes; offsets are validated and
// dropped. Rare path: it allocates, error paths included.
func decodeMMInfos(s *jsonscan.Scanner, field string) ([][]uint64, error) {
	if n, err := s.Null(); n || err != nil {
		return nil, err
	}
	var out [][]uint64
	_, err := s.Array(field, "a sequence", func() error {
		block := len(out)
		out = append(out, nil)
		if n, err := s.Null(); n || err != nil {
			return err
		}
		at := field + "[" + strconv.Itoa(block) + "]"
		var seen uint64
		hasObjects := false
		err := s.Object("struct BlockExtraInfo", func(k []byte) error {
			if done, err := s.SkipUnknown(s.Field(blockExtraInfoFields, &seen, at, k)); done {
				return err
			}
			hasObjects = true
			set, err := s.Array(at+".mm_objects", "a sequence", func() error {
				h, err := decodeMMObject(s, at+".mm_objects["+strconv.Itoa(len(out[block]))+"]")
				out[block] = append(out[block], h)
				return err
			})
			if err == nil && !set {
				err = s.TypeErr(at+".mm_objects", "invalid type: null, expected a sequence")
			}
			return err
		})
		if err == nil && !hasObjects {
			err = s.TypeErr(at, "missing field `mm_objects`")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeMMObject reads one BlockMmObjectInfo and returns its mm_hash.
func decodeMMObject(s *jsonscan.Scanner, at string) (uint64, error) {
	var seen uint64
	var hash uint64
	hasHash, hasOffsets := false, false
	err := s.Object("struct BlockMmObjectInfo", func(k []byte) error {
		if done, err := s.SkipUnknown(s.Field(mmObjectFields, &seen, at, k)); done {
			return err
		}
		var err error
		if string(k) == "mm_hash" {
			hash, err = s.Uint(at+".mm_hash", 1<<64-1, "u64")
			hasHash = true
			return err
		}
		hasOffsets = true
		set, err := s.Array(at+".offsets", "a sequence", func() error { return decodeOffsetPair(s, at+".offsets") })
		if err == nil && !set {
			err = s.TypeErr(at+".offsets", "invalid type: null, expected a sequence")
		}
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case !hasHash:
		return 0, s.TypeErr(at, "missing field `mm_hash`")
	case !hasOffsets:
		return 0, s.TypeErr(at, "missing field `offsets`")
	}
	return hash, nil
}

// decodeOffsetPair reads a (usize, usize) tuple: a two-element array. Fewer
// elements are serde's invalid length (422); more are serde_json's
// trailing characters (400), as its end of a tuple sequence reports them.
func decodeOffsetPair(s *jsonscan.Scanner, at string) error {
	return s.Tuple(at, 2, func() error {
		_, err := s.Uint(at, 1<<64-1, "usize")
		return err
	})
}
