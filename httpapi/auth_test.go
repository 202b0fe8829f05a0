package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// TestBearerAuth: with an auth token, every route but /health, /ready and
// /metrics (unknown routes included) answers 401 with a JSON
// error and WWW-Authenticate: Bearer unless the request carries
// Authorization: Bearer <token>; the scheme is case-insensitive, the token
// is not.
func TestBearerAuth(t *testing.T) {
	const token = "s3cret-Token_1"
	h := start(t, func(_ *core.Config, hc *httpapi.Config) { hc.AuthToken = []byte(token) })
	call := func(method, path, authz, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/workers", ""}, {"POST", "/workers", `{"worker_id":1}`}, {"POST", "/select", `{"token_ids":[1]}`},
		{"DELETE", "/reservations/x", ""}, {"GET", "/loads", ""}, {"GET", "/dump", ""}, {"GET", "/debug/pprof/heap", ""},
		{"GET", "/nope", ""}, {"GET", "/replica_sync/peers", ""},
	} {
		for _, authz := range []string{"", "Bearer wrong", "Bearer " + strings.ToUpper(token), "Basic " + token, token, "Bearer"} {
			status, hdr, body := call(c.method, c.path, authz, c.body)
			if status != 401 || hdr.Get("WWW-Authenticate") != "Bearer" || body != `{"error":"missing or invalid bearer token"}` {
				t.Fatalf("%s %s with %q: %d %q %s", c.method, c.path, authz, status, hdr.Get("WWW-Authenticate"), body)
			}
		}
	}
	for _, authz := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token + " "} {
		if status, _, body := call("POST", "/workers", authz, `{"worker_id":1,"model_name":"m","endpoint":"http://w","block_size":4}`); status != 201 {
			t.Fatalf("authorized with %q: %d %s", authz, status, body)
		}
	}
	if status, _, _ := call("GET", "/nope", "Bearer "+token, ""); status != 404 {
		t.Fatalf("an unknown route with the token: %d", status)
	}
	for path, want := range map[string]int{"/health": 200, "/ready": 200, "/metrics": 200} {
		if status, hdr, _ := call("GET", path, "", ""); status != want || hdr.Get("WWW-Authenticate") != "" {
			t.Fatalf("%s without a token: %d", path, status)
		}
	}
	if _, _, body := call("GET", "/metrics", "", ""); !strings.Contains(body, `kvselect_http_requests_total{route="unauthorized",code="401"} 54`) {
		t.Fatalf("401s not counted: %s", body)
	}
}
