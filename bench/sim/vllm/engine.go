package vllm

import (
	"errors"
	"fmt"
)

// Config shapes an Engine.
type Config struct {
	// BlockSize is the KV block size in tokens.
	BlockSize int
	// NumBlocks is the KV pool in blocks (vLLM's num_gpu_blocks).
	NumBlocks int
	// MaxBatchedTokens is the per-step token budget
	// (max_num_batched_tokens; vLLM's default 8,192 with chunked prefill).
	MaxBatchedTokens int
	// MaxNumSeqs caps the running requests (max_num_seqs; default 256).
	MaxNumSeqs int
	// Step is the step-time model.
	Step StepModel
}

// DefaultConfig is vLLM's scheduler defaults with Meta-Llama-3-8B on an
// A100 80GB (DefaultStepModel) at block size 64: 6,144 blocks, 393,216
// tokens of KV cache (48 GiB at 128 KiB per token: the 80 GB less the
// 16 GB of weights and vLLM's default 10% reserve, less activations).
func DefaultConfig() Config {
	return Config{BlockSize: 64, NumBlocks: 6144, MaxBatchedTokens: 8192, MaxNumSeqs: 256, Step: DefaultStepModel()}
}

// ErrConfig is the error of an invalid Config.
var ErrConfig = errors.New("vllm: invalid engine config")

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.BlockSize < 1 || c.NumBlocks < 1:
		return fmt.Errorf("%w: block size %d and blocks %d must be >= 1", ErrConfig, c.BlockSize, c.NumBlocks)
	case c.MaxBatchedTokens < 1 || c.MaxNumSeqs < 1:
		return fmt.Errorf("%w: max batched tokens %d and max seqs %d must be >= 1", ErrConfig, c.MaxBatchedTokens, c.MaxNumSeqs)
	}
	if err := c.Step.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Sink receives the pool's changes in the order they happen: what a vLLM
// engine publishes as KV events.
type Sink interface {
	// Stored: blocks [from, to) of r.Hashes became cached, in one run;
	// the parent of block from is r.Hashes[from-1] when from > 0.
	Stored(r *Request, from, to int)
	// Removed: the cached block of hash h was evicted.
	Removed(h uint64)
}

// Request is one request on an engine. The caller sets the fields above
// the line before Add and reads the rest; the engine owns it until it is
// finished.
type Request struct {
	// ID is the caller's.
	ID int
	// Hashes are the engine's block hashes of the request's token stream
	// (prompt, then output) in order, for every block that becomes full:
	// at least floor((PromptTokens+OutputTokens-1)/BlockSize) of them
	// (extra are ignored). Nonzero.
	Hashes       []uint64
	PromptTokens int // > 0
	OutputTokens int // >= 1: the first token ends the prefill
	Arrival      float64

	// ---- set by the engine ----

	// FirstToken and Finish are virtual times (0 until they happen).
	FirstToken, Finish float64
	// HitBlocks are the prompt blocks found cached at the request's
	// first admission (the prefix-cache hit the router aimed at).
	HitBlocks int
	// Preemptions counts the times the request was preempted (its blocks
	// freed, its tokens recomputed later).
	Preemptions int
	// Recomputed counts the tokens computed again after preemptions.
	Recomputed int

	computed  int     // tokens whose KV is computed (or scheduled this step)
	generated int     // output tokens produced
	blocks    []int32 // the blocks holding tokens [0, len*bs)
	ncached   int     // leading blocks registered as cached (or found cached)
	admitted  bool    // admitted once (HitBlocks set)
	sched     int     // tokens scheduled in the running step
	done      bool
}

// tokens is the request's known tokens: prompt and output so far.
func (r *Request) tokens() int { return r.PromptTokens + r.generated }

// Generated returns the output tokens produced so far.
func (r *Request) Generated() int { return r.generated }

// Outcome kinds of Engine.Finish.
const (
	FirstToken = iota // the request's prefill ended: its first token
	Finished          // the request produced its last token and left
)

// Outcome is one request's progress at the end of a step.
type Outcome struct {
	Kind int
	Req  *Request
}

// Stats are an engine's counters.
type Stats struct {
	Steps        uint64
	BusySeconds  float64
	Preemptions  uint64
	Evicted      uint64 // cached blocks evicted
	Stored       uint64 // blocks registered as cached
	HitBlocks    uint64 // prompt blocks hit at first admission
	PromptBlocks uint64 // full prompt blocks at first admission
	Recomputed   uint64 // tokens recomputed after preemptions
	MaxRunning   int
}

// Engine is one simulated vLLM engine (one data-parallel rank): a waiting
// queue, the running requests, the block pool, and the step in progress.
// It schedules as vLLM v1's scheduler does (vllm-project/vllm:
// vllm/v1/core/sched/scheduler.py, schedule()):
//
//  1. Running requests first, in order: each gets its remaining tokens
//     (one for a decode, the rest of its prompt for a prefill) up to the
//     step's token budget, and the blocks they need. When the pool cannot
//     supply them, the last running request is preempted (its blocks
//     freed, its computed tokens forgotten, back to the front of the
//     waiting queue), until the blocks fit or the request preempted itself.
//  2. Then, unless a request was preempted in this step, waiting requests
//     in order while budget, blocks and max_num_seqs allow: the longest
//     cached prefix of full blocks is taken from the pool (at most
//     (tokens-1)/block size blocks: the last token is always computed),
//     the rest is scheduled in a chunk of at most the remaining budget
//     (chunked prefill), and the request starts running.
//  3. Every full block a scheduled chunk completes is registered in the
//     prefix cache at once (reported to the Sink), as vLLM caches blocks
//     when it allocates them for a step.
//
// A step lasts Config.Step's time for what it scheduled. At its end every
// scheduled request has computed its chunk; one whose known tokens are all
// computed produces a token (its first ends the prefill), and one with all
// its output tokens finishes and frees its blocks, last block first (so a
// prompt's tail is evicted before its head).
//
// Not safe for concurrent use; time is an input.
type Engine struct {
	cfg     Config
	pool    *pool
	waiting []*Request // FIFO; index 0 is the head
	running []*Request
	// busy is set while a step runs; stepEnd is when it ends.
	busy    bool
	stepEnd float64
	sched   []*Request // the requests of the running step
	out     []Outcome
	stats   Stats
}

// New returns an idle engine whose pool reports to sink.
func New(cfg Config, sink Sink) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, pool: newPool(cfg.NumBlocks, sink)}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Add queues r at the waiting queue's tail.
func (e *Engine) Add(r *Request) {
	if r.PromptTokens < 1 || r.OutputTokens < 1 {
		panic("BUG: vllm: a request needs a prompt and at least one output token")
	}
	if need := (r.PromptTokens + r.OutputTokens - 1) / e.cfg.BlockSize; len(r.Hashes) < need {
		panic(fmt.Sprintf("BUG: vllm: request %d has %d block hashes, needs %d", r.ID, len(r.Hashes), need))
	}
	if (r.PromptTokens+r.OutputTokens+e.cfg.BlockSize-1)/e.cfg.BlockSize > e.cfg.NumBlocks {
		panic(fmt.Sprintf("BUG: vllm: request %d cannot fit in the pool", r.ID))
	}
	e.waiting = append(e.waiting, r)
}

// Busy reports whether a step is running; StepEnd is its end.
func (e *Engine) Busy() bool       { return e.busy }
func (e *Engine) StepEnd() float64 { return e.stepEnd }

// Load returns the waiting and running requests.
func (e *Engine) Load() (waiting, running int) { return len(e.waiting), len(e.running) }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Evicted = e.pool.evicted
	return s
}

// CachedPrefix returns how many leading blocks of hashes the pool holds.
func (e *Engine) CachedPrefix(hashes []uint64) int {
	n := 0
	for n < len(hashes) && e.pool.lookup(hashes[n]) >= 0 {
		n++
	}
	return n
}

// Start schedules a step at now if the engine is idle and has work, and
// reports whether one started.
func (e *Engine) Start(now float64) bool {
	if e.busy {
		return false
	}
	e.schedule()
	if len(e.sched) == 0 {
		return false
	}
	d := e.stepTime()
	e.busy, e.stepEnd = true, now+d
	e.stats.Steps++
	e.stats.BusySeconds += d
	return true
}

// Finish ends the running step at StepEnd and returns the outcomes,
// valid until the next call (the slice is reused). The caller then calls
// Start(StepEnd()) for the next step.
func (e *Engine) Finish() []Outcome {
	if !e.busy {
		panic("BUG: vllm: Finish without a running step")
	}
	now := e.stepEnd
	e.busy = false
	e.out = e.out[:0]
	for _, r := range e.sched {
		r.computed += r.sched
		r.sched = 0
		if r.computed < r.tokens() {
			continue // a prefill chunk that is not the last
		}
		r.generated++
		if r.generated == 1 {
			r.FirstToken = now
			e.out = append(e.out, Outcome{FirstToken, r})
		}
		if r.generated >= r.OutputTokens {
			r.Finish, r.done = now, true
			e.out = append(e.out, Outcome{Finished, r})
		}
	}
	e.sched = e.sched[:0]
	kept := e.running[:0]
	for _, r := range e.running {
		if r.done {
			e.freeBlocks(r)
			continue
		}
		kept = append(kept, r)
	}
	clear(e.running[len(kept):])
	e.running = kept
	return e.out
}

// schedule fills e.sched for one step (see Engine).
func (e *Engine) schedule() {
	budget := e.cfg.MaxBatchedTokens
	preempted := false
running:
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.tokens()-r.computed, budget)
		for !e.allocate(r, r.computed+n) {
			// The victim is the last running request, never one
			// scheduled before r in this step.
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				break running // nothing more fits in this step
			}
		}
		e.scheduleChunk(r, n)
		budget -= n
	}
	for !preempted && len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		r := e.waiting[0]
		hit := e.takePrefix(r)
		n := min(r.tokens()-r.computed, budget)
		if !e.allocate(r, r.computed+n) {
			e.freeBlocks(r) // gives the prefix back
			r.computed, r.ncached = 0, 0
			break
		}
		if r.Preemptions > 0 {
			// What the prefix does not cover is computed again.
			again := r.tokens() - r.computed
			e.stats.Recomputed += uint64(again)
			r.Recomputed += again
		}
		if !r.admitted {
			r.admitted, r.HitBlocks = true, hit
			e.stats.HitBlocks += uint64(hit)
			e.stats.PromptBlocks += uint64(r.PromptTokens / e.cfg.BlockSize)
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		e.scheduleChunk(r, n)
		budget -= n
	}
	e.stats.MaxRunning = max(e.stats.MaxRunning, len(e.running))
}

// takePrefix gives a request without computed tokens the longest cached
// prefix of full blocks (at most (tokens-1)/bs blocks) and returns its
// length in blocks.
func (e *Engine) takePrefix(r *Request) int {
	if r.computed > 0 || len(r.blocks) > 0 {
		panic("BUG: vllm: prefix lookup for a request with computed tokens")
	}
	limit := min((r.tokens()-1)/e.cfg.BlockSize, len(r.Hashes))
	for len(r.blocks) < limit {
		b := e.pool.lookup(r.Hashes[len(r.blocks)])
		if b < 0 {
			break
		}
		e.pool.touch(b)
		r.blocks = append(r.blocks, b)
	}
	hit := len(r.blocks)
	r.ncached = hit
	r.computed = hit * e.cfg.BlockSize
	return hit
}

// allocate gives r the blocks for its first upto tokens, all or none.
func (e *Engine) allocate(r *Request, upto int) bool {
	need := (upto+e.cfg.BlockSize-1)/e.cfg.BlockSize - len(r.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.free() {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.pool.alloc())
	}
	return true
}

// scheduleChunk puts n tokens of r in the step and registers the blocks
// they complete in the prefix cache.
func (e *Engine) scheduleChunk(r *Request, n int) {
	r.sched = n
	e.sched = append(e.sched, r)
	full := min((r.computed+n)/e.cfg.BlockSize, len(r.Hashes))
	for from := r.ncached; r.ncached < full; {
		k := r.ncached
		ok := e.pool.cache(r.blocks[k], r.Hashes[k])
		r.ncached++
		if !ok || r.ncached == full {
			to := k
			if ok {
				to = k + 1
			}
			if to > from {
				e.stats.Stored += uint64(to - from)
				e.pool.sink.Stored(r, from, to)
			}
			from = k + 1
		}
	}
}

// preempt frees a running request and puts it back at the waiting
// queue's head, to be recomputed.
func (e *Engine) preempt(r *Request) {
	e.freeBlocks(r)
	r.computed, r.ncached, r.sched = 0, 0, 0
	r.Preemptions++
	e.stats.Preemptions++
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = r
}

// freeBlocks releases r's blocks, last first.
func (e *Engine) freeBlocks(r *Request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
}

// stepTime is the duration of the scheduled step (StepModel).
func (e *Engine) stepTime() float64 {
	tokens := 0
	var attn float64
	for _, r := range e.sched {
		tokens += r.sched
		attn += e.cfg.Step.Attention(r.computed, r.sched)
	}
	return e.cfg.Step.Linear(tokens) + attn
}

// Used returns the blocks referenced by running requests and the blocks
// holding a cached prefix (referenced or not).
func (e *Engine) Used() (referenced, cached int) {
	return e.cfg.NumBlocks - e.pool.free(), e.pool.cachedBlocks()
}
