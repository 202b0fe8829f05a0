package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// FillStats is what the fill before the selector's load did (Run, step 4).
type FillStats struct {
	Engines        int     `json:"engines"`
	CapacityBlocks int     `json:"capacity_blocks"` // per engine
	Prompts        int     `json:"prompts"`         // prompts routed and served
	Batches        uint64  `json:"batches"`         // KV event batches published and awaited
	StoredBlocks   uint64  `json:"stored_blocks"`
	EvictedBlocks  uint64  `json:"evicted_blocks"`
	HeldBlocks     uint64  `json:"held_blocks"` // in the pools at the end (stored - evicted)
	HitRate        float64 `json:"hit_rate"`    // prompt blocks already cached on the chosen engine
	Seconds        float64 `json:"seconds"`
}

// startEngines starts one single-rank Engine per registered worker with a
// pool of cfg.EngineBlocks blocks on a free loopback port and sets their
// PUB endpoints as cfg.KVEventsEndpoints (worker i+1 on engines[i]).
func startEngines(cfg *Config) ([]*Engine, error) {
	n := registeredWorkers(cfg)
	engines := make([]*Engine, 0, n)
	for i := range n {
		e, err := NewEngine(EngineConfig{Ranks: 1, BlockSize: cfg.BlockSize, CapacityBlocks: cfg.EngineBlocks, Endpoint: "tcp://127.0.0.1:0"})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: engine %d: %w", i+1, err), closeEngines(engines))
		}
		engines = append(engines, e)
		cfg.KVEventsEndpoints = append(cfg.KVEventsEndpoints, e.Endpoints()[0])
	}
	return engines, nil
}

// fillPick routes fill prompt i, whose selection body is body, and
// returns the chosen worker and rank.
type fillPick func(ctx context.Context, i int, body []byte) (worker uint64, rank uint32, err error)

// selectPick routes with POST /select on c.
func selectPick(c *Control) fillPick {
	return func(_ context.Context, _ int, body []byte) (uint64, uint32, error) {
		resp, err := c.Call("POST", "/select", body)
		if err != nil {
			return 0, 0, err
		}
		var sel struct {
			WorkerID uint64 `json:"worker_id"`
			DPRank   uint32 `json:"dp_rank"`
		}
		if err := json.Unmarshal(resp, &sel); err != nil {
			return 0, 0, fmt.Errorf("/select response: %w", err)
		}
		return sel.WorkerID, sel.DPRank, nil
	}
}

func closeEngines(engines []*Engine) error {
	var errs []error
	for _, e := range engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// fill warms the engines' KV pools before the selector's load, the way a
// live cluster's pools fill as it serves: every prompt of the workload,
// once and in order, is
//
//  1. routed by the selector with pick: POST /select with its body (a
//     query; it books nothing) to the first of ctls (selectPick), or one
//     ext_proc stream through the endpoint picker (MixEPP: eppPick);
//  2. served by the chosen worker's engine (Engine.ServeTokens: the cached
//     leading blocks are hits, the rest is stored, evicting least recently
//     used blocks, and published as one KV event batch over ZMQ);
//  3. when the engine published, awaited until the index of every one of
//     ctls (each replica subscribes to every engine itself) shows the
//     prompt's blocks on that worker (Control.AwaitDeviceBlocks, at most
//     cfg.ReadyTimeout each), so the next prompt is routed on the pools as
//     they are.
//
// Afterwards every selector's index holds exactly the engines' pools, and
// it stays so during the load: the engines publish nothing more. With
// MixDisagg the prompts go to the prefill pool (fillBodies).
func fill(ctx context.Context, ctls []*Control, cfg *Config, engines []*Engine, prompts []Prompt, pick fillPick, logw io.Writer) (FillStats, error) {
	start := time.Now()
	st := FillStats{Engines: len(engines), CapacityBlocks: cfg.EngineBlocks}
	if err := awaitSubscribers(ctx, engines, len(ctls), cfg.ReadyTimeout); err != nil {
		return st, err
	}
	bodies := fillBodies(cfg, prompts)
	var before0 [2]uint64
	for _, e := range engines {
		es := e.Stats()
		before0[0] += es.Stored
		before0[1] += es.Evicted
	}
	var tokens []uint32
	var hit, total int64
	var sel struct {
		WorkerID uint64
		DPRank   uint32
	}
	for i := range prompts {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		p, body := &prompts[i], bodies[i]
		var err error
		if sel.WorkerID, sel.DPRank, err = pick(ctx, i, body); err != nil {
			return st, fmt.Errorf("bench: fill, prompt %d: %w", i, err)
		}
		if sel.WorkerID < 1 || sel.WorkerID > uint64(len(engines)) || sel.DPRank != 0 {
			return st, fmt.Errorf("bench: fill, prompt %d: the selector chose worker %d rank %d, not one of the harness's", i, sel.WorkerID, sel.DPRank)
		}
		e := engines[sel.WorkerID-1]
		tokens = p.AppendTokens(tokens[:0], cfg.BlockSize)
		before := e.Stats().Batches
		h := e.ServeTokens(0, tokens)
		hit += int64(h)
		total += int64(len(p.Local))
		st.Prompts++
		if e.Stats().Batches == before {
			continue // all cached: nothing published
		}
		st.Batches++
		want := e.Cached(0, tokens)
		for _, c := range ctls {
			got, ok, err := c.AwaitDeviceBlocks(ctx, body, sel.WorkerID, want, cfg.ReadyTimeout)
			if err != nil {
				return st, fmt.Errorf("bench: fill, prompt %d: %w", i, err)
			}
			if !ok {
				return st, fmt.Errorf("%w: fill, prompt %d: worker %d shows %d of the %d blocks its engine holds after %v on %s",
					ErrNotApplied, i, sel.WorkerID, got, want, cfg.ReadyTimeout, c.t.base)
			}
		}
	}
	for _, e := range engines {
		es := e.Stats()
		st.StoredBlocks += es.Stored
		st.EvictedBlocks += es.Evicted
	}
	st.StoredBlocks -= before0[0]
	st.EvictedBlocks -= before0[1]
	st.HeldBlocks = st.StoredBlocks - st.EvictedBlocks
	if total > 0 {
		st.HitRate = float64(hit) / float64(total)
	}
	st.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(logw, "fill: %d prompts routed by the selector and served by %d engines in %.1f s: %d blocks held, %d evicted, fill hit rate %.2f\n",
		st.Prompts, st.Engines, st.Seconds, st.HeldBlocks, st.EvictedBlocks, st.HitRate)
	return st, nil
}
