package bench

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Mix names the sequence of calls one operation makes.
type Mix int

const (
	// MixLifecycle is select_and_reserve, prefill_complete, OutputBlocks
	// output_block calls and DELETE: what a caller of Dynamo's selection
	// service does for one LLM request.
	MixLifecycle Mix = iota
	// MixSelect is one POST /select (a query; nothing is booked).
	MixSelect
	// MixReserve is select_and_reserve then DELETE.
	MixReserve
	// MixDisagg is one disaggregated request over a prefill and a decode
	// pool (kvselect's /disagg routes, over core's plans): POST
	// /disagg/plan (both legs booked), POST /disagg/{id}/prefill_complete
	// (the prefill leg freed at the hand-off) and DELETE /disagg/{id}.
	MixDisagg
	// MixEPP is one Envoy ext_proc stream through the endpoint picker
	// (`kvselect epp`, in-process), as Envoy runs it in
	// FULL_DUPLEX_STREAMED mode: request headers, the OpenAI completions
	// body, the pick, the echoed body, response headers, OutputBlocks SSE
	// chunks of one block of tokens each, end of stream (bench/extproc's
	// package doc); against a no-op ext_proc server on the same gRPC
	// stack as the baseline (see runEPP).
	MixEPP
)

var mixNames = [...]string{MixLifecycle: "lifecycle", MixSelect: "select", MixReserve: "reserve", MixDisagg: "disagg", MixEPP: "epp"}

func (m Mix) String() string {
	if int(m) < len(mixNames) {
		return mixNames[m]
	}
	return fmt.Sprintf("Mix(%d)", int(m))
}

// ParseMix parses "select", "reserve", "lifecycle", "disagg" or "epp".
func ParseMix(s string) (Mix, error) {
	for i, n := range mixNames {
		if s == n {
			return Mix(i), nil
		}
	}
	return 0, fmt.Errorf("%w: mix %q (want select, reserve, lifecycle, disagg or epp)", ErrConfig, s)
}

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("bench: invalid config")

// ErrNoServer is returned by Run when Config.Target is empty and no
// Config.StartServer hook was supplied: there is nothing to measure, and the
// harness never pretends there is.
var ErrNoServer = errors.New("bench: no target: --target URL is required because an in-process kvselect server is not wired into this binary yet")

// Server is a selector StartServer started in-process.
type Server struct {
	// URL is its API's base URL ("http://127.0.0.1:port").
	URL string
	// PprofURL is its pprof base on the debug listener, "" when it serves
	// no profiles.
	PprofURL string
	// Stop stops it.
	Stop func()
}

// EPPServer is an endpoint picker StartEPP started in-process.
type EPPServer struct {
	// GRPCAddr is its ext_proc port (host:port).
	GRPCAddr string
	// URL is its HTTP port's base URL (/ready, /loads, /overlap_scores,
	// /metrics).
	URL string
	// PprofURL is its pprof base, "" when it serves no profiles.
	PprofURL string
	// Stop stops it.
	Stop func()
}

// Config is a load run. Zero fields take the defaults of DefaultConfig only
// through DefaultConfig; Validate rejects what is still invalid.
type Config struct {
	// Target is the base URL of a running selector ("http://127.0.0.1:8092").
	// Empty means: start one in-process with StartServer.
	Target string
	// StartServer starts an in-process selector. It is the seam through
	// which cmd wires the server; nil means none is available (Run then
	// returns ErrNoServer when Target is empty).
	StartServer func() (Server, error)
	// Replicas is the number of selector replicas the load is spread over:
	// 0 or 1, the one selector above; 2 or more, that many in-process
	// replicas meshed over loopback ZMQ, started with StartReplicas (which
	// also starts one replica alone for the same-run comparison; see Run).
	Replicas int
	// StartReplicas starts n in-process replicas, each behind its own HTTP
	// server, meshed with each other when n > 1 (every replica a peer of
	// every other, subscribed both ways before it returns), and a stop
	// function. It is the seam through which cmd wires them.
	StartReplicas func(n int) (replicas []Replica, stop func(), err error)
	// StartAltReplicas, when set with Replicas > 1, starts n replicas
	// meshed over another bus (cmd's --event-plane nats: the NATS event
	// plane), kept up and measured in the same rounds as the ZMQ mesh,
	// after it, and reported beside it (ReplicaReport.Alt); AltLabel names
	// the bus.
	StartAltReplicas func(n int) (replicas []Replica, stop func(), err error)
	AltLabel         string
	// ProbeInterval is the pause between two propagation probes of a
	// replica run (see Propagation).
	ProbeInterval time.Duration
	// Rounds is the number of alternating windows a replica run measures
	// one replica and the replicas in, and a run with Baseline "noop" the
	// baseline and the selector in, Duration/Rounds each (see Run).
	Rounds int

	// Concurrency is the number of client goroutines. In the closed loop each
	// runs one operation after another; in the open loop it is the pool that
	// serves the arrival schedule (the bound on operations in flight).
	Concurrency int
	// Rate, when positive, selects the open loop: operations (arrivals) per
	// second on a fixed schedule, latency measured from the intended send
	// time. Zero selects the closed loop.
	Rate float64
	// Warmup runs before Duration; nothing started in it is recorded.
	Warmup   time.Duration
	Duration time.Duration
	Mix      Mix
	// OutputBlocks is the number of output_block calls in a lifecycle.
	OutputBlocks int

	// Workload is "synthetic" (Synthetic's shape), "synthetic:NAME" (a
	// SyntheticPreset with Synthetic.Prompts prompts) or "trace:FILE".
	Workload  string
	Synthetic SyntheticConfig
	// TraceRepeat replays a trace this many times (0 or 1: once), each
	// copy after the previous one by the trace's span plus one mean gap
	// between arrivals, its hash ids offset so that no copy shares content
	// with another (RepeatTrace).
	TraceRepeat int
	// TraceLimit replays only a trace's first TraceLimit records (0: all),
	// before TraceRepeat.
	TraceLimit int
	// Seed makes the synthetic workload reproducible.
	Seed int64
	// BlockSize is the registered KV block size in tokens; it must divide the
	// Mooncake block of 512 tokens for trace workloads.
	BlockSize int
	// PromptForm is how selection bodies carry a prompt: PromptHashes (the
	// default), PromptTokens (see Prompt) or PromptText (Tokenizer's text;
	// the selector needs the same model's tokenizer).
	PromptForm string
	// Tokenizer is the model's tokenizer of the text form, the one the
	// selector was given (serve --model-path); nil otherwise.
	Tokenizer Tokenizer

	// Workers is the number of workers registered with POST /workers before
	// the run (ids 1..Workers). Zero registers none and only waits for /ready.
	// With MixDisagg it is the size of each pool: prefill workers 1..Workers
	// and decode workers Workers+1..2*Workers (see DisaggWorkers).
	Workers int
	// KVEventsEndpoints, when non-empty, gives each worker i the ZMQ endpoint
	// KVEventsEndpoints[i % len] as its rank-0 kv_events_endpoints entry.
	KVEventsEndpoints []string
	// TotalKVBlocks is registered as each worker's total_kv_blocks (0 omits it).
	TotalKVBlocks int
	// MaxBatchedTokens is registered as each worker's
	// max_num_batched_tokens (0 omits it; a selector with a router queue
	// requires it).
	MaxBatchedTokens int
	// EngineBlocks, when positive and KVEventsEndpoints is empty, makes Run
	// start one simulated Engine per worker (one rank, a KV pool of
	// EngineBlocks blocks, publishing on a free loopback port) and register
	// its endpoint as the worker's kv_events_endpoints, so the selector runs
	// a live KV-event listener per worker. The selector must reach
	// 127.0.0.1.
	EngineBlocks int
	// Fill warms the engines' pools from the workload before the selector's
	// load, through their real KV events (see Run), so that selections
	// match real prefixes; it needs EngineBlocks. Without it the engines
	// publish nothing and the index stays empty.
	Fill bool
	// ReadyTimeout bounds the wait for GET /ready to answer 200.
	ReadyTimeout time.Duration
	// Timeout bounds each HTTP call of the load (read and write).
	Timeout time.Duration

	// StartEPP starts the endpoint picker of MixEPP in-process with its
	// workers from workersFile ({"workers": [POST /workers bodies]}, the
	// harness's workers and engines): the seam through which cmd wires
	// `kvselect epp`.
	StartEPP func(workersFile string) (EPPServer, error)
	// EPPConns is the gRPC connections MixEPP's client opens to each
	// ext_proc server (Envoy opens one per worker thread); 0: 4.
	EPPConns int

	// Baseline is "" (none) or "noop": the same client and bodies against an
	// in-process no-op fasthttp handler on loopback, in the same run.
	Baseline string

	// ProfileDir, when set, receives cpu, heap, mutex and block profiles
	// fetched from PprofURL during the selector's measured window.
	ProfileDir string
	// PprofURL is the pprof base ("http://host:port/debug/pprof"): the
	// selector's debug listener, not its API port. Empty means the
	// in-process server's (Server.PprofURL); with a Target and a
	// ProfileDir it is required.
	PprofURL string

	// Progress, when non-nil, receives a one-line progress bar redrawn with
	// carriage returns (give it a terminal; see IsTerminal).
	Progress io.Writer
	// Log receives short status lines (registration, phases); nil discards.
	Log io.Writer
}

// SyntheticConfig shapes the synthetic workload: families of conversations
// share a system prompt; each conversation grows by its previous answer and a
// new user message per turn. Lengths are in tokens, drawn uniformly in
// [Min, Max].
type SyntheticConfig struct {
	Prompts        int // prompts generated (the run cycles over them)
	Families       int // distinct system prompts
	SystemMin      int
	SystemMax      int
	TurnsMin       int
	TurnsMax       int
	UserMin        int
	UserMax        int
	OutputMin      int // answer length, appended to the history of the next turn
	OutputMax      int
	ActiveSessions int    // conversations interleaved at any time
	VocabSize      uint32 // token ids are drawn from [0, VocabSize)
	// ToolTurnProb is the probability that a turn's answer is a tool call
	// (ToolCallMin..ToolCallMax tokens) and the conversation's next turn
	// brings the tool's result (ToolMin..ToolMax tokens) instead of a user
	// message: an agent's loop. 0: every turn is a user's.
	ToolTurnProb             float64
	ToolMin, ToolMax         int
	ToolCallMin, ToolCallMax int
}

// SyntheticPreset returns a named shape of the synthetic workload
// (Workload "synthetic:NAME"), with the given prompt count:
//
//   - "chat": multi-turn chat, as DefaultSynthetic but 2-12 turns, so that
//     most prompts continue a conversation;
//   - "short": one-turn prompts of at most 256 tokens (a 64-128-token
//     system prompt of 16 families, a 16-128-token user message);
//   - "agent": agentic sessions: 8 agents whose 4-8k-token system prompts
//     (instructions and tool schemas) start 8-32-turn sessions in which 85%
//     of the answers are 16-128-token tool calls followed by a
//     256-4,096-token tool result; contexts grow to tens of thousands of
//     tokens, so that a few sessions fill an engine's KV pool.
func SyntheticPreset(name string, prompts int) (SyntheticConfig, bool) {
	c := DefaultSynthetic()
	c.Prompts = prompts
	switch name {
	case "chat":
		c.TurnsMin, c.TurnsMax = 2, 12
	case "short":
		// At most 256 tokens a prompt: 64-128 shared system tokens and one
		// 16-128-token user turn (the epp mix's short-prompt target).
		c.SystemMin, c.SystemMax = 64, 128
		c.TurnsMin, c.TurnsMax = 1, 1
		c.UserMin, c.UserMax = 16, 128
	case "agent":
		c.Families, c.SystemMin, c.SystemMax = 8, 4096, 8192
		c.TurnsMin, c.TurnsMax = 8, 32
		c.UserMin, c.UserMax = 64, 512
		c.ActiveSessions = 32
		c.ToolTurnProb, c.ToolMin, c.ToolMax, c.ToolCallMin, c.ToolCallMax = 0.85, 256, 4096, 16, 128
	default:
		return SyntheticConfig{}, false
	}
	return c, true
}

// DefaultSynthetic is 4,096 prompts from 16 families, 1-4k-token system
// prompts, 1-8 turns of 32-512-token user messages and 64-512-token answers,
// 64 conversations interleaved.
func DefaultSynthetic() SyntheticConfig {
	return SyntheticConfig{
		Prompts: 4096, Families: 16,
		SystemMin: 1024, SystemMax: 4096,
		TurnsMin: 1, TurnsMax: 8,
		UserMin: 32, UserMax: 512,
		OutputMin: 64, OutputMax: 512,
		ActiveSessions: 64,
		VocabSize:      128000,
	}
}

// DefaultConfig returns the defaults of `kvselect bench`: C1024 closed loop,
// lifecycle mix with 3 output blocks, synthetic workload, 8 workers of block
// size 16, 10 s measured after 2 s of warm-up.
func DefaultConfig() Config {
	return Config{
		Concurrency:  1024,
		Warmup:       2 * time.Second,
		Duration:     10 * time.Second,
		Mix:          MixLifecycle,
		OutputBlocks: 3,
		Workload:     "synthetic",
		Synthetic:    DefaultSynthetic(),
		Seed:         1,
		BlockSize:    16,
		PromptForm:   PromptHashes,
		Workers:      8,
		ReadyTimeout: 10 * time.Second,
		Timeout:      30 * time.Second,

		ProbeInterval: 10 * time.Millisecond,
		Rounds:        5,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrConfig}, a...)...) }
	switch {
	case c.Concurrency < 1:
		return bad("concurrency %d < 1", c.Concurrency)
	case c.Rate < 0:
		return bad("rate %v < 0", c.Rate)
	case c.Duration <= 0:
		return bad("duration %v <= 0", c.Duration)
	case c.Warmup < 0:
		return bad("warmup %v < 0", c.Warmup)
	case c.OutputBlocks < 0:
		return bad("output blocks %d < 0", c.OutputBlocks)
	case c.BlockSize < 1:
		return bad("block size %d < 1", c.BlockSize)
	case c.Workers < 0:
		return bad("workers %d < 0", c.Workers)
	case c.Mix < MixLifecycle || c.Mix > MixEPP:
		return bad("mix %v", c.Mix)
	case c.Baseline != "" && c.Baseline != "noop":
		return bad("baseline %q (want noop or empty)", c.Baseline)
	case c.Timeout <= 0 || c.ReadyTimeout <= 0:
		return bad("timeouts must be positive")
	case c.PromptForm != PromptHashes && c.PromptForm != PromptTokens && c.PromptForm != PromptText:
		return bad("prompt form %q (want %s, %s or %s)", c.PromptForm, PromptHashes, PromptTokens, PromptText)
	case c.PromptForm == PromptText && c.Tokenizer == nil:
		return bad("prompt form %s needs the model's tokenizer", PromptText)
	case c.EngineBlocks < 0:
		return bad("engine blocks %d < 0", c.EngineBlocks)
	case c.Fill && (c.EngineBlocks == 0 || len(c.KVEventsEndpoints) > 0):
		return bad("fill needs the harness's own engines (engine blocks > 0, no KV events endpoints given)")
	case c.Replicas < 0:
		return bad("replicas %d < 0", c.Replicas)
	case c.Replicas > 1 && (c.Target != "" || c.StartReplicas == nil):
		return bad("%d replicas need in-process replicas (no target; the host's StartReplicas)", c.Replicas)
	case c.StartAltReplicas != nil && c.Replicas < 2:
		return bad("replicas over another bus need --replicas > 1")
	case c.Replicas > 1 && c.ProbeInterval <= 0:
		return bad("probe interval %v <= 0", c.ProbeInterval)
	case (c.Replicas > 1 || c.Baseline != "") && (c.Rounds < 1 || c.Duration/time.Duration(max(1, c.Rounds)) <= 0):
		return bad("rounds %d: want >= 1 and at most duration %v in nanoseconds", c.Rounds, c.Duration)
	case c.Replicas > 1 && c.Mix == MixDisagg:
		// A plan lives in the process that made it (its legs replicate);
		// the probe books in the default pool, which the mix leaves empty.
		return bad("the disagg mix runs against one replica")
	case c.Mix == MixDisagg && c.Workers < 1:
		return bad("the disagg mix needs workers >= 1 (per pool)")
	case c.Mix == MixEPP && (c.StartEPP == nil || c.Target != "" || c.Replicas > 1 || len(c.KVEventsEndpoints) > 0):
		return bad("the epp mix runs against an in-process endpoint picker (the host's StartEPP; no target, one replica, the harness's engines)")
	case c.Mix == MixEPP && c.Workers < 1:
		return bad("the epp mix needs workers >= 1")
	case c.EPPConns < 0:
		return bad("epp connections %d < 0", c.EPPConns)
	}
	if _, ok := c.synthetic(); !ok && !strings.HasPrefix(c.Workload, "trace:") {
		return bad("workload %q (want synthetic, synthetic:chat, synthetic:agent, synthetic:short or trace:FILE)", c.Workload)
	}
	if c.TraceLimit < 0 {
		return bad("trace limit %d < 0", c.TraceLimit)
	}
	if c.TraceRepeat < 0 {
		return bad("trace repeat %d < 0", c.TraceRepeat)
	}
	if strings.HasPrefix(c.Workload, "trace:") && MooncakeBlockTokens%c.BlockSize != 0 {
		return bad("block size %d does not divide the trace's %d-token blocks", c.BlockSize, MooncakeBlockTokens)
	}
	if s, ok := c.synthetic(); ok {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	if c.Target != "" {
		if _, _, err := splitTarget(c.Target); err != nil {
			return err
		}
	}
	return nil
}

// Validate reports the first invalid field.
func (s *SyntheticConfig) Validate() error {
	switch {
	case s.Prompts < 1, s.Families < 1, s.ActiveSessions < 1:
		return fmt.Errorf("%w: synthetic prompts, families and sessions must be >= 1", ErrConfig)
	case s.SystemMin < 0 || s.SystemMax < s.SystemMin,
		s.TurnsMin < 1 || s.TurnsMax < s.TurnsMin,
		s.UserMin < 1 || s.UserMax < s.UserMin,
		s.OutputMin < 0 || s.OutputMax < s.OutputMin:
		return fmt.Errorf("%w: synthetic ranges must satisfy 0 <= min <= max (turns and user >= 1)", ErrConfig)
	case s.VocabSize < 2:
		return fmt.Errorf("%w: synthetic vocab size %d < 2", ErrConfig, s.VocabSize)
	case !(s.ToolTurnProb >= 0 && s.ToolTurnProb <= 1):
		return fmt.Errorf("%w: synthetic tool turn probability %v outside [0, 1]", ErrConfig, s.ToolTurnProb)
	case s.ToolTurnProb > 0 && (s.ToolMin < 1 || s.ToolMax < s.ToolMin || s.ToolCallMin < 0 || s.ToolCallMax < s.ToolCallMin):
		return fmt.Errorf("%w: synthetic tool ranges must satisfy 0 <= min <= max (tool results >= 1)", ErrConfig)
	}
	return nil
}

// splitTarget returns host:port and the path prefix of an http:// base URL.
func splitTarget(target string) (hostport, prefix string, err error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", "", fmt.Errorf("%w: target %q: %v", ErrConfig, target, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return "", "", fmt.Errorf("%w: target %q: want http://host:port", ErrConfig, target)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":80"
	}
	return host, strings.TrimSuffix(u.Path, "/"), nil
}

// synthetic returns the synthetic workload's shape when Workload names one.
func (c *Config) synthetic() (SyntheticConfig, bool) {
	switch name, ok := strings.CutPrefix(c.Workload, "synthetic:"); {
	case c.Workload == "synthetic":
		return c.Synthetic, true
	case ok:
		return SyntheticPreset(name, c.Synthetic.Prompts)
	}
	return SyntheticConfig{}, false
}
