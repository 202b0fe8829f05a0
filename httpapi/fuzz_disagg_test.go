package httpapi

import (
	stdjson "encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
)

// Differential tests of the /disagg/plan body and of the workers file
// against the reference decoder of ref_test.go (refExact, then
// encoding/json), as fuzz_test.go does for the other bodies.

var disaggSeeds = []string{
	`{"selection_id":"r","model_name":"m","prefill_routing_group":"p","decode_routing_group":"d","token_ids":[1,2,3],"expected_output_tokens":16}`,
	`{"order":"prefill-anchored","defer_decode":true,"prefill_failure":"BYPASS_ON_DECODE","allowed_worker_ids":[1,18446744073709551615]}`,
	`{"pinned_prefill_worker":{"worker_id":1,"dp_rank":0},"affinity_target":{"worker_id":2},"session_context":{"session_id":"s"},"session_id":"t"}`,
	`{"routing_constraints":{"required_taints":["a"],"preferred_taints":{"b":0.5}},"prefill_router_config_override":{"router_temperature":0},"decode_router_config_override":null}`,
	`{"order":"sideways"}`, `{"selection_id":""}`, `{"selection_id":null,"order":null,"defer_decode":null}`, `{"defer_decode":1}`,
	`{"order":"a","order":"b"}`, `{"ORDER":"x","Order":1}`, `{"pinned_prefill_worker":{"worker_id":1}}`, `{"affinity_target":{"dp_rank":1}}`,
	`{"block_hashes":[1],"sequence_hashes":[2],"isl_tokens":4,"expected_output_tokens":4294967296}`, `{"token_ids":[1.5]}`, `[]`, `{`, ``,
}

type refDisagg struct {
	SelectionID          *string   `json:"selection_id"`
	ModelName            *string   `json:"model_name"`
	PrefillRoutingGroup  *string   `json:"prefill_routing_group"`
	DecodeRoutingGroup   *string   `json:"decode_routing_group"`
	Order                *string   `json:"order"`
	PrefillFailure       *string   `json:"prefill_failure"`
	DeferDecode          *bool     `json:"defer_decode"`
	ExpectedOutputTokens *uint32   `json:"expected_output_tokens"`
	AllowedWorkerIDs     *[]uint64 `json:"allowed_worker_ids"`
	TokenIDs             *[]uint32 `json:"token_ids"`
}

var refDisaggSchema = func() *refSchema {
	sub := map[string]*refSchema{
		"pinned_prefill_worker":          refWorkerRank,
		"prefill_router_config_override": refPromptSub["router_config_override"],
		"decode_router_config_override":  refPromptSub["router_config_override"],
	}
	for k, v := range refPromptSub {
		sub[k] = v
	}
	own := []string{"selection_id", "model_name", "prefill_routing_group", "decode_routing_group", "expected_output_tokens",
		"session_context", "session_id", "affinity_target", "pinned_prefill_worker", "allowed_worker_ids", "routing_constraints",
		"prefill_router_config_override", "decode_router_config_override", "order", "prefill_failure", "defer_decode"}
	return &refSchema{fields: append(slices.Clone(promptFields), own...), sub: sub, elems: refPromptElems}
}()

// checkDisagg: syntax errors agree with encoding/json, a duplicate field
// is a 422, a body the reference rejects is rejected, and an accepted body
// decodes as the reference does; the only 400s on valid JSON are serde's
// and the validation of an empty id and of the two names.
func checkDisagg(t *testing.T, body []byte) {
	r := new(disaggReq)
	err := decodeDisagg(body, r)
	checkUTF8(t, body, err)
	var de *decodeError
	if err != nil && (!errors.As(err, &de) || (de.status != 400 && de.status != 422)) {
		t.Fatalf("%q: %v", body, err)
	}
	if !comparableInput(body) {
		return
	}
	if !stdjson.Valid(body) {
		if err == nil {
			t.Fatalf("%q: invalid JSON accepted", body)
		}
		return
	}
	validation := err != nil && de.status == 400 && !strings.HasPrefix(de.msg, syntaxPrefix)
	if err != nil && de.status == 400 && !validation && !validJSONSyntaxErr(de.msg) {
		t.Fatalf("%q: valid JSON reported as a syntax error: %v", body, err)
	}
	exact, rerr := refExact(body, refDisaggSchema)
	if rerr == errRefDuplicate && (err == nil || de.status != 422) {
		t.Fatalf("%q: a duplicate field not rejected with a 422: %v", body, err)
	}
	var ref refDisagg
	if rerr == nil {
		rerr = stdjson.Unmarshal(exact, &ref)
	}
	if err != nil {
		return
	}
	if rerr != nil {
		t.Fatalf("%q: the reference rejects (%v), the scanner accepts", body, rerr)
	}
	q := &r.req
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	order, _ := core.ParseDisaggOrder(str(ref.Order))
	failure, _ := core.ParsePrefillFailurePolicy(str(ref.PrefillFailure))
	if str(ref.SelectionID) != q.SelectionID || str(ref.ModelName) != q.ModelName || str(ref.PrefillRoutingGroup) != q.PrefillRoutingGroup ||
		str(ref.DecodeRoutingGroup) != q.DecodeRoutingGroup || order != q.Order || failure != q.PrefillFailure ||
		(ref.DeferDecode != nil && *ref.DeferDecode) != q.DeferDecode ||
		(ref.ExpectedOutputTokens != nil) != q.HasExpectedOutputTokens || (ref.AllowedWorkerIDs != nil) != q.HasAllowedWorkerIDs ||
		(ref.TokenIDs != nil) != q.HasTokenIDs {
		t.Fatalf("%q: decoded %+v, the reference %+v", body, *q, ref)
	}
	if ref.AllowedWorkerIDs != nil && !slicesEq(*ref.AllowedWorkerIDs, q.AllowedWorkerIDs) || ref.TokenIDs != nil && !slicesEq(*ref.TokenIDs, q.TokenIDs) {
		t.Fatalf("%q: arrays differ: %+v vs %+v", body, *q, ref)
	}
}

func TestDisaggDecodeDifferential(t *testing.T) {
	for _, s := range disaggSeeds {
		checkDisagg(t, []byte(s))
	}
}

// FuzzDisaggBody: POST /disagg/plan.
func FuzzDisaggBody(f *testing.F) {
	for _, s := range disaggSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDisagg)
}

var workersFileSeeds = []string{
	`{"workers":[]}`, `{"workers":[{"worker_id":1,"model_name":"m","routing_group":"prefill","endpoint":"http://p1:8000","block_size":16,"kv_events_endpoints":{"0":"tcp://p1:5557"},"topology_domains":{"zone":"a"},"taints":["dynamo.topology/zone=a"],"kv_transfer_domain":"zone","kv_transfer_enforcement":"required"}],"version":3}`,
	`{"workers":[{"worker_id":1},{"worker_id":1}]}`, `{"workers":[{"endpoint":"x"}]}`, `{"workers":null}`, `{}`, `{"workers":[null]}`, `[]`,
	`{"workers":[{"worker_id":1,"block_size":"16"}]}`, `{"workers":[{"worker_id":2,"kv_transfer_enforcement":"maybe"}]}`, `{"workers":[],"workers":[]}`,
	`{"workers":[{"worker_id":1,"taints":null}]}`, `{"workers":[{"worker_id":1,"endpoint":"a","endpoint":"b"}]}`, `{"Workers":[{"worker_id":1}]}`,
}

type refWorkersFile struct {
	Workers *[]refWorker `json:"workers"`
}

var refWorkersFileSchema = &refSchema{fields: []string{"workers"}, elems: map[string]*refSchema{"workers": refWorkerSchema}, nonNull: []string{"workers"}}

// checkWorkersFile: the file is accepted exactly when every entry would be
// a valid POST /workers body, worker ids unique, and decodes as the
// reference does.
func checkWorkersFile(t *testing.T, body []byte) {
	got, err := DecodeWorkersFile(body)
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
	exact, rerr := refExact(body, refWorkersFileSchema)
	var ref refWorkersFile
	if rerr == nil {
		rerr = stdjson.Unmarshal(exact, &ref)
	}
	var want []core.WorkerSpec
	ok := rerr == nil && ref.Workers != nil
	ids := map[uint64]bool{}
	for i := 0; ok && i < len(*ref.Workers); i++ {
		w := (*ref.Workers)[i]
		ok = w.WorkerID != nil && !ids[*w.WorkerID] && knownEnforcement(w.KVTransferEnforcement)
		if ok {
			ids[*w.WorkerID] = true
			want = append(want, core.WorkerSpec{WorkerID: *w.WorkerID, ModelName: w.ModelName, RoutingGroup: w.RoutingGroup, WorkerFields: w.WorkerFields})
		}
	}
	switch {
	case !ok && err == nil:
		t.Fatalf("%q: the reference rejects (%v), the decoder accepts %+v", body, rerr, got)
	case ok && err != nil:
		t.Fatalf("%q: the reference accepts %+v, the decoder rejects: %v", body, want, err)
	case ok && len(want) == 0 && len(got) == 0:
	case ok && !reflect.DeepEqual(got, want):
		t.Fatalf("%q: decoded %+v, the reference %+v", body, got, want)
	}
}

func TestWorkersFileDecodeDifferential(t *testing.T) {
	for _, s := range workersFileSeeds {
		checkWorkersFile(t, []byte(s))
	}
}

// FuzzWorkersFile: the --workers-file contents.
func FuzzWorkersFile(f *testing.F) {
	for _, s := range workersFileSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkWorkersFile)
}

// TestWorkersFileErrors: the messages an operator reads in the log.
func TestWorkersFileErrors(t *testing.T) {
	for body, want := range map[string]string{
		`{"workers":[{"worker_id":7},{"worker_id":7}]}`:                "duplicate worker_id 7",
		"{\"workers\":[\n {\"worker_id\":1},\n {\"endpoint\":\"x\"}]}": "workers[1]: missing field `worker_id` at line 3 column 17",
		`{"workers":[{"worker_id":1,"block_size":"16"}]}`:              "workers[0].block_size: invalid type: string, expected u32 at line 1 column 44",
		`{"workers":[{"worker_id":1,"endpoint":"a","endpoint":"b"}]}`:  "workers[0]: duplicate field `endpoint` at line 1 column 52",
		`{"workers":null}`: "workers: invalid type: null, expected a sequence at line 1 column 15",
		`{"hosts":[]}`:     "missing field `workers` at line 1 column 12",
		`{"workers":[}`:    "invalid JSON: expected value at line 1 column 12",
	} {
		if _, err := DecodeWorkersFile([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	specs, err := DecodeWorkersFile([]byte(`{"workers":[{"worker_id":1,"model_name":"m","routing_group":"decode"},{"worker_id":2}]}`))
	if err != nil || len(specs) != 2 || specs[0].RoutingGroup != "decode" || specs[1].WorkerID != 2 {
		t.Fatalf("%+v %v", specs, err)
	}
}

// TestCoordinatorErrorStatuses: a coordinator error answers its inner
// error's status (the classes no HTTP test can reach yet included: an
// overloaded pool is a 429, an internal error a 500), InvalidState 409,
// incomplete KV-transfer metadata 503.
func TestCoordinatorErrorStatuses(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{&core.CoordinatorError{Failure: core.DecodeCommitFailed, Err: &core.Error{Class: core.ErrOverloaded, Msg: "all workers are busy"}}, 429},
		{&core.CoordinatorError{Failure: core.PrefillCommitFailed, Err: &core.Error{Class: core.ErrInternal, Msg: "x"}}, 500},
		{&core.CoordinatorError{Failure: core.DecodePreviewFailed, Err: &core.Error{Class: core.ErrBadRequest, Msg: "x"}}, 400},
		{&core.CoordinatorError{Failure: core.DecodePreviewFailed, Err: &core.Error{Class: core.ErrNotFound, Msg: "x"}}, 404},
		{&core.CoordinatorError{Failure: core.InvalidPlanState, State: core.PlanLinked}, 409},
		{&core.CoordinatorError{Failure: core.MissingPreferredWeight, WorkerID: 1}, 503},
	} {
		if got := statusOf(tc.err); got != tc.status {
			t.Errorf("%v: %d, want %d", tc.err, got, tc.status)
		}
	}
}
