package httpapi

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
)

// refSelect is the reference decoding of a selection body with
// encoding/json: every field a pointer, so presence is visible.
type refSelect struct {
	ModelName            *string        `json:"model_name"`
	RoutingGroup         *string        `json:"routing_group"`
	SelectionID          *string        `json:"selection_id"`
	SessionID            *string        `json:"session_id"`
	TokenIDs             *[]uint32      `json:"token_ids"`
	BlockHashes          *[]int64       `json:"block_hashes"`
	SequenceHashes       *[]int64       `json:"sequence_hashes"`
	ISLTokens            *uint64        `json:"isl_tokens"`
	LoraName             *string        `json:"lora_name"`
	CacheSalt            *string        `json:"cache_salt"`
	ExpectedOutputTokens *uint32        `json:"expected_output_tokens"`
	StrictPriority       *uint32        `json:"strict_priority"`
	AllowedWorkerIDs     *[]uint64      `json:"allowed_worker_ids"`
	Advisory             *bool          `json:"advisory"`
	RouterConfigOverride *core.Override `json:"router_config_override"`
}

var selectSeeds = []string{
	`{"selection_id":"s-1","model_name":"m","routing_group":"g","block_hashes":[1,-2,9223372036854775807,-9223372036854775808],"sequence_hashes":[0,0,0,0],"isl_tokens":64}`,
	`{"token_ids":[1,2,3,4,4294967295],"lora_name":"l","cache_salt":"s\u00e9\n","expected_output_tokens":7,"advisory":true}`,
	` { "token_ids" : [ 1 , 2 ] , "unknown" : {"a":[1,{"b":null}]} , "allowed_worker_ids":[18446744073709551615] } `,
	`{"block_hashes":null,"sequence_hashes":[],"isl_tokens":null,"model_name":null}`,
	`{"router_config_override":{"router_temperature":0.5,"assume_kv_reuse":false},"strict_priority":3,"priority_jump":1.5}`,
	`{"router_config_override":{"routing_policy":"default","router_temperature":0}}`, `{"router_config_override":{"routing_policy":null}}`,
	`{"pinned_worker":{"worker_id":1,"dp_rank":0},"routing_constraints":{"required_taints":["a"],"preferred_taints":{"b":0.5}}}`,
	`{"session_context":{"session_id":"x","input_trigger":"tool_result"},"mm_routing_info":{"routing_token_ids":[5,6]}}`,
	`{"block_hashes":[1.5]}`, `{"block_hashes":[1e3]}`, `{"token_ids":[-1]}`, `{"isl_tokens":"4"}`, `{"block_hashes":[99999999999999999999]}`,
	`{"a":1,}`, `{"a"}`, `[1]`, `"x"`, `{"model_name":"\ud83d\ude00"}`, `{"model_name":"\ud83d"}`, `{`, ``, `{"x":01}`, `{"x":tru}`,
	`{"block_hashes":[1,2 ,3 ] ,"sequence_hashes":[ -1 ]}`,
	`{"token_ids":[1,2,3,4,5],"is_eagle":true,"block_mm_infos":[null,{"mm_objects":[{"mm_hash":7,"offsets":[[0,2]]}]}]}`,
	`{"mm_routing_info":{"routing_token_ids":[1],"block_mm_infos":{}}}`, `{"token_ids":[007]}`, `{"allowed_worker_ids":[-0]}`, `{"priority_jump":1e400}`, `{"isl_tokens":-01}`,
	// Mixed case is another (unknown) key; a known key given twice is
	// serde's duplicate field, at every level; an unknown one is ignored.
	`{"MODEL_NAME":"x","Token_IDs":[1],"token_ids":[2]}`, `{"Block_Hashes":"not even an array","token_ids":[1]}`,
	`{"model_name":"a","token_ids":[1],"model_name":"b"}`, `{"token_ids":[1],"token_ids":[1]}`, `{"x":1,"x":2,"token_ids":[1]}`,
	`{"pinned_worker":{"worker_id":1,"dp_rank":0,"dp_rank":1}}`, `{"router_config_override":{"router_temperature":1,"router_temperature":2}}`,
	`{"router_config_override":{"Router_Temperature":"x"}}`, `{"session_context":{"session_id":"a","SESSION_ID":1}}`,
	`{"block_mm_infos":[{"mm_objects":[{"mm_hash":1,"offsets":[],"mm_hash":2}]}]}`, `{"routing_constraints":{"preferred_taints":{"a":1,"a":2}}}`,
	`{"session_context":{"session_id":"c","parent_session_id":"p","session_final":true,"agent_headers":{"x-a":["1","2"],"x-b":[]}},"session_id":"legacy"}`,
	`{"session_context":{"session_id":"c","agent_headers":{"x":[null]}}}`, `{"session_context":{"session_id":"c","agent_headers":["x"]}}`,
	`{"affinity_target":{"worker_id":3},"session_id":"s"}`, `{"affinity_target":{"dp_rank":1}}`, `{"affinity_target":null,"session_context":null}`,
}

// comparableInput reports whether the reference decoder (refExact, then
// encoding/json) decides this input as serde does: valid UTF-8 and no \u
// escapes (encoding/json turns invalid text and lone surrogates into
// U+FFFD, serde rejects them), modest nesting (serde stops at 128 levels).
// Keys of any case and repeated keys are comparable: refExact matches them
// exactly and fails duplicates, as serde does.
func comparableInput(b []byte) bool {
	return utf8.Valid(b) && !bytes.Contains(bytes.ToLower(b), []byte(`\u`)) &&
		bytes.Count(b, []byte("[")) <= 64 && bytes.Count(b, []byte("{")) <= 64
}

// checkUTF8 is the property every decoder shares: a body that is not UTF-8
// is rejected.
func checkUTF8(t *testing.T, body []byte, err error) {
	if !utf8.Valid(body) && err == nil {
		t.Fatalf("%q: invalid UTF-8 accepted", body)
	}
}

// validJSONSyntaxErr reports whether a 400 on valid JSON is one serde also
// gives: a number beyond f64's range, a u32 map key that is not a number,
// a tuple of more than two offsets.
func validJSONSyntaxErr(msg string) bool {
	return strings.Contains(msg, "number out of range") || strings.Contains(msg, "expected key to be a number") || strings.Contains(msg, "trailing characters")
}

func u64sFromI64(p *[]int64) []uint64 {
	if p == nil {
		return nil
	}
	out := make([]uint64, len(*p))
	for i, v := range *p {
		out[i] = uint64(v)
	}
	return out
}

// checkSelect is the differential property: syntax errors agree with
// json.Valid (400), and when encoding/json accepts the body, the scanner
// agrees field by field; when encoding/json rejects a field it decodes,
// the scanner rejects the body too.
func checkSelect(t *testing.T, body []byte) {
	var r selectReq
	err := decodeSelect(body, &r)
	var de *decodeError
	if err != nil && !errors.As(err, &de) {
		t.Fatalf("%q: untyped error %v", body, err)
	}
	checkUTF8(t, body, err)
	if !comparableInput(body) {
		return
	}
	// Like serde, the scanner reports the first error in reading order: a
	// type error before a later syntax error is a 422, so invalid JSON need
	// only be rejected; valid JSON is never a 400.
	if !stdjson.Valid(body) {
		if err == nil {
			t.Fatalf("%q: invalid JSON accepted", body)
		}
		return
	}
	if err != nil && de.status == 400 && !validJSONSyntaxErr(de.msg) {
		t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
	}
	var ref refSelect
	exact, refErr := refExact(body, refSelectSchema)
	if refErr == errRefDuplicate && (err == nil || de.status != 422) {
		t.Fatalf("%q: a duplicate field not rejected with a 422: %v", body, err)
	}
	if refErr == nil {
		refErr = stdjson.Unmarshal(exact, &ref)
	}
	if refErr != nil {
		if err == nil {
			t.Fatalf("%q: encoding/json rejects (%v), scanner accepts", body, refErr)
		}
		return
	}
	if err != nil {
		return // fields the reference struct does not validate (pinned_worker, session_context, ...)
	}
	q := &r.req
	eqStr := func(name string, got string, set bool, want *string) {
		if (want != nil) != set && want != nil {
			t.Fatalf("%q: %s presence", body, name)
		}
		if want != nil && got != *want {
			t.Fatalf("%q: %s %q != %q", body, name, got, *want)
		}
	}
	eqStr("selection_id", q.SelectionID, q.HasSelectionID, ref.SelectionID)
	eqStr("model_name", q.ModelName, ref.ModelName != nil, ref.ModelName)
	eqStr("routing_group", q.RoutingGroup, ref.RoutingGroup != nil, ref.RoutingGroup)
	eqStr("lora_name", q.LoraName, ref.LoraName != nil, ref.LoraName)
	if (ref.BlockHashes != nil) != q.HasBlockHashes || (ref.BlockHashes != nil && !slicesEq(u64sFromI64(ref.BlockHashes), q.BlockHashes)) {
		t.Fatalf("%q: block_hashes %v vs %v", body, q.BlockHashes, ref.BlockHashes)
	}
	if (ref.SequenceHashes != nil) != q.HasSequenceHashes || (ref.SequenceHashes != nil && !slicesEq(u64sFromI64(ref.SequenceHashes), q.SequenceHashes)) {
		t.Fatalf("%q: sequence_hashes %v vs %v", body, q.SequenceHashes, ref.SequenceHashes)
	}
	if (ref.TokenIDs != nil) != q.HasTokenIDs || (ref.TokenIDs != nil && !slicesEq(*ref.TokenIDs, q.TokenIDs)) {
		t.Fatalf("%q: token_ids %v vs %v", body, q.TokenIDs, ref.TokenIDs)
	}
	if (ref.ISLTokens != nil) != q.HasISLTokens || (ref.ISLTokens != nil && *ref.ISLTokens != q.ISLTokens) {
		t.Fatalf("%q: isl_tokens", body)
	}
	if (ref.AllowedWorkerIDs != nil) != q.HasAllowedWorkerIDs || (ref.AllowedWorkerIDs != nil && !slicesEq(*ref.AllowedWorkerIDs, q.AllowedWorkerIDs)) {
		t.Fatalf("%q: allowed_worker_ids", body)
	}
	if (ref.RouterConfigOverride != nil) != (q.Override != nil) || (q.Override != nil && !reflect.DeepEqual(*ref.RouterConfigOverride, *q.Override)) {
		t.Fatalf("%q: router_config_override", body)
	}
}

func slicesEq[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSelectDecodeDifferential(t *testing.T) {
	for _, s := range selectSeeds {
		checkSelect(t, []byte(s))
	}
	checkSelect(t, selectBody(128, "x"))
}

// FuzzSelectBody fuzzes the selection body decoder (/select,
// /select_and_reserve, /potential_loads, /overlap_scores) against
// encoding/json.
func FuzzSelectBody(f *testing.F) {
	for _, s := range selectSeeds {
		f.Add([]byte(s))
	}
	f.Add(selectBody(8, "s"))
	f.Fuzz(func(t *testing.T, body []byte) { checkSelect(t, body) })
}

var reservationSeeds = []string{
	`{"selection_id":"r","worker_id":1,"dp_rank":0,"sequence_hashes":[1,-1],"isl_tokens":8,"effective_prefill_tokens":3,"track_prefill_tokens":false}`,
	`{"selection_id":"r","model_name":"m","routing_group":"g"}`,
	`{"model_name":"m"}`, `{"selection_id":1}`, `{"selection_id":"r","worker_id":-1}`, `{"selection_id":"r","expected_output_tokens":4294967296}`,
	`{"selection_id":"r","token_ids":[1,2],"lora_name":"x","router_config_override":{"track_prefill_tokens":true}}`, `{"selection_id":null}`,
	`{"SELECTION_ID":"r"}`, `{"selection_id":"r","Worker_Id":"x"}`, `{"selection_id":"r","selection_id":"s"}`, `{"selection_id":"r","worker_id":1,"worker_id":2}`,
}

// FuzzReservationBody fuzzes the /reservations decoder against the
// reference (refExact, then encoding/json): it never panics, syntax errors
// are 400, data errors 422, a duplicate field is a 422, keys match exactly,
// and a decoded request always has its required selection_id.
func FuzzReservationBody(f *testing.F) {
	for _, s := range reservationSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r reserveReq
		err := decodeReservation(body, &r)
		checkUTF8(t, body, err)
		var de *decodeError
		if err != nil {
			if !errors.As(err, &de) || (de.status != 400 && de.status != 422) {
				t.Fatalf("%q: %v", body, err)
			}
			if comparableInput(body) && stdjson.Valid(body) && de.status == 400 && !validJSONSyntaxErr(de.msg) {
				t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
			}
		}
		if !comparableInput(body) || !stdjson.Valid(body) {
			return
		}
		var ref struct {
			SelectionID *string `json:"selection_id"`
			WorkerID    *uint64 `json:"worker_id"`
		}
		exact, rerr := refExact(body, refReservationSchema)
		if rerr == errRefDuplicate && (err == nil || de.status != 422) {
			t.Fatalf("%q: a duplicate field not rejected with a 422: %v", body, err)
		}
		if rerr == nil {
			rerr = stdjson.Unmarshal(exact, &ref)
		}
		if err != nil {
			return
		}
		if rerr != nil {
			t.Fatalf("%q: the reference rejects (%v), scanner accepts", body, rerr)
		}
		if ref.SelectionID == nil || *ref.SelectionID != r.req.SelectionID || (ref.WorkerID != nil) != r.req.HasWorkerID ||
			(ref.WorkerID != nil && *ref.WorkerID != r.req.WorkerID) {
			t.Fatalf("%q: decoded %+v vs %+v", body, r.req, ref)
		}
	})
}

var coldSeeds = []string{
	`{"worker_id":1,"model_name":"m","endpoint":"http://w","block_size":16,"data_parallel_size":2,"kv_events_endpoints":{"0":"tcp://a:1","1":"tcp://a:2"},"taints":["x"],"topology_domains":{"zone":"a"},"is_eagle":false,"kv_transfer_preferred_weight":0.5}`,
	`{"worker_id":"1"}`, `{"kv_events_endpoints":{"x":"y"}}`, `{"decay_fraction":0.25}`, `{"decay_fraction":"x"}`, `{"endpoint":"tcp://h:1"}`, `{}`, `null`,
	`{"worker_id":1,"block_size":-1}`, `{"taints":null,"max_num_batched_tokens":18446744073709551615}`,
	`{"worker_id":1,"kv_transfer_enforcement":"preferred","kv_events_endpoints":{"01":"x"}}`, `{"worker_id":1,"kv_transfer_enforcement":"sometimes"}`,
	// Mixed case is another (unknown) key; a known key given twice is
	// serde's duplicate field; an unknown key given twice is ignored.
	`{"WORKER_ID":5,"endpoint":"x"}`, `{"Worker_Id":5,"worker_id":6}`, `{"DECAY_FRACTION":2}`, `{"Endpoint":"tcp://h:1"}`,
	`{"worker_id":1,"worker_id":2}`, `{"decay_fraction":0.5,"decay_fraction":0.5}`, `{"endpoint":"a","endpoint":"b"}`, `{"x":1,"x":2,"worker_id":1}`,
	`{"worker_id":1,"topology_domains":{"a":"1","a":"2"}}`, `{"taints":[],"TAINTS":null,"worker_id":1}`,
}

// coldCase is one cold route's body for the differential test: its decoder
// (the comparable result), its reference schema and type, and the checks
// serde makes that encoding/json does not (required fields, enum variants),
// turning the reference value into the decoder's result type.
type coldCase struct {
	decode func([]byte) (any, error)
	schema *refSchema
	newRef func() any
	want   func(ref any) (any, bool)
}

var coldCases = map[string]coldCase{
	"worker": {
		decode: func(b []byte) (any, error) { return decodeWorker(b) },
		schema: refWorkerSchema,
		newRef: func() any { return new(refWorker) },
		want: func(ref any) (any, bool) {
			r := ref.(*refWorker)
			if r.WorkerID == nil || !knownEnforcement(r.WorkerFields.KVTransferEnforcement) {
				return nil, false
			}
			return core.WorkerSpec{WorkerID: *r.WorkerID, ModelName: r.ModelName, RoutingGroup: r.RoutingGroup, WorkerFields: r.WorkerFields}, true
		},
	},
	"patch": {
		decode: func(b []byte) (any, error) { return decodePatch(b) },
		schema: refPatchSchema,
		newRef: func() any { return new(core.WorkerPatch) },
		want: func(ref any) (any, bool) {
			p := *ref.(*core.WorkerPatch)
			return p, knownEnforcement(p.KVTransferEnforcement)
		},
	},
	"output_block": {
		decode: func(b []byte) (any, error) { return decodeOutputBlock(b) },
		schema: refOutputBlockSchema,
		newRef: func() any { return new(refOutputBlock) },
		want:   func(ref any) (any, bool) { return ref.(*refOutputBlock).DecayFraction, true },
	},
	"peer": {
		decode: func(b []byte) (any, error) { return decodePeer(b) },
		schema: refPeerSchema,
		newRef: func() any { return new(refPeer) },
		want: func(ref any) (any, bool) {
			e := ref.(*refPeer).Endpoint
			if e == nil {
				return nil, false
			}
			return *e, true
		},
	},
}

type refOutputBlock struct {
	DecayFraction *float64 `json:"decay_fraction"`
}

type refPeer struct {
	Endpoint *string `json:"endpoint"`
}

// refWorker is WorkerRequest for encoding/json: worker_id's presence is
// visible.
type refWorker struct {
	WorkerID     *uint64 `json:"worker_id"`
	ModelName    string  `json:"model_name"`
	RoutingGroup string  `json:"routing_group"`
	core.WorkerFields
}

func knownEnforcement(e *string) bool { return e == nil || *e == "required" || *e == "preferred" }

// checkCold is the differential property of a cold body: the decoder and
// the reference accept and reject the same bodies, decode them alike, and
// classify errors as serde does (a duplicate field is a 422, valid JSON is
// not a 400 but for serde's own syntax errors on valid JSON).
func checkCold(t *testing.T, c coldCase, body []byte) {
	got, err := c.decode(body)
	var de *decodeError
	if err != nil && (!errors.As(err, &de) || (de.status != 400 && de.status != 422)) {
		t.Fatalf("%q: %v", body, err)
	}
	checkUTF8(t, body, err)
	if !comparableInput(body) {
		return
	}
	if !stdjson.Valid(body) {
		if err == nil {
			t.Fatalf("%q: invalid JSON accepted", body)
		}
		return
	}
	if err != nil && de.status == 400 && !validJSONSyntaxErr(de.msg) {
		t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
	}
	exact, rerr := refExact(body, c.schema)
	if rerr == errRefDuplicate && (err == nil || de.status != 422) {
		t.Fatalf("%q: a duplicate field not rejected with a 422: %v", body, err)
	}
	ref := c.newRef()
	if rerr == nil {
		rerr = stdjson.Unmarshal(exact, ref)
	}
	var want any
	ok := rerr == nil
	if ok {
		want, ok = c.want(ref)
	}
	switch {
	case !ok && err == nil:
		t.Fatalf("%q: the reference rejects (%v), the decoder accepts %+v", body, rerr, got)
	case ok && err != nil:
		t.Fatalf("%q: the reference accepts %+v, the decoder rejects: %v", body, want, err)
	case ok && !reflect.DeepEqual(got, want):
		t.Fatalf("%q: decoded %+v, the reference %+v", body, got, want)
	}
}

func fuzzCold(f *testing.F, name string) {
	for _, s := range coldSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCold(t, coldCases[name], body) })
}

func TestColdDecodeDifferential(t *testing.T) {
	for name, c := range coldCases {
		for _, s := range coldSeeds {
			t.Run(name, func(t *testing.T) { checkCold(t, c, []byte(s)) })
		}
	}
}

// FuzzWorkerBody: POST /workers.
func FuzzWorkerBody(f *testing.F) { fuzzCold(f, "worker") }

// FuzzWorkerPatchBody: PATCH /workers/{id}.
func FuzzWorkerPatchBody(f *testing.F) { fuzzCold(f, "patch") }

// FuzzOutputBlockBody: POST /reservations/{id}/output_block.
func FuzzOutputBlockBody(f *testing.F) { fuzzCold(f, "output_block") }

// FuzzPeerBody: POST /replica_sync/register_peer and deregister_peer.
func FuzzPeerBody(f *testing.F) { fuzzCold(f, "peer") }

// TestEncodeDifferential compares go-json's encoding of the cold responses
// with encoding/json's, and the hand encoder of SelectResponse with
// encoding/json's decoding of it.
func TestEncodeDifferential(t *testing.T) {
	ep, bs, w := "http://w\u2028<&>", uint32(16), 0.5
	rec := toWorkerJSON(core.WorkerRecord{WorkerID: 1, ModelName: "m\"", RoutingGroup: "g", Lifecycle: core.Schedulable,
		WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, KVTransferPreferredWeight: &w, Taints: []string{}, TopologyDomains: map[string]string{"b": "1", "a": "2"},
			KVEventsEndpoints: map[uint32]string{2: "x", 10: "y"}}, NotSchedulableReasons: []string{"r"}})
	for _, v := range []any{rec, []core.PotentialLoad{{WorkerID: 1, PotentialDecodeBlocks: -1}}, core.OverlapScores{Workers: []core.OverlapRow{{RouterCreditBlocks: 1.25}}, SharedCache: core.SharedCache{Ranges: [][2]int64{}}},
		core.Reservation{SelectionID: "\x01"}, []string{}} {
		g, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		s, err := stdjson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		// go-json escapes HTML like encoding/json by default; both must agree byte for byte.
		if !bytes.Equal(g, s) {
			t.Errorf("go-json %s\nencoding/json %s", g, s)
		}
	}
	o := core.Selection{SelectionID: "id\"\\\x00é", HasSelectionID: true, Booked: true, SequenceHashes: []uint64{1, 1 << 63}, ISLTokens: 5, ModelName: "m", RoutingGroup: "g",
		WorkerID: 1 << 63, DPRank: 3, Endpoint: "e", BlockSize: 16, Overlap: core.Overlap{LongestMatched: 3, DP: []core.RankTokens{{DPRank: 3, Tokens: 16}}},
		DecodeBusyKnown: true, HasWorkerLoad: true, WorkerLoad: core.WorkerLoadInfo{PrefillBusyKnown: true}}
	var back map[string]any
	if err := stdjson.Unmarshal(appendSelection(nil, &o, nil), &back); err != nil {
		t.Fatalf("%s: %v", appendSelection(nil, &o, nil), err)
	}
	if back["selection_id"] != o.SelectionID || back["sequence_hashes"].([]any)[1].(float64) != -9.223372036854775808e18 {
		t.Fatalf("round trip: %v", back)
	}
}
