package httpapi

import (
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
)

// The standalone indexer's request bodies
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/server.rs), read by
// the same scanner as the selector's: exact keys, serde's duplicate-field
// error and texts. routing_group defaults to "default" (null is a type
// error: the field is a String with a serde default); tenant_id and
// additional_salt (alias additionalsalt) are read for their type and
// ignored, as the reference ignores them.

var (
	ixRegisterFields   = jsonscan.NewFieldSet("instance_id", "endpoint", "model_name", "routing_group", "tenant_id", "block_size", "dp_rank", "replay_endpoint", "additional_salt", "additionalsalt")
	ixUnregisterFields = jsonscan.NewFieldSet("instance_id", "model_name", "routing_group", "tenant_id", "dp_rank")
	ixQueryFields      = jsonscan.NewFieldSet("token_ids", "model_name", "routing_group", "tenant_id", "lora_name", "cache_salt", "prompt")
	ixByHashFields     = jsonscan.NewFieldSet("block_hashes", "model_name", "routing_group", "tenant_id", "cache_salt")
	ixPeerFields       = jsonscan.NewFieldSet("url")
	ixControlFields    = jsonscan.NewFieldSet("instance_id", "dp_rank")
)

func decodeIxRegister(body []byte) (core.IndexerRegistration, error) {
	var r core.IndexerRegistration
	s := jsonscan.New(body)
	var seen uint64
	var hasID, hasEP, hasModel, hasBS bool
	err := s.Object("struct RegisterRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(ixRegisterFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			r.InstanceID, err = s.Uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "endpoint":
			r.Endpoint, err = ownedStr(s, "endpoint")
			hasEP = true
		case "model_name":
			r.ModelName, err = ownedStr(s, "model_name")
			hasModel = true
		case "routing_group":
			r.RoutingGroup, err = ownedStr(s, "routing_group")
		case "tenant_id":
			_, err = ownedStr(s, "tenant_id")
		case "block_size":
			var v uint64
			v, err = s.Uint("block_size", 1<<32-1, "u32")
			r.BlockSize, hasBS = uint32(v), true
		case "dp_rank":
			var v *uint32
			v, err = optU32(s, "dp_rank")
			if v != nil {
				r.DPRank = *v
			}
		case "replay_endpoint":
			var v *string
			v, err = optStr(s, "replay_endpoint")
			if v != nil {
				r.ReplayEndpoint = *v
			}
		default: // additional_salt, additionalsalt
			_, err = optStr(s, string(key))
		}
		return err
	})
	if err != nil {
		return r, bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return r, bodyErr(err)
	}
	for _, f := range []struct {
		has  bool
		name string
	}{{hasID, "instance_id"}, {hasEP, "endpoint"}, {hasModel, "model_name"}, {hasBS, "block_size"}} {
		if !f.has {
			return r, bodyErr(jsonscan.MissingField(body, objEnd, f.name))
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
	s := jsonscan.New(body)
	var seen uint64
	var hasID, hasModel bool
	err := s.Object("struct UnregisterRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(ixUnregisterFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			r.id, err = s.Uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "model_name":
			r.model, err = ownedStr(s, "model_name")
			hasModel = true
		case "routing_group":
			r.group, err = optStr(s, "routing_group")
		case "tenant_id":
			_, err = optStr(s, "tenant_id")
		case "dp_rank":
			r.dpRank, err = optU32(s, "dp_rank")
		}
		return err
	})
	if err != nil {
		return r, bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return r, bodyErr(err)
	}
	if !hasID {
		return r, bodyErr(jsonscan.MissingField(body, objEnd, "instance_id"))
	}
	if !hasModel {
		return r, bodyErr(jsonscan.MissingField(body, objEnd, "model_name"))
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
	text              string // prompt: read only with a tokenizer configured
	hasSalt, hasText  bool
	s                 jsonscan.Scanner
	match             core.IndexerMatch
	hasModel, hasData bool
}

func (q *ixQuery) reset(body []byte) {
	*q = ixQuery{tokens: q.tokens[:0], hashes: q.hashes[:0], s: q.s, match: core.IndexerMatch{Matches: q.match.Matches[:0]}}
	q.s.Reset(body)
	q.group = core.DefaultPartition
}

// decodeIxQuery reads a QueryRequest (byHash false: token_ids) or a
// QueryByHashRequest (block_hashes, i64 bits as u64) into q. With
// prompts (a tokenizer is configured), a QueryRequest's prompt may stand
// in for its token_ids (a kvselect extension; q.hasData stays false and
// the handler tokenizes q.text); without, prompt is an unknown field, as
// the reference sees it.
func decodeIxQuery(body []byte, q *ixQuery, byHash, prompts bool) error {
	q.reset(body)
	s := &q.s
	fields, typ, data := ixQueryFields, "struct QueryRequest", "token_ids"
	if byHash {
		fields, typ, data = ixByHashFields, "struct QueryByHashRequest", "block_hashes"
	}
	var seen uint64
	err := s.Object(typ, func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(fields, &seen, "", key)); done {
			return err
		}
		var err error
		var set bool
		switch string(key) {
		case "token_ids":
			q.tokens, set, err = s.U32s("token_ids", q.tokens)
			if err == nil && !set {
				err = s.TypeErr("token_ids", "invalid type: null, expected a sequence")
			}
			q.hasData = true
		case "block_hashes":
			q.hashes, set, err = s.I64s("block_hashes", q.hashes)
			if err == nil && !set {
				err = s.TypeErr("block_hashes", "invalid type: null, expected a sequence")
			}
			q.hasData = true
		case "model_name":
			q.model, err = reqStr(s, "model_name")
			q.hasModel = true
		case "routing_group":
			q.group, err = reqStr(s, "routing_group")
		case "tenant_id":
			_, err = reqStr(s, "tenant_id")
		case "lora_name":
			q.lora, _, err = s.Str("lora_name")
		case "cache_salt":
			q.salt, q.hasSalt, err = s.Str("cache_salt")
		case "prompt":
			if !prompts {
				return s.Skip()
			}
			q.text, q.hasText, err = s.Str("prompt")
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
	if !q.hasData && !q.hasText {
		return bodyErr(jsonscan.MissingField(body, objEnd, data))
	}
	if !q.hasModel {
		return bodyErr(jsonscan.MissingField(body, objEnd, "model_name"))
	}
	return nil
}

// reqStr reads a String (null is a type error), aliasing the input.
func reqStr(s *jsonscan.Scanner, field string) (string, error) {
	v, set, err := s.Str(field)
	if err == nil && !set {
		err = s.TypeErr(field, "invalid type: null, expected a string")
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
	s := jsonscan.New(body)
	var seen uint64
	hasID := false
	err = s.Object("struct ListenerControlRequest", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(ixControlFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "instance_id":
			id, err = s.Uint("instance_id", 1<<64-1, "u64")
			hasID = true
		case "dp_rank":
			if s.Peek() == 'n' {
				_, err = s.Null()
				return err
			}
			var v uint64
			v, err = s.Uint("dp_rank", 1<<32-1, "u32")
			rank = uint32(v)
		}
		return err
	})
	if err != nil {
		return 0, 0, bodyErr(err)
	}
	objEnd := s.Offset()
	if err := s.End(); err != nil {
		return 0, 0, bodyErr(err)
	}
	if !hasID {
		return 0, 0, bodyErr(jsonscan.MissingField(body, objEnd, "instance_id"))
	}
	return id, rank, nil
}
