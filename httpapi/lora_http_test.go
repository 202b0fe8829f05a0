package httpapi_test

import (
	"strings"
	"testing"
)

// TestLoraAdaptersOverHTTP: lora_adapters (kvselect's extension) is read
// by POST and PATCH /workers, shown by GET /workers as a set (omitted when
// empty), checked for its type, and narrows a request naming a lora_name.
func TestLoraAdaptersOverHTTP(t *testing.T) {
	h := start(t)
	h.want(h.do("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4}`), 201)
	h.want(h.do("POST", "/workers", `{"worker_id":2,"endpoint":"http://w2","block_size":4,"lora_adapters":["sql","chat","sql"]}`), 201)
	r := h.do("GET", "/workers", "")
	h.want(r, 200, `"lora_adapters":["chat","sql"]`)
	if strings.Count(r.raw, "lora_adapters") != 1 {
		t.Fatalf("a worker without adapters shows the field: %s", r.raw)
	}
	h.want(h.do("POST", "/workers", `{"worker_id":3,"endpoint":"http://w3","block_size":4,"lora_adapters":"sql"}`), 422, "lora_adapters", "expected a sequence")
	for range 20 {
		h.want(h.do("POST", "/select", `{"block_hashes":[1,2],"sequence_hashes":[5,6],"isl_tokens":8,"lora_name":"sql"}`), 200, `"worker_id":2`)
	}
	// A PATCH of null leaves the list; [] clears it.
	h.want(h.do("PATCH", "/workers/2", `{"lora_adapters":null}`), 200, `"lora_adapters":["chat","sql"]`)
	r = h.do("PATCH", "/workers/2", `{"lora_adapters":[]}`)
	h.want(r, 200)
	if strings.Contains(r.raw, "lora_adapters") {
		t.Fatalf("cleared list still shown: %s", r.raw)
	}
}

// TestDynamoMetricNames: /metrics carries Dynamo's router families under
// their names and labels (a Dynamo dashboard keeps working): per-worker
// booked load and registration, removed with the worker.
func TestDynamoMetricNames(t *testing.T) {
	h := start(t)
	h.want(h.do("POST", "/workers", `{"worker_id":7,"endpoint":"http://w7","block_size":4,"data_parallel_size":2}`), 201)
	h.want(h.do("POST", "/workers", `{"worker_id":9,"routing_group":"prefill","endpoint":"http://w9","block_size":4}`), 201)
	h.want(h.do("POST", "/reservations", `{"selection_id":"r","worker_id":7,"dp_rank":1,"sequence_hashes":[1,2,3],"isl_tokens":12}`), 201)
	m := h.do("GET", "/metrics", "").raw
	for _, want := range []string{
		"# TYPE dynamo_frontend_worker_active_prefill_tokens gauge",
		`dynamo_frontend_worker_active_prefill_tokens{worker_id="7",dp_rank="1",worker_type="decode"} 12`,
		`dynamo_frontend_worker_active_decode_blocks{worker_id="7",dp_rank="1",worker_type="decode"} 3`,
		`dynamo_frontend_worker_active_decode_blocks{worker_id="7",dp_rank="0",worker_type="decode"} 0`,
		`dynamo_component_router_worker_registered{router_worker_id="9",dp_rank="0",worker_type="prefill"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, m)
		}
	}
	h.want(h.do("DELETE", "/workers/9", ""), 200)
	if m := h.do("GET", "/metrics", "").raw; strings.Contains(m, `router_worker_id="9"`) {
		t.Fatal("a removed worker keeps its registration series")
	}
}
