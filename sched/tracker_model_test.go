package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// TestTrackerMatchesModel runs random operation sequences against a naive
// model (per worker: the union of the live requests' hash sets with a
// weight per hash; prefix depth by linear scan) and checks loads, NewBlocks
// and invariants after every operation. Decay follows Dynamo's block
// tracker: f goes to every output block of the request and to its prompt
// hashes from the last one back while only this request holds them, and a
// hash keeps its weight until no request holds it. The seed is logged;
// SCHED_SEED=<seed> replays it.
func TestTrackerMatchesModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	tr := newTracker(t, nil)
	keys := []radix.WorkerKey{wk(1, 0), wk(1, 1), wk(2, 0)}
	for _, k := range keys {
		tr.AddWorker(k)
	}
	type mreq struct {
		w       radix.WorkerKey
		hashes  []uint64
		reuse   bool
		prefill int64
		outputs []float64 // weight of each output block
		private float64   // weight of each block without KV reuse
	}
	model := map[string]*mreq{}
	weight := map[radix.WorkerKey]map[uint64]float64{} // prompt hashes not at weight 1
	for _, k := range keys {
		weight[k] = map[uint64]float64{}
	}
	holders := func(k radix.WorkerKey, h uint64) int {
		n := 0
		for _, r := range model {
			if r.w == k && r.reuse && slices.Contains(r.hashes, h) {
				n++
			}
		}
		return n
	}
	families := make([][]uint64, 4)
	for i := range families {
		families[i] = seqN(1000*(i+1), 12)
	}
	randSeq := func() []uint64 {
		f := families[rng.IntN(len(families))]
		local := append([]uint64(nil), f[:rng.IntN(len(f)+1)]...)
		for range rng.IntN(6) {
			local = append(local, uint64(rng.IntN(3))) // small alphabet: collisions of suffixes
		}
		return radix.SequenceHashes(nil, local)
	}
	modelLoads := func(k radix.WorkerKey) (Loads, map[uint64]bool) {
		set := map[uint64]bool{}
		var l Loads
		var blocks float64
		for _, r := range model {
			if r.w != k {
				continue
			}
			l.Requests++
			l.PrefillTokens += r.prefill
			l.PrefillPairs += attentionPairs(0, r.prefill) // booked without a block size: from position 0
			for _, o := range r.outputs {
				blocks += o
			}
			if r.reuse {
				for _, h := range r.hashes {
					set[h] = true
				}
			} else {
				blocks += float64(len(r.hashes)) * r.private
			}
		}
		for h := range set {
			if f, ok := weight[k][h]; ok {
				blocks += f
			} else {
				blocks++
			}
		}
		l.Blocks = int64(math.Round(blocks))
		return l, set
	}
	next := 0
	var ids []string
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(10); {
		case op < 4 || len(ids) == 0: // book
			id := fmt.Sprintf("r%d", next)
			next++
			r := &mreq{w: keys[rng.IntN(len(keys))], hashes: randSeq(), reuse: rng.IntN(5) != 0, prefill: rng.Int64N(3) * 16, private: 1}
			must(t, tr.Book(&tbook{RequestID: id, Worker: r.w, SequenceHashes: r.hashes, PrefillTokens: r.prefill, AssumeKVReuse: r.reuse}, t0))
			model[id] = r
			ids = append(ids, id)
		case op < 6: // prefill complete
			id := ids[rng.IntN(len(ids))]
			if got, want := tr.PrefillComplete(id), model[id] != nil; got != want {
				t.Fatalf("seed %d step %d: PrefillComplete(%s) = %v, want %v", seed, step, id, got, want)
			}
			if r := model[id]; r != nil {
				r.prefill = 0
			}
		case op < 7: // output block, with a decay fraction half of the time
			id := ids[rng.IntN(len(ids))]
			var f *float64
			if rng.IntN(2) == 0 {
				v := float64(rng.IntN(5)) / 4 // exact in fixed point
				f = &v
			}
			err := tr.OutputBlock(id, f)
			if r := model[id]; r != nil {
				must(t, err)
				r.outputs = append(r.outputs, 1)
				if f != nil {
					for i := range r.outputs {
						r.outputs[i] = *f
					}
					r.private = *f
					if r.reuse {
						for i := len(r.hashes) - 1; i >= 0 && holders(r.w, r.hashes[i]) == 1; i-- {
							weight[r.w][r.hashes[i]] = *f
						}
					}
				}
			} else if !errors.Is(err, errNotLive) {
				t.Fatalf("seed %d step %d: OutputBlock(freed) = %v", seed, step, err)
			}
		default: // free (sometimes twice)
			id := ids[rng.IntN(len(ids))]
			if got, want := tr.Free(id), model[id] != nil; got != want {
				t.Fatalf("seed %d step %d: Free(%s) = %v, want %v", seed, step, id, got, want)
			}
			if r := model[id]; r != nil {
				delete(model, id)
				for _, h := range r.hashes {
					if holders(r.w, h) == 0 {
						delete(weight[r.w], h) // the block left; it comes back at weight 1
					}
				}
			}
		}
		for _, k := range keys {
			w, _ := tr.Worker(k)
			want, set := modelLoads(k)
			if got := w.Loads(); got != want {
				t.Fatalf("seed %d step %d: %v loads %+v, model %+v", seed, step, k, got, want)
			}
			q := randSeq()
			depth := 0
			for depth < len(q) && set[q[depth]] {
				depth++
			}
			if got := w.NewBlocks(q, true); got != int64(len(q)-depth) {
				t.Fatalf("seed %d step %d: %v NewBlocks = %d, model %d", seed, step, k, got, len(q)-depth)
			}
		}
		if step%100 == 0 {
			checkInvariants(t, tr)
		}
	}
	for id := range model {
		tr.Free(id)
	}
	for _, k := range keys {
		w, _ := tr.Worker(k)
		wantLoads(t, w, Loads{})
	}
	checkInvariants(t, tr)
}
