package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
	"github.com/zeebo/xxh3"
)

func TestNotReady(t *testing.T) {
	h := start(t)
	r := h.do("GET", "/ready", "")
	h.want(r, 503, `"ready":false`, `"schedulable_workers":0`, `"workers":[]`)
	h.want(h.do("POST", "/select", `{"token_ids":[1,2,3,4]}`), 503, `"error":"no schedulable workers are available"`)
	h.want(h.do("GET", "/health", ""), 200, `{"status":"ok"}`)
	h.worker(1, "")
	h.want(h.do("GET", "/ready", ""), 200, `"ready":true`, `"schedulable_workers":1`)
	h.want(h.do("POST", "/select", `{"model_name":"other","token_ids":[1,2,3,4]}`), 503, "no schedulable workers for model=other routing_group=default")
}

func TestIncompleteWorkerWhenQueueing(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { q := 1.0; c.Sched.QueueThreshold = &q })
	r := h.do("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4}`)
	h.want(r, 201, `"lifecycle":"incomplete"`, "max_num_batched_tokens is required while queueing is enabled")
	h.want(h.do("POST", "/select", `{"token_ids":[1,2,3,4]}`), 503)
	h.want(h.do("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4,"max_num_batched_tokens":8192}`), 201, `"lifecycle":"schedulable"`)
}

func TestSelectEchoesIDAndDoesNotBook(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	r := h.do("POST", "/select", `{"selection_id":"s-1","model_name":"m","token_ids":[1,2,3,4],"tenant_id":"x"}`)
	h.want(r, 200, `"selection_id":"s-1"`, `"routing_group":"default"`, `"effective_prefill_tokens":4`, `"longest_matched":0`, `"dp":{"0":0}`, `"potential_decode_blocks":1`)
	for _, absent := range []string{"tenant_id", "sequence_hashes", "isl_tokens", "track_prefill_tokens", "decode_busy"} {
		if strings.Contains(r.raw, absent) {
			t.Fatalf("%s present in %s", absent, r.raw)
		}
	}
	if n := num(h.load("m", 1, 0)["active_requests"]); n != 0 {
		t.Fatalf("select booked: active_requests %d", n)
	}
	// Advisory select adds worker_load: the worker's booked prefill,
	// without this request's own prompt (0 on an idle worker, as the
	// reference reports).
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"advisory":true}`), 200, `"worker_load":{"active_prefill_tokens":0,"prefill_token_capacity":10000000}`)
	h.want(h.do("POST", "/select_and_reserve", `{"model_name":"m","token_ids":[9,9,9,9,9,9,9,9]}`), 200)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"advisory":true}`), 200, `"worker_load":{"active_prefill_tokens":8,"prefill_token_capacity":10000000}`)
}

func TestDecodeBusy(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { f := 0.5; c.Sched.DecodeBusyThreshold = &f })
	h.worker(1, `,"total_kv_blocks":2`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8]}`), 200, `"decode_busy":true`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4]}`), 200, `"decode_busy":false`)
}

func TestOverlapScoresRows(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	h.worker(2, `,"data_parallel_start_rank":2,"data_parallel_size":2`)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	local := radix.LocalHashes(nil, toks, 4, radix.HashSeed("", ""))
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 2, DPRank: 3}, Kind: radix.Stored}
	for _, l := range local {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: l ^ 7, Local: l})
	}
	h.svc.EventSink("m", "default").ApplyBatch([]radix.Event{ev})
	r := h.do("POST", "/overlap_scores", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8]}`)
	h.want(r, 200, `"block_size":4`, `"num_blocks":2`, `"shared_cache":{"enabled":false`)
	var rows []string
	for _, w := range r.obj()["workers"].([]any) {
		m := w.(map[string]any)
		rows = append(rows, fmt.Sprintf("%v/%v:%v", m["worker_id"], m["dp_rank"], m["device_blocks"]))
	}
	if got := strings.Join(rows, " "); got != "1/0:0 2/2:0 2/3:2" {
		t.Fatalf("rows %s", got)
	}
	r = h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9]}`)
	h.want(r, 200, `"worker_id":2`, `"dp_rank":3`, `"overlap":{"longest_matched":8,"gpu":8,"dp":{"3":8},"cpu":8,"disk":8}`, `"effective_prefill_tokens":1`)
	h.want(h.do("POST", "/potential_loads", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8]}`), 200, `{"worker_id":2,"dp_rank":3,"potential_prefill_tokens":0,"potential_decode_blocks":2,"active_requests":0}`)
	// /dump: key and block size, the events in the RouterEvent format.
	d := h.do("GET", "/dump", "")
	h.want(d, 200, `"m:default":{"block_size":4,"events":[{"worker_id":2,"storage_tier":"device"`)
}

func TestSelectAndReserve(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	toks := []uint32{1, 2, 3, 4}
	seq := radix.SequenceHashes(nil, radix.LocalHashes(nil, toks, 4, radix.HashSeed("", "")))
	r := h.do("POST", "/select_and_reserve", `{"selection_id":"r-1","model_name":"m","token_ids":[1,2,3,4]}`)
	h.want(r, 200, fmt.Sprintf(`"sequence_hashes":[%d]`, int64(seq[0])), `"isl_tokens":4`, `"track_prefill_tokens":true`)
	if l := h.load("m", 1, 0); num(l["potential_prefill_tokens"]) != 4 || num(l["active_requests"]) != 1 {
		t.Fatalf("load %v", l)
	}
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"r-1","model_name":"m","token_ids":[9,9,9,9]}`), 409, "selection r-1 is already reserved or being reserved")
	// Generated id.
	g := h.do("POST", "/select_and_reserve", `{"model_name":"m","token_ids":[1,2,3,4]}`)
	h.want(g, 200)
	if id, _ := g.obj()["selection_id"].(string); len(id) != 36 || id[14] != '4' {
		t.Fatalf("generated id %q is not a UUID v4", id)
	}
	h.want(h.do("POST", "/reservations/r-1/output_block", `{}`), 200, `{"status":"ok"}`)
	if l := h.load("m", 1, 0); num(l["potential_decode_blocks"]) != 2 {
		t.Fatalf("output block not counted: %v", l)
	}
	h.want(h.do("POST", "/reservations/r-1/output_block", `{"decay_fraction":1.5}`), 400, `{"error":"decay_fraction must be between 0.0 and 1.0"}`)
	h.want(h.do("POST", "/reservations/r-1/output_block", `{"decay_fraction":0.5}`), 200)
	h.want(h.do("POST", "/reservations/r-1/output_block", ``), 400, "Failed to parse the request body as JSON")
	h.want(h.do("POST", "/reservations/r-1/prefill_complete", ``, ""), 200, `{"status":"ok"}`)
	h.want(h.do("POST", "/reservations/r-1/prefill_complete", ``), 200)
	h.want(h.do("DELETE", "/reservations/r-1", ""), 200, `{"status":"ok"}`)
	h.want(h.do("DELETE", "/reservations/r-1", ""), 404, `{"error":"reservation r-1 not found"}`)
	h.want(h.do("POST", "/reservations/r-1/prefill_complete", ``), 404, "reservation r-1 not found")
	h.want(h.do("POST", "/reservations/r-1/output_block", `{}`), 404, "reservation r-1 not found")
}

func TestExplicitReservations(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	sel := h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4]}`)
	h.want(sel, 200)
	r := h.do("POST", "/reservations", `{"selection_id":"e-1","model_name":"m","worker_id":1,"dp_rank":0,"sequence_hashes":[21],"isl_tokens":4,"effective_prefill_tokens":3}`)
	h.want(r, 201, `{"selection_id":"e-1","model_name":"m","routing_group":"default","worker_id":1,"dp_rank":0,"endpoint":"http://w1"}`)
	if l := h.load("m", 1, 0); num(l["potential_prefill_tokens"]) != 3 {
		t.Fatalf("load %v", l)
	}
	h.want(h.do("POST", "/reservations", `{"selection_id":"e-2","model_name":"m","worker_id":1,"sequence_hashes":[21],"isl_tokens":4,"effective_prefill_tokens":5}`), 400, "effective_prefill_tokens (5) must not exceed isl_tokens (4)")
	h.want(h.do("POST", "/reservations", `{"selection_id":"e-2","model_name":"m","worker_id":9,"sequence_hashes":[21],"isl_tokens":4}`), 404, "schedulable worker 9 not found for model=m routing_group=default")
	// Explicit replay of booking facts with prefill tracking disabled books
	// no prefill.
	h.want(h.do("POST", "/reservations", `{"selection_id":"e-3","model_name":"m","worker_id":1,"sequence_hashes":[21],"isl_tokens":4,"effective_prefill_tokens":4,"track_prefill_tokens":false}`), 201)
	if l := h.load("m", 1, 0); num(l["potential_prefill_tokens"]) != 3 || num(l["active_requests"]) != 2 {
		t.Fatalf("load %v", l)
	}
	// Missing selection_id is a 422.
	r = h.do("POST", "/reservations", `{"model_name":"m","worker_id":1}`)
	h.want(r, 422, "missing field `selection_id`")
}

func TestCachedReplay(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	h.want(h.do("POST", "/select", `{"selection_id":"c-1","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	// A miss with another model does not consume.
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-1","model_name":"x"}`), 404, "no pending selection c-1 for model=x routing_group=default (expired, already used, or never selected)")
	// Request overrides are ignored on replay.
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-1","model_name":"m","effective_prefill_tokens":1,"dp_rank":5}`), 201, `"worker_id":1,"dp_rank":0`)
	if l := h.load("m", 1, 0); num(l["potential_prefill_tokens"]) != 4 {
		t.Fatalf("replay honoured an override: %v", l)
	}
	h.want(h.do("POST", "/reservations/c-1/prefill_complete", ""), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-1","model_name":"m"}`), 404, "no pending selection c-1")
	h.want(h.do("DELETE", "/reservations/c-1", ""), 200)

	// Retryable after a failure before the booking lands.
	h.want(h.do("POST", "/select", `{"selection_id":"c-2","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.want(h.do("DELETE", "/workers/1", ""), 200, `"lifecycle":"unschedulable"`)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-2","model_name":"m"}`), 503)
	h.worker(1, "")
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-2","model_name":"m"}`), 201)

	// Retryable after a conflict: 409, then 201 after the other booking is freed.
	h.want(h.do("POST", "/select", `{"selection_id":"c-3","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"c-3","model_name":"m","token_ids":[5,6,7,8]}`), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-3","model_name":"m"}`), 409)
	h.want(h.do("DELETE", "/reservations/c-3", ""), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-3","model_name":"m"}`), 201)

	// Stale dp rank: 404, then 201 after the range is restored.
	h.worker(2, `,"data_parallel_size":2`)
	h.want(h.do("POST", "/select", `{"selection_id":"c-4","model_name":"m","token_ids":[1,2,3,4],"pinned_worker":{"worker_id":2,"dp_rank":1}}`), 200, `"worker_id":2,"dp_rank":1`)
	h.want(h.do("PATCH", "/workers/2", `{"data_parallel_size":1}`), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-4","model_name":"m"}`), 404, "schedulable worker 2 (dp_rank 1) not found for model=m routing_group=default")
	h.want(h.do("PATCH", "/workers/2", `{"data_parallel_size":2}`), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-4","model_name":"m"}`), 201)

	// An explicit booking discards the cached selection.
	h.want(h.do("POST", "/select", `{"selection_id":"c-5","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-5","model_name":"m","worker_id":1,"sequence_hashes":[1],"isl_tokens":4}`), 201)
	h.want(h.do("DELETE", "/reservations/c-5", ""), 200)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-5","model_name":"m"}`), 404, "no pending selection c-5")

	// Expiry of the cache.
	h.want(h.do("POST", "/select", `{"selection_id":"c-6","model_name":"m","token_ids":[1,2,3,4]}`), 200)
	h.now = h.now.Add(121 * time.Second)
	h.want(h.do("POST", "/reservations", `{"selection_id":"c-6","model_name":"m"}`), 404)
}

func TestWorkersRoutes(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { c.UseKVEvents = true })
	r := h.do("POST", "/workers", `{"worker_id":7,"model_name":"m","endpoint":"http://w7","block_size":4,"kv_events_endpoint":"bogus"}`)
	h.want(r, 201, `"lifecycle":"incomplete"`, "reconciliation failed: invalid kv_events endpoint for worker 7 dp_rank 0")
	h.want(h.do("PATCH", "/workers/7", `{"kv_events_endpoint":"tcp://127.0.0.1:5557"}`), 200, `"lifecycle":"schedulable"`)
	h.want(h.do("PATCH", "/workers/8", `{}`), 404, `{"error":"worker 8 not found"}`)
	h.want(h.do("PATCH", "/workers/abc", `{}`), 400)
	h.want(h.do("POST", "/workers", `{"model_name":"m"}`), 422, "missing field `worker_id`")
	h.want(h.do("POST", "/workers", `{"worker_id":"x"}`), 422, "Failed to deserialize the JSON body")
	h.want(h.do("POST", "/workers", `{"worker_id":1,"kv_events_endpoint":"tcp://h:1","model_name":"a","endpoint":"http://w1","block_size":4}`), 201)
	r = h.do("GET", "/workers", "")
	h.want(r, 200)
	if len(r.arr()) != 2 || num(r.arr()[0].(map[string]any)["worker_id"]) != 1 {
		t.Fatalf("list order: %s", r.raw)
	}
	h.want(h.do("GET", "/workers?model_name=m", ""), 200, `"worker_id":7`)
	if r := h.do("GET", "/workers?model_name=zzz", ""); r.raw != "[]" {
		t.Fatalf("filter: %s", r.raw)
	}
	h.want(h.do("DELETE", "/workers/7", ""), 200, `"lifecycle":"unschedulable"`)
	h.want(h.do("DELETE", "/workers/7", ""), 404, "worker 7 not found")
	if r := h.do("GET", "/workers?model_name=m", ""); r.raw != "[]" {
		t.Fatalf("deleted worker still listed: %s", r.raw)
	}
}

func TestHashPathValidation(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	for body, msg := range map[string]string{
		`{"model_name":"m","sequence_hashes":[1],"isl_tokens":4}`:                      "block_hashes is required without token_ids",
		`{"model_name":"m","block_hashes":[1],"isl_tokens":4}`:                         "sequence_hashes is required without token_ids",
		`{"model_name":"m","block_hashes":[1],"sequence_hashes":[1]}`:                  "isl_tokens is required without token_ids",
		`{"model_name":"m","block_hashes":[1],"sequence_hashes":[1],"isl_tokens":0}`:   "isl_tokens must be greater than 0",
		`{"model_name":"m","block_hashes":[1,2],"sequence_hashes":[1],"isl_tokens":4}`: "block_hashes length 2 must match sequence_hashes length 1",
	} {
		h.want(h.do("POST", "/select", body), 400, msg)
	}
	h.want(h.do("POST", "/select", `{"model_name":"m","block_hashes":[-1,9223372036854775807],"sequence_hashes":[-9223372036854775808,2],"isl_tokens":8}`), 200)
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"neg","model_name":"m","block_hashes":[-1],"sequence_hashes":[-5],"isl_tokens":4}`), 200, `"sequence_hashes":[-5]`)
	h.want(h.do("POST", "/select", `{"model_name":"m","block_hashes":[18446744073709551615],"sequence_hashes":[1],"isl_tokens":4}`), 422, "expected i64")
	// A pin outside allowed_worker_ids is a 400; an unknown pin with no
	// allowed set has no endpoint to route to (503), as in Dynamo.
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"allowed_worker_ids":[1],"pinned_worker":{"worker_id":9,"dp_rank":0}}`), 400, "not in allowed worker set")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"pinned_worker":{"worker_id":9,"dp_rank":0}}`), 503, "pinned worker 9 is unavailable")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"pinned_worker":{"worker_id":1}}`), 422, "missing field `dp_rank`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"shared_cache_multiplier":2}}`), 400, "shared_cache_multiplier")
	// kvselect's routing_policy key: a known policy, an unknown one, a
	// wrong type.
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"routing_policy":"default"}}`), 200)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"routing_policy":"nope"}}`), 400, `unknown routing_policy \"nope\"`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"routing_policy":3}}`), 422, "routing_policy")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"allowed_worker_ids":[5]}`), 503, "no endpoints available to route work")
	// Nesting limit: serde's 128 on every route (the cold routes no longer
	// decode with go-json, whose own limit answered "exceeded max depth").
	deep := func(n int) string { return `{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	h.want(h.do("POST", "/select", deep(1000)), 400, "recursion limit exceeded")
	h.want(h.do("POST", "/workers", deep(1<<20)), 400, "recursion limit exceeded")
}

func TestErrorsAndFallbacks(t *testing.T) {
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.MaxRequestBodySize = 1 << 10 })
	h.want(h.do("GET", "/nope", ""), 404, `{"error":"route not found"}`)
	h.want(h.do("GET", "/workers/", ""), 404, "route not found")
	h.want(h.do("GET", "/select", ""), 405, `{"error":"method not allowed"}`)
	h.want(h.do("PUT", "/workers/1", "{}"), 405, "method not allowed")
	h.want(h.do("GET", "/reservations/x", ""), 405)
	h.want(h.do("POST", "/select", `{"token_ids":[1,2`), 400, "Failed to parse the request body as JSON")
	h.want(h.do("POST", "/select", `{"token_ids":"x"}`), 422, "Failed to deserialize the JSON body into the target type: token_ids")
	h.want(h.do("POST", "/select", `[]`), 422)

	h.want(h.do("POST", "/select", `{"token_ids":[1]}`, "text/plain"), 415, "Content-Type: application/json")
	h.want(h.do("POST", "/select", `{"token_ids":[1]}`, ""), 415)
	h.overLimit(1<<10 + 1)
}

func TestBodyLimitDefault8MiB(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	// Just under the limit passes the limit (and fails as a select of
	// padding), just over is 413.
	pad := func(n int) string {
		s := `{"model_name":"m","token_ids":[1,2,3,4],"pad":"`
		return s + strings.Repeat("x", n-len(s)-2) + `"}`
	}
	h.want(h.do("POST", "/select", pad(8<<20)), 200)
	h.overLimit(8<<20 + 1)
}

// overLimit sends the headers of a /select with an n-byte body and expects
// the 413. Over the limit the server answers from the headers and closes
// without reading the body, so a client still writing it may see a reset
// before the response: speak raw HTTP and send headers only.
func (h *harness) overLimit(n int) {
	h.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /select HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", n)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 413 || string(b) != `{"error":"Failed to buffer the request body: length limit exceeded"}` {
		h.t.Fatalf("over the limit: %d %s", res.StatusCode, b)
	}
}

func TestReplicaSyncRoutesDisabled(t *testing.T) {
	h := start(t)
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"tcp://h:9092"}`), 409, `{"error":"replica sync is disabled"}`)
	h.want(h.do("POST", "/replica_sync/deregister_peer", `{"endpoint":"tcp://h:9092"}`), 409, "replica sync is disabled")
	h.want(h.do("POST", "/replica_sync/register_peer", `{}`), 422, "missing field `endpoint`")
	if r := h.do("GET", "/replica_sync/peers", ""); r.status != 200 || r.raw != "[]" {
		t.Fatalf("peers: %d %s", r.status, r.raw)
	}
}

// TestMetricsNoPprof: /metrics counts the routes and the service; the
// public port serves no /debug/pprof (perf.DebugServer does, on a
// listener of its own).
func TestMetricsNoPprof(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	h.do("POST", "/select_and_reserve", `{"model_name":"m","token_ids":[1,2,3,4]}`)
	h.do("POST", "/select", `{"selection_id":"p","model_name":"m","token_ids":[1,2,3,4]}`)
	r := h.do("GET", "/metrics", "")
	h.want(r, 200,
		`kvselect_http_requests_total{route="POST /select_and_reserve",code="200"} 1`,
		`kvselect_http_request_duration_seconds_bucket{route="POST /select",le=`,
		`kvselect_selections_total{outcome="ok"} 2`,
		`kvselect_bookings_total{outcome="ok"} 1`,
		`kvselect_active_reservations 1`,
		`kvselect_pending_selections 1`,
		`kvselect_pending_selection_bytes 25`,
		// Without KV events the booking's block is predicted (approximate
		// index) and the pending selection keeps its local hash.
		`kvselect_index_blocks{tier="device"} 1`,
		`kvselect_approx_index_blocks{index="primary"} 1`,
		`kvselect_index_events_applied_total 0`,
		`kvselect_index_events_dropped_total{reason="hash_conflict"} 0`,
	)
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		h.want(h.do("GET", p, ""), 404, "route not found")
	}
}

// fakePeers is an in-memory peer manager.
type fakePeers struct{ set map[string]bool }

func (p *fakePeers) Register(ep string) (bool, error) {
	if !strings.HasPrefix(ep, "tcp://") {
		return false, &core.Error{Class: core.ErrBadRequest, Msg: "invalid replica peer endpoint " + ep}
	}
	if p.set[ep] {
		return false, nil
	}
	p.set[ep] = true
	return true, nil
}

func (p *fakePeers) Deregister(ep string) error {
	if !p.set[ep] {
		return &core.Error{Class: core.ErrNotFound, Msg: "peer not found"}
	}
	delete(p.set, ep)
	return nil
}

func (p *fakePeers) List() []string {
	var out []string
	for ep := range p.set {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

func TestReplicaSyncRoutesEnabled(t *testing.T) {
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.Peers = &fakePeers{set: map[string]bool{}} })
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"tcp://b:9092"}`), 201, `{"status":"ok"}`)
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"tcp://b:9092"}`), 200, `{"status":"ok"}`)
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"tcp://a:9092"}`), 201)
	h.want(h.do("POST", "/replica_sync/register_peer", `{"endpoint":"b:9092"}`), 400, "invalid replica peer endpoint")
	if r := h.do("GET", "/replica_sync/peers", ""); r.raw != `["tcp://a:9092","tcp://b:9092"]` {
		t.Fatalf("peers %s", r.raw)
	}
	h.want(h.do("POST", "/replica_sync/deregister_peer", `{"endpoint":"tcp://b:9092"}`), 200, `{"status":"ok"}`)
	h.want(h.do("POST", "/replica_sync/deregister_peer", `{"endpoint":"tcp://b:9092"}`), 404, `{"error":"peer not found"}`)
}

// TestBookingSequenceHashes: the booking response reports the booked
// tracking hashes as i64, whether echoed from the body (hash path) or
// formatted (tokens). A negative zero is serde's float -0.0: 422, nothing
// booked.
func TestBookingSequenceHashes(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	h.want(h.do("POST", "/select_and_reserve", `{"selection_id":"z","model_name":"m","block_hashes":[1,2,3],"sequence_hashes":[1,-0,2],"isl_tokens":16}`),
		422, "sequence_hashes: invalid type: floating point `-0.0`, expected i64")
	h.want(h.do("DELETE", "/reservations/z", ""), 404)
	for i, tc := range []struct{ seq, want string }{
		{`[ -5 ,7,  -9223372036854775808 ]`, "-5 7 -9223372036854775808"},
		{`[]`, ""},
	} {
		body := fmt.Sprintf(`{"selection_id":"h%d","model_name":"m","block_hashes":%s,"sequence_hashes":%s,"isl_tokens":16}`, i, tc.seq, tc.seq)
		r := h.do("POST", "/select_and_reserve", body)
		h.want(r, 200)
		var got []string
		for _, v := range r.obj()["sequence_hashes"].([]any) {
			got = append(got, v.(json.Number).String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: got %v (%s)", tc.seq, got, r.raw)
		}
	}
}

func TestInspectionErrors(t *testing.T) {
	h := start(t)
	h.want(h.do("POST", "/potential_loads", `{"token_ids":[1,2,3,4]}`), 503, "no schedulable workers are available")
	h.want(h.do("POST", "/overlap_scores", `{"token_ids":[1,2,3,4]}`), 503)
	h.want(h.do("GET", "/dump", ""), 200)
	if r := h.do("GET", "/dump", ""); r.raw != "{}" {
		t.Fatalf("empty dump %s", r.raw)
	}
	if r := h.do("GET", "/loads", ""); r.raw != "[]" {
		t.Fatalf("empty loads %s", r.raw)
	}
	h.worker(1, "")
	h.want(h.do("POST", "/potential_loads", `{"model_name":"m","block_hashes":[1]}`), 400, "sequence_hashes is required without token_ids")
	h.want(h.do("POST", "/overlap_scores", `{"model_name":"m","token_ids":[1,2,3,4],"router_config_override":{"router_temperature":-1}}`), 400, "router_temperature")
	h.want(h.do("POST", "/overlap_scores", `{"model_name":"m","token_ids":"x"}`), 422)
	h.want(h.do("GET", "/potential_loads", ""), 405)
	h.want(h.do("GET", "/loads?model_name=m&routing_group=default", ""), 200, `"model_name":"m","routing_group":"default","loads":[{"worker_id":1,"dp_rank":0,"potential_prefill_tokens":0,"potential_decode_blocks":0,"active_requests":0}],"pending_count":0,"pending_isl_tokens":0`)
	if r := h.do("GET", "/loads?routing_group=other", ""); r.raw != "[]" {
		t.Fatalf("filtered loads %s", r.raw)
	}
}

// TestPromptVariants: eagle windows and multimodal blocks change the local
// hashes (and so the match), as the reference's compute_block_hash_for_seq
// does (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs).
func TestPromptVariants(t *testing.T) {
	h := start(t)
	h.worker(1, "")
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	seed := radix.HashSeed("", "")
	store := func(local ...uint64) {
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored}
		for _, l := range local {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: l + 1, Local: l})
		}
		h.svc.EventSink("m", "default").ApplyBatch([]radix.Event{ev})
	}
	// Eagle: the first block covers tokens 1..5.
	store(radix.BlockHash(toks[0:5], seed))
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9],"is_eagle":true}`), 200, `"gpu":4`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,9]}`), 200, `"gpu":0`)
	// Multimodal: a block with an mm object hashes its mm hash too.
	var buf []byte
	for _, tk := range toks[:4] {
		buf = append(buf, byte(tk), 0, 0, 0)
	}
	buf = append(buf, 42, 0, 0, 0, 0, 0, 0, 0)
	store(xxh3.HashSeed(buf, seed))
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"block_mm_infos":[{"mm_objects":[{"mm_hash":42,"offsets":[[0,4]]}]}]}`), 200, `"gpu":4`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[9,9],"mm_routing_info":{"routing_token_ids":[1,2,3,4],"block_mm_infos":[{"mm_objects":[{"mm_hash":42,"offsets":[]}]}]}}`), 200, `"gpu":4`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"block_mm_infos":[null]}`), 200, `"gpu":0`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"block_mm_infos":[{"mm_objects":[{"mm_hash":-1}]}]}`), 422, "block_mm_infos")
}
