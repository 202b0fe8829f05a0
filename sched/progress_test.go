package sched

import (
	"fmt"
	"sync"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// progressPrompt is a prompt of n full blocks of bs tokens for the
// progress tests: its local hashes base..base+n-1, its sequence hashes,
// and the engine hashes an engine gives its blocks (external, opaque).
type progressPrompt struct {
	local, seq []uint64
	base       uint64
}

func newPrompt(base uint64, n int) progressPrompt {
	local := seqN(int(base), n)
	return progressPrompt{local: local, seq: radix.SequenceHashes(nil, local), base: base}
}

// engineHash is block i's engine hash.
func (p progressPrompt) engineHash(i int) uint64 { return 1<<40 + p.base<<16 + uint64(i) }

// stored is the blocks of the BlockStored event of blocks [from, to).
func (p progressPrompt) stored(from, to int) []radix.Block {
	var blocks []radix.Block
	for i := from; i < to; i++ {
		blocks = append(blocks, radix.Block{Hash: p.engineHash(i), Local: p.local[i]})
	}
	return blocks
}

func credit(w *WorkerLoad, blocks []radix.Block) { w.CreditStored(blocks) }

// bookPrompt books request "a", the first seqLen blocks of a 10-block
// prompt with prefill tokens, block size 16, on a fresh worker.
func bookPrompt(t testing.TB, seqLen int, prefill int64) (*testTracker, *WorkerLoad, progressPrompt) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	p := newPrompt(100, 10)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: p.seq[:seqLen], PrefillTokens: prefill, AssumeKVReuse: true, BlockSize: 16}, t0))
	return tr, w, p
}

// wantComputed fails unless w's A_c is want.
func wantComputed(t *testing.T, w *WorkerLoad, want int64, when string) {
	t.Helper()
	if got := w.Loads().ComputedPrefillTokens; got != want {
		t.Fatalf("A_c = %d %s, want %d", got, when, want)
	}
}

// TestCreditStoredFollowsTheBooking: a booking of a 10-block prompt of
// which 2 blocks are cached (8 blocks, 128 tokens booked) is credited
// chunk by chunk as its engine stores its blocks: A_c grows by each
// chunk's tokens and A_pairs shrinks by the attention work of the tokens
// computed, both back to 0 at its first token.
func TestCreditStoredFollowsTheBooking(t *testing.T) {
	tr, w, p := bookPrompt(t, 10, 128)
	wantLoads(t, w, Loads{PrefillTokens: 128, Blocks: 10, Requests: 1, PrefillPairs: attentionPairs(32, 128)})

	if got := w.CreditStored(p.stored(2, 6)); got != 64 { // the first chunk: blocks 2-5
		t.Fatalf("CreditStored of the first chunk = %d tokens, want 64", got)
	}
	wantLoads(t, w, Loads{PrefillTokens: 128, Blocks: 10, Requests: 1, ComputedPrefillTokens: 64, PrefillPairs: attentionPairs(96, 64)})
	checkInvariants(t, tr)

	credit(w, p.stored(6, 10)) // the next chunk, found by its parent
	wantLoads(t, w, Loads{PrefillTokens: 128, Blocks: 10, Requests: 1, ComputedPrefillTokens: 128})
	if w.Loads().PrefillPairs != 0 {
		t.Fatalf("pairs left %d once every block is computed", w.Loads().PrefillPairs)
	}
	// Output blocks chain from the prompt's last block; the booking has
	// taken its whole prefill, so they credit nothing.
	credit(w, []radix.Block{{Hash: 7, Local: 7}})
	wantLoads(t, w, Loads{PrefillTokens: 128, Blocks: 10, Requests: 1, ComputedPrefillTokens: 128})

	if !tr.PrefillComplete("a") {
		t.Fatal("PrefillComplete(a) = false")
	}
	wantLoads(t, w, Loads{Blocks: 10, Requests: 1})
	checkInvariants(t, tr)
	tr.Free("a")
	wantLoads(t, w, Loads{})
	if w.credit.head != nil {
		t.Fatal("credit queue not empty once every slot is released")
	}
}

// TestCreditStoredMatchesByHash: blocks are credited to the booking they
// belong to, not to the oldest; blocks of no pending booking (another
// prompt, a chunk whose parent no booking stored, output blocks) credit
// nothing.
func TestCreditStoredMatchesByHash(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	a, b, other := newPrompt(100, 8), newPrompt(200, 8), newPrompt(300, 8)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: a.seq, PrefillTokens: 128, AssumeKVReuse: true, BlockSize: 16}, t0))
	must(t, tr.Book(&tbook{RequestID: "b", Worker: w.Key(), SequenceHashes: b.seq, PrefillTokens: 128, AssumeKVReuse: true, BlockSize: 16}, t0))

	credit(w, b.stored(0, 3))
	credit(w, other.stored(0, 8))
	credit(w, b.stored(4, 6)) // not b's next block (3)
	credit(w, []radix.Block{{Hash: 10, Local: 10}})
	wantComputed(t, w, 48, "(b's 3 blocks only)")
	tr.reqs.Range(func(id string, s *Slot) bool {
		if want := map[string]int64{"a": 0, "b": 48}[id]; s.credited.Load() != want {
			t.Errorf("%s credited %d, want %d", id, s.credited.Load(), want)
		}
		return true
	})
	checkInvariants(t, tr)

	// b's prefill completes: its credit leaves with it and its late
	// chunk finds no booking.
	tr.PrefillComplete("b")
	credit(w, b.stored(3, 8))
	wantLoads(t, w, Loads{PrefillTokens: 128, Blocks: 16, Requests: 2})
	checkInvariants(t, tr)
}

// TestCreditStoredUnlinks: a completed booking leaves the credit queue
// at the next event, a released one at once, and neither takes credit
// after.
func TestCreditStoredUnlinks(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	a, b := newPrompt(100, 8), newPrompt(200, 8)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: a.seq, PrefillTokens: 128, AssumeKVReuse: true, BlockSize: 16}, t0))
	must(t, tr.Book(&tbook{RequestID: "b", Worker: w.Key(), SequenceHashes: b.seq, PrefillTokens: 128, AssumeKVReuse: true, BlockSize: 16}, t0))
	queued := func() (n int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for s := w.credit.head; s != nil; s = s.next {
			n++
		}
		return n
	}
	tr.Free("b")
	if n := queued(); n != 1 {
		t.Fatalf("%d slots queued after b's release, want 1", n)
	}
	tr.PrefillComplete("a")
	credit(w, a.stored(0, 4))
	credit(w, b.stored(0, 4))
	if n := queued(); n != 0 {
		t.Fatalf("%d slots queued after a's completion and an event, want 0", n)
	}
	if got := w.c.computed.Load(); got != 0 {
		t.Fatalf("A_c = %d, want 0: nothing pending", got)
	}
	checkInvariants(t, tr)
}

// TestCreditStoredRecomputedPrefix: an engine that found less of the
// prefix cached than the booking's overlap (it was evicted meanwhile)
// stores blocks before the booking's first; only the booked ones count.
func TestCreditStoredRecomputedPrefix(t *testing.T) {
	// 4 blocks cached at booking and a partial block of 5 tokens: 6·16 + 5.
	tr, w, p := bookPrompt(t, 10, 101)
	credit(w, p.stored(1, 7)) // blocks 1-6: 4, 5 and 6 are the booking's
	wantLoads(t, w, Loads{PrefillTokens: 101, Blocks: 10, Requests: 1, ComputedPrefillTokens: 48, PrefillPairs: attentionPairs(64+48, 101-48)})
	credit(w, p.stored(7, 10))
	// The partial block is never stored: 5 tokens stay ahead.
	wantLoads(t, w, Loads{PrefillTokens: 101, Blocks: 10, Requests: 1, ComputedPrefillTokens: 96, PrefillPairs: attentionPairs(160, 5)})
	checkInvariants(t, tr)
}

// TestCreditStoredFirstChunkOneBlockLater: an eagle prompt of 160 tokens
// hashes 9 blocks (its last full block is not hashed); with 4 cached the
// booking is 96 tokens, from which Book derives 3 cached blocks. The
// engine's first chunk starts at block 4 and is still the booking's; a
// later chunk that skips a block is not.
func TestCreditStoredFirstChunkOneBlockLater(t *testing.T) {
	tr, w, p := bookPrompt(t, 9, 96)
	credit(w, p.stored(4, 6))
	wantComputed(t, w, 32, "after the first chunk")
	credit(w, p.stored(7, 9)) // skips block 6
	wantComputed(t, w, 32, "after a chunk that skips a block")
	credit(w, p.stored(6, 9))
	wantComputed(t, w, 80, "after the rest")
	checkInvariants(t, tr)
}

// TestCreditStoredWithoutHashes: a booking the events cannot be matched
// to (no block size, or no sequence hashes kept: assume_kv_reuse off)
// keeps its whole prefill ahead, as without KV events.
func TestCreditStoredWithoutHashes(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	p := newPrompt(100, 4)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: 64, AssumeKVReuse: true}, t0))
	must(t, tr.Book(&tbook{RequestID: "b", Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: 64, AssumeKVReuse: false, BlockSize: 16}, t0))
	credit(w, p.stored(0, 4))
	wantComputed(t, w, 0, "for bookings that cannot be matched")
	if w.credit.head != nil {
		t.Fatal("a booking that cannot be matched joined the credit queue")
	}
}

// TestCreditStoredScanBudget: an event is looked for in at most
// maxCreditScan hashes, two per pending booking first. Behind 1,100
// pending 8-block bookings the last one's chunk is given up on (it
// credits nothing); one within the budget is found.
func TestCreditStoredScanBudget(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	const blocks, n = 8, 1100
	for i := range n {
		p := newPrompt(uint64(1000+i*blocks), blocks)
		must(t, tr.Book(&tbook{RequestID: fmt.Sprint(i), Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: blocks * 16, AssumeKVReuse: true, BlockSize: 16}, t0))
	}
	last := newPrompt(uint64(1000+(n-1)*blocks), blocks)
	credit(w, last.stored(0, blocks))
	wantComputed(t, w, 0, "past the scan budget")
	near := newPrompt(uint64(1000+(maxCreditScan/2-1)*blocks), blocks)
	credit(w, near.stored(0, blocks))
	wantComputed(t, w, blocks*16, "within the scan budget")
	checkInvariants(t, tr)
}

// TestCreditStoredRacesLifecycle: chunks credited while the same
// bookings complete and are freed from other goroutines leave every
// counter consistent, and all at 0 once every booking is gone (run under
// -race in make test).
func TestCreditStoredRacesLifecycle(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	const n, blocks = 64, 16
	prompts := make([]progressPrompt, n)
	ids := make([]string, n)
	for i := range prompts {
		prompts[i] = newPrompt(uint64(1+i*blocks), blocks)
		ids[i] = string(rune(0x100 + i))
		must(t, tr.Book(&tbook{RequestID: ids[i], Worker: w.Key(), SequenceHashes: prompts[i].seq, PrefillTokens: blocks * 16, AssumeKVReuse: true, BlockSize: 16}, t0))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for _, p := range prompts {
			for from := 0; from < blocks; from += 4 {
				credit(w, p.stored(from, from+4))
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range prompts {
			if i%2 == 0 {
				tr.PrefillComplete(ids[i])
			} else {
				tr.Free(ids[i])
			}
		}
	}()
	wg.Wait()
	checkInvariants(t, tr)
	for _, id := range ids {
		tr.Free(id)
	}
	wantLoads(t, w, Loads{})
	if l := w.Loads(); l.PrefillPairs != 0 || w.c.computed.Load() != 0 || w.c.pairs.Load() != 0 {
		t.Fatalf("counters left after every booking is gone: %+v, computed %d, pairs %d", l, w.c.computed.Load(), w.c.pairs.Load())
	}
}

func TestCreditStoredAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	p := newPrompt(100, 1024)
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: 1024 * 16, AssumeKVReuse: true, BlockSize: 16}, t0))
	other := newPrompt(5000, 64)
	credit(w, p.stored(0, 8))
	from := 8
	events := make([][]radix.Block, 0, 101)
	for range 101 {
		events = append(events, p.stored(from, from+8))
		from += 8
	}
	noise := other.stored(0, 64)
	k := 0
	allocs := testing.AllocsPerRun(100, func() {
		credit(w, events[k])
		credit(w, noise)
		k++
	})
	if allocs != 0 {
		t.Fatalf("CreditStored allocates %.1f times per call", allocs)
	}
	if got := w.Loads().ComputedPrefillTokens; got != int64(from)*16 {
		t.Fatalf("A_c = %d, want %d", got, from*16)
	}
}

// TestCreditStoredSaturatedPairs: a booking whose attention pairs
// saturate at MaxPrefillPairs is credited without driving A_pairs
// negative, and leaves every counter at 0.
func TestCreditStoredSaturatedPairs(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	p := newPrompt(100, 10)
	const huge = 1 << 40 // (2^40)²/2 pairs: past MaxPrefillPairs
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: huge, AssumeKVReuse: true, BlockSize: 16}, t0))
	if got := w.Loads().PrefillPairs; got != MaxPrefillPairs {
		t.Fatalf("A_pairs = %d, want the saturation bound %d", got, int64(MaxPrefillPairs))
	}
	credit(w, p.stored(0, 10))
	wantComputed(t, w, 160, "after every block")
	if l := w.Loads(); l.PrefillPairs <= 0 || l.PrefillPairs > MaxPrefillPairs {
		t.Fatalf("A_pairs = %d after credit, want in (0, %d]", l.PrefillPairs, int64(MaxPrefillPairs))
	}
	checkInvariants(t, tr)
	tr.PrefillComplete("a")
	wantLoads(t, w, Loads{Blocks: 10, Requests: 1})
	if w.c.pairs.Load() != 0 || w.c.computed.Load() != 0 {
		t.Fatalf("pairs %d, computed %d after completion", w.c.pairs.Load(), w.c.computed.Load())
	}
}
