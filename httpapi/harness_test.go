package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// harness is a real server on a loopback port, spoken to over HTTP.
type harness struct {
	t    *testing.T
	base string
	svc  *core.Service
	now  time.Time
}

type opt func(*core.Config, *httpapi.Config)

func start(t *testing.T, opts ...opt) *harness {
	t.Helper()
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	cfg.Sched.TrackOutputBlocks = true
	hcfg := httpapi.DefaultConfig()
	for _, o := range opts {
		o(&cfg, &hcfg)
	}
	h := &harness{t: t, now: time.Unix(1_700_000_000, 0)}
	svc, err := core.New(cfg, core.Options{Clock: func() time.Time { return h.now }})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(svc, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	h.base = serveLoopback(t, srv)
	h.svc = svc
	return h
}

// refusedAddr is a loopback address nothing listens on: port 1 is below
// the kernel's ephemeral range, so no socket of a test is ever given it (a
// port freed by closing a listener can be handed to the next one, and a
// "down" peer would then answer).
const refusedAddr = "127.0.0.1:1"

// serveLoopback serves srv on a loopback port until the test ends, then
// shuts it down (which must succeed), and returns its base URL.
func serveLoopback(t testing.TB, srv *httpapi.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// resp is a decoded response.
type resp struct {
	status int
	raw    string
	body   any
}

func (r resp) obj() map[string]any {
	m, _ := r.body.(map[string]any)
	return m
}

func (r resp) arr() []any {
	a, _ := r.body.([]any)
	return a
}

func (r resp) errText() string {
	s, _ := r.obj()["error"].(string)
	return s
}

// send sends method base+path with body, with a JSON content type unless
// ct gives one ("" none), and returns the status, the response's content
// type and its body.
func send(t testing.TB, base, method, path, body string, ct ...string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(ct) > 0 {
		if ct[0] != "" {
			req.Header.Set("Content-Type", ct[0])
		}
	} else if body != "" || method == "POST" || method == "PATCH" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Content-Type"), b
}

// do sends method path with body (JSON content type unless ct is given).
func (h *harness) do(method, path, body string, ct ...string) resp {
	h.t.Helper()
	status, _, b := send(h.t, h.base, method, path, body, ct...)
	r := resp{status: status, raw: string(b)}
	if len(b) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil && !strings.HasPrefix(path, "/metrics") && !strings.HasPrefix(path, "/debug") {
			h.t.Fatalf("%s %s: body %q is not JSON: %v", method, path, b, err)
		}
	}
	return r
}

func (h *harness) want(r resp, status int, contains ...string) {
	h.t.Helper()
	if r.status != status {
		h.t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	for _, c := range contains {
		if !strings.Contains(r.raw, c) {
			h.t.Fatalf("body %s does not contain %q", r.raw, c)
		}
	}
}

func (h *harness) worker(id int, extra string) {
	h.t.Helper()
	body := fmt.Sprintf(`{"worker_id":%d,"model_name":"m","endpoint":"http://w%d","block_size":4%s}`, id, id, extra)
	h.want(h.do("POST", "/workers", body), 201, `"lifecycle":"schedulable"`)
}

func num(v any) int64 {
	n, _ := v.(json.Number).Int64()
	return n
}

func (h *harness) load(model string, worker, rank int) map[string]any {
	h.t.Helper()
	r := h.do("GET", "/loads?model_name="+model, "")
	h.want(r, 200)
	for _, p := range r.arr() {
		for _, l := range p.(map[string]any)["loads"].([]any) {
			lm := l.(map[string]any)
			if num(lm["worker_id"]) == int64(worker) && num(lm["dp_rank"]) == int64(rank) {
				return lm
			}
		}
	}
	h.t.Fatalf("no load row for %d/%d in %s", worker, rank, r.raw)
	return nil
}
