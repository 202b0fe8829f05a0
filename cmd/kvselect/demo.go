package main

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// demoEngines are the simulated engines of `kvselect serve --demo N` and
// `kvselect epp --demo N`: real vLLM-format KV event publishers on
// loopback, registered with the service as workers 1..N of the default
// partition, each with a replay socket; the EPP's also answer OpenAI
// requests at their endpoints (bench.OpenAIServer).
type demoEngines struct {
	engines []*bench.Engine
	servers []*bench.OpenAIServer
}

// Demo prompts, in blocks: every engine has served the "system prompt"
// (DemoSystemBlocks blocks of tokens 1, 2, 3, ...), and worker 1 has also
// served a conversation that continues it to DemoConversationBlocks blocks.
// The README's curl examples send these token ids.
const (
	demoSystemBlocks       = 4
	demoConversationBlocks = 8
	demoCapacityBlocks     = 16384
)

// demoTokens returns the token ids 1..blocks*blockSize.
func demoTokens(blocks, blockSize int) []uint32 {
	t := make([]uint32, blocks*blockSize)
	for i := range t {
		t[i] = uint32(i + 1)
	}
	return t
}

// startDemo starts n engines, registers them with svc, waits until each
// one's listener is subscribed, serves the demo prompts and waits until the
// index holds them, so /ready is 200 and a selection shows real overlap as
// soon as it returns.
//
// The workers are of model; endpoint(i) is engine i's (0-based) endpoint:
// serve's demo://engine-N, or the EPP's http://127.0.0.N+1:8000, an
// ip:port it can answer to the gateway. An http:// endpoint is served:
// the engine answers OpenAI completions and chat requests there (any
// model name), its prompts' KV events published as it serves them; when
// the address cannot be bound (8000 taken, or no 127.0.0.N+1 on the
// host), a free port of that host, else of 127.0.0.1, is served and
// registered instead, and logged.
func startDemo(svc *core.Service, n, blockSize int, model string, endpoint func(i int) string, log *slog.Logger) (*demoEngines, error) {
	d := &demoEngines{}
	for i := range n {
		e, err := bench.NewEngine(bench.EngineConfig{
			Ranks: 1, BlockSize: blockSize, CapacityBlocks: demoCapacityBlocks,
			Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("engine %d: %w", i+1, err)
		}
		d.engines = append(d.engines, e)
		endpoint := endpoint(i)
		if addr, ok := strings.CutPrefix(endpoint, "http://"); ok {
			srv, err := serveDemoHTTP(e, addr, model, log)
			if err != nil {
				d.Close()
				return nil, fmt.Errorf("engine %d: HTTP endpoint: %w", i+1, err)
			}
			d.servers = append(d.servers, srv)
			endpoint = srv.URL()
		}
		bs, dp, total := uint32(blockSize), uint32(1), uint64(demoCapacityBlocks)
		replay := e.ReplayEndpoints()[0]
		spec := core.WorkerSpec{WorkerID: uint64(i + 1), ModelName: model, RoutingGroup: "default"}
		spec.Endpoint = &endpoint
		spec.BlockSize = &bs
		spec.DataParallelSize = &dp
		spec.TotalKVBlocks = &total
		spec.ReplayEndpoint = &replay
		spec.KVEventsEndpoints = map[uint32]string{0: e.Endpoints()[0]}
		rec, err := svc.UpsertWorker(&spec)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("register worker %d: %w", i+1, err)
		}
		httpapi.LogCatalogChange(log, "--demo", "upserted", rec)
		if rec.Lifecycle != core.Schedulable {
			d.Close()
			return nil, fmt.Errorf("worker %d is %s: %v", i+1, rec.Lifecycle, rec.NotSchedulableReasons)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, e := range d.engines {
		for e.Subscribers(0) == 0 {
			if time.Now().After(deadline) {
				d.Close()
				return nil, fmt.Errorf("engine %d: the selector's listener did not subscribe within 10s", i+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := int64(0)
	for i, e := range d.engines {
		blocks := demoSystemBlocks
		if i == 0 {
			blocks = demoConversationBlocks
		}
		e.ServeTokens(0, demoTokens(blocks, blockSize))
		want += int64(blocks)
	}
	for svc.Stats().IndexBlocks[0] < want {
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("the index holds %d of the demo's %d blocks after 10s", svc.Stats().IndexBlocks[0], want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Info(fmt.Sprintf("demo: worker 1 caches tokens 1..%d, every worker tokens 1..%d", demoConversationBlocks*blockSize, demoSystemBlocks*blockSize),
		"index_blocks", want, "block_size", blockSize)
	return d, nil
}

// serveDemoHTTP serves e's OpenAI endpoint at addr, else at a free port
// of addr's host, else at a free port of 127.0.0.1.
func serveDemoHTTP(e *bench.Engine, addr, model string, log *slog.Logger) (*bench.OpenAIServer, error) {
	cfg := bench.OpenAIConfig{Model: model, AnyModel: true}
	srv, err := e.ServeOpenAI(addr, cfg)
	if err == nil {
		return srv, nil
	}
	host, _, herr := net.SplitHostPort(addr)
	if herr != nil {
		return nil, err
	}
	for _, alt := range []string{net.JoinHostPort(host, "0"), "127.0.0.1:0"} {
		if srv, aerr := e.ServeOpenAI(alt, cfg); aerr == nil {
			log.Warn("demo: engine endpoint taken or unavailable; serving and registering a free port instead", "wanted", addr, "err", err, "endpoint", srv.URL())
			return srv, nil
		}
	}
	return nil, err
}

// Close closes every engine and its HTTP endpoint.
func (d *demoEngines) Close() {
	for _, s := range d.servers {
		_ = s.Close()
	}
	for _, e := range d.engines {
		_ = e.Close()
	}
}
