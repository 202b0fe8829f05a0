package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/zmqin"
)

// runMocker is `kvselect mocker`: simulated vLLM engines publishing real
// ZMQ KV events, each answering OpenAI completions and chat requests on
// its HTTP endpoint (bench.OpenAIServer), until SIGINT or SIGTERM.
func runMocker(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mocker(ctx, args, os.Stdout, os.Stderr)
}

// mockWorker is the part of a POST /workers body that describes a mocked
// engine, printed one JSON object per line on start: endpoint is its
// OpenAI HTTP endpoint (mock://engine-N with -http-base-port -1).
type mockWorker struct {
	WorkerID         uint64            `json:"worker_id"`
	Endpoint         string            `json:"endpoint"`
	BlockSize        int               `json:"block_size"`
	DPSize           int               `json:"data_parallel_size"`
	KVEventsEndpoint map[string]string `json:"kv_events_endpoints"`
	ReplayEndpoint   string            `json:"replay_endpoint,omitempty"`
	TotalKVBlocks    int               `json:"total_kv_blocks"`
}

// mocker parses flags, starts the engines and their prompt drivers, prints
// one worker description per engine on stdout, and runs until ctx is done.
// Goroutines: one driver per engine with a non-zero rate (stops with ctx),
// plus each engine's publishers and HTTP server (closed on return).
func mocker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvselect mocker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engines := fs.Int("engines", 1, "number of simulated engines")
	ranks := fs.Int("ranks", 1, "data-parallel ranks per engine (one PUB socket each)")
	blockSize := fs.Int("block-size", 16, "KV block size in tokens")
	capacity := fs.Int("capacity", 4096, "KV pool capacity per rank, in blocks")
	host := fs.String("host", "127.0.0.1", "address to bind (\"*\" for every interface)")
	basePort := fs.Int("base-port", 0, "PUB port of engine 0 rank 0; engine e rank r uses base-port + e*ranks + r; 0 (default) picks free ports, so mockers and real engines (vLLM publishes on 5557) run side by side; the printed descriptions name them")
	replayPort := fs.Int("replay-base-port", 0, "replay ROUTER port, numbered like base-port; 0 disables replay (when base-port is 0, any non-zero value enables replay on free ports)")
	encoding := fs.String("encoding", "map", "event encoding: map (vLLM after #42892) or array (vLLM <= 0.23, SGLang)")
	hashes := fs.String("hashes", "unsigned", "block hash form: unsigned, signed or bytes")
	topic := fs.String("topic", "", "topic frame of every message")
	rate := fs.Float64("rate", 10, "prompts per second per engine (0: publish nothing)")
	groups := fs.Int("groups", 8, "distinct shared prefixes in the synthetic workload")
	prefixBlocks := fs.Int("prefix-blocks", 32, "blocks of each shared prefix")
	suffixBlocks := fs.Int("suffix-blocks", 8, "unique blocks after the prefix")
	seed := fs.Uint64("seed", 1, "workload seed")
	workerBase := fs.Uint64("worker-id-base", 1, "worker_id of engine 0 (engine e is base + e)")
	httpPort := fs.Int("http-base-port", 0, "port of engine 0's OpenAI HTTP endpoint (POST /v1/completions, /v1/chat/completions, GET /v1/models, /health); engine e uses http-base-port + e; 0 (default) picks free ports, so two mockers run side by side; -1 serves no HTTP")
	modelName := fs.String("served-model-name", "", "model the HTTP endpoints serve (vLLM's --served-model-name): a request naming another is a 404; empty (default): any model name is answered")
	maxTokens := fs.Int("max-tokens", bench.DefaultOpenAIMaxTokens, "tokens generated for a request without max_tokens")
	tokenInterval := fs.Duration("token-interval", 0, "pause between two streamed tokens of a response (an inter-token latency; 0: none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := newLogs(stderr, parseLogEnv(os.LookupEnv)).logger("kvselect::mocker")
	enc := zmqin.Encoder{}
	switch *encoding {
	case "map":
		enc.Encoding = zmqin.EncodingMap
	case "array":
		enc.Encoding = zmqin.EncodingArray
	default:
		log.Error("mocker: -encoding: want map or array", "encoding", *encoding)
		return 2
	}
	switch *hashes {
	case "unsigned":
		enc.Hashes = zmqin.HashUnsigned
	case "signed":
		enc.Hashes = zmqin.HashSigned
	case "bytes":
		enc.Hashes = zmqin.HashBytes
	default:
		log.Error("mocker: -hashes: want unsigned, signed or bytes", "hashes", *hashes)
		return 2
	}
	if *engines < 1 || *ranks < 1 || *rate < 0 || *maxTokens < 1 || *tokenInterval < 0 {
		log.Error("mocker: -engines, -ranks and -max-tokens must be >= 1, -rate and -token-interval >= 0")
		return 2
	}
	if *httpPort < -1 || *httpPort > 65535-*engines+1 {
		log.Error("mocker: -http-base-port: want -1, 0 or a port with room for every engine", "http-base-port", *httpPort)
		return 2
	}
	bindHost := *host
	if bindHost == "*" {
		bindHost = ""
	}
	openai := bench.OpenAIConfig{Model: *modelName, AnyModel: *modelName == "", DefaultMaxTokens: *maxTokens, TokenInterval: *tokenInterval}
	ep := func(base, e int) string {
		if base == 0 {
			return "tcp://" + net.JoinHostPort(*host, "0")
		}
		return "tcp://" + net.JoinHostPort(*host, strconv.Itoa(base+e**ranks))
	}

	var all []*bench.Engine
	var servers []*bench.OpenAIServer
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
		for _, e := range all {
			_ = e.Close()
		}
	}()
	out := json.NewEncoder(stdout)
	for i := range *engines {
		cfg := bench.EngineConfig{
			Ranks: *ranks, BlockSize: *blockSize, CapacityBlocks: *capacity,
			Endpoint: ep(*basePort, i), Topic: *topic, Encoder: enc,
		}
		if *replayPort != 0 {
			cfg.ReplayEndpoint = ep(*replayPort, i)
			if *basePort == 0 {
				cfg.ReplayEndpoint = ep(0, i)
			}
		}
		e, err := bench.NewEngine(cfg)
		if err != nil {
			log.Error("mocker: engine", "engine", i, "err", err)
			return 1
		}
		all = append(all, e)
		endpoint := fmt.Sprintf("mock://engine-%d", i)
		if *httpPort >= 0 {
			port := 0
			if *httpPort > 0 {
				port = *httpPort + i
			}
			srv, err := e.ServeOpenAI(net.JoinHostPort(bindHost, strconv.Itoa(port)), openai)
			if err != nil {
				log.Error("mocker: engine's HTTP endpoint (-http-base-port)", "engine", i, "err", err)
				return 1
			}
			servers = append(servers, srv)
			endpoint = srv.URL()
		}
		w := mockWorker{
			WorkerID: *workerBase + uint64(i), Endpoint: endpoint,
			BlockSize: *blockSize, DPSize: *ranks, KVEventsEndpoint: map[string]string{},
			TotalKVBlocks: *capacity,
		}
		for r, s := range e.Endpoints() {
			w.KVEventsEndpoint[strconv.Itoa(r)] = s
		}
		if *ranks == 1 {
			w.ReplayEndpoint = e.ReplayEndpoints()[0]
		}
		if err := out.Encode(w); err != nil {
			log.Error("mocker: writing the worker description", "err", err)
			return 1
		}
	}

	var wg sync.WaitGroup
	if *rate > 0 {
		for i, e := range all {
			wl, err := bench.NewWorkload(bench.WorkloadConfig{
				Groups: *groups, PrefixBlocks: *prefixBlocks, SuffixBlocks: *suffixBlocks,
				BlockSize: *blockSize, Seed: *seed + uint64(i),
			})
			if err != nil {
				log.Error("mocker: workload", "err", err)
				return 2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				drive(ctx, e, wl, *rate)
			}()
		}
	}
	<-ctx.Done()
	wg.Wait()
	for i, e := range all {
		st := e.Stats()
		var hs bench.OpenAIStats
		if i < len(servers) {
			_ = servers[i].Close() // its streams end before the counts are read
			hs = servers[i].Stats()
		}
		log.Info("mocker: engine done", "engine", i, "prompts", st.Prompts, "hit_blocks", st.HitBlocks, "stored", st.Stored, "evicted", st.Evicted, "batches", st.Batches,
			"http_requests", hs.Requests, "http_errors", hs.Errors, "completion_tokens", hs.CompletionTokens)
	}
	return 0
}

// drive serves workload prompts on e at rate per second, ranks in turn,
// until ctx is done.
func drive(ctx context.Context, e *bench.Engine, wl *bench.Workload, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for r := 0; ; r = (r + 1) % e.Ranks() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			toks, _ := wl.Next()
			e.ServeTokens(r, toks)
		}
	}
}
