package httpapi

import (
	"strings"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
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
	workerFields      = jsonscan.NewFieldSet(append([]string{"worker_id", "model_name", "routing_group"}, workerFieldNames...)...)
	patchFields       = jsonscan.NewFieldSet(workerFieldNames...)
	outputBlockFields = jsonscan.NewFieldSet("decay_fraction")
	peerFields        = jsonscan.NewFieldSet("endpoint")
)

// decodeWorker reads a WorkerRequest (POST /workers); worker_id is
// required.
func decodeWorker(body []byte) (core.WorkerSpec, error) {
	s := jsonscan.New(body)
	spec, hasID, err := decodeWorkerObject(s, "")
	if err != nil {
		return spec, bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return spec, bodyErr(err)
	}
	if !hasID {
		return spec, bodyErr(jsonscan.MissingField(body, objEnd, "worker_id"))
	}
	return spec, nil
}

// decodeWorkerObject reads one WorkerRequest object; path prefixes the
// field names in messages ("" for a body, "workers[3]." in a workers
// file). hasID reports whether worker_id was given.
func decodeWorkerObject(s *jsonscan.Scanner, path string) (spec core.WorkerSpec, hasID bool, err error) {
	var seen uint64
	err = s.Object("struct WorkerRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(workerFields, &seen, strings.TrimSuffix(path, "."), key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "worker_id":
			spec.WorkerID, err = s.Uint(path+"worker_id", 1<<64-1, "u64")
			hasID = true
		case "model_name":
			spec.ModelName, err = ownedStr(s, path+"model_name")
		case "routing_group":
			spec.RoutingGroup, err = ownedStr(s, path+"routing_group")
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
	s := jsonscan.New(body)
	var seen uint64
	err := s.Object("struct WorkerPatchRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(patchFields, &seen, "", key)); done {
			return err
		}
		return decodeWorkerField(s, "", key, &p, true)
	})
	if err != nil {
		return p, bodyErr(err)
	}
	return p, bodyErr(s.End())
}

// decodeWorkerField reads one of workerFieldNames into f; path prefixes
// the field's name in messages. The maps and the taint set are Option in a
// patch (null is absent) and defaulted in a WorkerRequest (null is a type
// error); present, they are non-nil even when empty, so a patch can clear
// them.
func decodeWorkerField(s *jsonscan.Scanner, path string, key []byte, f *core.WorkerFields, patch bool) (err error) {
	k := path + string(key)
	switch string(key) {
	case "endpoint":
		f.Endpoint, err = optStr(s, k)
	case "kv_events_endpoint":
		f.KVEventsEndpoint, err = optStr(s, k)
	case "replay_endpoint":
		f.ReplayEndpoint, err = optStr(s, k)
	case "stable_routing_id":
		f.StableRoutingID, err = optStr(s, k)
	case "kv_transfer_domain":
		f.KVTransferDomain, err = optStr(s, k)
	case "router_hint_worker_type":
		f.RouterHintWorkerType, err = optStr(s, k)
	case "kv_event_source_mode":
		f.KVEventSourceMode, err = optStr(s, k)
	case "block_size":
		f.BlockSize, err = optU32(s, k)
	case "data_parallel_start_rank":
		f.DataParallelStartRank, err = optU32(s, k)
	case "data_parallel_size":
		f.DataParallelSize, err = optU32(s, k)
	case "max_num_batched_tokens":
		f.MaxNumBatchedTokens, err = optU64(s, k)
	case "total_kv_blocks":
		f.TotalKVBlocks, err = optU64(s, k)
	case "is_eagle":
		if n, err := s.Null(); n || err != nil {
			return err
		}
		v, err := s.Boolean(k)
		f.IsEagle = &v
		return err
	case "kv_transfer_preferred_weight":
		if n, err := s.Null(); n || err != nil {
			return err
		}
		v, err := s.FloatAs(k, "f32")
		f.KVTransferPreferredWeight = &v
		return err
	case "kv_transfer_enforcement":
		f.KVTransferEnforcement, err = optStr(s, k)
		if err == nil && f.KVTransferEnforcement != nil {
			if v := *f.KVTransferEnforcement; v != "required" && v != "preferred" {
				return s.TypeErr(k, "unknown variant `"+jsonscan.Echo([]byte(v))+"`, expected `required` or `preferred`")
			}
		}
	case "taints":
		if patch && s.Peek() == 'n' {
			_, err = s.Null()
			return err
		}
		f.Taints = []string{}
		var set bool
		set, err = s.Array(k, "a sequence", func() error {
			v, err := ownedStr(s, k)
			f.Taints = append(f.Taints, v)
			return err
		})
		if err == nil && !set {
			f.Taints = nil
			return s.TypeErr(k, "invalid type: null, expected a sequence")
		}
	case "lora_adapters":
		if s.Peek() == 'n' { // unset (a PATCH leaves it as it is)
			_, err = s.Null()
			return err
		}
		f.LoraAdapters = []string{} // [] clears it in a PATCH
		_, err = s.Array(k, "a sequence", func() error {
			v, err := ownedStr(s, k)
			f.LoraAdapters = append(f.LoraAdapters, v)
			return err
		})
	case "topology_domains":
		f.TopologyDomains, err = strMap(s, k, patch)
	case "kv_events_endpoints":
		f.KVEventsEndpoints, err = rankMap(s, k, patch)
	case "router_hint_source_control_endpoints":
		f.RouterHintSourceControlEndpoints, err = rankMap(s, k, patch)
	default:
		panic("BUG: decodeWorkerField called with " + string(key))
	}
	return err
}

// decodeOutputBlock reads an OutputBlockRequest ({"decay_fraction"?: f64}).
func decodeOutputBlock(body []byte) (*float64, error) {
	s := jsonscan.New(body)
	var seen uint64
	var frac *float64
	err := s.Object("struct OutputBlockRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(outputBlockFields, &seen, "", key)); done {
			return err
		}
		if n, err := s.Null(); n || err != nil {
			return err
		}
		v, err := s.Float("decay_fraction")
		frac = &v
		return err
	})
	if err != nil {
		return nil, bodyErr(err)
	}
	return frac, bodyErr(s.End())
}

// decodePeer reads the body of the replica-sync peer routes
// ({"endpoint": string}, required).
func decodePeer(body []byte) (string, error) {
	return decodeOneString(body, "struct ReplicaPeerRequest", peerFields, "endpoint")
}

// decodeOneString reads an object, serde's struct name, whose one known
// field, key (the only member of fields), is a required string; unknown
// fields are skipped.
func decodeOneString(body []byte, name string, fields *jsonscan.FieldSet, key string) (string, error) {
	s := jsonscan.New(body)
	var seen uint64
	var v string
	has := false
	err := s.Object(name, func(k []byte) error {
		if done, err := s.SkipUnknown(s.Field(fields, &seen, "", k)); done {
			return err
		}
		var err error
		v, err = ownedStr(s, key)
		has = true
		return err
	})
	if err != nil {
		return "", bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return "", bodyErr(err)
	}
	if !has {
		return "", bodyErr(jsonscan.MissingField(body, objEnd, key))
	}
	return v, nil
}

// ownedStr reads a String (null is a type error) as a copy.
func ownedStr(s *jsonscan.Scanner, field string) (string, error) {
	if s.Peek() == 'n' {
		if _, err := s.Null(); err != nil {
			return "", err
		}
		return "", s.TypeErr(field, "invalid type: null, expected a string")
	}
	v, _, err := s.Str(field)
	return strings.Clone(v), err
}

// optStr reads an Option<String> (null is nil) as a copy.
func optStr(s *jsonscan.Scanner, field string) (*string, error) {
	v, set, err := s.Str(field)
	if !set || err != nil {
		return nil, err
	}
	c := strings.Clone(v)
	return &c, nil
}

// optU32 reads an Option<u32>.
func optU32(s *jsonscan.Scanner, field string) (*uint32, error) {
	if n, err := s.Null(); n || err != nil {
		return nil, err
	}
	v, err := s.Uint(field, 1<<32-1, "u32")
	u := uint32(v)
	return &u, err
}

// optU64 reads an Option<u64>.
func optU64(s *jsonscan.Scanner, field string) (*uint64, error) {
	if n, err := s.Null(); n || err != nil {
		return nil, err
	}
	v, err := s.Uint(field, 1<<64-1, "u64")
	return &v, err
}

// mapStart reads the start of a map value: false with no error for an
// optional null (patch), a type error for a required one.
func mapStart(s *jsonscan.Scanner, field string, optional bool) (isMap bool, err error) {
	if s.Peek() == 'n' {
		if _, err := s.Null(); err != nil || optional {
			return false, err
		}
		return false, s.TypeErr(field, "invalid type: null, expected a map")
	}
	return true, nil
}

// strMap reads a HashMap<String, String>; a repeated key keeps the last
// value, as serde's HashMap does.
func strMap(s *jsonscan.Scanner, field string, optional bool) (map[string]string, error) {
	if ok, err := mapStart(s, field, optional); !ok {
		return nil, err
	}
	m := map[string]string{}
	err := s.Object("a map", func(k []byte) error {
		v, err := ownedStr(s, field)
		m[string(k)] = v
		return err
	})
	return m, err
}

// rankMap reads a HashMap<u32, String>, whose keys serde_json parses as
// numbers in quotes: a key that is not one is a syntax error (400), one
// out of range a data error (422).
func rankMap(s *jsonscan.Scanner, field string, optional bool) (map[uint32]string, error) {
	if ok, err := mapStart(s, field, optional); !ok {
		return nil, err
	}
	m := map[uint32]string{}
	err := s.Object("a map", func(k []byte) error {
		rank, err := rankKey(s, field, k)
		if err != nil {
			return err
		}
		v, err := ownedStr(s, field)
		m[rank] = v
		return err
	})
	return m, err
}

// rankKey parses an object key as a u32, as serde_json's map-key
// deserializer does: the key must be a JSON number.
func rankKey(s *jsonscan.Scanner, field string, k []byte) (uint32, error) {
	ks := jsonscan.New(k)
	lit, integer, err := ks.Number()
	if len(k) == 0 || (k[0] != '-' && (k[0] < '0' || k[0] > '9')) || err != nil || ks.Offset() != len(k) {
		return 0, s.SyntaxErr("invalid value: expected key to be a number in quotes")
	}
	if !integer {
		return 0, s.TypeErr(field, "invalid type: floating point `"+jsonscan.Echo(lit)+"`, expected u32")
	}
	var v uint64
	for _, d := range lit {
		if d == '-' || v > 1<<32 {
			return 0, s.TypeErr(field, "invalid value: integer `"+jsonscan.Echo(lit)+"`, expected u32")
		}
		v = v*10 + uint64(d-'0')
	}
	if v > 1<<32-1 {
		return 0, s.TypeErr(field, "invalid value: integer `"+jsonscan.Echo(lit)+"`, expected u32")
	}
	return uint32(v), nil
}
