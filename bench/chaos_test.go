package bench

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

// TestChaos drives two single-rank engines with replay through random
// prompts, clears, lost connections (batches published while a listener
// reconnects are lost live and must be replayed) and engine restarts at the
// same address (new incarnation, empty pool, seq from 0), then checks that
// the index agrees with every engine's pool for every prompt ever served.
// The engines are the model. Restarts happen once the listener has caught
// up (the condition under which the restart rules of the zmqin doc detect
// every restart); the new incarnation's first batches may be lost.
func TestChaos(t *testing.T) {
	noLeak(t)
	const bs, workers = 4, 2
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ix, _ := radix.New(radix.Config{})
	sink := indexSink{ix}

	cfgs := make([]EngineConfig, workers)
	engines := make([]*Engine, workers)
	defer func() {
		for _, e := range engines {
			_ = e.Close()
		}
	}()
	start := func(i int) {
		e, err := NewEngine(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = e
		waitFor(t, "subscribed", func() bool { return e.Subscribers(0) == 1 })
	}
	for i := range workers {
		cfgs[i] = EngineConfig{BlockSize: bs, CapacityBlocks: 40, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Encoder: zmqin.Encoder{Encoding: zmqin.Encoding(i % 2)}}
		e, err := NewEngine(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = e
		// Restarts rebind the same ports.
		cfgs[i].Endpoint, cfgs[i].ReplayEndpoint = e.Endpoints()[0], e.ReplayEndpoints()[0]
		in.Sync(uint64(i), bs, []core.RankSource{{Endpoint: cfgs[i].Endpoint, ReplayEndpoint: cfgs[i].ReplayEndpoint}}, sink)
		waitFor(t, "subscribed", func() bool { return e.Subscribers(0) == 1 })
	}
	var r radix.Result
	depth := func(i int, toks []uint32) int {
		r.Reset()
		ix.Match(radix.LocalHashes(nil, toks, bs, radix.HashSeed("", "")), &r)
		for _, m := range r.Matches {
			if m.Worker == (radix.WorkerKey{WorkerID: uint64(i)}) {
				return int(m.Device)
			}
		}
		return 0
	}
	// caughtUp: the listener has applied the engine's last batch, which
	// stored marker's unique blocks (the watermark alone could match a
	// stale incarnation's by chance), and is not replaying.
	caughtUp := func(i int, marker []uint32) bool {
		st := in.Status(uint64(i), nil)
		b := engines[i].Stats().Batches
		return len(st) == 1 && st[0].State == "live" && st[0].HasSeq && st[0].LastSeq == b-1 &&
			depth(i, marker) == engines[i].Cached(0, marker)
	}
	wl, _ := NewWorkload(WorkloadConfig{Groups: 4, PrefixBlocks: 3, SuffixBlocks: 2, BlockSize: bs, Seed: seed})
	var prompts [][]uint32
	// settle makes worker i's listener catch up: batches lost at the tail
	// of the stream show as a gap only when a later batch arrives, so once
	// the listener is subscribed again, serve one more prompt (its unique
	// suffix always publishes a batch) and wait for it.
	settle := func(i int) {
		waitFor(t, "resubscribed", func() bool { return engines[i].Subscribers(0) == 1 })
		toks, _ := wl.Next()
		engines[i].ServeTokens(0, toks)
		prompts = append(prompts, toks)
		deadline := time.Now().Add(10 * time.Second)
		for !caughtUp(i, toks) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d not caught up: status %+v, engine %+v, stats %+v (seed %d)", i, in.Status(uint64(i), nil), engines[i].Stats(), in.Stats(), seed)
			}
			time.Sleep(time.Millisecond)
		}
	}
	restarts := 0
	for range 600 {
		i := rng.IntN(workers)
		switch x := rng.IntN(100); {
		case x < 85:
			toks, _ := wl.Next()
			engines[i].ServeTokens(0, toks)
			prompts = append(prompts, toks)
		case x < 90:
			engines[i].DropSubscribers(0)
		case x < 93:
			engines[i].Clear(0)
		default:
			settle(i)
			_ = engines[i].Close()
			start(i)
			restarts++
		}
	}
	for i := range workers {
		settle(i)
	}
	s := in.Stats()
	t.Logf("restarts %d, stats %+v", restarts, s)
	if s.Restarts != uint64(restarts) || s.DecodeErrors != 0 || s.ReplayFailures != 0 || s.Overflow != 0 {
		t.Fatalf("restarts %d, stats %+v, status %+v %+v", restarts, s, in.Status(0, nil), in.Status(1, nil))
	}
	for i := range workers {
		for _, toks := range prompts {
			if got, want := depth(i, toks), engines[i].Cached(0, toks); got != want {
				t.Fatalf("worker %d: index depth %d, engine cached %d (seed %d)", i, got, want, seed)
			}
		}
	}
}
