package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

type indexSink struct{ ix *radix.Index }

func (s indexSink) ApplyBatch(evs []radix.Event) { s.ix.ApplyBatch(evs) }
func (s indexSink) ClearRank(w radix.WorkerKey) {
	s.ix.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func noLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
	})
}

func newEngine(t *testing.T, cfg EngineConfig) *Engine {
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestEngineLRU(t *testing.T) {
	noLeak(t)
	e := newEngine(t, EngineConfig{BlockSize: 4, CapacityBlocks: 4, Endpoint: "tcp://127.0.0.1:0"})
	a, b, c := TokensForHashIDs([]uint64{1, 2}, 4), TokensForHashIDs([]uint64{3, 4}, 4), TokensForHashIDs([]uint64{5, 6}, 4)
	if hit := e.ServeTokens(0, a); hit != 0 {
		t.Fatalf("cold hit %d", hit)
	}
	e.ServeTokens(0, b)
	if hit := e.ServeTokens(0, a); hit != 2 {
		t.Fatalf("warm hit %d", hit)
	}
	e.ServeTokens(0, c) // evicts b, the least recently used
	if e.Cached(0, a) != 2 || e.Cached(0, b) != 0 || e.Cached(0, c) != 2 {
		t.Fatalf("cached a=%d b=%d c=%d", e.Cached(0, a), e.Cached(0, b), e.Cached(0, c))
	}
	// A prompt sharing a's first block: hit 1, stores 1, and evicts a's
	// second block, untouched since before c was served.
	ab := append(append([]uint32(nil), a[:4]...), TokensForHashIDs([]uint64{9}, 4)...)
	if hit := e.ServeTokens(0, ab); hit != 1 {
		t.Fatalf("shared prefix hit %d", hit)
	}
	if e.Cached(0, c) != 2 || e.Cached(0, a) != 1 || e.Cached(0, ab) != 2 {
		t.Fatalf("tail-first eviction: a=%d c=%d", e.Cached(0, a), e.Cached(0, c))
	}
	// A prompt longer than the pool stores what fits.
	long := TokensForHashIDs([]uint64{20, 21, 22, 23, 24, 25}, 4)
	e.ServeTokens(0, long)
	if e.Cached(0, long) != 4 {
		t.Fatalf("long prompt cached %d", e.Cached(0, long))
	}
	st := e.Stats()
	if st.Prompts != 6 || st.Batches != 5 || st.Stored != 2+2+2+1+4 || st.Evicted != st.Stored-4 {
		t.Fatalf("stats %+v", st)
	}
	e.Clear(0)
	if e.Cached(0, long) != 0 {
		t.Fatal("clear kept blocks")
	}
}

// TestEngineToIndex: many prompts on a two-rank engine with evictions; once
// every batch is applied, the index agrees with each rank's pool for every
// prompt (the engine is the model). Then a Clear empties one rank.
func TestEngineToIndex(t *testing.T) {
	for _, enc := range []zmqin.Encoder{{Encoding: zmqin.EncodingMap}, {Encoding: zmqin.EncodingArray, Hashes: zmqin.HashSigned}} {
		noLeak(t)
		const bs = 4
		e := newEngine(t, EngineConfig{Ranks: 2, BlockSize: bs, CapacityBlocks: 48, Endpoint: "tcp://127.0.0.1:0", Encoder: enc})
		in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ix, _ := radix.New(radix.Config{})
		eps := e.Endpoints()
		in.Sync(1, bs, []core.RankSource{{DPRank: 0, Endpoint: eps[0]}, {DPRank: 1, Endpoint: eps[1]}}, indexSink{ix})
		waitFor(t, "subscribed", func() bool { return e.Subscribers(0) == 1 && e.Subscribers(1) == 1 })

		wl, _ := NewWorkload(WorkloadConfig{Groups: 5, PrefixBlocks: 4, SuffixBlocks: 3, BlockSize: bs, Seed: 1})
		type served struct {
			rank int
			toks []uint32
		}
		var prompts []served
		for i := range 400 {
			toks, _ := wl.Next()
			e.ServeTokens(i%2, toks)
			prompts = append(prompts, served{i % 2, toks})
		}
		waitFor(t, "all batches applied", func() bool { return in.Stats().BatchesApplied == e.Stats().Batches })
		if s := in.Stats(); s.Gaps != 0 || s.Overflow != 0 || s.Events.Total() != 0 || s.DecodeErrors != 0 {
			t.Fatalf("ingress stats %+v", s)
		}
		if st := e.Stats(); st.Evicted == 0 || st.HitBlocks == 0 {
			t.Fatalf("workload did not exercise eviction and hits: %+v", st)
		}
		var r radix.Result
		depth := func(rank int, toks []uint32) int {
			r.Reset()
			ix.Match(radix.LocalHashes(nil, toks, bs, radix.HashSeed("", "")), &r)
			for _, m := range r.Matches {
				if m.Worker == (radix.WorkerKey{WorkerID: 1, DPRank: uint32(rank)}) {
					return int(m.Device)
				}
			}
			return 0
		}
		for _, p := range prompts {
			if got, want := depth(p.rank, p.toks), e.Cached(p.rank, p.toks); got != want {
				t.Fatalf("rank %d prompt: index depth %d, engine cached %d", p.rank, got, want)
			}
		}
		e.Clear(0)
		waitFor(t, "clear applied", func() bool { return in.Stats().BatchesApplied == e.Stats().Batches })
		for _, p := range prompts {
			if p.rank == 0 && depth(0, p.toks) != 0 {
				t.Fatal("rank 0 not cleared")
			}
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		_ = e.Close()
	}
}
