package httpapi_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

func withAffinity(mode core.AffinityMode) opt {
	return func(c *core.Config, _ *httpapi.Config) {
		c.SessionAffinity = core.AffinityConfig{TTL: time.Minute, Mode: mode}
	}
}

// TestSessionAffinityHTTP: session_context (whole, agent headers included)
// binds a session on select_and_reserve and steers later bookings; the
// legacy session_id names the same session; a /select only reads; the
// reference's 400s.
func TestSessionAffinityHTTP(t *testing.T) {
	h := start(t, withAffinity(core.AffinityHard))
	h.worker(1, "")
	h.worker(2, "")
	r := h.do("POST", "/select_and_reserve", `{"model_name":"m","selection_id":"a","token_ids":[1,2,3,4],
		"session_context":{"session_id":"s","parent_session_id":"p","session_final":false,"input_trigger":"tool_result",
		"agent_headers":{"x-claude-code-request-class":["subagent"],"x-two":["a","b"]}}}`)
	h.want(r, 200)
	bound := num(r.obj()["worker_id"])
	other := 3 - bound
	// Load the bound worker: an unsteered booking would go elsewhere.
	h.want(h.do("POST", "/select_and_reserve", fmt.Sprintf(`{"model_name":"m","selection_id":"hog","token_ids":[9,9,9,9,9,9,9,9],"pinned_worker":{"worker_id":%d,"dp_rank":0}}`, bound)), 200)
	for i, body := range []string{
		`{"model_name":"m","token_ids":[5,6,7,8],"session_id":"s"}`,
		`{"model_name":"m","token_ids":[5,6,7,8],"session_id":"other","session_context":{"session_id":"s"}}`,
	} {
		h.want(h.do("POST", "/select", body), 200, fmt.Sprintf(`"worker_id":%d`, bound))
		b := strings.Replace(body, `{"model_name"`, fmt.Sprintf(`{"selection_id":"b%d","model_name"`, i), 1)
		h.want(h.do("POST", "/select_and_reserve", b), 200, fmt.Sprintf(`"worker_id":%d`, bound))
	}
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[5,6,7,8],"session_id":"fresh"}`), 200, fmt.Sprintf(`"worker_id":%d`, other))
	// An explicit affinity_target takes the session out and steers itself.
	h.want(h.do("POST", "/select_and_reserve", fmt.Sprintf(`{"model_name":"m","token_ids":[5,6,7,8],"session_id":"s","affinity_target":{"worker_id":%d}}`, other)), 200, fmt.Sprintf(`"worker_id":%d`, other))
	// Hard mode: a booking kept off the live bound worker is a 400.
	r = h.do("POST", "/select_and_reserve", fmt.Sprintf(`{"model_name":"m","token_ids":[5,6,7,8],"session_id":"s","allowed_worker_ids":[%d]}`, other))
	h.want(r, 400)
	if want := fmt.Sprintf("session s is bound to worker %d, not %d", bound, other); r.errText() != want {
		t.Fatalf("error %q, want %q", r.errText(), want)
	}
	long := strings.Repeat("x", 257)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1],"session_id":"`+long+`"}`), 400, `"error":"session affinity ID must not exceed 256 bytes"`)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1],"session_context":{"parent_session_id":"p"}}`), 422, "missing field `session_id`")
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1],"session_context":{"session_id":"s","agent_headers":{"h":"v"}}}`), 422)
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1],"session_context":{"session_id":"s","input_trigger":"cron"}}`), 422, "unknown variant `cron`")
	m := h.do("GET", "/metrics", "")
	h.want(m, 200, "kvselect_session_affinity_entries 0", "kvselect_session_affinity_invalidated_total 1", "kvselect_session_affinity_entries_limit 65536", "kvselect_session_affinity_id_bytes_limit 256", "kvselect_session_affinity_rejected_total 1")
}

// TestKVHintHTTP: a booking response carries the seed's kv_hint envelope;
// a /select never does.
func TestKVHintHTTP(t *testing.T) {
	h := start(t, func(c *core.Config, _ *httpapi.Config) { c.UseKVEvents = true })
	h.worker(1, `,"kv_events_endpoint":"tcp://127.0.0.1:5001","router_hint_worker_type":"decode","router_hint_source_control_endpoints":{"0":"tcp://w1:5600"}`)
	h.worker(2, `,"kv_events_endpoint":"tcp://127.0.0.1:5002","router_hint_worker_type":"decode","router_hint_source_control_endpoints":{"0":"tcp://worker-2:5600"}`)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	local := radix.LocalHashes(nil, toks, 4, radix.HashSeed("", ""))
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 2}, Kind: radix.Stored}
	for i, l := range local {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(11 * (i + 1)), Local: l})
	}
	h.svc.EventSink("m", "default").ApplyBatch([]radix.Event{ev})
	body := `{"model_name":"m","selection_id":"select-123","token_ids":[1,2,3,4,5,6,7,8],"pinned_worker":{"worker_id":1,"dp_rank":0}}`
	h.want(h.do("POST", "/select_and_reserve", body), 200,
		`,"kv_hint":{"protocol_version":"0.1","message_id":"select-123","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"source_control_endpoint":"tcp://worker-2:5600","block_hashes":[11,22]}}]}}`)
	r := h.do("POST", "/select", strings.Replace(body, "select-123", "q", 1))
	h.want(r, 200)
	if strings.Contains(r.raw, "kv_hint") {
		t.Fatalf("a select carries a hint: %s", r.raw)
	}
	h.want(h.do("GET", "/metrics", ""), 200, "kvselect_kv_hints_total 1")
}

func policyConfig(t *testing.T) *sched.PolicyConfig {
	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	doc := sched.PolicyDoc{PolicyProfileDoc: sched.PolicyProfileDoc{
		DefaultPolicyFamily: s("agents"),
		UncachedISLBuckets:  []sched.BucketDoc{{MinTokens: n(0), Bucket: "all"}},
		PolicyClasses: []sched.PolicyClassDoc{
			{Name: "agents", PolicyFamily: s("agents"), CacheBucket: s("all"), Quantum: n(10), PrefillBusyThreshold: n(0), RequestQueueLimitPerWorker: n(1)},
			{Name: "batch", Quantum: n(10), PrefillBusyThreshold: n(0), RequestQueueLimitPerWorker: n(0)},
		},
	}}
	pc, err := doc.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// rawPost sends a select_and_reserve on its own connection and returns it,
// unread.
func rawPost(t *testing.T, base, body string, header ...string) net.Conn {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	extra := strings.Join(header, "")
	fmt.Fprintf(c, "POST /select_and_reserve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
	return c
}

// eventually yields to the server's goroutines until cond holds (the
// server reads a raw client's request asynchronously), failing after 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// TestRouterQueueHTTP: a booking with every worker busy waits and is
// dispatched by the free that makes room; a class at its cap answers 429
// with the reference's details (the header picks the explicit class); a
// waiting client that hangs up leaves the queue.
func TestRouterQueueHTTP(t *testing.T) {
	pc := policyConfig(t)
	h := start(t, func(c *core.Config, _ *httpapi.Config) { c.Sched.Policy = pc })
	h.worker(1, `,"max_num_batched_tokens":100`)
	h.want(h.do("POST", "/select_and_reserve", `{"model_name":"m","selection_id":"hog","token_ids":[1,2,3,4]}`), 200)
	waiter := rawPost(t, h.base, `{"model_name":"m","selection_id":"w1","token_ids":[5,6,7,8]}`)
	defer waiter.Close()
	eventually(t, "the first waiter", func() bool { return h.svc.QueueStats().Depth == 1 })
	h.want(h.do("GET", "/loads?model_name=m", ""), 200, `"pending_count":1,"pending_isl_tokens":4`)
	r := h.do("POST", "/select_and_reserve", `{"model_name":"m","selection_id":"w2","token_ids":[5,6,7,8]}`)
	h.want(r, 429, `{"error":"router policy class \"agents\" queue requests limit reached (current=1, limit=1)","details":{"policy_class":"agents","limit_kind":"requests","current":1,"limit":1}}`)
	req, _ := http.NewRequest("POST", h.base+"/select_and_reserve", strings.NewReader(`{"model_name":"m","token_ids":[5,6,7,8]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-dynamo-meta-policy-class", "  batch ")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 {
		t.Fatalf("batch class: status %d", res.StatusCode)
	}
	h.want(h.do("DELETE", "/reservations/hog", ""), 200)
	br := bufio.NewReader(waiter)
	st, err := http.ReadResponse(br, nil)
	if err != nil || st.StatusCode != 200 {
		t.Fatalf("waiter: %v %v", err, st)
	}
	st.Body.Close()
	// The watch of the waiter's connection ended with its wait: the
	// connection serves its next request.
	fmt.Fprintf(waiter, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if st, err = http.ReadResponse(br, nil); err != nil || st.StatusCode != 200 {
		t.Fatalf("keep-alive after a wait: %v %v", err, st)
	}
	st.Body.Close()
	// A client that goes away while waiting is cancelled: it books nothing.
	gone := rawPost(t, h.base, `{"model_name":"m","selection_id":"gone","token_ids":[5,6,7,8]}`)
	eventually(t, "the second waiter", func() bool { return h.svc.QueueStats().Depth == 1 })
	gone.Close()
	eventually(t, "the cancellation", func() bool { return h.svc.QueueStats().Cancelled == 1 })
	if d := h.svc.QueueStats().Depth; d != 0 {
		t.Fatalf("depth %d", d)
	}
	h.want(h.do("DELETE", "/reservations/w1", ""), 200)
	h.want(h.do("DELETE", "/reservations/gone", ""), 404)
	m := h.do("GET", "/metrics", "")
	h.want(m, 200, `kvselect_router_queue_rejected_total{limit_kind="requests"} 2`, "kvselect_router_queue_cancelled_total 1",
		`kvselect_router_queue_class_limit{model_name="m",routing_group="default",class="agents",limit_kind="requests"} 1`,
		"kvselect_router_queue_wait_seconds_count 1", "kvselect_router_queue_depth 0")
}
