package httpapi

import (
	"strings"

	"github.com/kvselect/kvselect/core"
)

// The cold bodies (POST and PATCH /workers, output_block, the replica peer
// routes) are decoded by the scanner too, so every route has one grammar:
// exact keys, serde's duplicate-field error, UTF-8 checked, serde's texts.
// go-json's decoder matches keys case-insensitively, takes the last of
// duplicate keys and replaces invalid UTF-8, where the reference (serde)
// answers 422, 422 and 400. Unlike the selection bodies, every string is
// copied out of the request: core and the peer manager keep them.

// workerFieldNames are the fields WorkerRequest and WorkerPatchRequest share
// (ai-dynamo/dynamo:lib/kv-router/src/services/selection/types.rs), plus
// kv_event_source_mode and lora_adapters (kvselect's extension:
// core.WorkerFields.LoraAdapters).
var workerFieldNames = []string{"endpoint", "kv_events_endpoint", "kv_events_endpoints", "replay_endpoint", "block_size",
	"data_parallel_start_rank", "data_parallel_size", "max_num_batched_tokens", "total_kv_blocks", "stable_routing_id",
	"is_eagle", "taints", "topology_domains", "kv_transfer_domain", "kv_transfer_enforcement", "kv_transfer_preferred_weight",
	"router_hint_worker_type", "router_hint_source_control_endpoints", "kv_event_source_mode", "lora_adapters"}

var (
	workerFields      = newFieldSet(append([]string{"worker_id", "model_name", "routing_group"}, workerFieldNames...)...)
	patchFields       = newFieldSet(workerFieldNames...)
	outputBlockFields = newFieldSet("decay_fraction")
	peerFields        = newFieldSet("endpoint")
)

// decodeWorker reads a WorkerRequest (POST /workers); worker_id is
// required.
func decodeWorker(body []byte) (core.WorkerSpec, error) {
	s := &scanner{b: body}
	spec, hasID, err := decodeWorkerObject(s, "")
	if err != nil {
		return spec, err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return spec, err
	}
	if !hasID {
		return spec, missingField(body, objEnd, "worker_id")
	}
	return spec, nil
}

// decodeWorkerObject reads one WorkerRequest object; path prefixes the
// field names in messages ("" for a body, "workers[3]." in a workers
// file). hasID reports whether worker_id was given.
func decodeWorkerObject(s *scanner, path string) (spec core.WorkerSpec, hasID bool, err error) {
	var seen uint64
	err = s.object("struct WorkerRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(workerFields, &seen, strings.TrimSuffix(path, "."), key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "worker_id":
			spec.WorkerID, err = s.uint(path+"worker_id", 1<<64-1, "u64")
			hasID = true
		case "model_name":
			spec.ModelName, err = s.ownedStr(path + "model_name")
		case "routing_group":
			spec.RoutingGroup, err = s.ownedStr(path + "routing_group")
		default:
			err = decodeWorkerField(s, path, key, &spec.WorkerFields, false)
		}
		return err
	})
	return spec, hasID, err
}

// decodePatch reads a WorkerPatchRequest (PATCH /workers/{id}): every field
// optional, null is absent.
func decodePatch(body []byte) (core.WorkerPatch, error) {
	var p core.WorkerPatch
	s := &scanner{b: body}
	var seen uint64
	err := s.object("struct WorkerPatchRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(patchFields, &seen, "", key)); done {
			return err
		}
		return decodeWorkerField(s, "", key, &p, true)
	})
	if err != nil {
		return p, err
	}
	return p, s.end()
}

// decodeWorkerField reads one of workerFieldNames into f; path prefixes
// the field's name in messages. The maps and the taint set are Option in a
// patch (null is absent) and defaulted in a WorkerRequest (null is a type
// error); present, they are non-nil even when empty, so a patch can clear
// them.
func decodeWorkerField(s *scanner, path string, key []byte, f *core.WorkerFields, patch bool) (err error) {
	k := path + string(key)
	switch string(key) {
	case "endpoint":
		f.Endpoint, err = s.optStr(k)
	case "kv_events_endpoint":
		f.KVEventsEndpoint, err = s.optStr(k)
	case "replay_endpoint":
		f.ReplayEndpoint, err = s.optStr(k)
	case "stable_routing_id":
		f.StableRoutingID, err = s.optStr(k)
	case "kv_transfer_domain":
		f.KVTransferDomain, err = s.optStr(k)
	case "router_hint_worker_type":
		f.RouterHintWorkerType, err = s.optStr(k)
	case "kv_event_source_mode":
		f.KVEventSourceMode, err = s.optStr(k)
	case "block_size":
		f.BlockSize, err = s.optU32(k)
	case "data_parallel_start_rank":
		f.DataParallelStartRank, err = s.optU32(k)
	case "data_parallel_size":
		f.DataParallelSize, err = s.optU32(k)
	case "max_num_batched_tokens":
		f.MaxNumBatchedTokens, err = s.optU64(k)
	case "total_kv_blocks":
		f.TotalKVBlocks, err = s.optU64(k)
	case "is_eagle":
		if n, err := s.null(); n || err != nil {
			return err
		}
		v, err := s.boolean(k)
		f.IsEagle = &v
		return err
	case "kv_transfer_preferred_weight":
		if n, err := s.null(); n || err != nil {
			return err
		}
		v, err := s.floatAs(k, "f32")
		f.KVTransferPreferredWeight = &v
		return err
	case "kv_transfer_enforcement":
		f.KVTransferEnforcement, err = s.optStr(k)
		if err == nil && f.KVTransferEnforcement != nil {
			if v := *f.KVTransferEnforcement; v != "required" && v != "preferred" {
				return s.typeErr(k, "unknown variant `"+echo([]byte(v))+"`, expected `required` or `preferred`")
			}
		}
	case "taints":
		if patch && s.peek() == 'n' {
			_, err = s.null()
			return err
		}
		f.Taints = []string{}
		var set bool
		set, err = s.array(k, "a sequence", func() error {
			v, err := s.ownedStr(k)
			f.Taints = append(f.Taints, v)
			return err
		})
		if err == nil && !set {
			f.Taints = nil
			return s.typeErr(k, "invalid type: null, expected a sequence")
		}
	case "lora_adapters":
		if s.peek() == 'n' { // unset (a PATCH leaves it as it is)
			_, err = s.null()
			return err
		}
		f.LoraAdapters = []string{} // [] clears it in a PATCH
		_, err = s.array(k, "a sequence", func() error {
			v, err := s.ownedStr(k)
			f.LoraAdapters = append(f.LoraAdapters, v)
			return err
		})
	case "topology_domains":
		f.TopologyDomains, err = s.strMap(k, patch)
	case "kv_events_endpoints":
		f.KVEventsEndpoints, err = s.rankMap(k, patch)
	case "router_hint_source_control_endpoints":
		f.RouterHintSourceControlEndpoints, err = s.rankMap(k, patch)
	default:
		panic("BUG: decodeWorkerField called with " + string(key))
	}
	return err
}

// decodeOutputBlock reads an OutputBlockRequest ({"decay_fraction"?: f64}).
func decodeOutputBlock(body []byte) (*float64, error) {
	s := &scanner{b: body}
	var seen uint64
	var frac *float64
	err := s.object("struct OutputBlockRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(outputBlockFields, &seen, "", key)); done {
			return err
		}
		if n, err := s.null(); n || err != nil {
			return err
		}
		v, err := s.float("decay_fraction")
		frac = &v
		return err
	})
	if err != nil {
		return nil, err
	}
	return frac, s.end()
}

// decodePeer reads the body of the replica-sync peer routes
// ({"endpoint": string}, required).
func decodePeer(body []byte) (string, error) {
	return decodeOneString(body, "struct ReplicaPeerRequest", peerFields, "endpoint")
}

// decodeOneString reads an object, serde's struct name, whose one known
// field, key (the only member of fields), is a required string; unknown
// fields are skipped.
func decodeOneString(body []byte, name string, fields *fieldSet, key string) (string, error) {
	s := &scanner{b: body}
	var seen uint64
	var v string
	has := false
	err := s.object(name, func(k []byte) error {
		if done, err := s.skipUnknown(s.field(fields, &seen, "", k)); done {
			return err
		}
		var err error
		v, err = s.ownedStr(key)
		has = true
		return err
	})
	if err != nil {
		return "", err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return "", err
	}
	if !has {
		return "", missingField(body, objEnd, key)
	}
	return v, nil
}

// ownedStr reads a String (null is a type error) as a copy.
func (s *scanner) ownedStr(field string) (string, error) {
	if s.peek() == 'n' {
		if _, err := s.null(); err != nil {
			return "", err
		}
		return "", s.typeErr(field, "invalid type: null, expected a string")
	}
	v, _, err := s.str(field)
	return strings.Clone(v), err
}

// optStr reads an Option<String> (null is nil) as a copy.
func (s *scanner) optStr(field string) (*string, error) {
	v, set, err := s.str(field)
	if !set || err != nil {
		return nil, err
	}
	c := strings.Clone(v)
	return &c, nil
}

// optU32 reads an Option<u32>.
func (s *scanner) optU32(field string) (*uint32, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	v, err := s.uint(field, 1<<32-1, "u32")
	u := uint32(v)
	return &u, err
}

// optU64 reads an Option<u64>.
func (s *scanner) optU64(field string) (*uint64, error) {
	if n, err := s.null(); n || err != nil {
		return nil, err
	}
	v, err := s.uint(field, 1<<64-1, "u64")
	return &v, err
}

// mapStart reads the start of a map value: false with no error for an
// optional null (patch), a type error for a required one.
func (s *scanner) mapStart(field string, optional bool) (isMap bool, err error) {
	if s.peek() == 'n' {
		if _, err := s.null(); err != nil || optional {
			return false, err
		}
		return false, s.typeErr(field, "invalid type: null, expected a map")
	}
	return true, nil
}

// strMap reads a HashMap<String, String>; a repeated key keeps the last
// value, as serde's HashMap does.
func (s *scanner) strMap(field string, optional bool) (map[string]string, error) {
	if ok, err := s.mapStart(field, optional); !ok {
		return nil, err
	}
	m := map[string]string{}
	err := s.object("a map", func(k []byte) error {
		v, err := s.ownedStr(field)
		m[string(k)] = v
		return err
	})
	return m, err
}

// rankMap reads a HashMap<u32, String>, whose keys serde_json parses as
// numbers in quotes: a key that is not one is a syntax error (400), one
// out of range a data error (422).
func (s *scanner) rankMap(field string, optional bool) (map[uint32]string, error) {
	if ok, err := s.mapStart(field, optional); !ok {
		return nil, err
	}
	m := map[uint32]string{}
	err := s.object("a map", func(k []byte) error {
		rank, err := s.rankKey(field, k)
		if err != nil {
			return err
		}
		v, err := s.ownedStr(field)
		m[rank] = v
		return err
	})
	return m, err
}

// rankKey parses an object key as a u32, as serde_json's map-key
// deserializer does: the key must be a JSON number.
func (s *scanner) rankKey(field string, k []byte) (uint32, error) {
	ks := scanner{b: k}
	lit, integer, err := ks.number()
	if len(k) == 0 || (k[0] != '-' && (k[0] < '0' || k[0] > '9')) || err != nil || ks.i != len(k) {
		return 0, s.syntaxErr("invalid value: expected key to be a number in quotes")
	}
	if !integer {
		return 0, s.typeErr(field, "invalid type: floating point `"+echo(lit)+"`, expected u32")
	}
	var v uint64
	for _, d := range lit {
		if d == '-' || v > 1<<32 {
			return 0, s.typeErr(field, "invalid value: integer `"+echo(lit)+"`, expected u32")
		}
		v = v*10 + uint64(d-'0')
	}
	if v > 1<<32-1 {
		return 0, s.typeErr(field, "invalid value: integer `"+echo(lit)+"`, expected u32")
	}
	return uint32(v), nil
}
