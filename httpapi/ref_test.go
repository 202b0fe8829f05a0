package httpapi

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"regexp"
	"slices"
)

// The reference decoder of the differential tests: encoding/json for the
// values, after refExact has rewritten every object as serde sees it.
// encoding/json alone matches keys case-insensitively and keeps the last of
// duplicate keys; serde_json matches exactly and fails a known field given
// twice, so refExact drops every key that is not exactly a field name and
// fails on a duplicate.

// refSchema is one serde struct: its exact field names, the fields that
// hold a nested struct (sub) or an array of nullable nested structs
// (elems), the fields whose null is a type error (nonNull: not an Option),
// and the HashMap<u32, _> fields, whose keys must be JSON numbers (numKeys).
type refSchema struct {
	fields  []string
	sub     map[string]*refSchema
	elems   map[string]*refSchema
	nonNull []string
	numKeys []string
}

var (
	errRefDuplicate = errors.New("reference: duplicate field")
	errRefNull      = errors.New("reference: null for a non-Option field")
	errRefKey       = errors.New("reference: map key is not a number")
	errRefShape     = errors.New("reference: not an object")
)

var numKey = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// refExact returns raw (valid JSON) with every object of sc's shape reduced
// to its exact field names, or the error serde would report for a
// duplicate field, a null non-Option field or a non-numeric u32 key. A
// non-object top level is errRefShape.
func refExact(raw []byte, sc *refSchema) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errRefShape
	}
	return refObject(raw, sc)
}

func refObject(raw []byte, sc *refSchema) ([]byte, error) {
	dec := stdjson.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('{')
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		var v stdjson.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if !slices.Contains(sc.fields, key) {
			continue
		}
		if seen[key] {
			return nil, errRefDuplicate
		}
		seen[key] = true
		v = bytes.TrimSpace(v)
		isNull := string(v) == "null"
		if isNull && slices.Contains(sc.nonNull, key) {
			return nil, errRefNull
		}
		if !isNull {
			if s := sc.sub[key]; s != nil && v[0] == '{' {
				if v, err = refObject(v, s); err != nil {
					return nil, err
				}
			}
			if s := sc.elems[key]; s != nil && v[0] == '[' {
				if v, err = refArray(v, s); err != nil {
					return nil, err
				}
			}
			if slices.Contains(sc.numKeys, key) && v[0] == '{' {
				var m map[string]stdjson.RawMessage
				if err := stdjson.Unmarshal(v, &m); err != nil {
					return nil, err
				}
				for k := range m {
					if !numKey.MatchString(k) {
						return nil, errRefKey
					}
				}
			}
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := stdjson.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(v)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

func refArray(raw []byte, sc *refSchema) ([]byte, error) {
	var elems []stdjson.RawMessage
	if err := stdjson.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	for i, e := range elems {
		if e = bytes.TrimSpace(e); len(e) > 0 && e[0] == '{' {
			f, err := refObject(e, sc)
			if err != nil {
				return nil, err
			}
			elems[i] = f
		}
	}
	return stdjson.Marshal(elems)
}

// The schemas of the request bodies, from the reference's types
// (ai-dynamo/dynamo:lib/kv-router/src/services/selection/types.rs, input.rs).
var (
	refWorkerRank     = &refSchema{fields: []string{"worker_id", "dp_rank"}}
	refMMObject       = &refSchema{fields: []string{"mm_hash", "offsets"}}
	refBlockExtraInfo = &refSchema{fields: []string{"mm_objects"}, elems: map[string]*refSchema{"mm_objects": refMMObject}}
	refPromptSub      = map[string]*refSchema{
		"mm_routing_info":        {fields: []string{"routing_token_ids", "block_mm_infos"}, elems: map[string]*refSchema{"block_mm_infos": refBlockExtraInfo}},
		"router_config_override": {fields: overrideFieldNames},
		"pinned_worker":          refWorkerRank,
		"affinity_target":        refWorkerRank,
		"routing_constraints":    {fields: []string{"required_taints", "preferred_taints"}},
		"session_context":        {fields: []string{"session_id", "parent_session_id", "session_final", "input_trigger"}},
	}
	refPromptElems = map[string]*refSchema{"block_mm_infos": refBlockExtraInfo}

	refSelectSchema      = &refSchema{fields: append(slices.Clone(promptFields), selectOwn...), sub: refPromptSub, elems: refPromptElems}
	refReservationSchema = &refSchema{fields: append(slices.Clone(promptFields), "model_name", "routing_group", "selection_id", "worker_id", "dp_rank",
		"router_config_override", "expected_output_tokens", "effective_prefill_tokens", "track_prefill_tokens"),
		sub: refPromptSub, elems: refPromptElems, nonNull: []string{"selection_id"}}
	refWorkerSchema = &refSchema{fields: append([]string{"worker_id", "model_name", "routing_group"}, workerFieldNames...),
		nonNull: []string{"worker_id", "model_name", "routing_group", "taints", "topology_domains", "kv_events_endpoints", "router_hint_source_control_endpoints"},
		numKeys: []string{"kv_events_endpoints", "router_hint_source_control_endpoints"}}
	refPatchSchema       = &refSchema{fields: workerFieldNames, numKeys: []string{"kv_events_endpoints", "router_hint_source_control_endpoints"}}
	refOutputBlockSchema = &refSchema{fields: []string{"decay_fraction"}}
	refPeerSchema        = &refSchema{fields: []string{"endpoint"}, nonNull: []string{"endpoint"}}
)

var overrideFieldNames = []string{"overlap_score_credit", "prefill_load_scale", "overlap_score_weight", "router_temperature",
	"assume_kv_reuse", "track_prefill_tokens", "shared_cache_multiplier", "routing_policy"}
