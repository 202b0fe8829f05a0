package httpapi

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"reflect"
	"strconv"
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
	`{"pinned_worker":{"worker_id":1,"dp_rank":0},"routing_constraints":{"required_taints":["a"],"preferred_taints":{"b":0.5}}}`,
	`{"session_context":{"session_id":"x","input_trigger":"tool_result"},"mm_routing_info":{"routing_token_ids":[5,6]}}`,
	`{"block_hashes":[1.5]}`, `{"block_hashes":[1e3]}`, `{"token_ids":[-1]}`, `{"isl_tokens":"4"}`, `{"block_hashes":[99999999999999999999]}`,
	`{"a":1,}`, `{"a"}`, `[1]`, `"x"`, `{"model_name":"\ud83d\ude00"}`, `{"model_name":"\ud83d"}`, `{`, ``, `{"x":01}`, `{"x":tru}`,
	`{"block_hashes":[1,2 ,3 ] ,"sequence_hashes":[ -1 ]}`,
	`{"token_ids":[1,2,3,4,5],"is_eagle":true,"block_mm_infos":[null,{"mm_objects":[{"mm_hash":7,"offsets":[[0,2]]}]}]}`,
	`{"mm_routing_info":{"routing_token_ids":[1],"block_mm_infos":{}}}`, `{"token_ids":[007]}`, `{"allowed_worker_ids":[-0]}`, `{"priority_jump":1e400}`, `{"isl_tokens":-01}`,
}

// comparableInput reports whether the reference decoder's semantics match the
// reference service's on this input: valid UTF-8, no upper-case letters
// (encoding/json matches keys case-insensitively, serde does not), no
// escapes (an escaped key could spell a field name), modest nesting.
func comparableInput(b []byte) bool {
	if !utf8.Valid(b) || bytes.IndexByte(b, '\\') >= 0 || bytes.Count(b, []byte("[")) > 64 || bytes.Count(b, []byte("{")) > 64 {
		return false
	}
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
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
	// serde's one syntax error on valid JSON: a number beyond f64's range.
	if err != nil && de.status == 400 && !strings.Contains(de.msg, "number out of range") {
		t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
	}
	var ref refSelect
	refErr := stdjson.Unmarshal(body, &ref)
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
}

// FuzzReservationBody fuzzes the /reservations decoder: it never panics,
// syntax errors are 400, data errors 422, and a decoded request always has
// its required selection_id.
func FuzzReservationBody(f *testing.F) {
	for _, s := range reservationSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r reserveReq
		err := decodeReservation(body, &r)
		var de *decodeError
		if err != nil {
			if !errors.As(err, &de) || (de.status != 400 && de.status != 422) {
				t.Fatalf("%q: %v", body, err)
			}
			if comparableInput(body) && stdjson.Valid(body) && de.status == 400 && !strings.Contains(de.msg, "number out of range") {
				t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
			}
			return
		}
		if comparableInput(body) {
			var ref struct {
				SelectionID *string `json:"selection_id"`
				WorkerID    *uint64 `json:"worker_id"`
			}
			if rerr := stdjson.Unmarshal(body, &ref); rerr != nil {
				t.Fatalf("%q: encoding/json rejects (%v), scanner accepts", body, rerr)
			}
			if ref.SelectionID == nil || *ref.SelectionID != r.req.SelectionID || (ref.WorkerID != nil) != r.req.HasWorkerID {
				t.Fatalf("%q: decoded %+v vs %+v", body, r.req, ref)
			}
		}
	})
}

var coldSeeds = []string{
	`{"worker_id":1,"model_name":"m","endpoint":"http://w","block_size":16,"data_parallel_size":2,"kv_events_endpoints":{"0":"tcp://a:1","1":"tcp://a:2"},"taints":["x"],"topology_domains":{"zone":"a"},"is_eagle":false,"kv_transfer_preferred_weight":0.5}`,
	`{"worker_id":"1"}`, `{"kv_events_endpoints":{"x":"y"}}`, `{"decay_fraction":0.25}`, `{"decay_fraction":"x"}`, `{"endpoint":"tcp://h:1"}`, `{}`, `null`,
	`{"worker_id":1,"block_size":-1}`, `{"taints":null,"max_num_batched_tokens":18446744073709551615}`,
}

// fuzzCold is the differential test of go-json v0.12.0 against
// encoding/json on one cold route's body type: both accept or both reject,
// and accepted values are equal.
func fuzzCold(f *testing.F, newV func() any) {
	for _, s := range coldSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !comparableInput(body) {
			return
		}
		got, want := newV(), newV()
		gerr, werr := json.Unmarshal(body, got), stdjson.Unmarshal(body, want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q as %T: go-json %v, encoding/json %v", body, got, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q as %T: go-json %+v, encoding/json %+v", body, got, got, want)
		}
		// And the handler's classification: never a 400 for valid JSON.
		if err := decodeJSON(body, newV()); err != nil && stdjson.Valid(body) && err.(*decodeError).status == 400 {
			t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
		}
	})
}

// FuzzWorkerBody: POST /workers.
func FuzzWorkerBody(f *testing.F) { fuzzCold(f, func() any { return new(workerBody) }) }

// FuzzWorkerPatchBody: PATCH /workers/{id}.
func FuzzWorkerPatchBody(f *testing.F) { fuzzCold(f, func() any { return new(core.WorkerPatch) }) }

// FuzzOutputBlockBody: POST /reservations/{id}/output_block.
func FuzzOutputBlockBody(f *testing.F) { fuzzCold(f, func() any { return new(outputBlockBody) }) }

// FuzzPeerBody: POST /replica_sync/register_peer and deregister_peer.
func FuzzPeerBody(f *testing.F) { fuzzCold(f, func() any { return new(peerBody) }) }

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

func TestEightDigits(t *testing.T) {
	for _, s := range []string{"00000000", "12345678", "99999999", "10000001", "87654321"} {
		v, ok := eightDigits([]byte(s))
		want, _ := strconvParse(s)
		if !ok || v != want {
			t.Errorf("%s: %d %v", s, v, ok)
		}
	}
	for _, s := range []string{"1234567a", "/2345678", ":2345678", "1234 678", "-1234567"} {
		if _, ok := eightDigits([]byte(s)); ok {
			t.Errorf("%s accepted", s)
		}
	}
	// Every 19-digit boundary value round-trips through the array path.
	for _, v := range []int64{0, 1, -1, 12345678, 123456789, 1234567812345678, 9223372036854775807, -9223372036854775808, 1000000000000000000} {
		body := []byte(`{"block_hashes":[` + strconvFormat(v) + `]}`)
		var r selectReq
		if err := decodeSelect(body, &r); err != nil || len(r.req.BlockHashes) != 1 || int64(r.req.BlockHashes[0]) != v {
			t.Errorf("%d: %v %v", v, r.req.BlockHashes, err)
		}
	}
}

func strconvParse(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
func strconvFormat(v int64) string          { return strconv.FormatInt(v, 10) }
