package httpapi_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// The /disagg routes over a real server on loopback: the prefill pool is
// the partition (m, prefill), the decode pool (m, decode), of one service.

// poolWorker registers worker id in routing group g of model m.
func (h *harness) poolWorker(id int, g, extra string) {
	h.t.Helper()
	body := fmt.Sprintf(`{"worker_id":%d,"model_name":"m","routing_group":%q,"endpoint":"http://%s%d","block_size":4%s}`, id, g, g[:1], id, extra)
	h.want(h.do("POST", "/workers", body), 201, `"lifecycle":"schedulable"`)
}

// active returns the active requests of a worker's rank 0 in partition
// (m, g), 0 when it has no row.
func (h *harness) active(g string, worker int) int64 {
	h.t.Helper()
	r := h.do("GET", "/loads?model_name=m&routing_group="+g, "")
	h.want(r, 200)
	for _, p := range r.arr() {
		for _, l := range p.(map[string]any)["loads"].([]any) {
			lm := l.(map[string]any)
			if num(lm["worker_id"]) == int64(worker) && num(lm["dp_rank"]) == 0 {
				return num(lm["active_requests"])
			}
		}
	}
	return 0
}

func (h *harness) wantLoads(prefill, decode int64) {
	h.t.Helper()
	if p, d := h.active("prefill", 1), h.active("decode", 2); p != prefill || d != decode {
		h.t.Fatalf("loads prefill=%d decode=%d, want %d/%d", p, d, prefill, decode)
	}
}

const planBody = `{"selection_id":"req-1","model_name":"m","token_ids":[1,2,3,4,5,6,7,8],"expected_output_tokens":16`

// TestDisaggLinkedPlan: the decode-anchored plan over HTTP, body for body:
// both legs booked and shown in /loads, prefill_complete frees the prefill
// leg (twice is a no-op), DELETE frees the rest, and the derived booking
// ids are gone from /reservations too (Dynamo's EPP test
// coordinator_links_prefill_and_decode_pools_and_headers_name_both).
func TestDisaggLinkedPlan(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", "")
	h.poolWorker(2, "decode", "")
	const prefill = `"prefill":{"selection_id":"req-1/prefill","routing_group":"prefill","worker_id":1,"dp_rank":0,"endpoint":"http://p1"},`
	const decode = `"decode":{"selection_id":"req-1/decode","routing_group":"decode","worker_id":2,"dp_rank":0,"endpoint":"http://d2"},`
	const tail = `"decision":{"policy_says_bypass":false,"bypass":false},"decode_signals":{"cached_tokens":0,"potential_decode_blocks":2}}`
	linked := `{"selection_id":"req-1","model_name":"m","order":"decode_anchored","state":"linked","transitions":["idle","decode_previewed","decode_committed","linked"],"bypass":false,` + prefill + decode + tail
	r := h.do("POST", "/disagg/plan", planBody+`}`)
	h.want(r, 200)
	if r.raw != linked {
		t.Fatalf("plan:\n got %s\nwant %s", r.raw, linked)
	}
	h.wantLoads(1, 1)
	if r := h.do("GET", "/disagg/req-1", ""); r.status != 200 || r.raw != linked {
		t.Fatalf("GET: %d %s", r.status, r.raw)
	}
	h.want(h.do("POST", "/disagg/req-1/prefill_complete", ""), 200, `{"status":"ok"}`)
	h.wantLoads(0, 1)
	h.want(h.do("POST", "/disagg/req-1/prefill_complete", `ignored`, "text/plain"), 200, `{"status":"ok"}`)
	released := `{"selection_id":"req-1","model_name":"m","order":"decode_anchored","state":"prefill_released","transitions":["idle","decode_previewed","decode_committed","linked","prefill_released"],"bypass":false,` + decode + tail
	if r := h.do("GET", "/disagg/req-1", ""); r.raw != released {
		t.Fatalf("after prefill_complete:\n got %s\nwant %s", r.raw, released)
	}
	h.want(h.do("DELETE", "/disagg/req-1", ""), 200, `{"status":"ok"}`)
	h.wantLoads(0, 0)
	h.want(h.do("DELETE", "/reservations/req-1%2Fdecode", ""), 404, `{"error":"reservation req-1/decode not found"}`)
	h.want(h.do("DELETE", "/reservations/req-1%2Fprefill", ""), 404)
	for _, c := range [][2]string{{"GET", ""}, {"DELETE", ""}, {"POST", "/prefill_complete"}, {"POST", "/plan_decode"}} {
		h.want(h.do(c[0], "/disagg/req-1"+c[1], ""), 404, `{"error":"plan req-1 not found"}`)
	}
}

// TestDisaggPrefillAnchoredDeferred: the frontend's shape, decode booked
// after the hand-off: plan_prefill alone, prefill_complete, plan_decode
// (the state stays prefill_released), a second plan_decode is a 409.
func TestDisaggPrefillAnchoredDeferred(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", "")
	h.poolWorker(2, "decode", "")
	r := h.do("POST", "/disagg/plan", planBody+`,"order":"prefill-anchored","defer_decode":true,"prefill_failure":"bypass_on_decode"}`)
	h.want(r, 200, `"order":"prefill_anchored","state":"prefill_committed","transitions":["idle","prefill_committed"]`, `"prefill":{"selection_id":"req-1/prefill"`)
	for _, absent := range []string{`"decode"`, `"decision"`, `"decode_signals"`} {
		if strings.Contains(r.raw, absent) {
			t.Fatalf("%s present in %s", absent, r.raw)
		}
	}
	h.wantLoads(1, 0)
	h.want(h.do("POST", "/disagg/req-1/prefill_complete", ""), 200)
	h.wantLoads(0, 0)
	r = h.do("POST", "/disagg/req-1/plan_decode", "")
	h.want(r, 200, `"state":"prefill_released","transitions":["idle","prefill_committed","prefill_released"]`, `"decode":{"selection_id":"req-1/decode","routing_group":"decode","worker_id":2`)
	h.wantLoads(0, 1)
	h.want(h.do("POST", "/disagg/req-1/plan_decode", ""), 409, `{"error":"plan is in state prefill_released; plan_decode needs a prefill booking and no decode booking"}`)
	h.want(h.do("DELETE", "/disagg/req-1", ""), 200)
	h.wantLoads(0, 0)
}

// TestDisaggPlanDecodeFailureRemovesPlan: a plan_decode that cannot book
// compensates (the prefill leg is freed) and the plan is gone.
func TestDisaggPlanDecodeFailureRemovesPlan(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", "")
	h.want(h.do("POST", "/disagg/plan", planBody+`,"order":"prefill_anchored","defer_decode":true}`), 200)
	h.wantLoads(1, 0)
	h.want(h.do("POST", "/disagg/req-1/plan_decode", ""), 503, `{"error":"decode booking failed: no schedulable workers for model=m routing_group=decode"}`)
	h.wantLoads(0, 0)
	h.want(h.do("GET", "/disagg/req-1", ""), 404, "plan req-1 not found")
}

// TestDisaggStatuses is the status table of the routes: each row one
// request, its status and its exact error.
func TestDisaggStatuses(t *testing.T) {
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.MaxRequestBodySize = 4096 })
	h.poolWorker(1, "prefill", "")
	h.poolWorker(2, "decode", "")
	const tok = `"model_name":"m","token_ids":[1,2,3,4]`
	// Live plans for the conflict rows: a linked plan, and a booking under
	// another plan's derived decode id.
	h.want(h.do("POST", "/disagg/plan", `{"selection_id":"live",`+tok+`}`), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"taken/decode","routing_group":"decode",`+tok+`}`), 200)
	for _, tc := range []struct {
		method, path, body string
		status             int
		err                string
	}{
		// JSON rejections.
		{"POST", "/disagg/plan", "", 400, "Failed to parse the request body as JSON: EOF while parsing a value at line 1 column 0"},
		{"POST", "/disagg/plan", `{"defer_decode":"yes"}`, 422, "Failed to deserialize the JSON body into the target type: defer_decode: invalid type: string, expected a boolean at line 1 column 21"},
		{"POST", "/disagg/plan", `{"order":"a","order":"b"}`, 422, "Failed to deserialize the JSON body into the target type: duplicate field `order` at line 1 column 20"},
		{"POST", "/disagg/plan", `{"pinned_prefill_worker":{"worker_id":1}}`, 422, "Failed to deserialize the JSON body into the target type: pinned_prefill_worker: missing field `dp_rank` at line 1 column 40"},
		{"POST", "/disagg/plan", "{\"model_name\":\"\xff\"}", 400, "Failed to parse the request body as JSON: invalid unicode code point at line 1 column 17"},
		{"POST", "/disagg/plan", `{"token_ids":[` + strings.Repeat("1,", 3000) + `1]}`, 413, "Failed to buffer the request body: length limit exceeded"},
		// Validation.
		{"POST", "/disagg/plan", `{"selection_id":"a/b",` + tok + `}`, 400, "selection_id must not contain '/'"},
		{"POST", "/disagg/plan", `{"selection_id":"",` + tok + `}`, 400, "selection_id must not be empty"},
		{"POST", "/disagg/plan", `{"prefill_routing_group":"g","decode_routing_group":"g",` + tok + `}`, 400, "prefill_routing_group and decode_routing_group must differ"},
		{"POST", "/disagg/plan", `{"defer_decode":true,` + tok + `}`, 400, "defer_decode requires order prefill_anchored"},
		{"POST", "/disagg/plan", `{"order":"decode",` + tok + `}`, 400, "order must be `decode_anchored` or `prefill_anchored`, got `decode`"},
		{"POST", "/disagg/plan", `{"prefill_failure":"retry",` + tok + `}`, 400, "prefill_failure must be `free_decode` or `bypass_on_decode`, got `retry`"},
		{"POST", "/disagg/plan", `{"model_name":"m","block_hashes":[1],"sequence_hashes":[1,2],"isl_tokens":8}`, 400, "decode preview failed: block_hashes length 1 must match sequence_hashes length 2"},
		{"POST", "/disagg/plan", `{"prefill_router_config_override":{"router_temperature":-1},` + tok + `}`, 400, "prefill_router_config_override: invalid router config: router_temperature must be finite and >= 0, got -1"},
		// The pools' own errors, wrapped by the coordinator.
		{"POST", "/disagg/plan", `{"model_name":"x","token_ids":[1]}`, 503, "decode preview failed: no schedulable workers for model=x routing_group=decode"},
		{"POST", "/disagg/plan", `{"prefill_routing_group":"none",` + tok + `}`, 503, "prefill booking failed: no schedulable workers for model=m routing_group=none"},
		{"POST", "/disagg/plan", `{"allowed_worker_ids":[1],` + tok + `}`, 503, "decode preview failed: no endpoints available to route work"},
		{"POST", "/disagg/plan", `{"pinned_prefill_worker":{"worker_id":9,"dp_rank":0},` + tok + `}`, 503, "prefill booking failed: no endpoints available to route work: pinned worker 9 is unavailable"},
		{"POST", "/disagg/plan", `{"selection_id":"taken",` + tok + `}`, 409, "decode booking failed: selection taken/decode is already reserved or being reserved"},
		// The registry.
		{"POST", "/disagg/plan", `{"selection_id":"live",` + tok + `}`, 409, "plan live already exists"},
		{"POST", "/disagg/live/plan_decode", "", 409, "plan is in state linked; plan_decode needs a prefill booking and no decode booking"},
		{"GET", "/disagg/nope", "", 404, "plan nope not found"},
		{"POST", "/disagg/nope/plan_decode", "", 404, "plan nope not found"},
		// Routing.
		{"GET", "/disagg/%FF", "", 400, "Invalid URL: Invalid UTF-8 in `selection_id`"},
		{"PUT", "/disagg/live", "", 405, "method not allowed"},
		{"GET", "/disagg/live/plan_decode", "", 405, "method not allowed"},
		{"POST", "/disagg/live/unknown", "", 404, "route not found"},
		{"POST", "/disagg/live/", "", 404, "route not found"},
		{"POST", "/disagg/", "", 404, "route not found"},
	} {
		r := h.do(tc.method, tc.path, tc.body)
		if r.status != tc.status || r.errText() != tc.err {
			t.Errorf("%s %s %.60s: %d %s, want %d %q", tc.method, tc.path, tc.body, r.status, r.raw, tc.status, tc.err)
		}
	}
	h.want(h.do("POST", "/disagg/plan", `{}`, "text/plain"), 415, "Expected request with `Content-Type: application/json`")
	// Nothing but the two live bookings is held after all of that.
	h.wantLoads(1, 2)
	h.want(h.do("GET", "/metrics", ""), 200,
		`kvselect_http_requests_total{route="POST /disagg/plan",code="200"} 1`,
		`kvselect_http_requests_total{route="POST /disagg/plan",code="409"} 2`,
		`kvselect_http_requests_total{route="POST /disagg/{selection_id}/plan_decode",code="404"} 1`,
		`kvselect_http_requests_total{route="GET /disagg/{selection_id}",code="400"} 1`,
		`kvselect_disagg_plans 1`, `kvselect_disagg_plans_limit 1048576`, `kvselect_disagg_plans_total{outcome="ok"} 1`)
	// Shutting down: planning fails before any pool call; lifecycle calls
	// keep working.
	h.svc.Close()
	h.want(h.do("POST", "/disagg/plan", `{`+tok+`}`), 503, `{"error":"selection service is shutting down"}`)
	h.want(h.do("POST", "/disagg/live/prefill_complete", ""), 200)
	h.want(h.do("DELETE", "/disagg/live", ""), 200)
	h.wantLoads(0, 1)
}

// TestDisaggMetadataFailsClosed: a decode worker naming a KV-transfer
// domain without an enforcement cannot constrain prefill: 503, and the
// decode leg is freed; with bypass_on_decode the plan succeeds on the
// decode worker alone. A complete record constrains prefill to the domain.
func TestDisaggMetadataFailsClosed(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", `,"topology_domains":{"zone":"a"},"taints":["dynamo.topology/zone=a"]`)
	h.poolWorker(3, "prefill", `,"topology_domains":{"zone":"b"},"taints":["dynamo.topology/zone=b"]`)
	h.poolWorker(2, "decode", `,"topology_domains":{"zone":"a"},"kv_transfer_domain":"zone"`)
	h.want(h.do("POST", "/disagg/plan", planBody+`}`), 503, `{"error":"worker 2 has kv_transfer_domain \"zone\" but no kv_transfer_enforcement"}`)
	h.wantLoads(0, 0)
	h.want(h.do("POST", "/disagg/plan", planBody+`,"prefill_failure":"bypass-on-decode"}`), 200,
		`"state":"bypass_after_prefill_failure"`, `"bypass":true`, `"decode":{"selection_id":"req-1/decode"`)
	h.wantLoads(0, 1)
	h.want(h.do("DELETE", "/disagg/req-1", ""), 200)
	h.poolWorker(2, "decode", `,"topology_domains":{"zone":"a"},"kv_transfer_domain":"zone","kv_transfer_enforcement":"required"`)
	for i := range 4 {
		id := fmt.Sprintf("zone-%d", i)
		r := h.do("POST", "/disagg/plan", `{"selection_id":"`+id+`","model_name":"m","token_ids":[1,2,3,4]}`)
		h.want(r, 200, `"prefill":{"selection_id":"`+id+`/prefill","routing_group":"prefill","worker_id":1,`)
		h.want(h.do("DELETE", "/disagg/"+url.PathEscape(id), ""), 200)
	}
}

// TestDisaggPlanIDsInPath: plan ids are path segments like reservation
// ids (percent-decoded), and "plan" is an id for every method but POST.
func TestDisaggPlanIDsInPath(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", "")
	h.poolWorker(2, "decode", "")
	for _, id := range []string{"a b", "50%", "é", "..", "plan"} {
		body := fmt.Sprintf(`{"selection_id":%q,"model_name":"m","token_ids":[1,2,3,4],"session_context":{"session_id":"s"},"session_id":"t"}`, id)
		h.want(h.do("POST", "/disagg/plan", body), 200)
		p := "/disagg/" + url.PathEscape(id)
		h.want(h.do("GET", p, ""), 200, `"state":"linked"`)
		h.want(h.do("POST", p+"/prefill_complete", ""), 200)
		h.want(h.do("DELETE", p, ""), 200)
		h.want(h.do("DELETE", p, ""), 404)
	}
	h.wantLoads(0, 0)
	// A generated id is a UUID v4.
	r := h.do("POST", "/disagg/plan", `{"model_name":"m","token_ids":[1,2,3,4]}`)
	h.want(r, 200)
	id, _ := r.obj()["selection_id"].(string)
	if len(id) != 36 || id[14] != '4' {
		t.Fatalf("generated id %q", id)
	}
	h.want(h.do("DELETE", "/disagg/"+id, ""), 200)
}

// TestDisaggPlanExpiry: a plan older than the reservation expiry (300 s)
// is released and removed by the sweep, its legs with it.
func TestDisaggPlanExpiry(t *testing.T) {
	h := start(t)
	h.poolWorker(1, "prefill", "")
	h.poolWorker(2, "decode", "")
	h.want(h.do("POST", "/disagg/plan", planBody+`}`), 200)
	h.now = h.now.Add(300 * time.Second)
	h.svc.Sweep(h.now)
	h.want(h.do("GET", "/disagg/req-1", ""), 200)
	h.now = h.now.Add(time.Second)
	h.svc.Sweep(h.now)
	h.want(h.do("GET", "/disagg/req-1", ""), 404, "plan req-1 not found")
	h.wantLoads(0, 0)
	h.want(h.do("GET", "/metrics", ""), 200, "kvselect_disagg_plans_expired_total 1", "kvselect_disagg_plans 0")
}
