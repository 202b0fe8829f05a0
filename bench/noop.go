package bench

import (
	"fmt"
	"net"

	"github.com/valyala/fasthttp"
)

// The no-op baseline: a fasthttp server on a loopback port that answers every
// route of the selection API at once with a canned body and never looks at
// the request. fasthttp still reads and parses each request and its body, so
// the same client sending the same bodies to it measures the HTTP floor of
// this machine in this run; the selector's figures are reported as ratios
// to it.

var (
	noopSelectBody = []byte(`{"selection_id":"noop","model_name":"default","routing_group":"default","worker_id":1,"dp_rank":0,` +
		`"endpoint":"http://noop:8000","block_size":16,"overlap":{"longest_matched":0,"gpu":0,"dp":{"0":0},"cpu":0,"disk":0},` +
		`"effective_prefill_tokens":1,"potential_decode_blocks":1}`)
	// noopPlanBody has the shape and size of a linked decode-anchored plan.
	noopPlanBody = []byte(`{"selection_id":"noop","model_name":"default","order":"decode_anchored","state":"linked",` +
		`"transitions":["idle","decode_previewed","decode_committed","linked"],"bypass":false,` +
		`"prefill":{"selection_id":"noop/prefill","routing_group":"prefill","worker_id":1,"dp_rank":0,"endpoint":"http://noop:8000"},` +
		`"decode":{"selection_id":"noop/decode","routing_group":"decode","worker_id":2,"dp_rank":0,"endpoint":"http://noop:8001"},` +
		`"decision":{"policy_says_bypass":false,"bypass":false},"decode_signals":{"cached_tokens":0,"potential_decode_blocks":1}}`)
	noopOK    = []byte(`{"status":"ok"}`)
	noopReady = []byte(`{"ready":true,"schedulable_workers":1,"workers":[]}`)
	noopLoads = []byte(`[]`)
)

func noopHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	switch string(ctx.Path()) { // the conversion does not allocate in a switch
	case "/select", "/select_and_reserve":
		ctx.SetBody(noopSelectBody)
	case "/disagg/plan":
		ctx.SetBody(noopPlanBody)
	case "/workers":
		ctx.SetStatusCode(fasthttp.StatusCreated)
		ctx.SetBody(noopOK)
	case "/ready":
		ctx.SetBody(noopReady)
	case "/loads":
		ctx.SetBody(noopLoads)
	default:
		ctx.SetBody(noopOK)
	}
}

// StartNoop serves the no-op baseline handler on addr ("127.0.0.1:0" picks a
// free port) and returns its base URL and a stop function that waits for the
// server to shut down. Run uses it for --baseline noop; a host can also serve
// it from another process (kvselect bench --serve-noop) to measure the
// client against a server it does not share a process with.
func StartNoop(addr string) (string, func(), error) {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return "", nil, fmt.Errorf("bench: no-op baseline: %w", err)
	}
	srv := &fasthttp.Server{
		Handler:               noopHandler,
		Name:                  "kvselect-bench-noop",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		MaxRequestBodySize:    8 << 20, // the selection API's limit
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	stop := func() {
		_ = srv.Shutdown()
		// Shutdown closes only the listeners Serve has registered: a stop
		// that races the goroutine's start would leave Serve running
		// forever. Closing ln makes Serve return whenever it starts.
		_ = ln.Close()
		<-done
	}
	return "http://" + ln.Addr().String(), stop, nil
}
