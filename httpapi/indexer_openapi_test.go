package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/httpapi"
)

// TestIndexerOpenAPIDescribesResponses sends every route of the standalone
// indexer its success case and each of its error classes (the plain-text
// body rejections, the JSON handler errors, 401 without the token, 503
// while draining, 405 for another method), and validates every response
// (status, required headers, content type, body) against the indexer's
// GET /openapi.json with a JSON Schema 2020-12 validator, and every
// successful request body against the operation's request schema. Every
// route of the indexer is described, every described operation is a
// route, and every status an operation lists is produced, in each of its
// media types, by some case: the description cannot drift.
func TestIndexerOpenAPIDescribesResponses(t *testing.T) {
	tok := miniTokenizer(t)
	h := startIndexer(t, func(c *core.IndexerConfig, hc *httpapi.Config) {
		c.MaxPeers, hc.AuthToken = 2, []byte(apiToken)
		hc.Tokenizers = map[string]*text.Tokenizer{"m": tok}
	})
	raw := do(t, h.base, apiCase{route: "GET /openapi.json"}).body
	if !bytes.Equal(raw, httpapi.IndexerOpenAPI()) {
		t.Fatal("the indexer's GET /openapi.json does not serve the embedded document")
	}
	s := loadSpec(t, raw)

	// The registrations below add instance 1's listeners to the partition.
	local := restoreBlocks(t, h)
	hashes := fmt.Sprintf("[%d,%d,%d]", int64(local[0]), int64(local[1]), int64(local[2]))
	for _, c := range ixAPICases(hashes) {
		s.check(h.base, c)
	}
	// Without the bearer token, every operation that lists 401 gets it.
	for _, route := range s.listing(401) {
		s.check(h.base, apiCase{route: route, body: ixBodyOf(route), status: 401, noAuth: true})
	}
	// An unknown path is an empty 404, HEAD serves a GET route without
	// its body: neither is an operation of the document.
	if res := do(t, h.base, apiCase{route: "GET /nope"}); res.status != 404 || len(res.body) != 0 || res.header.Get("Content-Type") != "" {
		t.Errorf("unknown path: %d %q %q, want an empty 404", res.status, res.header.Get("Content-Type"), res.body)
	}
	if res := do(t, h.base, apiCase{route: "HEAD /openapi.json"}); res.status != 200 || len(res.body) != 0 {
		t.Errorf("HEAD /openapi.json: %d %q, want 200 without a body", res.status, res.body)
	}
	// While the server drains, every operation (all list 503) is refused,
	// the token unchecked.
	httpapi.StartDraining(h.srv)
	for _, route := range s.listing(503) {
		s.check(h.base, apiCase{route: route, body: ixBodyOf(route), status: 503, noAuth: true})
	}
	s.checkCoverage(httpapi.IndexerRouteNames())
}

// ixBodyOf is a body for route that only the checks made before decoding
// (auth, drain) answer: "{}" for a POST, none for a GET.
func ixBodyOf(route string) string {
	if strings.HasPrefix(route, "POST ") {
		return "{}"
	}
	return ""
}

// ixAPICases are the requests of TestIndexerOpenAPIDescribesResponses, in
// order: each may rely on the state the earlier ones left. hashes are the
// local hashes of the restored prefix, as a JSON array.
func ixAPICases(hashes string) []apiCase {
	big := `{"pad":"` + strings.Repeat("x", 2<<20) + `"}`      // over 2 MiB
	bigQuery := `{"pad":"` + strings.Repeat("x", 8<<20) + `"}` // over 8 MiB
	reg := func(id, port int, extra string) string {
		return fmt.Sprintf(`{"instance_id":%d,"endpoint":"tcp://127.0.0.1:%d","model_name":"m","block_size":4%s}`, id, port, extra)
	}
	var cs []apiCase
	add := func(route, path, body string, status int) {
		cs = append(cs, apiCase{route: route, path: path, body: body, status: status})
	}
	// The plain-text rejections of a body that cannot be read, on every
	// route with a body: not JSON (400), wrong or missing field (422), over
	// the route's limit (413), not declared JSON (415).
	rejections := func(route, syntax, data, over string) {
		add(route, "", syntax, 400)
		add(route, "", data, 422)
		add(route, "", over, 413)
		cs = append(cs, apiCase{route: route, body: `{}`, ct: "text/plain", status: 415})
	}
	// Health, metrics and this document; the auth-exempt routes without
	// the token too.
	add("GET /health", "", "", 200)
	cs = append(cs, apiCase{route: "GET /health", status: 200, noAuth: true},
		apiCase{route: "GET /metrics", status: 200, noAuth: true})
	add("GET /metrics", "", "", 200)
	add("GET /openapi.json", "", "", 200)
	add("GET /workers", "", "", 200)
	add("GET /peers", "", "", 200)
	// Registration.
	add("POST /register", "", reg(1, 5557, `,"routing_group":"default","tenant_id":"t","dp_rank":null,"replay_endpoint":null,"additional_salt":null`), 201)
	add("POST /register", "", reg(1, 5558, `,"dp_rank":1,"replay_endpoint":"tcp://127.0.0.1:5560","additionalsalt":"s"`), 201)
	add("POST /register", "", reg(2, 5559, `,"unknown":[1]`), 201)
	add("POST /register", "", reg(1, 5558, `,"dp_rank":1`), 409)
	add("POST /register", "", `{"instance_id":3,"endpoint":"tcp://127.0.0.1:5561","model_name":"m","block_size":8}`, 409)
	add("POST /register", "", `{"instance_id":3,"endpoint":"nonsense","model_name":"m","block_size":4}`, 400)
	rejections("POST /register", `{"instance_id":3,`, `{"instance_id":3,"endpoint":"tcp://127.0.0.1:5561","block_size":4}`, big)
	add("GET /workers", "/workers?model_name=m&routing_group=default", "", 200)
	add("GET /workers", "/workers?model_name=x", "", 200)
	// Queries.
	add("POST /query", "", `{"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13],"model_name":"m","routing_group":"default","tenant_id":"t","lora_name":null,"cache_salt":null}`, 200)
	add("POST /query", "", `{"token_ids":[1,2,3,4],"model_name":"m","lora_name":"a","cache_salt":"b"}`, 200)
	add("POST /query", "", `{"token_ids":[1,2,3,4],"model_name":"x"}`, 404)
	add("POST /query", "", `{"prompt":"abababab","model_name":"m"}`, 200)
	add("POST /query", "", `{"prompt":"ab","model_name":"x"}`, 400)
	rejections("POST /query", `{"token_ids":[1,`, `{"model_name":"m"}`, bigQuery)
	for _, route := range []string{"POST /query_by_hash", "POST /query_tiered_by_hash"} {
		add(route, "", `{"block_hashes":`+hashes+`,"model_name":"m","routing_group":"default","tenant_id":"t","cache_salt":null}`, 200)
		add(route, "", `{"block_hashes":[-1,9223372036854775807],"model_name":"m"}`, 200)
		add(route, "", `{"block_hashes":[1],"model_name":"m","cache_salt":"x"}`, 400)
		add(route, "", `{"block_hashes":[1],"model_name":"x"}`, 404)
		rejections(route, `[`, `{"block_hashes":null,"model_name":"m"}`, bigQuery)
	}
	add("GET /dump", "", "", 200)
	// The tokenizer routes (--model-path).
	add("POST /tokenize", "", `{"model":"m","prompt":"ab b","return_token_strs":true}`, 200)
	add("POST /tokenize", "", `{"model":"x","prompt":"ab"}`, 400)
	add("POST /tokenize", "", `{"model":"m"}`, 422)
	add("POST /tokenize", "", bigQuery, 413)
	cs = append(cs, apiCase{route: "POST /tokenize", body: `{}`, ct: "text/plain", status: 415})
	add("POST /detokenize", "", `{"model":"m","tokens":[257,256]}`, 200)
	add("POST /detokenize", "", `{"tokens":[99999]}`, 400)
	add("POST /detokenize", "", `{"tokens":"x"}`, 422)
	add("POST /detokenize", "", bigQuery, 413)
	cs = append(cs, apiCase{route: "POST /detokenize", body: `{}`, ct: "text/plain", status: 415})
	// Recovery peers (at most 2 here).
	add("POST /register_peer", "", `{"url":"http://a:8090"}`, 201)
	add("POST /register_peer", "", `{"url":"http://a:8090"}`, 201)
	add("POST /register_peer", "", `{"url":"http://b:8090"}`, 201)
	add("POST /register_peer", "", `{"url":"http://c:8090"}`, 503)
	rejections("POST /register_peer", `{`, `{}`, big)
	add("GET /peers", "", "", 200)
	add("POST /deregister_peer", "", `{"url":"http://a:8090"}`, 200)
	add("POST /deregister_peer", "", `{"url":"http://a:8090"}`, 404)
	rejections("POST /deregister_peer", `{"url"`, `{"url":null}`, big)
	// Unregistration: one rank, then whole instances.
	add("POST /unregister", "", `{"instance_id":1,"model_name":"m","routing_group":"default","tenant_id":null,"dp_rank":1}`, 200)
	add("POST /unregister", "", `{"instance_id":1,"model_name":"m","routing_group":"default","dp_rank":7}`, 404)
	add("POST /unregister", "", `{"instance_id":1,"model_name":"n"}`, 404)
	add("POST /unregister", "", `{"instance_id":1,"model_name":"m","routing_group":null,"dp_rank":null}`, 200)
	add("POST /unregister", "", `{"instance_id":2,"model_name":"m"}`, 200)
	add("POST /unregister", "", `{"instance_id":2,"model_name":"m"}`, 404)
	rejections("POST /unregister", `{"instance_id":2 "model_name":"m"}`, `{"instance_id":-2,"model_name":"m"}`, big)
	add("POST /reopen_logs", "", "", 200)
	// Another method: an empty 405 with Allow.
	cs = append(cs, apiCase{route: "POST /register", method: "GET", status: 405},
		apiCase{route: "GET /dump", method: "POST", body: `{}`, status: 405},
		apiCase{route: "GET /openapi.json", method: "PUT", status: 405})
	return cs
}

// TestIndexerRouteNames: every indexer (and selector) route id has a
// metric name of its own, and the indexer counts requests under their
// route's name, the unmatched ones under "unmatched".
func TestIndexerRouteNames(t *testing.T) {
	for _, names := range [][]string{httpapi.IndexerRouteNames(), httpapi.RouteNames()} {
		for i, n := range names {
			if n == "" || slices.Index(names, n) != i {
				t.Errorf("route id %d: name %q (empty or not unique)", i, n)
			}
		}
	}
	h := startIndexer(t)
	for _, p := range []string{"/nope", "/openapi.json"} {
		res, err := http.Get(h.base + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	_, _, metrics := h.call("GET", "/metrics", "")
	for _, m := range []string{`route="unmatched",code="404"`, `route="GET /openapi.json",code="200"`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}
