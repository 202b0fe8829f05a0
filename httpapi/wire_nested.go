package httpapi

import (
	"slices"
	"strconv"
	"strings"

	"github.com/kvselect/kvselect/core"
)

// The nested structs of the selection bodies, with the reference's field
// names (ai-dynamo/dynamo:lib/kv-router/src/services/selection/types.rs,
// input.rs, lib/kv-router/src/protocols.rs and scheduling/config.rs).
var (
	workerRankFields     = newFieldSet("worker_id", "dp_rank")
	constraintFields     = newFieldSet("required_taints", "preferred_taints")
	sessionContextFields = newFieldSet("session_id", "parent_session_id", "session_final", "input_trigger", "agent_headers")
	mmRoutingInfoFields  = newFieldSet("routing_token_ids", "block_mm_infos")
	blockExtraInfoFields = newFieldSet("mm_objects")
	mmObjectFields       = newFieldSet("mm_hash", "offsets")
	overrideFields       = newFieldSet("overlap_score_credit", "prefill_load_scale", "overlap_score_weight", "router_temperature",
		"assume_kv_reuse", "track_prefill_tokens", "shared_cache_multiplier", "routing_policy")
)

// skipUnknown is the tail of an object callback: known is from
// scanner.field; an unknown key's value is skipped.
func (s *scanner) skipUnknown(known bool, err error) (done bool, _ error) {
	if err != nil {
		return true, err
	}
	if !known {
		return true, s.skip()
	}
	return false, nil
}

// decodeOverride reads router_config_override (RouterConfigOverrideSerde:
// every field an optional number or boolean) into ov, plus kvselect's own
// routing_policy (a string aliasing the body, like every string of a
// request).
func decodeOverride(s *scanner, ov *core.Override) (*core.Override, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	*ov = core.Override{}
	var seen uint64
	err := s.object("struct RouterConfigOverride", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(overrideFields, &seen, "router_config_override", key)); done {
			return err
		}
		if n, err := s.null(); n || err != nil {
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
			v, _, err := s.str(path)
			ov.RoutingPolicy = v
			return err
		case "assume_kv_reuse", "track_prefill_tokens":
			v, err := s.boolean(path)
			if string(key) == "assume_kv_reuse" {
				ov.AssumeKVReuse = &v
			} else {
				ov.TrackPrefillTokens = &v
			}
			return err
		}
		v, err := s.float(path)
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
func decodeWorkerRank(s *scanner, field, typeName string, k *core.WorkerKey, needRank bool) (hasRank bool, err error) {
	var hasID bool
	var seen uint64
	err = s.object(typeName, func(key []byte) error {
		if done, err := s.skipUnknown(s.field(workerRankFields, &seen, field, key)); done {
			return err
		}
		switch string(key) {
		case "worker_id":
			v, err := s.uint(field+".worker_id", 1<<64-1, "u64")
			k.WorkerID, hasID = v, true
			return err
		default: // dp_rank
			if n, err := s.null(); n || err != nil {
				return err
			}
			v, err := s.uint(field+".dp_rank", 1<<32-1, "u32")
			k.DPRank, hasRank = uint32(v), true
			return err
		}
	})
	if err != nil {
		return false, err
	}
	if !hasID {
		return false, s.typeErr(field, "missing field `worker_id`")
	}
	if needRank && !hasRank {
		return false, s.typeErr(field, "missing field `dp_rank`")
	}
	return hasRank, nil
}

// decodeConstraints reads routing_constraints into required and preferred
// (appended; preferred sorted by taint), with *prefs as the scratch map of
// the pooled request. preferred_taints is a map: a repeated taint keeps the
// last weight, as serde's HashMap does.
func decodeConstraints(s *scanner, prefs *map[string]float64, required *[]string, preferred *[]core.PreferredTaint) error {
	if n, err := s.null(); n || err != nil {
		return err
	}
	var seen uint64
	return s.object("struct RoutingConstraints", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(constraintFields, &seen, "routing_constraints", key)); done {
			return err
		}
		if string(key) == "required_taints" {
			_, err := s.array("routing_constraints.required_taints", "a sequence", func() error {
				v, _, err := s.str("routing_constraints.required_taints")
				*required = append(*required, v)
				return err
			})
			return err
		}
		if n, err := s.null(); n || err != nil {
			return err
		}
		if *prefs == nil {
			*prefs = map[string]float64{}
		}
		m := *prefs
		clear(m)
		err := s.object("a map", func(k []byte) error {
			w, err := s.float("routing_constraints.preferred_taints")
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
// set is false for null. Strings alias the body or the scanner's strbuf.
func decodeSessionContext(s *scanner, c *core.SessionContext) (set bool, err error) {
	if n, err := s.null(); n || err != nil {
		return false, err
	}
	c.Reset()
	has := false
	var seen uint64
	err = s.object("struct SelectionSessionContext", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(sessionContextFields, &seen, "session_context", key)); done {
			return err
		}
		switch string(key) {
		case "session_id":
			v, set, err := s.str("session_context.session_id")
			if set {
				c.SessionID, has = v, true
			}
			return err
		case "parent_session_id":
			var err error
			c.ParentSessionID, c.HasParent, err = s.str("session_context.parent_session_id")
			return err
		case "session_final":
			if n, err := s.null(); n || err != nil {
				return err
			}
			var err error
			c.SessionFinal, err = s.boolean("session_context.session_final")
			c.HasSessionFinal = true
			return err
		case "agent_headers":
			return decodeAgentHeaders(s, c)
		default: // input_trigger
			v, set, err := s.str("session_context.input_trigger")
			if err == nil && set && v != "user_message" && v != "tool_result" && v != "other" {
				return s.typeErr("session_context.input_trigger", "unknown variant `"+echo([]byte(v))+"`, expected one of `user_message`, `tool_result`, `other`")
			}
			c.InputTrigger = v
			return err
		}
	})
	if err != nil {
		return false, err
	}
	if !has {
		return false, s.typeErr("session_context", "missing field `session_id`")
	}
	return true, nil
}

// decodeAgentHeaders reads agent_headers: {name: [value, ...]} (null: none).
func decodeAgentHeaders(s *scanner, c *core.SessionContext) error {
	if n, err := s.null(); n || err != nil {
		return err
	}
	return s.object("a map", func(key []byte) error {
		h := core.AgentHeader{Name: b2s(key)}
		_, err := s.array("session_context.agent_headers", "a sequence", func() error {
			v, set, err := s.str("session_context.agent_headers")
			if err == nil && !set {
				err = s.typeErr("session_context.agent_headers", "invalid type: null, expected a string")
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
func decodeMMRoutingInfo(s *scanner, p *core.Prompt) error {
	if n, err := s.null(); n || err != nil {
		return err
	}
	var seen uint64
	hasTokens := false
	err := s.object("struct MmRoutingInfoRequest", func(k []byte) error {
		if done, err := s.skipUnknown(s.field(mmRoutingInfoFields, &seen, "mm_routing_info", k)); done {
			return err
		}
		var err error
		if string(k) == "routing_token_ids" {
			p.RoutingTokenIDs, hasTokens, err = s.u32s("mm_routing_info.routing_token_ids", p.RoutingTokenIDs[:0])
			if err == nil && !hasTokens {
				err = s.typeErr("mm_routing_info.routing_token_ids", "invalid type: null, expected a sequence")
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
		return s.typeErr("mm_routing_info", "missing field `routing_token_ids`")
	}
	return nil
}

// decodeMMInfos reads block_mm_infos, an array of BlockExtraInfo or null
// ({mm_objects: [{mm_hash: u64, offsets: [[usize, usize], ...]}]}, every
// field required), into the per-block mm hashes; offsets are validated and
// dropped. Rare path: it allocates, error paths included.
func decodeMMInfos(s *scanner, field string) ([][]uint64, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	var out [][]uint64
	_, err := s.array(field, "a sequence", func() error {
		block := len(out)
		out = append(out, nil)
		if n, err := s.null(); n || err != nil {
			return err
		}
		at := field + "[" + strconv.Itoa(block) + "]"
		var seen uint64
		hasObjects := false
		err := s.object("struct BlockExtraInfo", func(k []byte) error {
			if done, err := s.skipUnknown(s.field(blockExtraInfoFields, &seen, at, k)); done {
				return err
			}
			hasObjects = true
			set, err := s.array(at+".mm_objects", "a sequence", func() error {
				h, err := decodeMMObject(s, at+".mm_objects["+strconv.Itoa(len(out[block]))+"]")
				out[block] = append(out[block], h)
				return err
			})
			if err == nil && !set {
				err = s.typeErr(at+".mm_objects", "invalid type: null, expected a sequence")
			}
			return err
		})
		if err == nil && !hasObjects {
			err = s.typeErr(at, "missing field `mm_objects`")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeMMObject reads one BlockMmObjectInfo and returns its mm_hash.
func decodeMMObject(s *scanner, at string) (uint64, error) {
	var seen uint64
	var hash uint64
	hasHash, hasOffsets := false, false
	err := s.object("struct BlockMmObjectInfo", func(k []byte) error {
		if done, err := s.skipUnknown(s.field(mmObjectFields, &seen, at, k)); done {
			return err
		}
		var err error
		if string(k) == "mm_hash" {
			hash, err = s.uint(at+".mm_hash", 1<<64-1, "u64")
			hasHash = true
			return err
		}
		hasOffsets = true
		set, err := s.array(at+".offsets", "a sequence", func() error { return decodeOffsetPair(s, at+".offsets") })
		if err == nil && !set {
			err = s.typeErr(at+".offsets", "invalid type: null, expected a sequence")
		}
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case !hasHash:
		return 0, s.typeErr(at, "missing field `mm_hash`")
	case !hasOffsets:
		return 0, s.typeErr(at, "missing field `offsets`")
	}
	return hash, nil
}

// decodeOffsetPair reads a (usize, usize) tuple: a two-element array. Fewer
// elements are serde's invalid length (422); more are serde_json's
// trailing characters (400), as its end of a tuple sequence reports them.
func decodeOffsetPair(s *scanner, at string) error {
	if c := s.peek(); c != '[' {
		if c == 0 {
			return s.syntaxErr("EOF while parsing a value")
		}
		if err := s.skip(); err != nil {
			return err
		}
		return s.typeErr(at, "invalid type: "+kindName(c)+", expected a tuple of size 2")
	}
	s.i++
	for n := 0; ; n++ {
		if s.peek() == ']' {
			if n < 2 {
				s.i++
				return s.typeErr(at, "invalid length "+strconv.Itoa(n)+", expected a tuple of size 2")
			}
			s.i++
			return nil
		}
		if n == 2 {
			return s.syntaxErr("trailing characters")
		}
		if n > 0 {
			if s.peek() != ',' {
				if s.i >= len(s.b) {
					return s.syntaxErr("EOF while parsing a list")
				}
				return s.syntaxErr("expected `,` or `]`")
			}
			s.i++
		}
		if _, err := s.uint(at, 1<<64-1, "usize"); err != nil {
			return err
		}
	}
}
