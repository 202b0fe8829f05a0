package httpapi

import (
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestLatencyStartsAtHandlerCall: a route's latency counts from the time
// fasthttp's server called its handler (ctx.Time()), not from Handle's own
// first line: a handler that waits 40 ms before Handle, over a loopback
// connection, records at least those 40 ms.
func TestLatencyStartsAtHandlerCall(t *testing.T) {
	srv, err := New(benchService(t), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/health" {
			time.Sleep(40 * time.Millisecond)
		}
		srv.Handle(ctx)
	}}
	go fs.Serve(ln)     //nolint:errcheck
	defer fs.Shutdown() //nolint:errcheck
	status, body, err := fasthttp.Get(nil, "http://"+ln.Addr().String()+"/health")
	if err != nil || status != 200 {
		t.Fatalf("GET /health: %d %s %v", status, body, err)
	}
	_, body, err = fasthttp.Get(nil, "http://"+ln.Addr().String()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`kvselect_http_request_duration_seconds_sum\{route="GET /health"\} (\S+)`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no GET /health latency in:\n%s", body)
	}
	if sum, _ := strconv.ParseFloat(string(m[1]), 64); sum < 0.040 {
		t.Fatalf("GET /health latency sum %v s, want >= 0.040 (the wait before Handle)", sum)
	}
}
