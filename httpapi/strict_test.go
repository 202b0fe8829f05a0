package httpapi_test

import (
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// TestKeysAreCaseSensitive: serde matches JSON keys exactly, so a key in
// another case is an unknown field (ignored) on every route, the cold ones
// included; go-json's case-insensitive matching registered
// {"WORKER_ID": 5} as worker 5 where the reference answers 422.
func TestKeysAreCaseSensitive(t *testing.T) {
	h := start(t)
	h.want(h.do("POST", "/workers", `{"WORKER_ID":5,"endpoint":"http://w5","block_size":4}`), 422,
		"Failed to deserialize the JSON body into the target type: missing field `worker_id` at line 1 column 53")
	if r := h.do("GET", "/workers", ""); r.raw != "[]" {
		t.Fatalf("a mixed-case key registered a worker: %s", r.raw)
	}
	h.want(h.do("POST", "/workers", `{"worker_id":1,"Model_Name":"other","endpoint":"http://w1","block_size":4,"BLOCK_SIZE":"x"}`), 201,
		`"model_name":"default"`, `"block_size":4`)
	h.want(h.do("PATCH", "/workers/1", `{"Block_Size":"not a number","ENDPOINT":7}`), 200, `"block_size":4`, `"endpoint":"http://w1"`)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"c","token_ids":[1,2,3,4],"Router_Config_Override":{"router_temperature":-1},"router_config_override":{"ROUTER_TEMPERATURE":-1}}`), 200)
	h.want(h.do("POST", "/reservations/c/output_block", `{"DECAY_FRACTION":2}`), 200, `{"status":"ok"}`)
	h.want(h.do("POST", "/reservations", `{"SELECTION_ID":"c"}`), 422, "missing field `selection_id`")
	h.want(h.do("POST", "/replica_sync/register_peer", `{"Endpoint":"tcp://h:1"}`), 422, "missing field `endpoint`")
	h.want(h.do("POST", "/select", `{"token_ids":[1,2,3,4],"pinned_worker":{"WORKER_ID":1,"dp_rank":0}}`), 422, "pinned_worker: missing field `worker_id`")
}

// TestDuplicateFields: a known field given twice is serde's data error
// "duplicate field `x`" (422), positioned after the repeated key, on every
// route and in nested structs; an unknown field may repeat, and a map's
// repeated key keeps the last value.
func TestDuplicateFields(t *testing.T) {
	h := start(t)
	const dup = "Failed to deserialize the JSON body into the target type: "
	h.want(h.do("POST", "/workers", `{"worker_id":1,"worker_id":2}`), 422, `{"error":"`+dup+"duplicate field `worker_id` at line 1 column 26\"}")
	h.want(h.do("POST", "/workers", `{"worker_id":1,"endpoint":"a","block_size":4,"endpoint" :"b"}`), 422, dup+"duplicate field `endpoint` at line 1 column 56")
	if r := h.do("GET", "/workers", ""); r.raw != "[]" {
		t.Fatalf("a body with a duplicate field registered a worker: %s", r.raw)
	}
	h.worker(1, `,"x":1,"x":[2],"topology_domains":{"zone":"a","zone":"b"}`)
	h.want(h.do("GET", "/workers", ""), 200, `"topology_domains":{"zone":"b"}`)
	h.want(h.do("PATCH", "/workers/1", `{"taints":[],"taints":["a"]}`), 422, dup+"duplicate field `taints`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"model_name":"m"}`), 422, dup+"duplicate field `model_name` at line 1 column 52")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"token_ids":[1,2,3,4]}`), 422, dup+"duplicate field `token_ids`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"pinned_worker":{"worker_id":1,"dp_rank":0,"dp_rank":0}}`), 422,
		dup+"pinned_worker: duplicate field `dp_rank`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"router_temperature":0,"router_temperature":0}}`), 422,
		dup+"router_config_override: duplicate field `router_temperature`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"block_mm_infos":[{"mm_objects":[],"mm_objects":[]}]}`), 422,
		dup+"block_mm_infos[0]: duplicate field `mm_objects`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"routing_constraints":{"preferred_taints":{"a":1,"a":2}},"y":0,"y":0}`), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"a","selection_id":"b","model_name":"m","token_ids":[1,2,3,4]}`), 422, dup+"duplicate field `selection_id`")
	h.want(h.do("POST", "/potential_loads", `{"model_name":"m","model_name":"m","token_ids":[1,2,3,4]}`), 422, dup+"duplicate field `model_name`")
	// selection_id is not a field of PotentialLoadsRequest: ignored, even twice.
	h.want(h.do("POST", "/potential_loads", `{"model_name":"m","token_ids":[1,2,3,4],"selection_id":1,"selection_id":2}`), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"r","selection_id":"r"}`), 422, dup+"duplicate field `selection_id`")
	h.want(h.do("POST", "/reservations/r/output_block", `{"decay_fraction":0.5,"decay_fraction":0.5}`), 422, dup+"duplicate field `decay_fraction`")
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"tcp://h:1","endpoint":"tcp://h:2"}`), 422, dup+"duplicate field `endpoint`")
}

// TestInvalidUTF8Rejected: a string that is not UTF-8 is serde's 400
// "invalid unicode code point" on every route, in a value, a key or an
// unknown field alike (go-json stored it as U+FFFD on POST /workers); a
// path segment that does not decode to UTF-8 is axum's 400 "Invalid URL:
// Invalid UTF-8 in `param`".
func TestInvalidUTF8Rejected(t *testing.T) {
	h := start(t)
	const bad = "Failed to parse the request body as JSON: invalid unicode code point at line 1 column "
	for _, c := range []struct{ method, path, body, col string }{
		{"POST", "/workers", "{\"worker_id\":1,\"model_name\":\"m\xff\"}", "32"},
		{"POST", "/workers", "{\"worker_id\":1,\"x\xff\":1}", "19"},
		{"POST", "/workers", "{\"worker_id\":1,\"x\":[{\"y\":\"\xc3\"}]}", "28"},
		{"POST", "/workers", "{\"worker_id\":1,\"taints\":[\"\xed\xa0\x80\"]}", "30"},
		{"PATCH", "/workers/1", "{\"endpoint\":\"\xff\"}", "15"},
		{"POST", "/select", "{\"model_name\":\"\xff\",\"token_ids\":[1]}", "17"},
		{"POST", "/select_and_reserve", "{\"model_name\":\"m\",\"token_ids\":[1],\"z\":\"\xfe\"}", "41"},
		{"POST", "/potential_loads", "{\"lora_name\":\"\xff\",\"token_ids\":[1]}", "16"},
		{"POST", "/overlap_scores", "{\"cache_salt\":\"\xff\",\"token_ids\":[1]}", "17"},
		{"POST", "/reservations", "{\"selection_id\":\"\xff\"}", "19"},
		{"POST", "/reservations/r/output_block", "{\"\xff\":1}", "4"},
		{"POST", "/replica_sync/register_peer", "{\"endpoint\":\"tcp://\xff:1\"}", "23"},
	} {
		h.want(h.do(c.method, c.path, c.body), 400, `{"error":"`+bad+c.col+`"}`)
	}
	if r := h.do("GET", "/workers", ""); r.raw != "[]" {
		t.Fatalf("a body with invalid UTF-8 registered a worker: %s", r.raw)
	}
	h.want(h.do("DELETE", "/reservations/%FF", ""), 400, `{"error":"Invalid URL: Invalid UTF-8 in `+"`selection_id`"+`"}`)
	h.want(h.do("POST", "/reservations/a%C3/prefill_complete", ""), 400, "Invalid UTF-8 in `selection_id`")
	h.want(h.do("POST", "/reservations/%FF/output_block", "{}"), 400, "Invalid UTF-8 in `selection_id`")
	h.want(h.do("DELETE", "/workers/%FF", ""), 400, "Invalid URL: Invalid UTF-8 in `worker_id`")
}

// TestErrorEchoIsCapped: an error message quotes at most 256 bytes of the
// request (with an ellipsis), however long the offending token.
func TestErrorEchoIsCapped(t *testing.T) {
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.MaxRequestBodySize = 4 << 20 })
	huge := strings.Repeat("9", 1<<20)
	long := strings.Repeat("é", 1<<16)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/workers", `{"worker_id":` + huge + `}`, "worker_id: invalid value: integer `999"},
		{"POST", "/workers", `{"worker_id":1,"block_size":1.` + huge + `}`, "block_size: invalid type: floating point `1.999"},
		{"POST", "/workers", `{"worker_id":1,"kv_transfer_enforcement":"` + long + `"}`, "unknown variant `éé"},
		{"POST", "/workers", `{"worker_id":1,"kv_events_endpoints":{"` + huge + `":"x"}}`, "kv_events_endpoints: invalid value: integer `999"},
		{"POST", "/select", `{"token_ids":[` + huge + `]}`, "token_ids: invalid value: integer `999"},
		{"POST", "/select", `{"block_hashes":[-` + huge + `]}`, "block_hashes: invalid value: integer `-999"},
		{"POST", "/select", `{"token_ids":[1],"session_context":{"session_id":"s","input_trigger":"` + long + `"}}`, "unknown variant `éé"},
		{"POST", "/reservations", `{"selection_id":"r","worker_id":` + huge + `}`, "worker_id: invalid value: integer `999"},
		{"PATCH", "/workers/" + strings.Repeat("7", 3000), `{}`, "Invalid URL: Cannot parse `777"},
	} {
		r := h.do(c.method, c.path, c.body)
		if r.status != 400 && r.status != 422 {
			t.Fatalf("%s %s: status %d", c.method, c.path, r.status)
		}
		msg := r.errText()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, "…") || len(msg) > 600 {
			t.Errorf("%s %s: a %d-byte message, want it capped and quoting %q: %.300s", c.method, c.path, len(msg), c.want, msg)
		}
	}
}
