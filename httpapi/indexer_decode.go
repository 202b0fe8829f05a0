package httpapi

import (
	"github.com/kvselect/kvselect/core"
)

// The standalone indexer's request bodies
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/server.rs), read by
// the same scanner as the selector's: exact keys, serde's duplicate-field
// error and texts. routing_group defaults to "default" (null is a type
// error: the field is a String with a serde default); tenant_id and
// additional_salt (alias additionalsalt) are read for their type and
// ignored, as the reference ignores them.

var (
	ixRegisterFields   = newFieldSet("instance_id", "endpoint", "model_name", "routing_group", "tenant_id", "block_size", "dp_rank", "replay_endpoint", "additional_salt", "additionalsalt")
	ixUnregisterFields = newFieldSet("instance_id", "model_name", "routing_group", "tenant_id", "dp_rank")
	ixQueryFields      = newFieldSet("token_ids", "model_name", "routing_group", "tenant_id", "lora_name", "cache_salt")
	ixByHashFields     = newFieldSet("block_hashes", "model_name", "routing_group", "tenant_id", "cache_salt")
	ixPeerFields       = newFieldSet("url")
	ixControlFields    = newFieldSet("instance_id", "dp_rank")
)

func decodeIxRegister(body []byte) (core.IndexerRegistration, error) {
	var r core.IndexerRegistration
	s := &scanner{b: body}
	var seen uint64
	var hasID, hasEP, hasModel, hasBS bool
	err := s.object("struct RegisterRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(ixRegisterFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			r.InstanceID, err = s.uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "endpoint":
			r.Endpoint, err = s.ownedStr("endpoint")
			hasEP = true
		case "model_name":
			r.ModelName, err = s.ownedStr("model_name")
			hasModel = true
		case "routing_group":
			r.RoutingGroup, err = s.ownedStr("routing_group")
		case "tenant_id":
			_, err = s.ownedStr("tenant_id")
		case "block_size":
			var v uint64
			v, err = s.uint("block_size", 1<<32-1, "u32")
			r.BlockSize, hasBS = uint32(v), true
		case "dp_rank":
			var v *uint32
			v, err = s.optU32("dp_rank")
			if v != nil {
				r.DPRank = *v
			}
		case "replay_endpoint":
			var v *string
			v, err = s.optStr("replay_endpoint")
			if v != nil {
				r.ReplayEndpoint = *v
			}
		default: // additional_salt, additionalsalt
			_, err = s.optStr(string(key))
		}
		return err
	})
	if err != nil {
		return r, err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return r, err
	}
	for _, f := range []struct {
		has  bool
		name string
	}{{hasID, "instance_id"}, {hasEP, "endpoint"}, {hasModel, "model_name"}, {hasBS, "block_size"}} {
		if !f.has {
			return r, missingField(body, objEnd, f.name)
		}
	}
	return r, nil
}

// ixUnregister is a decoded UnregisterRequest.
type ixUnregister struct {
	id     uint64
	model  string
	group  *string
	dpRank *uint32
}

func decodeIxUnregister(body []byte) (ixUnregister, error) {
	var r ixUnregister
	s := &scanner{b: body}
	var seen uint64
	var hasID, hasModel bool
	err := s.object("struct UnregisterRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(ixUnregisterFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			r.id, err = s.uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "model_name":
			r.model, err = s.ownedStr("model_name")
			hasModel = true
		case "routing_group":
			r.group, err = s.optStr("routing_group")
		case "tenant_id":
			_, err = s.optStr("tenant_id")
		case "dp_rank":
			r.dpRank, err = s.optU32("dp_rank")
		}
		return err
	})
	if err != nil {
		return r, err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return r, err
	}
	if !hasID {
		return r, missingField(body, objEnd, "instance_id")
	}
	if !hasModel {
		return r, missingField(body, objEnd, "model_name")
	}
	return r, nil
}

// ixQuery is a decoded QueryRequest or QueryByHashRequest; pooled. Its
// strings alias the request body (valid until the handler returns: core
// keeps none of them); its slices are reused.
type ixQuery struct {
	tokens            []uint32
	hashes            []uint64
	model, group      string
	lora, salt        string
	hasSalt           bool
	s                 scanner
	match             core.IndexerMatch
	hasModel, hasData bool
}

func (q *ixQuery) reset(body []byte) {
	*q = ixQuery{tokens: q.tokens[:0], hashes: q.hashes[:0], s: scanner{b: body, strbuf: q.s.strbuf[:0]}, match: core.IndexerMatch{Matches: q.match.Matches[:0]}}
	q.group = core.DefaultPartition
}

// decodeIxQuery reads a QueryRequest (byHash false: token_ids) or a
// QueryByHashRequest (block_hashes, i64 bits as u64) into q.
func decodeIxQuery(body []byte, q *ixQuery, byHash bool) error {
	q.reset(body)
	s := &q.s
	fields, typ, data := ixQueryFields, "struct QueryRequest", "token_ids"
	if byHash {
		fields, typ, data = ixByHashFields, "struct QueryByHashRequest", "block_hashes"
	}
	var seen uint64
	err := s.object(typ, func(key []byte) error {
		if done, err := s.skipUnknown(s.field(fields, &seen, "", key)); done {
			return err
		}
		var err error
		var set bool
		switch string(key) {
		case "token_ids":
			q.tokens, set, err = s.u32s("token_ids", q.tokens)
			if err == nil && !set {
				err = s.typeErr("token_ids", "invalid type: null, expected a sequence")
			}
			q.hasData = true
		case "block_hashes":
			q.hashes, set, err = s.i64s("block_hashes", q.hashes)
			if err == nil && !set {
				err = s.typeErr("block_hashes", "invalid type: null, expected a sequence")
			}
			q.hasData = true
		case "model_name":
			q.model, err = s.reqStr("model_name")
			q.hasModel = true
		case "routing_group":
			q.group, err = s.reqStr("routing_group")
		case "tenant_id":
			_, err = s.reqStr("tenant_id")
		case "lora_name":
			q.lora, _, err = s.str("lora_name")
		case "cache_salt":
			q.salt, q.hasSalt, err = s.str("cache_salt")
		}
		return err
	})
	if err != nil {
		return err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return err
	}
	if !q.hasData {
		return missingField(body, objEnd, data)
	}
	if !q.hasModel {
		return missingField(body, objEnd, "model_name")
	}
	return nil
}

// reqStr reads a String (null is a type error), aliasing the input.
func (s *scanner) reqStr(field string) (string, error) {
	v, set, err := s.str(field)
	if err == nil && !set {
		err = s.typeErr(field, "invalid type: null, expected a string")
	}
	return v, err
}

// decodeIxPeer reads {"url": String}.
func decodeIxPeer(body []byte) (string, error) {
	return decodeOneString(body, "struct PeerRequest", ixPeerFields, "url")
}

// decodeIxListenerControl reads a ListenerControlRequest ({instance_id,
// dp_rank?}) of the test routes; dp_rank defaults to 0.
func decodeIxListenerControl(body []byte) (id uint64, rank uint32, err error) {
	s := &scanner{b: body}
	var seen uint64
	hasID := false
	err = s.object("struct ListenerControlRequest", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(ixControlFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			id, err = s.uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "dp_rank":
			if s.peek() == 'n' {
				_, err = s.null()
				return err
			}
			var v uint64
			v, err = s.uint("dp_rank", 1<<32-1, "u32")
			rank = uint32(v)
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	objEnd := s.i
	if err := s.end(); err != nil {
		return 0, 0, err
	}
	if !hasID {
		return 0, 0, missingField(body, objEnd, "instance_id")
	}
	return id, rank, nil
}
