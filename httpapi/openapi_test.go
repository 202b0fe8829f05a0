package httpapi_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/httpapi"
)

const prompt8 = `"token_ids":[1,2,3,4,5,6,7,8]`

// TestOpenAPIDescribesResponses sends every route of the selector its
// success case and each of its error classes, and validates every response
// (status, content type, body) against GET /openapi.json with a JSON Schema
// 2020-12 validator, and every successful request body against the
// operation's request schema. Every route of the server is described,
// every described operation is a route, and every status an operation
// lists is produced by some case: the description cannot drift.
func TestOpenAPIDescribesResponses(t *testing.T) {
	peers := &fakePeers{set: map[string]bool{}}
	tok := miniTokenizer(t)
	h := start(t, func(c *core.Config, hc *httpapi.Config) {
		hc.Tokenizers = map[string]*text.Tokenizer{"m": tok}
		hc.AuthToken, hc.Peers, hc.MaxRequestBodySize = []byte(apiToken), peers, 64<<10
		threshold := 0.5
		c.Sched.DecodeBusyThreshold, c.Sched.PrefillBusyThreshold = &threshold, &threshold
	})
	noPeers := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.AuthToken = []byte(apiToken) })
	raw := do(t, h.base, apiCase{route: "GET /openapi.json"}).body
	if !bytes.Equal(raw, httpapi.OpenAPI()) {
		t.Fatal("GET /openapi.json does not serve the embedded document")
	}
	s := loadSpec(t, raw)

	for _, c := range apiCases() {
		s.check(h.base, c)
	}
	// A source that owns the catalog: the public catalog mutations are
	// conflicts.
	rec, err := core.NewCatalogReconciler(h.svc, core.ReconcilerConfig{Name: "--workers-file", Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []apiCase{
		{route: "POST /workers", body: `{"worker_id":8}`, status: 409},
		{route: "PATCH /workers/{worker_id}", path: "/workers/1", body: `{}`, status: 409},
		{route: "DELETE /workers/{worker_id}", path: "/workers/1", status: 409},
	} {
		s.check(h.base, c)
	}
	rec.Close()
	// Without the bearer token, every operation that lists 401 gets it
	// (the token is checked before routing: any id will do).
	for _, route := range s.listing(401) {
		_, path, _ := strings.Cut(route, " ")
		concrete := strings.NewReplacer("{worker_id}", "1", "{selection_id}", "x").Replace(path)
		s.check(h.base, apiCase{route: route, path: concrete, body: "{}", status: 401, noAuth: true})
	}
	// A closed service refuses catalog changes as shutting down.
	h.svc.Close()
	for _, c := range []apiCase{
		{route: "POST /workers", body: `{"worker_id":8}`, status: 503},
		{route: "PATCH /workers/{worker_id}", path: "/workers/1", body: `{}`, status: 503},
	} {
		s.check(h.base, c)
	}
	for _, c := range []apiCase{
		{route: "POST /replica_sync/register_peer", body: `{"endpoint":"tcp://b:9092"}`, status: 409},
		{route: "POST /replica_sync/deregister_peer", body: `{"endpoint":"tcp://b:9092"}`, status: 409},
		{route: "GET /ready", status: 503},
	} {
		s.check(noPeers.base, c)
	}

	// Every route is described, every described operation is a route, and
	// every status an operation lists was produced above.
	s.checkCoverage(httpapi.RouteNames())
}

// apiCases are the requests of TestOpenAPIDescribesResponses, in order:
// each may rely on the state the earlier ones left.
func apiCases() []apiCase {
	big := `{"pad":"` + strings.Repeat("x", 65<<10) + `"}`
	worker := func(id int, group, extra string) string {
		return fmt.Sprintf(`{"worker_id":%d,"model_name":"m","routing_group":%q,"endpoint":"http://w%d:8000","block_size":4,"total_kv_blocks":100%s}`, id, group, id, extra)
	}
	var cs []apiCase
	add := func(route, path, body string, status int) {
		cs = append(cs, apiCase{route: route, path: path, body: body, status: status})
	}
	// Health and readiness, before any worker.
	add("GET /health", "", "", 200)
	cs = append(cs, apiCase{route: "GET /health", status: 200, noAuth: true})
	add("GET /metrics", "", "", 200)
	add("GET /openapi.json", "", "", 200)
	add("POST /select", "", `{"model_name":"m",`+prompt8+`}`, 503)
	// The tokenizer routes.
	add("POST /tokenize", "", `{"model":"m","prompt":"ab b","return_token_strs":true}`, 200)
	add("POST /tokenize", "", `{"model":"m","messages":[{"role":"user","content":"ab"}],"chat_template":"{{ messages[0]['content'] }}","add_generation_prompt":true,"continue_final_message":null,"tools":null,"chat_template_kwargs":{"x":1}}`, 200)
	add("POST /tokenize", "", `{"model":"x","prompt":"ab"}`, 400)
	add("POST /tokenize", "", `{"model":"m"}`, 422)
	add("POST /tokenize", "", big, 413)
	cs = append(cs, apiCase{route: "POST /tokenize", body: `{}`, ct: "text/plain", status: 415})
	add("POST /detokenize", "", `{"model":"m","tokens":[257,256]}`, 200)
	add("POST /detokenize", "", `{"tokens":[99999]}`, 400)
	add("POST /detokenize", "", `{"tokens":"x"}`, 422)
	add("POST /detokenize", "", big, 413)
	cs = append(cs, apiCase{route: "POST /detokenize", body: `{}`, ct: "text/plain", status: 415})
	// Workers.
	add("POST /workers", "", worker(1, "default", ""), 201)
	add("POST /workers", "", worker(2, "default", `,"data_parallel_size":2,"taints":["gpu"],"topology_domains":{"zone":"a"},"kv_transfer_domain":"d1","kv_transfer_enforcement":"preferred"`), 201)
	add("POST /workers", "", `{"worker_id":9,"model_name":"m"}`, 201) // incomplete
	add("POST /workers", "", worker(3, "prefill", ""), 201)
	add("POST /workers", "", worker(4, "decode", ""), 201)
	add("POST /workers", "", `{"worker_id":`, 400)
	add("POST /workers", "", `{"model_name":"m"}`, 422)
	add("POST /workers", "", big, 413)
	cs = append(cs, apiCase{route: "POST /workers", body: worker(5, "default", ""), ct: "text/plain", status: 415},
		apiCase{route: "POST /workers", body: worker(5, "default", ""), status: 401, noAuth: true})
	add("GET /workers", "/workers?model_name=m", "", 200)
	add("GET /ready", "", "", 200)
	add("PATCH /workers/{worker_id}", "/workers/1", `{"total_kv_blocks":200}`, 200)
	add("PATCH /workers/{worker_id}", "/workers/77", `{"total_kv_blocks":200}`, 404)
	add("PATCH /workers/{worker_id}", "/workers/1", `{"total_kv_blocks":"x"}`, 422)
	add("PATCH /workers/{worker_id}", "/workers/1", `[`, 400)
	add("PATCH /workers/{worker_id}", "/workers/1", big, 413)
	cs = append(cs, apiCase{route: "PATCH /workers/{worker_id}", path: "/workers/1", body: `{}`, ct: "none", status: 415})
	add("DELETE /workers/{worker_id}", "/workers/9", "", 200)
	add("DELETE /workers/{worker_id}", "/workers/9", "", 404)
	add("DELETE /workers/{worker_id}", "/workers/x", "", 400)
	// Selection.
	add("POST /select", "", `{"selection_id":"s1","model_name":"m",`+prompt8+`}`, 200)
	add("POST /select", "", `{"model_name":"m","advisory":true,`+prompt8+`}`, 200)
	add("POST /select", "", `{"model_name":"m","block_hashes":[1,2],"sequence_hashes":[1],"isl_tokens":8}`, 400)
	add("POST /select", "", `{"model_name":"m","token_ids":"x"}`, 422)
	add("POST /select", "", big, 413)
	cs = append(cs, apiCase{route: "POST /select", body: `{}`, ct: "none", status: 415})
	add("POST /select_and_reserve", "", `{"selection_id":"r1","model_name":"m",`+prompt8+`}`, 200)
	add("POST /select_and_reserve", "", `{"selection_id":"r1","model_name":"m",`+prompt8+`}`, 409)
	add("POST /select_and_reserve", "", `{"model_name":"nope",`+prompt8+`}`, 503)
	add("POST /select_and_reserve", "", `{"model_name":"m","isl_tokens":0,"block_hashes":[],"sequence_hashes":[]}`, 400)
	add("POST /select_and_reserve", "", `{"model_name":"m","isl_tokens":-1}`, 422)
	add("POST /select_and_reserve", "", big, 413)
	cs = append(cs, apiCase{route: "POST /select_and_reserve", body: `{}`, ct: "text/plain", status: 415})
	// Reservations.
	add("POST /reservations", "", `{"selection_id":"s1","model_name":"m"}`, 201)
	add("POST /reservations", "", `{"selection_id":"s1","model_name":"m"}`, 404)
	add("POST /reservations", "", `{"selection_id":"r1","model_name":"m","worker_id":1,"sequence_hashes":[1],"isl_tokens":4}`, 409)
	add("POST /reservations", "", `{"selection_id":"x1","model_name":"m","worker_id":1,"sequence_hashes":[1],"isl_tokens":4,"effective_prefill_tokens":9}`, 400)
	add("POST /reservations", "", `{"model_name":"m"}`, 422)
	add("POST /reservations", "", `{"selection_id":"x2","model_name":"m","worker_id":77,"sequence_hashes":[1],"isl_tokens":4}`, 404)
	add("POST /reservations", "", `{"selection_id":"x3","model_name":"nope","worker_id":1,"sequence_hashes":[1],"isl_tokens":4}`, 503)
	add("POST /reservations", "", big, 413)
	cs = append(cs, apiCase{route: "POST /reservations", body: `{}`, ct: "none", status: 415})
	add("POST /reservations/{selection_id}/prefill_complete", "/reservations/r1/prefill_complete", "", 200)
	add("POST /reservations/{selection_id}/prefill_complete", "/reservations/nope/prefill_complete", "", 404)
	add("POST /reservations/{selection_id}/prefill_complete", "/reservations/%FF/prefill_complete", "", 400)
	add("POST /reservations/{selection_id}/output_block", "/reservations/r1/output_block", `{"decay_fraction":0.5}`, 200)
	add("POST /reservations/{selection_id}/output_block", "/reservations/r1/output_block", `{"decay_fraction":1.5}`, 400)
	add("POST /reservations/{selection_id}/output_block", "/reservations/nope/output_block", `{}`, 404)
	add("POST /reservations/{selection_id}/output_block", "/reservations/r1/output_block", `{"decay_fraction":"x"}`, 422)
	add("POST /reservations/{selection_id}/output_block", "/reservations/r1/output_block", big, 413)
	cs = append(cs, apiCase{route: "POST /reservations/{selection_id}/output_block", path: "/reservations/r1/output_block", ct: "none", status: 415})
	// Inspection.
	add("GET /loads", "/loads?model_name=m", "", 200)
	add("POST /potential_loads", "", `{"model_name":"m",`+prompt8+`}`, 200)
	add("POST /potential_loads", "", `{"model_name":"nope",`+prompt8+`}`, 503)
	add("POST /potential_loads", "", `{"model_name":"m"}`, 400)
	add("POST /potential_loads", "", `{"model_name":7}`, 422)
	add("POST /potential_loads", "", big, 413)
	cs = append(cs, apiCase{route: "POST /potential_loads", body: `{}`, ct: "none", status: 415})
	add("POST /overlap_scores", "", `{"model_name":"m",`+prompt8+`}`, 200)
	add("POST /overlap_scores", "", `{"model_name":"nope",`+prompt8+`}`, 503)
	add("POST /overlap_scores", "", `{"model_name":"m"}`, 400)
	add("POST /overlap_scores", "", `{"model_name":7}`, 422)
	add("POST /overlap_scores", "", big, 413)
	cs = append(cs, apiCase{route: "POST /overlap_scores", body: `{}`, ct: "none", status: 415})
	add("GET /dump", "", "", 200)
	// Replica-sync peers (the no-peers server answers the 409s).
	add("POST /replica_sync/register_peer", "", `{"endpoint":"tcp://b:9092"}`, 201)
	add("POST /replica_sync/register_peer", "", `{"endpoint":"tcp://b:9092"}`, 200)
	add("POST /replica_sync/register_peer", "", `{"endpoint":"udp://b"}`, 400)
	add("POST /replica_sync/register_peer", "", `{}`, 422)
	add("POST /replica_sync/register_peer", "", big, 413)
	cs = append(cs, apiCase{route: "POST /replica_sync/register_peer", body: `{}`, ct: "none", status: 415})
	add("GET /replica_sync/peers", "", "", 200)
	add("POST /replica_sync/deregister_peer", "", `{"endpoint":"tcp://b:9092"}`, 200)
	add("POST /replica_sync/deregister_peer", "", `{"endpoint":"tcp://b:9092"}`, 404)
	add("POST /replica_sync/deregister_peer", "", `{"endpoint":1}`, 422)
	add("POST /replica_sync/deregister_peer", "", `{`, 400)
	add("POST /replica_sync/deregister_peer", "", big, 413)
	cs = append(cs, apiCase{route: "POST /replica_sync/deregister_peer", body: `{}`, ct: "none", status: 415})
	// Disaggregated plans.
	add("POST /disagg/plan", "", `{"selection_id":"p1","model_name":"m",`+prompt8+`}`, 200)
	add("POST /disagg/plan", "", `{"selection_id":"p1","model_name":"m",`+prompt8+`}`, 409)
	add("POST /disagg/plan", "", `{"selection_id":"p2","model_name":"m","order":"prefill_anchored","defer_decode":true,`+prompt8+`}`, 200)
	add("POST /disagg/plan", "", `{"selection_id":"p3","model_name":"nope",`+prompt8+`}`, 503)
	add("POST /disagg/plan", "", `{"selection_id":"p4","model_name":"m","order":"sideways",`+prompt8+`}`, 400)
	add("POST /disagg/plan", "", `{"selection_id":5}`, 422)
	add("POST /disagg/plan", "", big, 413)
	cs = append(cs, apiCase{route: "POST /disagg/plan", body: `{}`, ct: "none", status: 415})
	add("GET /disagg/{selection_id}", "/disagg/p1", "", 200)
	add("GET /disagg/{selection_id}", "/disagg/nope", "", 404)
	add("GET /disagg/{selection_id}", "/disagg/%FF", "", 400)
	add("POST /disagg/{selection_id}/plan_decode", "/disagg/p2/plan_decode", "", 200)
	add("POST /disagg/{selection_id}/plan_decode", "/disagg/p1/plan_decode", "", 409)
	add("POST /disagg/{selection_id}/plan_decode", "/disagg/nope/plan_decode", "", 404)
	add("POST /disagg/{selection_id}/plan_decode", "/disagg/%FF/plan_decode", "", 400)
	add("POST /disagg/{selection_id}/prefill_complete", "/disagg/p1/prefill_complete", "", 200)
	add("POST /disagg/{selection_id}/prefill_complete", "/disagg/nope/prefill_complete", "", 404)
	add("POST /disagg/{selection_id}/prefill_complete", "/disagg/%FF/prefill_complete", "", 400)
	add("DELETE /disagg/{selection_id}", "/disagg/p1", "", 200)
	add("DELETE /disagg/{selection_id}", "/disagg/p1", "", 404)
	add("DELETE /disagg/{selection_id}", "/disagg/%FF", "", 400)
	// Freeing, limits and the generic answers.
	add("DELETE /reservations/{selection_id}", "/reservations/r1", "", 200)
	add("DELETE /reservations/{selection_id}", "/reservations/r1", "", 404)
	add("DELETE /reservations/{selection_id}", "/reservations/%FF", "", 400)
	add("GET /loads", "/loads", "", 200)
	cs = append(cs, apiCase{route: "GET /workers", method: "PUT", status: 405})
	return cs
}

// TestOpenAPIDocumentIsValid validates the selector's and the indexer's
// documents against the OpenAPI 3.1 schema (validOpenAPI).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Run("selector", func(t *testing.T) { validOpenAPI(t, httpapi.OpenAPI()) })
	t.Run("indexer", func(t *testing.T) { validOpenAPI(t, httpapi.IndexerOpenAPI()) })
}
