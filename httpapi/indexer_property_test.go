package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
)

// TestIndexerQueryEqualsSelectorOverlap is the property test: for random
// KV event sequences (stores chained to earlier blocks or from the root,
// on the device and lower tiers, removals, clears, over 3 workers of 2
// ranks), fed alike to a standalone indexer and to a selector, the
// indexer's POST /query and the selector's POST /overlap_scores agree on
// every prompt: the same device tokens per rank, and per worker the same
// cumulative gpu, cpu and disk tokens. The seed is in the subtest name.
func TestIndexerQueryEqualsSelectorOverlap(t *testing.T) {
	const bs = 4
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			ixh := startIndexer(t)
			sel := start(t, func(c *core.Config, _ *httpapi.Config) { c.UseKVEvents = true })
			for w := 1; w <= 3; w++ {
				sel.want(sel.do("POST", "/workers", fmt.Sprintf(`{"worker_id":%d,"model_name":"m","endpoint":"http://w","block_size":%d,"data_parallel_size":2,"kv_events_endpoints":{"0":"tcp://127.0.0.1:1","1":"tcp://127.0.0.1:2"}}`, w, bs)), 201, "schedulable")
			}
			ixSink := ixh.ix.EventSink("m", "default", bs)
			selSink := sel.svc.EventSink("m", "default")

			// Blocks are drawn from a small alphabet so that prompts share
			// prefixes; held[w] are a rank's external hashes with their
			// token paths, for parents and removals.
			type block struct {
				hash uint64
				path []uint32
			}
			held := map[core.WorkerKey][]block{}
			next := uint64(1)
			seedH := radix.HashSeed("", "")
			chunk := func() []uint32 {
				c := make([]uint32, bs)
				v := uint32(1 + rng.IntN(3))
				for i := range c {
					c[i] = v*10 + uint32(i)
				}
				return c
			}
			event := func() core.Event {
				w := core.WorkerKey{WorkerID: uint64(1 + rng.IntN(3)), DPRank: uint32(rng.IntN(2))}
				switch r := rng.IntN(10); {
				case r == 0:
					held[w] = nil
					return core.Event{Worker: w, Kind: radix.Cleared}
				case r <= 2 && len(held[w]) > 0:
					b := held[w][rng.IntN(len(held[w]))]
					return core.Event{Worker: w, Kind: radix.Removed, Hashes: []uint64{b.hash}}
				}
				ev := core.Event{Worker: w, Kind: radix.Stored, Tier: radix.Tier(rng.IntN(3) * rng.IntN(2))}
				var path []uint32
				if hs := held[w]; len(hs) > 0 && rng.IntN(3) > 0 {
					p := hs[rng.IntN(len(hs))]
					ev.HasParent, ev.ParentHash, path = true, p.hash, p.path
				}
				for range 1 + rng.IntN(3) {
					path = append(append([]uint32(nil), path...), chunk()...)
					l := radix.LocalHashes(nil, path[len(path)-bs:], bs, seedH)[0]
					ev.Blocks = append(ev.Blocks, radix.Block{Hash: next, Local: l})
					held[w] = append(held[w], block{next, path})
					next++
				}
				return ev
			}
			hits := 0
			for round := range 6 {
				var evs []core.Event
				for range 10 {
					evs = append(evs, event())
				}
				ixSink.ApplyBatch(evs)
				selSink.ApplyBatch(evs)
				for q := range 5 {
					var prompt []uint32
					for range 1 + rng.IntN(5) {
						prompt = append(prompt, chunk()...)
					}
					body := `{"model_name":"m","token_ids":` + strings.ReplaceAll(fmt.Sprint(prompt), " ", ",") + `}`
					st, _, qraw := ixh.call("POST", "/query", body)
					ov := sel.do("POST", "/overlap_scores", body)
					if st != 200 || ov.status != 200 {
						t.Fatalf("round %d query %d: %d %s / %d %s", round, q, st, qraw, ov.status, ov.raw)
					}
					got, want := fromQuery(t, qraw), fromOverlap(t, ov.raw, bs)
					if got != want {
						t.Fatalf("round %d prompt %v:\nindexer  %s\nselector %s\n(raw %s / %s)", round, prompt, got, want, qraw, ov.raw)
					}
					if got != "map[]" {
						hits++
					}
				}
			}
			if hits < 5 {
				t.Fatalf("only %d of 30 prompts hit anything: the sequence tests too little", hits)
			}
		})
	}
}

// fromQuery reduces a /query body to a canonical text: per worker, its
// per-rank device tokens and its gpu/cpu/disk tokens.
func fromQuery(t *testing.T, raw string) string {
	var r struct {
		Scores    map[string]map[string]uint64 `json:"scores"`
		Instances map[string]struct {
			Longest, GPU, CPU, Disk uint64
			DP                      map[string]uint64
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for w, in := range r.Instances {
		for rank, v := range in.DP {
			if v > 0 && r.Scores[w][rank] != v {
				t.Fatalf("scores and instances disagree: %s", raw)
			}
		}
		out[w] = fmt.Sprintf("dp=%v gpu=%d cpu=%d disk=%d", nonzero(in.DP), in.GPU, in.CPU, in.Disk)
	}
	return fmt.Sprint(out)
}

// fromOverlap reduces an /overlap_scores body the same way: ranks with no
// hit in any tier are absent, as the indexer reports only ranks it holds.
func fromOverlap(t *testing.T, raw string, bs uint64) string {
	var rows struct {
		Workers []map[string]any `json:"workers"`
	}
	if err := json.Unmarshal([]byte(raw), &rows); err != nil {
		t.Fatal(err)
	}
	type agg struct {
		dp             map[string]uint64
		gpu, cpu, disk uint64
	}
	ws := map[string]*agg{}
	for _, r := range rows.Workers {
		row := map[string]uint64{}
		for k, v := range r {
			if f, ok := v.(float64); ok {
				row[k] = uint64(f)
			}
		}
		if row["disk_blocks"] == 0 {
			continue
		}
		w := fmt.Sprint(row["worker_id"])
		a := ws[w]
		if a == nil {
			a = &agg{dp: map[string]uint64{}}
			ws[w] = a
		}
		a.dp[fmt.Sprint(row["dp_rank"])] = row["device_blocks"] * bs
		a.gpu = max(a.gpu, row["device_blocks"]*bs)
		a.cpu = max(a.cpu, row["host_pinned_blocks"]*bs)
		a.disk = max(a.disk, row["disk_blocks"]*bs)
	}
	out := map[string]string{}
	for w, a := range ws {
		out[w] = fmt.Sprintf("dp=%v gpu=%d cpu=%d disk=%d", nonzero(a.dp), a.gpu, a.cpu, a.disk)
	}
	return fmt.Sprint(out)
}

func nonzero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}
