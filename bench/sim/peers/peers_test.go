package peers

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// fakeEngine is an engine whose gauges and cache the test sets.
type fakeEngine struct {
	waiting int
	usage   float64
	cached  map[uint64]bool
}

func (e *fakeEngine) Waiting() int     { return e.waiting }
func (e *fakeEngine) KVUsage() float64 { return e.usage }
func (e *fakeEngine) CachedPrefix(h []uint64) int {
	n := 0
	for n < len(h) && e.cached[h[n]] {
		n++
	}
	return n
}

func fakes(n int) ([]*fakeEngine, []Engine) {
	fs := make([]*fakeEngine, n)
	es := make([]Engine, n)
	for i := range fs {
		fs[i] = &fakeEngine{cached: map[uint64]bool{}}
		es[i] = fs[i]
	}
	return fs, es
}

// text returns n tokens: family's shared prefix of shared tokens, then
// tokens unique to (family, id).
func text(family, id, shared, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		if i < shared {
			t[i] = uint32(family<<20 | i)
		} else {
			t[i] = uint32(1<<30 | family<<20 | id<<12 | i)
		}
	}
	return t
}

func req(t []uint32) *Request { return &Request{Text: t} }

// TestSGLangCacheAware pins the old sgl-router's documented rules
// (sgl-router/src/policies/cache_aware.rs, header comment): a match rate
// at or below cache_threshold (0.3) goes to the worker with the smallest
// tree; above it, to the matched worker; when max-min > 64 and max > 1.5
// min in-flight, to the least loaded worker, whatever the cache.
func TestSGLangCacheAware(t *testing.T) {
	_, es := fakes(3)
	p, _ := New(SGLang, Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 100})
	// Empty trees: all sizes 0, the first smallest is worker 0.
	if w := p.Pick(0, req(text(1, 0, 100, 100))); w != 0 {
		t.Fatalf("cold request to %d, want 0 (smallest tree)", w)
	}
	// Worker 0 now holds 100 tokens; the next cold request goes to the
	// smallest, worker 1, then worker 2.
	if w := p.Pick(0, req(text(2, 0, 0, 50))); w != 1 {
		t.Fatalf("second cold request to %d, want 1", w)
	}
	if w := p.Pick(0, req(text(3, 0, 0, 10))); w != 2 {
		t.Fatalf("third cold request to %d, want 2", w)
	}
	// 60 of 100 tokens shared with family 1 (rate 0.6 > 0.3): worker 0.
	if w := p.Pick(0, req(text(1, 1, 60, 100))); w != 0 {
		t.Fatalf("matching request to %d, want 0", w)
	}
	// 20 of 100 shared (0.2 <= 0.3): the smallest tree, worker 2 (10 tokens).
	if w := p.Pick(0, req(text(1, 2, 20, 100))); w != 2 {
		t.Fatalf("weak match to %d, want 2 (smallest tree)", w)
	}
	// In flight now 2, 1, 2. Family-1 requests follow worker 0 until its
	// load is 66: then 66-1 > 64 and 66 > 1.5*1, imbalanced, and the next
	// one goes to the least loaded, worker 1, despite its match.
	for range 64 {
		if w := p.Pick(0, req(text(1, 3, 100, 100))); w != 0 {
			t.Fatalf("affine request to %d, want 0", w)
		}
	}
	if w := p.Pick(0, req(text(1, 4, 100, 100))); w != 1 {
		t.Fatalf("imbalanced pool: request to %d, want 1 (least loaded)", w)
	}
}

// TestSMGCacheAware pins SMG's rules (model_gateway/src/policies/cache_aware.rs,
// select_worker_with_text): a miss goes to the least loaded worker by
// (load, processed requests, index), not to the smallest tree; a hit to
// the matched node's tenant; the imbalance test as the old router's, on
// in-flight counts that fall when requests end (Done).
func TestSMGCacheAware(t *testing.T) {
	_, es := fakes(2)
	p, _ := New(SMG, Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 100})
	if w := p.Pick(0, req(text(1, 0, 0, 1000))); w != 0 {
		t.Fatalf("cold to %d, want 0", w)
	}
	p.Done(0)
	// Loads 0 and 0, processed 1 and 0: the tie-break prefers worker 1,
	// although its tree is the smaller one too.
	if w := p.Pick(0, req(text(2, 0, 10, 10))); w != 1 {
		t.Fatalf("cold to %d, want 1 (fewer processed)", w)
	}
	p.Done(1)
	// Worker 0's tree is 1,000 tokens, worker 1's 10: a miss still goes by
	// load and processed (1 and 1, equal): index 0.
	if w := p.Pick(0, req(text(3, 0, 0, 10))); w != 0 {
		t.Fatalf("cold to %d, want 0 (load tie, processed tie, index)", w)
	}
	// Family 2 matches worker 1 fully: hit although worker 0 is busier.
	if w := p.Pick(0, req(text(2, 0, 10, 10))); w != 1 {
		t.Fatalf("hit to %d, want 1", w)
	}
}

// TestTreeEviction: the eviction cuts a tenant over its budget by its
// least recently used leaves, and leaves the others alone.
func TestTreeEviction(t *testing.T) {
	tr := newTree(2)
	a, b, c := text(1, 0, 0, 40), text(2, 0, 0, 40), text(3, 0, 0, 40)
	tr.insert(a, 0)
	tr.insert(b, 0)
	tr.insert(c, 1)
	tr.insert(a, 0) // a is now more recent than b
	if tr.size[0] != 80 || tr.size[1] != 40 {
		t.Fatalf("sizes %v", tr.size)
	}
	tr.evict(50)
	if tr.size[0] != 40 || tr.size[1] != 40 {
		t.Fatalf("sizes after eviction %v, want [40 40]", tr.size)
	}
	m := tr.matchAndInsert(b, func(m match) int {
		if m.matched != 0 {
			t.Errorf("b still matched %d tokens", m.matched)
		}
		return -1
	})
	_ = m
	tr.matchAndInsert(a, func(m match) int {
		if m.matched != 40 || m.tenant != 0 {
			t.Errorf("a: %+v, want 40 tokens on tenant 0", m)
		}
		return -1
	})
}

// TestLLMD pins the default profile's sum 2*queue + 2*(1-kv) + 3*prefix
// over scraped gauges (llm-d-router: pkg/epp/config/loader/defaults.go and
// the three scorers): gauges are the last scrape's, so requests routed
// since are invisible; the prefix index is the routing history.
func TestLLMD(t *testing.T) {
	fs, es := fakes(3)
	pol, _ := New(LLMD, Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 100})
	p := pol.(*llmd)
	fs[0].waiting, fs[1].waiting, fs[2].waiting = 4, 0, 2
	fs[0].usage, fs[1].usage, fs[2].usage = 0.1, 0.9, 0.5
	p.Scrape(0)
	// Queue scores 0, 1, 0.5; kv 0.9, 0.1, 0.5: totals 1.8, 2.2, 2.0.
	for range 5 {
		if w := p.Pick(0, req(text(1, 0, 0, 256))); w != 1 {
			t.Fatalf("cold request to %d, want 1", w)
		}
	}
	// The same gauges (no scrape): family 1 matches worker 1 fully: 5.2.
	fs[1].waiting = 100
	if w := p.Pick(0.01, req(text(1, 1, 256, 256))); w != 1 {
		t.Fatalf("herding before the scrape: request to %d, want 1", w)
	}
	// After the scrape: queues 4, 100, 2 -> 0.98, 0, 1; kv as before:
	// worker 0 1.96+1.8 = 3.76, worker 1 0+0.2+3 = 3.2, worker 2 2+1 = 3.
	p.Scrape(0.05)
	if w := p.Pick(0.06, req(text(1, 2, 256, 256))); w != 0 {
		t.Fatalf("after the scrape: request to %d, want 0", w)
	}
	// Equal gauges and no match: uniform ties, every worker drawn.
	fs[0].waiting, fs[1].waiting, fs[2].waiting = 0, 0, 0
	fs[0].usage, fs[1].usage, fs[2].usage = 0, 0, 0
	p.Scrape(0.1)
	seen := map[int]bool{}
	for i := range 60 {
		seen[p.Pick(0.1, req(text(10+i, 0, 0, 64)))] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ties drew %v, want all three workers", seen)
	}
}

// TestLLMDPrecise: the precise producer reads the engines' caches (KV
// events), weights 2 prefix, 1 kv, 1 queue.
func TestLLMDPrecise(t *testing.T) {
	fs, es := fakes(2)
	pol, _ := New(LLMDPrecise, Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 100})
	p := pol.(*llmd)
	blocks := []uint64{11, 12, 13, 14}
	fs[1].cached[11], fs[1].cached[12], fs[1].cached[13] = true, true, true
	fs[0].waiting, fs[1].waiting = 0, 3
	p.Scrape(0)
	// Worker 0: 1 + 1 + 0 = 2; worker 1: 0 + 1 + 2*0.75 = 2.5.
	if w := p.Pick(0, &Request{Blocks: blocks}); w != 1 {
		t.Fatalf("request to %d, want 1 (3 of 4 blocks cached)", w)
	}
	fs[1].cached[11] = false // evicted: the KV events say so at once
	if w := p.Pick(0, &Request{Blocks: blocks}); w != 0 {
		t.Fatalf("after the eviction: request to %d, want 0", w)
	}
}

// TestProdStack pins prefixaware routing (routing_logic.py, hashtrie.py):
// 128-character chunks (32 tokens), random among the endpoints holding the
// longest matched chunk path, load never read, nothing evicted.
func TestProdStack(t *testing.T) {
	_, es := fakes(4)
	pol, _ := New(ProductionStack, Options{Engines: es, Seed: 3, BlockSize: 64, NumGPUBlocks: 100})
	first := pol.Pick(0, req(text(1, 0, 100, 100)))
	// Every later request sharing the first chunk (32 tokens) follows it,
	// however loaded that endpoint is (Done is never called here).
	for i := range 20 {
		if w := pol.Pick(0, req(text(1, 1+i, 40, 100))); w != first {
			t.Fatalf("request %d to %d, want %d (chunk match)", i, w, first)
		}
	}
	// A shared prefix shorter than one chunk matches nothing: the draw is
	// over all endpoints.
	seen := map[int]bool{}
	for i := range 80 {
		seen[pol.Pick(0, req(text(2, 100+i, 31, 100)))] = true
	}
	if len(seen) != 4 {
		t.Fatalf("sub-chunk prefixes drew %v, want all four endpoints", seen)
	}
}

// TestAIBrix pins prefix-cache routing (prefix_cache.go): with an
// in-flight spread over 8 only the least loaded pods are candidates; a
// matched pod whose count exceeds mean + 1 sd gives way to least-request;
// the 200,000-block table forgets the oldest writes first.
func TestAIBrix(t *testing.T) {
	_, es := fakes(3)
	pol, _ := New(AIBrix, Options{Engines: es, Seed: 1, BlockSize: 64, NumGPUBlocks: 100})
	p := pol.(*aibrix)
	a := text(1, 0, 0, 100)
	wa := p.Pick(0, req(a)) // cold: least request, random among 0, 0, 0
	// The same prompt matches wa 100%: counts (1, 0, 0) with wa at 1,
	// mean 1/3, sd 0.577: 1 <= 0.91? no: least-request instead.
	w := p.Pick(0, req(a))
	if w == wa {
		t.Fatalf("matched pod %d over mean+sd still chosen", w)
	}
	p.Done(wa)
	p.Done(w)
	// Counts 0, 0, 0: the match wins.
	if w := p.Pick(0, req(a)); w != wa {
		t.Fatalf("balanced: request to %d, want %d (100%% match)", w, wa)
	}
	p.Done(wa)
	// Imbalance: 9 in flight on wa, others 0 (> 8): the match is ignored,
	// candidates are the least loaded pods only.
	p.load[wa] = 9
	if w := p.Pick(0, req(a)); w == wa {
		t.Fatalf("imbalanced: request to the loaded pod %d", w)
	}
	// Capacity: a table of 150 blocks keeps a's last 50 blocks after
	// another 100-block prompt, so a's prefix (block 0) is gone.
	q := newAIBrix(3, 1, AIBrixConfig{BlockBytes: 4, BlockNumber: 150, TTL: 1200, EvictionInterval: 1, ImbalanceAbs: 8, SDFactor: 1})
	q.Pick(0, req(a))
	q.Pick(0, req(text(2, 0, 0, 100)))
	q.Pick(0, req(a))
	if q.percent[0] != -1 || q.percent[1] != -1 || q.percent[2] != -1 {
		t.Fatalf("a matched %v after its first blocks were evicted", q.percent)
	}
	// Idle TTL: 20 minutes after its last write, a is gone.
	r := newAIBrix(3, 1, DefaultAIBrixConfig())
	r.Pick(0, req(a))
	r.Pick(1201, req(text(3, 0, 0, 10)))
	r.Pick(1202, req(a))
	if r.percent[0] != -1 || r.percent[1] != -1 || r.percent[2] != -1 {
		t.Fatalf("a matched %v after its TTL", r.percent)
	}
}

// TestLRU: puts move to the head, gets do not, the tail is evicted.
func TestLRU(t *testing.T) {
	l := newLRU(2)
	var evicted []uint64
	l.onEvict = func(k, _ uint64) { evicted = append(evicted, k) }
	l.put(1, 1, 0)
	l.put(2, 1, 1)
	l.get(1)
	l.put(3, 1, 2)
	if len(evicted) != 1 || evicted[0] != 1 {
		t.Fatalf("evicted %v, want [1]", evicted)
	}
	l.put(2, 2, 3)
	l.put(4, 1, 4)
	if evicted[1] != 3 {
		t.Fatalf("evicted %v, want [1 3]", evicted)
	}
	if m, ok := l.get(2); !ok || m != 3 {
		t.Fatalf("2: %v %v", m, ok)
	}
	l.expire(4)
	if l.len() != 1 {
		t.Fatalf("after expiry %d entries, want 1", l.len())
	}
}

// TestRunTableMatchesBlocks drives the run table and the block-by-block
// reference with the same random writes, expiries and lookups (families
// of shared prefixes, extensions of earlier texts as conversations do, a
// table a few texts large) and compares every lookup block by block.
func TestRunTableMatchesBlocks(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := 50 + rng.IntN(300)
		ref := &blockTable{l: newLRU(capacity)}
		run := newRunTable(capacity)
		var texts [][]uint32
		now := 0.0
		expand := func(tb prefixTable, q []uint32) []uint64 {
			var out []uint64
			tb.match(q, func(end int, pods uint64) bool {
				for len(out) < end {
					out = append(out, pods)
				}
				return true
			})
			return out
		}
		for op := range 400 {
			var q []uint32
			switch r := rng.IntN(10); {
			case r < 4 && len(texts) > 0: // a later turn: an earlier text extended
				base := texts[rng.IntN(len(texts))]
				q = append(append([]uint32(nil), base...), text(99, op, 0, 1+rng.IntN(40))...)
			case r < 7 && len(texts) > 0: // a prefix of an earlier text, then new tokens
				base := texts[rng.IntN(len(texts))]
				k := rng.IntN(len(base))
				q = append(append([]uint32(nil), base[:k]...), text(98, op, 0, 1+rng.IntN(20))...)
			default:
				f := rng.IntN(4)
				q = text(f, op, rng.IntN(60), 1+rng.IntN(100))
			}
			if len(q) > capacity {
				q = q[:capacity]
			}
			a, b := expand(ref, q), expand(run, q)
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d op %d: lookup of %d blocks: reference %v, runs %v", seed, op, len(q), a, b)
			}
			w := rng.IntN(4)
			ref.add(q, w, now)
			run.add(q, w, now)
			texts = append(texts, q)
			if rng.IntN(20) == 0 {
				cut := now - rng.Float64()*20
				ref.expire(cut)
				run.expire(cut)
			}
			now += rng.Float64()
			if ref.l.len() != run.present {
				t.Fatalf("seed %d op %d: %d blocks in the reference, %d in runs", seed, op, ref.l.len(), run.present)
			}
		}
	}
}
