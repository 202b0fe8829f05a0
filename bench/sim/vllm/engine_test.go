package vllm

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// recorder is a Sink that logs the pool's changes.
type recorder struct{ log []string }

func (s *recorder) Stored(r *Request, from, to int) {
	s.log = append(s.log, fmt.Sprintf("stored r%d [%d,%d)", r.ID, from, to))
}
func (s *recorder) Removed(h uint64) { s.log = append(s.log, fmt.Sprintf("removed %d", h)) }

// hashes returns n block hashes base+1 .. base+n.
func hashes(base uint64, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = base + uint64(i) + 1
	}
	return hs
}

// unitModel makes a step cost 1 s plus 1 ms per token, no attention: easy
// times to check by hand.
var unitModel = StepModel{Weights: 1, PerToken: 0}

func testEngine(t *testing.T, blocks, budget int, sink Sink) *Engine {
	t.Helper()
	e, err := New(Config{BlockSize: 4, NumBlocks: blocks, MaxBatchedTokens: budget, MaxNumSeqs: 256, Step: unitModel}, sink)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run drives e until idle from now, returning the outcomes in order.
func run(e *Engine, now float64) []string {
	var log []string
	for e.Start(now) {
		now = e.StepEnd()
		for _, o := range e.Finish() {
			log = append(log, fmt.Sprintf("t%g r%d %s", now, o.Req.ID, map[int]string{FirstToken: "first", Finished: "done"}[o.Kind]))
		}
	}
	return log
}

// TestStepModelFitsTheProfile: the default model against points of the
// Vidur profile it was fitted to (Meta-Llama-3-8B, A100 80GB, the sum of
// the operators' medians over 32 layers plus the embedding, in ms).
func TestStepModelFitsTheProfile(t *testing.T) {
	m := DefaultStepModel()
	for _, p := range []struct {
		tokens int
		ms     float64
		tol    float64
	}{{1, 9.763, 0.001}, {256, 19.63, 0.03}, {512, 34.88, 0.03}, {4096, 275.28, 0.01}, {8192, 547.96, 0.01}, {32768, 2193.11, 0.01}} {
		got := 1000 * m.Linear(p.tokens)
		if math.Abs(got-p.ms)/p.ms > p.tol {
			t.Errorf("T=%d: %.2f ms, profile %.2f ms", p.tokens, got, p.ms)
		}
	}
	// Decode attention is memory-bound, a long prefill chunk compute-bound.
	if got, want := m.Attention(1024, 1), 1025*m.PerKVToken; got != want {
		t.Errorf("decode attention %v, want %v", got, want)
	}
	if got, want := m.Attention(0, 8192), m.PerPair*8192*8193/2; got != want {
		t.Errorf("prefill attention %v, want %v", got, want)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []StepModel{{}, {Weights: -1}, {Weights: 1, PerPair: math.NaN()}, {Weights: math.Inf(1)}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestPrefixHitsFullBlocksOnly: a hit covers only full blocks, and never
// the block of the prompt's last token.
func TestPrefixHitsFullBlocksOnly(t *testing.T) {
	for _, c := range []struct{ prompt, want int }{
		{10, 2}, // blocks [0,4) [4,8) full, [8,10) partial
		{8, 1},  // the last token's block is computed again
		{3, 0},  // no full block
	} {
		e := testEngine(t, 64, 100, &recorder{})
		a := &Request{ID: 1, Hashes: hashes(0, 8), PromptTokens: 16, OutputTokens: 1}
		e.Add(a)
		run(e, 0)
		b := &Request{ID: 2, Hashes: hashes(0, 8), PromptTokens: c.prompt, OutputTokens: 1}
		e.Add(b)
		run(e, 10)
		if b.HitBlocks != c.want {
			t.Errorf("prompt %d tokens: hit %d blocks, want %d", c.prompt, b.HitBlocks, c.want)
		}
	}
}

// TestChunkedPrefillBudget: a long prompt is prefilled in chunks of the
// token budget, sharing steps with a decode; the first token comes at the
// end of the last chunk.
func TestChunkedPrefillBudget(t *testing.T) {
	rec := &recorder{}
	e := testEngine(t, 64, 8, rec)
	short := &Request{ID: 1, Hashes: hashes(0, 4), PromptTokens: 4, OutputTokens: 4}
	long := &Request{ID: 2, Hashes: hashes(100, 8), PromptTokens: 20, OutputTokens: 1}
	e.Add(short)
	e.Add(long)
	got := run(e, 0)
	// Step 1 (t1): short's prompt (4) + 4 of long's; step 2: short's decode
	// (1) + 7 of long; step 3: decode + 7; step 4: decode + 2 (20 done);
	// short produces its 4th token at t4 too.
	want := []string{"t1 r1 first", "t4 r1 done", "t4 r2 first", "t4 r2 done"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if e.Stats().Steps != 4 {
		t.Fatalf("%d steps, want 4", e.Stats().Steps)
	}
}

// TestLRUEvictionKeepsRunningBlocks: unreferenced blocks leave least
// recently freed first, a request's tail before its head; blocks of a
// running request are never evicted: a request that needs them waits.
func TestLRUEvictionKeepsRunningBlocks(t *testing.T) {
	rec := &recorder{}
	e := testEngine(t, 6, 100, rec)
	a := &Request{ID: 1, Hashes: hashes(10, 2), PromptTokens: 8, OutputTokens: 1}
	e.Add(a)
	run(e, 0) // a cached blocks 11, 12, freed tail first
	b := &Request{ID: 2, Hashes: hashes(20, 5), PromptTokens: 20, OutputTokens: 1}
	e.Add(b)
	run(e, 10)
	// b needs 5 blocks of 6: the 4 never-used blocks, then a's tail (12).
	want := []string{"stored r1 [0,2)", "removed 12", "stored r2 [0,5)"}
	if !reflect.DeepEqual(rec.log, want) {
		t.Fatalf("pool log %v, want %v", rec.log, want)
	}
	// c holds 4 blocks, then 5 as it decodes; d needs 3 and waits for c to
	// finish: the free blocks are too few, and a waiting request never
	// evicts a running one's.
	rec.log = nil
	c := &Request{ID: 3, Hashes: hashes(30, 5), PromptTokens: 16, OutputTokens: 4}
	d := &Request{ID: 4, Hashes: hashes(40, 3), PromptTokens: 12, OutputTokens: 1}
	e.Add(c)
	e.Add(d)
	got := run(e, 20)
	if !(d.FirstToken > c.Finish) || e.Stats().Preemptions != 0 {
		t.Fatalf("d's first token at %v, c finished at %v, %d preemptions (%v)", d.FirstToken, c.Finish, e.Stats().Preemptions, got)
	}
}

// TestPreemptionRecomputes: two requests whose decodes outgrow the pool:
// the last one is preempted, resumes after the first finishes, and
// recomputes what it lost; both finish.
func TestPreemptionRecomputes(t *testing.T) {
	e := testEngine(t, 6, 100, &recorder{})
	a := &Request{ID: 1, Hashes: hashes(0, 4), PromptTokens: 4, OutputTokens: 10}
	b := &Request{ID: 2, Hashes: hashes(100, 4), PromptTokens: 4, OutputTokens: 10}
	e.Add(a)
	e.Add(b)
	run(e, 0)
	if a.Finish == 0 || b.Finish == 0 {
		t.Fatalf("not finished: a %+v b %+v", a, b)
	}
	if b.Preemptions == 0 || a.Preemptions != 0 || e.Stats().Preemptions != uint64(b.Preemptions) {
		t.Fatalf("preemptions a %d b %d engine %d; want b only", a.Preemptions, b.Preemptions, e.Stats().Preemptions)
	}
	if b.Recomputed == 0 || b.Finish <= a.Finish {
		t.Fatalf("b recomputed %d, finished %v after a %v", b.Recomputed, b.Finish, a.Finish)
	}
	if ref, _ := e.Used(); ref != 0 {
		t.Fatalf("%d blocks still referenced after every request finished", ref)
	}
}

// TestStoredRunsAndParents: blocks are reported cached as their chunks
// are scheduled, output blocks included, and a block another request
// already holds is not reported again.
func TestStoredRunsAndParents(t *testing.T) {
	rec := &recorder{}
	e := testEngine(t, 64, 6, rec)
	a := &Request{ID: 1, Hashes: hashes(0, 4), PromptTokens: 10, OutputTokens: 7}
	e.Add(a)
	run(e, 0)
	b := &Request{ID: 2, Hashes: append(hashes(0, 2), hashes(50, 2)...), PromptTokens: 16, OutputTokens: 1}
	e.Add(b)
	run(e, 100)
	// a: chunk 6 tokens (block 0), chunk 4 (block 1; 10 computed), decodes
	// complete block 2 at 12 tokens and block 3 at 16; b hits blocks 0-1
	// and stores its own 2 (chunk of 6: 14 tokens) and 3.
	want := []string{"stored r1 [0,1)", "stored r1 [1,2)", "stored r1 [2,3)", "stored r1 [3,4)", "stored r2 [2,3)", "stored r2 [3,4)"}
	if !reflect.DeepEqual(rec.log, want) {
		t.Fatalf("pool log %v, want %v", rec.log, want)
	}
	if b.HitBlocks != 2 {
		t.Fatalf("b hit %d blocks, want 2", b.HitBlocks)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.NumBlocks = 0 },
		func(c *Config) { c.MaxBatchedTokens = 0 },
		func(c *Config) { c.MaxNumSeqs = 0 },
		func(c *Config) { c.Step.PerToken = -1 },
	} {
		c := DefaultConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
