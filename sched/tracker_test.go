package sched

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
)

var t0 = time.Unix(1_700_000_000, 0)

func wk(id uint64, r uint32) radix.WorkerKey { return radix.WorkerKey{WorkerID: id, DPRank: r} }

// chain returns rolling sequence hashes for the local hashes base..base+n-1
// after the shared prefix local hashes prefix.
func chain(prefix []uint64, rest ...uint64) []uint64 {
	local := append(append([]uint64(nil), prefix...), rest...)
	return radix.SequenceHashes(nil, local)
}

func seqN(start, n int) []uint64 {
	local := make([]uint64, n)
	for i := range local {
		local[i] = uint64(start + i)
	}
	return local
}

// wantLoads compares w's loads with want: A_p, A_d, N and A_c exactly;
// A_pairs exactly when want sets it, else only its link with the prefill
// left (zero exactly when A_p − A_c is).
func wantLoads(t *testing.T, w *WorkerLoad, want Loads) {
	t.Helper()
	got := w.Loads()
	pairs := got.PrefillPairs == want.PrefillPairs
	if want.PrefillPairs == 0 {
		pairs = (got.PrefillPairs == 0) == (got.PrefillTokens == got.ComputedPrefillTokens)
	}
	if got.PrefillTokens != want.PrefillTokens || got.Blocks != want.Blocks || got.Requests != want.Requests ||
		got.ComputedPrefillTokens != want.ComputedPrefillTokens || !pairs {
		t.Fatalf("%v loads = %+v, want %+v", w.Key(), got, want)
	}
}

// checkInvariants recomputes every worker's totals from the live slots
// and compares them with the counters and the trie.
func checkInvariants(t *testing.T, tr *testTracker) {
	t.Helper()
	type sums struct{ prefill, fixed, n, credited, pairs int64 }
	per := map[*WorkerLoad]*sums{}
	tr.workers.Range(func(_ radix.WorkerKey, w *WorkerLoad) bool { per[w] = &sums{}; return true })
	tr.reqs.Range(func(id string, r *Slot) bool {
		s := per[r.w]
		if s == nil {
			t.Errorf("request %s on an unregistered worker", id)
			return true
		}
		r.w.mu.Lock()
		s.prefill += r.prefill.Load()
		c, p := r.credited.Load(), r.pairs.Load()
		if c < 0 || c > r.prefill.Load() || p < 0 {
			t.Errorf("request %s: credited %d, pairs %d, prefill %d", id, c, p, r.prefill.Load())
		}
		s.credited += c
		s.pairs += p
		if !r.released {
			s.n++
			s.fixed += r.outputFixed + r.private*r.privateWeight
		}
		r.w.mu.Unlock()
		return true
	})
	for w, s := range per {
		w.mu.Lock()
		w.trie.check() // panics on a broken trie
		s.fixed += w.trie.fixed
		w.mu.Unlock()
		if got := w.c.prefillTokens.Load(); got != s.prefill {
			t.Errorf("%v prefill %d, recount %d", w.key, got, s.prefill)
		}
		if got := w.c.blocksFixed.Load(); got != s.fixed {
			t.Errorf("%v blocksFixed %d, recount %d", w.key, got, s.fixed)
		}
		if got := w.c.requests.Load(); got != s.n {
			t.Errorf("%v requests %d, recount %d", w.key, got, s.n)
		}
		if got := w.c.computed.Load(); got != s.credited {
			t.Errorf("%v computed %d, recount %d", w.key, got, s.credited)
		}
		if got := w.c.pairs.Load(); got != s.pairs {
			t.Errorf("%v pairs %d, recount %d", w.key, got, s.pairs)
		}
	}
}

func TestPrefixDedup(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	other := tr.AddWorker(wk(1, 1))
	shared := seqN(100, 8)
	a := chain(shared, 1, 2)    // 10 blocks
	b := chain(shared, 3, 4, 5) // 11 blocks, 8 shared with a
	c := chain(shared[:4])      // 4 blocks, all inside a

	if got := w.NewBlocks(a, true); got != 10 {
		t.Fatalf("empty worker: NewBlocks = %d, want 10", got)
	}
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: a, PrefillTokens: 160, AssumeKVReuse: true}, t0))
	wantLoads(t, w, Loads{PrefillTokens: 160, Blocks: 10, Requests: 1})
	wantLoads(t, other, Loads{})
	if got := w.NewBlocks(b, true); got != 3 {
		t.Fatalf("NewBlocks(b) = %d, want 3", got)
	}
	if got := w.NewBlocks(b, false); got != 11 {
		t.Fatalf("NewBlocks(b, no reuse) = %d, want 11", got)
	}
	if got := other.NewBlocks(b, true); got != 11 {
		t.Fatalf("other rank NewBlocks(b) = %d, want 11 (ranks are separate)", got)
	}
	must(t, tr.Book(&tbook{RequestID: "b", Worker: w.Key(), SequenceHashes: b, PrefillTokens: 48, AssumeKVReuse: true}, t0))
	wantLoads(t, w, Loads{PrefillTokens: 208, Blocks: 13, Requests: 2})
	must(t, tr.Book(&tbook{RequestID: "c", Worker: w.Key(), SequenceHashes: c, AssumeKVReuse: true}, t0))
	wantLoads(t, w, Loads{PrefillTokens: 208, Blocks: 13, Requests: 3})
	must(t, tr.Book(&tbook{RequestID: "d", Worker: w.Key(), SequenceHashes: c, AssumeKVReuse: false}, t0))
	wantLoads(t, w, Loads{PrefillTokens: 208, Blocks: 17, Requests: 4})
	checkInvariants(t, tr)

	if !tr.PrefillComplete("a") || !tr.PrefillComplete("a") {
		t.Fatal("PrefillComplete of a live request must report true, twice")
	}
	wantLoads(t, w, Loads{PrefillTokens: 48, Blocks: 17, Requests: 4})
	if !tr.Free("a") {
		t.Fatal("Free(a) = false")
	}
	wantLoads(t, w, Loads{PrefillTokens: 48, Blocks: 15, Requests: 3}) // a's own 2 blocks go
	if tr.Free("a") || tr.PrefillComplete("a") {
		t.Fatal("a second Free / PrefillComplete must report false")
	}
	checkInvariants(t, tr)
	for _, id := range []string{"b", "c", "d"} {
		tr.Free(id)
	}
	wantLoads(t, w, Loads{})
	checkInvariants(t, tr)
	if w.trie.root.numChildren() != 0 {
		t.Fatal("trie not empty after freeing everything")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutputBlocksAndDecay(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	shared := seqN(1, 4)
	a := chain(shared, 10, 11) // exclusive suffix: 2 blocks
	b := chain(shared, 20)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: a, AssumeKVReuse: true}, t0))
	must(t, tr.Book(&tbook{RequestID: "b", Worker: w.Key(), SequenceHashes: b, AssumeKVReuse: true}, t0))
	wantLoads(t, w, Loads{Blocks: 7, Requests: 2})

	must(t, tr.OutputBlock("a", nil))
	must(t, tr.OutputBlock("a", nil))
	wantLoads(t, w, Loads{Blocks: 9, Requests: 2})
	half := 0.5
	// Third output block with f = 0.5: 3 outputs × 0.5 + exclusive prompt
	// suffix 2 × 0.5; the shared 4 blocks and b's block keep weight 1.
	must(t, tr.OutputBlock("a", &half))
	if got, want := w.c.blocksFixed.Load(), 4*fullWeight+fullWeight+2*fullWeight/2+3*fullWeight/2; got != want {
		t.Fatalf("blocksFixed = %d, want %d (4 + 1 + 2×0.5 + 3×0.5)", got, want)
	}
	wantLoads(t, w, Loads{Blocks: 8, Requests: 2}) // round(7.5) = 8
	zero := 0.0
	must(t, tr.OutputBlock("a", &zero))
	wantLoads(t, w, Loads{Blocks: 5, Requests: 2}) // 4 shared + b's 1
	checkInvariants(t, tr)

	// A new owner of a decayed node does not restore its weight: as in
	// Dynamo's block tracker, the fraction stays with the node (here split
	// at a[:5], both halves keeping weight 0) until the node is removed.
	must(t, tr.Book(&tbook{RequestID: "c", Worker: w.Key(), SequenceHashes: a[:5], AssumeKVReuse: true}, t0))
	wantLoads(t, w, Loads{Blocks: 5, Requests: 3})
	checkInvariants(t, tr)
	// a's next decay reaches its block 6 only (block 5 has two owners now).
	must(t, tr.OutputBlock("a", &half))
	if got, want := w.c.blocksFixed.Load(), 5*fullWeight+fullWeight/2+5*fullWeight/2; got != want {
		t.Fatalf("blocksFixed = %d, want %d (4 shared + b's 1 + block 5 at 0 + block 6 at 0.5 + 5 outputs × 0.5)", got, want)
	}
	wantLoads(t, w, Loads{Blocks: 8, Requests: 3})
	checkInvariants(t, tr)

	// Private blocks (no KV reuse) decay too.
	must(t, tr.Book(&tbook{RequestID: "p", Worker: w.Key(), SequenceHashes: seqN(50, 4), AssumeKVReuse: false}, t0))
	wantLoads(t, w, Loads{Blocks: 12, Requests: 4})
	quarter := 0.25
	must(t, tr.OutputBlock("p", &quarter))
	wantLoads(t, w, Loads{Blocks: 9, Requests: 4}) // 8 + 4×0.25 + 0.25 = 9.25
	checkInvariants(t, tr)

	for _, id := range []string{"a", "b", "c", "p"} {
		tr.Free(id)
	}
	wantLoads(t, w, Loads{})
	if w.c.blocksFixed.Load() != 0 {
		t.Fatalf("blocksFixed %d after freeing everything", w.c.blocksFixed.Load())
	}
}

// TestOutputBlocksWhateverTrackOutput: an output block adds one decode
// block whatever router_track_output_blocks says (that flag steers only the
// reference's frontend; its selection service adds the block
// unconditionally, Dynamo's output_block_endpoint_updates_reserved_load).
// Without active-block tracking the prompt counts nothing, the outputs
// still do.
func TestOutputBlocksWhateverTrackOutput(t *testing.T) {
	for _, track := range []bool{false, true} {
		tr := newTracker(t, func(c *Config) { c.TrackOutputBlocks = track })
		w := tr.AddWorker(wk(1, 0))
		must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: chain(seqN(1, 3)), AssumeKVReuse: true}, t0))
		must(t, tr.OutputBlock("a", nil))
		wantLoads(t, w, Loads{Blocks: 4, Requests: 1})
	}

	tr := newTracker(t, func(c *Config) { c.TrackOutputBlocks, c.TrackActiveBlocks = false, false })
	w := tr.AddWorker(wk(1, 0))
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: chain(seqN(1, 3)), AssumeKVReuse: true, PrefillTokens: 5}, t0))
	wantLoads(t, w, Loads{PrefillTokens: 5, Requests: 1})
	if got := w.NewBlocks(chain(seqN(1, 3)), true); got != 0 {
		t.Fatalf("NewBlocks without block tracking = %d, want 0", got)
	}
	must(t, tr.OutputBlock("a", nil))
	wantLoads(t, w, Loads{PrefillTokens: 5, Blocks: 1, Requests: 1})
	tr.Free("a")
	wantLoads(t, w, Loads{})
}

func TestSlotErrors(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	seq := chain(seqN(1, 2))
	must(t, tr.Book(&tbook{RequestID: "x", Worker: wk(1, 0), SequenceHashes: seq, AssumeKVReuse: true}, t0))
	bad := func(f float64) *float64 { return &f }
	for _, f := range []float64{-0.1, 1.01, nan()} {
		if err := tr.OutputBlock("x", bad(f)); !errors.Is(err, ErrInvalidDecayFraction) {
			t.Errorf("decay %v: err = %v, want ErrInvalidDecayFraction", f, err)
		}
	}
	wantLoads(t, w, Loads{Blocks: 2, Requests: 1})
	w.Retire()
	var s Slot
	if err := s.Book(w, &Booking{SequenceHashes: seq}); !errors.Is(err, ErrWorkerNotFound) {
		t.Fatalf("Book on a retired worker: %v", err)
	}
	if s.Worker() != (radix.WorkerKey{}) {
		t.Fatal("a failed Book left the slot booked")
	}
	wantLoads(t, w, Loads{Blocks: 2, Requests: 1})
	for _, misuse := range []func(){
		func() { s.Release() },
		func() { s.CompletePrefill() },
		func() { _ = s.OutputBlock(nil) },
		func() {
			var b Slot
			w2 := NewWorkerLoad(wk(2, 0), &tr.cfg)
			must(t, b.Book(w2, &Booking{}))
			_ = b.Book(w2, &Booking{})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a broken caller protocol did not panic")
				}
			}()
			misuse()
		}()
	}
	checkInvariants(t, tr)
}

func nan() float64 { var z float64; return z / z }

func TestRemoveWorker(t *testing.T) {
	tr := newTracker(t, nil)
	tr.AddWorker(wk(1, 0))
	tr.AddWorker(wk(1, 1))
	keep := tr.AddWorker(wk(2, 0))
	must(t, tr.Book(&tbook{RequestID: "a", Worker: wk(1, 0), SequenceHashes: chain(seqN(1, 3)), AssumeKVReuse: true}, t0))
	must(t, tr.Book(&tbook{RequestID: "b", Worker: wk(1, 1), PrefillTokens: 7}, t0))
	must(t, tr.Book(&tbook{RequestID: "c", Worker: wk(2, 0), PrefillTokens: 9}, t0))
	if n := tr.RemoveWorker(1); n != 2 {
		t.Fatalf("RemoveWorker freed %d, want 2", n)
	}
	if _, ok := tr.Worker(wk(1, 1)); ok {
		t.Fatal("rank 1 still registered")
	}
	if err := tr.Book(&tbook{RequestID: "d", Worker: wk(1, 0)}, t0); !errors.Is(err, ErrWorkerNotFound) {
		t.Fatalf("Book on a removed worker: %v", err)
	}
	wantLoads(t, keep, Loads{PrefillTokens: 9, Requests: 1})
	if tr.reqs.Size() != 1 {
		t.Fatalf("%d live requests, want 1", tr.reqs.Size())
	}
}

// TestConcurrentBookingsSpread: 8 goroutines select-and-book 1,600 distinct
// 32-block requests onto 8 equally good workers at once (full pipeline:
// Fill, Score, Pick, Book). Stated tolerance: every worker ends with
// between 0.85× and 1.15× of the mean (200) bookings. Then every request is
// freed concurrently and every counter must be back to zero. Run under -race.
func TestConcurrentBookingsSpread(t *testing.T) {
	tr := newTracker(t, nil)
	const workers, goroutines, perG = 8, 8, 200
	handles := make([]*WorkerLoad, workers)
	for i := range handles {
		handles[i] = tr.AddWorker(wk(uint64(i), 0))
	}
	p := defaultParams(t)
	req := Request{ISLTokens: 512, BlockSize: 16}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cands := make([]Candidate, workers)
			costs := make([]float64, workers)
			for i := range perG {
				seq := chain(seqN(1_000_000*g+1000*i, 32))
				for j, h := range handles {
					cands[j] = Candidate{Worker: h.Key()}
					h.Fill(&cands[j], seq, true)
				}
				Score(&p, &req, cands, costs)
				pick := Pick(costs, 0, RuntimeRand{})
				eff := EffectivePrefillTokens(req.ISLTokens, CachedTokens(&p, req.BlockSize, &cands[pick]))
				if err := tr.Book(&tbook{RequestID: fmt.Sprintf("g%d-%d", g, i), Worker: cands[pick].Worker, SequenceHashes: seq, PrefillTokens: eff, AssumeKVReuse: true}, t0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mean := float64(goroutines*perG) / workers
	counts := make([]int64, workers)
	for i, h := range handles {
		l := h.Loads()
		counts[i] = l.Requests
		if l.Blocks != 32*l.Requests || l.PrefillTokens != 512*l.Requests {
			t.Errorf("worker %d loads %+v inconsistent with %d requests", i, l, l.Requests)
		}
	}
	t.Logf("bookings per worker: %v (mean %.0f)", counts, mean)
	for i, c := range counts {
		if f := float64(c) / mean; f < 0.85 || f > 1.15 {
			t.Errorf("worker %d got %d bookings (%.2f× the mean), outside [0.85, 1.15]", i, c, f)
		}
	}
	checkInvariants(t, tr)

	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				id := fmt.Sprintf("g%d-%d", g, i)
				if i%2 == 0 {
					tr.PrefillComplete(id)
				}
				tr.Free(id)
			}
		}()
	}
	wg.Wait()
	for _, h := range handles {
		wantLoads(t, h, Loads{})
		if h.c.blocksFixed.Load() != 0 || h.c.prefillTokens.Load() != 0 || h.c.requests.Load() != 0 {
			t.Fatalf("raw counters not zero on %v", h.Key())
		}
	}
	if tr.reqs.Size() != 0 {
		t.Fatalf("%d live requests after freeing all", tr.reqs.Size())
	}
}

// TestLifecycleRacesBooking: Free and PrefillComplete racing Book of the
// same id never leave a counter off zero.
func TestLifecycleRacesBooking(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	seq := chain(seqN(1, 8))
	for i := range 500 {
		id := fmt.Sprintf("r%d", i)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() {
			defer wg.Done()
			_ = tr.Book(&tbook{RequestID: id, Worker: w.Key(), SequenceHashes: seq, PrefillTokens: 100, AssumeKVReuse: true}, t0)
		}()
		go func() { defer wg.Done(); tr.PrefillComplete(id) }()
		go func() { defer wg.Done(); tr.Free(id) }()
		wg.Wait()
		tr.Free(id)
	}
	wantLoads(t, w, Loads{})
	if w.c.prefillTokens.Load() != 0 || w.c.blocksFixed.Load() != 0 || w.c.requests.Load() != 0 {
		t.Fatalf("counters %d %d %d", w.c.prefillTokens.Load(), w.c.blocksFixed.Load(), w.c.requests.Load())
	}
}

func firstChild(n *pnode) (first *pnode) {
	n.rangeChildren(func(_ uint64, c *pnode) {
		if first == nil {
			first = c
		}
	})
	return first
}

// TestTrieCheckCatchesCorruption proves the invariant checker can fail.
func TestTrieCheckCatchesCorruption(t *testing.T) {
	for _, corrupt := range []func(*promptTrie){
		func(tr *promptTrie) { tr.blocks++ },
		func(tr *promptTrie) { tr.fixed-- },
		func(tr *promptTrie) { firstChild(&tr.root).refs = 0 },
		func(tr *promptTrie) { firstChild(&tr.root).parent = nil },
		func(tr *promptTrie) { c := firstChild(&tr.root); c.chain = slices.Clone(c.chain) },
		func(tr *promptTrie) { c := firstChild(firstChild(&tr.root)); c.chain = c.chain[1:] },
	} {
		var tr promptTrie
		a, b := chain(seqN(1, 4)), chain(seqN(1, 2), 9)
		tr.acquire(a, a, 0)
		tr.acquire(b, b[2:], 2)
		tr.check()
		corrupt(&tr)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("check did not panic on a corrupted trie")
				}
			}()
			tr.check()
		}()
	}
}
