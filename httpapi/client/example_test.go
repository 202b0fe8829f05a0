package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/httpapi/client"
)

// startSelector runs a selector on a loopback port for the examples and
// tests (KV events off: bookings predict the cache) and returns its URL
// and a stop function.
func startSelector() (string, func()) {
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	svc, err := core.New(cfg, core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := httpapi.New(svc, httpapi.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Shutdown(context.Background()) }
}

func ptr[T any](v T) *T { return &v }

// The select-then-reserve flow a gateway (or Ray, in Dynamo's documentation)
// runs: select a worker without booking it, send the request there, then
// book the cached selection by its id, report the request's progress and
// free it at the end. A cached selection books once: a second replay is a
// 404, and the gateway falls back to the explicit form with the worker and
// the prompt.
func Example_selectThenReserve() {
	base, stop := startSelector()
	defer stop()
	ctx := context.Background()
	c, err := client.New(base, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The worker catalog (a discovery source or the deployment does this).
	rec, err := c.UpsertWorker(ctx, &client.Worker{WorkerID: 1, ModelName: "llama", WorkerFields: client.WorkerFields{
		Endpoint: ptr("http://worker-1:8000"), BlockSize: ptr(uint32(16)),
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker", rec.WorkerID, rec.Lifecycle)

	// 1. Select, with an id: nothing is booked, the selection is cached.
	prompt := client.Prompt{TokenIDs: make([]uint32, 64)}
	for i := range prompt.TokenIDs {
		prompt.TokenIDs[i] = uint32(i + 1)
	}
	sel, err := c.Select(ctx, &client.SelectRequest{SelectionID: "req-1", ModelName: "llama", Prompt: prompt})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("send to %s (worker %d, dp_rank %d): %d tokens to prefill\n", sel.Endpoint, sel.WorkerID, sel.DPRank, sel.EffectivePrefillTokens)

	// 2. The gateway sends the request to sel.Endpoint here.

	// 3. Book the cached selection by its id.
	res, err := c.Reserve(ctx, &client.ReservationRequest{SelectionID: "req-1", ModelName: "llama"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved", res.SelectionID, "on worker", res.WorkerID)

	// A cached selection books once; the explicit form needs no cache.
	_, err = c.Reserve(ctx, &client.ReservationRequest{SelectionID: "req-1", ModelName: "llama"})
	var e *client.Error
	if errors.Is(err, client.ErrNotFound) && errors.As(err, &e) {
		fmt.Println("replayed again:", e.StatusCode, e.Message)
	}

	// 4. The request's lifecycle.
	if err := c.PrefillComplete(ctx, "req-1"); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if err := c.OutputBlock(ctx, "req-1", nil); err != nil {
			log.Fatal(err)
		}
	}
	loads, err := c.Loads(ctx, "llama", "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("active requests on worker 1:", loads[0].Loads[0].ActiveRequests)
	if err := c.Free(ctx, "req-1"); err != nil {
		log.Fatal(err)
	}
	err = c.Free(ctx, "req-1")
	fmt.Println("freed; freeing again:", errors.Is(err, client.ErrNotFound))
	// Output:
	// worker 1 schedulable
	// send to http://worker-1:8000 (worker 1, dp_rank 0): 64 tokens to prefill
	// reserved req-1 on worker 1
	// replayed again: 404 no pending selection req-1 for model=llama routing_group=default (expired, already used, or never selected)
	// active requests on worker 1: 1
	// freed; freeing again: true
}
