// Package bench is kvselect's bundled load harness: workload generators, the
// closed- and open-loop drivers, latency histograms, the same-run no-op
// baseline and the report. It talks to a selector only over the selection
// API's HTTP routes, so it measures kvselect and Dynamo's Python service
// alike.
//
// # Load runs
//
// A host (cmd/kvselect's `bench` subcommand) fills a Config, starting from
// DefaultConfig, and calls Run, which:
//
//  1. builds the prompts of Config.Workload, "synthetic" (Synthetic: families
//     sharing a system prompt, conversations whose next turn extends the
//     previous one, deterministic in Config.Seed) or "trace:FILE" (a Mooncake
//     JSONL trace; ExpandTrace turns each 512-token hash id into 512/BlockSize
//     local hashes), and encodes each prompt's body once, in the form of
//     Config.PromptForm: hashes (block_hashes, sequence_hashes, isl_tokens)
//     or tokens (token_ids, which the selector hashes itself; see Prompt);
//     with Config.EngineBlocks, starts one simulated Engine per worker on a
//     loopback port and registers its endpoint as the worker's
//     kv_events_endpoints;
//  2. resolves the selector: Config.Target, else Config.StartServer, the
//     seam through which the host starts an in-process server; with neither,
//     Run returns ErrNoServer rather than measure something else;
//  3. with Config.Baseline "noop", starts a no-op fasthttp server on a
//     loopback port and drives it exactly as it will drive the selector (same
//     client, goroutines, mix, prompts and timings), so the report can give
//     the selector's throughput and latency as ratios to the HTTP floor of
//     this machine in this run;
//  4. registers Config.Workers workers with POST /workers, waits for GET
//     /ready; with Config.Fill, fills the engines' KV pools, and through
//     their KV events the selector's index, from the workload (below); then
//     drives the selector; with Config.ProfileDir it fetches cpu, heap,
//     mutex and block profiles from the server's /debug/pprof during the
//     measured window;
//  5. reads GET /loads after every operation has finished and reports the
//     active requests left as leaked reservations (must be 0).
//
// # Replica runs
//
// With Config.Replicas > 1 the host's Config.StartReplicas starts that
// many in-process selectors meshed over loopback ZMQ (cmd/kvselect: each a
// core.Service with its own mesh.Mesh (zmqin/mesh), peers of each other, each behind
// its own HTTP server). Run then opens, after the no-op baseline, one
// replica alone (StartReplicas(1): same workers, engines of its own, fill)
// and the mesh, keeps both up, and measures them in Config.Rounds
// alternating windows (one replica, the mesh, one replica, ...), so the
// report gives the mesh's throughput as a ratio to one replica measured in
// the same run and under the same background load. Against the mesh, the
// workers are registered on every replica (each subscribes to every
// engine, and the fill waits until every index shows each prompt), each
// client goroutine sends its operations to the replicas in turn, and every
// call of an operation after the first goes to the replica that booked it
// (multiCaller). During the measured window probes measure how long a
// booking takes from its publish on one replica to its apply on the
// other, and its free (Propagation: the method and why it does not poll),
// up to probeLanes at once, on goroutines that end with the window. The leak
// check sums GET /loads over the replicas once the peers' frees have
// arrived (at most 5 s).
//
// # The index under load
//
// A selector's cost per selection depends on what its index holds: an
// empty index matches nothing at once. The fill makes the index what a
// live cluster's would be: every prompt of the workload, once and in
// order, is routed by the selector (POST /select), served by the chosen
// worker's engine (its cached leading blocks are hits, the rest is stored,
// evicting least recently used blocks, and published as a real vLLM KV
// event batch over ZMQ), and awaited until the selector's index shows it
// (POST /overlap_scores). The report's fill section tells what the pools
// held and evicted. During the load the engines publish nothing more, so
// the index is the engines' pools throughout the window; the load's request
// rate (tens of thousands per second over a few workers) is far above what
// the workers could serve, so publishing per selection would measure an
// event rate no cluster of that size produces. Every selection response's
// overlap.gpu is read (one backward search in the body), and the report
// gives mean_overlap_blocks, the chosen worker's matched blocks per
// successful selection, beside mean_prompt_blocks.
//
// Each of Config.Concurrency client goroutines owns its request, response,
// buffers and two Histograms (every call, and the selection calls alone); they
// share one fasthttp.HostClient with MaxConns above the goroutine count and
// one atomic operation counter. Nothing is shared on the request path beyond
// that; histograms and counters are merged after the run.
//
// An operation is one call (mix select), select_and_reserve plus DELETE
// (reserve), select_and_reserve, prefill_complete, Config.OutputBlocks
// output_block calls and DELETE (lifecycle), or POST /disagg/plan, POST
// /disagg/{id}/prefill_complete and DELETE /disagg/{id} over a prefill and
// a decode pool of Config.Workers workers each (disagg; disagg.go). Selection ids are generated by
// the client (run nonce, goroutine, sequence), so lifecycle URLs need no
// response parsing. An operation whose select_and_reserve fails stops there;
// one that started is always finished, even after the window or a
// cancellation, so leaks are the server's.
//
// # Closed and open loop
//
// Closed loop (Config.Rate 0): each goroutine runs operations back to back;
// latency and throughput are tied by Little's law, so at C1024 the figure of
// merit is the ratio to the no-op baseline.
//
// Open loop (Config.Rate > 0): operation k is intended at start + k/Rate; a
// free goroutine takes the next k, sleeps until then if it is ahead, and
// times the first call from the intended time. When the server stalls every
// goroutine, later operations are sent late and their wait is counted, not
// omitted (coordinated omission). The backlog intended before the end is
// drained for at most max(Duration, 1 s) after it; what is still unsent is
// counted under errors["unsent"].
//
// # Is the client the bottleneck?
//
// The report answers from three figures of the same run: the no-op
// baseline's rate (what this client reaches with the same bodies when the
// server does nothing: if the selector's rate is well below it, the client
// was not what limited it), the client goroutines' own time outside the call
// per call and as a share of their time (Result.Client), and the process's
// CPU in cores over the window (the client alone against an external target).
// On a 2-core machine the client still takes CPU from a server on the same
// machine; only the same-run ratio is portable.
//
// # Routing-quality simulation
//
// Package bench/sim (`kvselect bench --simulate`) replays a workload of
// this package in virtual time through simulated vLLM engines (package
// bench/sim/vllm: continuous batching, chunked prefill, prefix caching,
// preemption, and step times fitted to a published profile of
// Meta-Llama-3-8B on an A100 80GB, cited in vllm.StepModel) routed by the
// selector's policies, round-robin and random, at load levels relative to
// the capacity it measures, and reports KV hit rate, TTFT, end-to-end
// latency, throughput, preemptions and load balance per policy. It uses
// the harness's Control client, KVPublisher and token streams
// (StreamHashes) and adds its loop, its policies and its report.
//
// The synthetic workload has presets for it (Config.Workload
// "synthetic:chat", multi-turn chat, and "synthetic:agent", agentic
// sessions whose answers are mostly tool calls followed by tool results,
// marked Prompt.ToolResult), and a trace can be replayed several times
// (Config.TraceRepeat, RepeatTrace) to make a longer one.
//
// # Simulated engines
//
// The package also holds the simulated engine used by the load runs,
// `kvselect mocker`, the end-to-end tests and the benchmarks:
// Engine, a vLLM-like engine with one KV block pool of fixed
// capacity (LRU eviction) and one zmqpub.Publisher per data-parallel rank,
// publishing real BlockStored / BlockRemoved / AllBlocksCleared batches
// with the vLLM encoder (zmqin.Encoder), with a replay socket; and
// Workload (engine_workload.go), a synthetic token-prompt generator for
// engines.
//
// # Using an Engine
//
//  1. NewEngine binds every rank's PUB (and replay ROUTER) socket; rank r
//     uses the configured port plus r, as vLLM does, or a free port each
//     when the port is 0 (Endpoints tells which).
//  2. Register the engine's endpoints with the selector (kv_events_endpoints
//     keyed by rank, replay_endpoint for a single rank) and wait until it
//     subscribes (Subscribers): a PUB drops what it publishes before.
//  3. ServeTokens "serves" a prompt on a rank: cached leading blocks are
//     hits, the rest are stored, evicting least recently used blocks, and
//     one batch describing the change is published. Clear resets a rank.
//  4. Close closes the publishers.
//
// Engine hashes are a chain over the blocks' local hashes (ChainHashes),
// so they depend on the whole prefix, as vLLM's do; the selector matches by
// the local hashes of the tokens, which it computes itself.
//
// # An engine's OpenAI endpoint
//
// Engine.ServeOpenAI serves what vLLM's OpenAI server answers
// (vllm-project/vllm:vllm/entrypoints/openai/protocol.py) over the
// engine's pool, on a listener of its own (engine_http.go,
// engine_openai.go): POST /v1/completions (a prompt of text or of token
// ids) and POST /v1/chat/completions serve the prompt's tokens on rank 0
// (or vLLM's X-data-parallel-rank) through ServeTokens, so its KV events
// are published before a token is answered, then generate max_tokens
// simulated tokens, streamed as SSE chunks (a final usage chunk with
// stream_options.include_usage, then data: [DONE]) or in one JSON body;
// usage.prompt_tokens_details.cached_tokens is what the pool held of the
// prompt. GET /v1/models and GET /health answer too; errors are
// OpenAI's {"error": {...}} envelope. Without OpenAIConfig.Tokenizer a
// text is tokenized as its UTF-8 bytes, and a chat's messages are
// rendered by the engine's own fixed template (chatTokens), so a
// conversation's turns share their prefix blocks either way. Request
// bodies and max_tokens are bounded (OpenAIConfig).
//
// # Goroutines
//
// An Engine starts none of its own; each rank's zmqpub.Publisher runs its
// accept loops and per-peer goroutines (see zmqpub.Publisher) until Close.
// An OpenAIServer runs its http.Server (the accept loop, one goroutine per
// connection) until its own Close, which waits for every handler.
package bench
