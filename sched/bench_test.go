package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// BenchmarkBookFree512 books and frees one 512-block request on a worker
// that already holds 16 other requests (target: <= 5 µs per pair).
func BenchmarkBookFree512(b *testing.B) {
	tr := newTracker(b, nil)
	w := tr.AddWorker(wk(1, 0))
	for i := range 16 {
		must(b, tr.Book(&tbook{RequestID: fmt.Sprintf("bg%d", i), Worker: w.Key(), SequenceHashes: chain(seqN(10_000*(i+1), 512)), PrefillTokens: 100, AssumeKVReuse: true}, t0))
	}
	seq := chain(seqN(1, 512))
	bk := &tbook{RequestID: "req", Worker: w.Key(), SequenceHashes: seq, PrefillTokens: 8192, AssumeKVReuse: true}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Book(bk, t0); err != nil {
			b.Fatal(err)
		}
		tr.Free("req")
	}
}

// BenchmarkBookFree512Shared is the same with the request sharing a
// 384-block prefix with a live request (a split and a re-merge-free
// release).
func BenchmarkBookFree512Shared(b *testing.B) {
	tr := newTracker(b, nil)
	w := tr.AddWorker(wk(1, 0))
	prefix := seqN(1, 384)
	must(b, tr.Book(&tbook{RequestID: "live", Worker: w.Key(), SequenceHashes: chain(prefix, seqN(5000, 128)...), AssumeKVReuse: true}, t0))
	bk := &tbook{RequestID: "req", Worker: w.Key(), SequenceHashes: chain(prefix, seqN(9000, 128)...), PrefillTokens: 2048, AssumeKVReuse: true}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Book(bk, t0); err != nil {
			b.Fatal(err)
		}
		tr.Free("req")
	}
}

// newBlocksFixture books, on each of 64 worker ranks, 8 requests that share
// a random-depth prefix of one 512-block prompt (depth fullDepth when >= 0)
// and returns the handles and the prompt.
func newBlocksFixture(b *testing.B, fullDepth int) ([]*WorkerLoad, []uint64) {
	tr := newTracker(b, nil)
	rng := rand.New(rand.NewPCG(3, 3))
	local := seqN(1, 512)
	handles := make([]*WorkerLoad, 64)
	for i := range handles {
		handles[i] = tr.AddWorker(wk(uint64(i/8), uint32(i%8)))
		for j := range 8 {
			d := fullDepth
			if d < 0 {
				d = rng.IntN(513)
			}
			seq := chain(local[:d], seqN(1_000_000*(i+1)+1000*j, 64)...)
			must(b, tr.Book(&tbook{RequestID: fmt.Sprintf("w%d-%d", i, j), Worker: handles[i].Key(), SequenceHashes: seq, AssumeKVReuse: true}, t0))
		}
	}
	return handles, chain(local)
}

// BenchmarkNewBlocks64Workers is potential decode blocks for a 512-block
// prompt across 64 worker ranks: Fill (three atomic loads and the lock-free
// prefix-dedup walk) for every rank (target: <= 10 µs). "mixed" has random prefix depths per request; "full" has every
// rank holding the whole prompt, the worst case for the edge compare.
func BenchmarkNewBlocks64Workers(b *testing.B) {
	for _, bc := range []struct {
		name  string
		depth int
	}{{"mixed", -1}, {"full", 512}, {"none", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			handles, seq := newBlocksFixture(b, bc.depth)
			var c Candidate
			var sink int64
			b.ReportAllocs()
			for b.Loop() {
				for _, h := range handles {
					h.Fill(&c, seq, true)
					sink += c.ActiveBlocks + c.NewBlocks
				}
			}
			_ = sink
		})
	}
}

func TestNewBlocksAllocatesNothing(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	seq := chain(seqN(1, 64))
	must(t, tr.Book(&tbook{RequestID: "a", Worker: w.Key(), SequenceHashes: seq[:40], AssumeKVReuse: true}, t0))
	var c Candidate
	if n := testing.AllocsPerRun(100, func() { w.Fill(&c, seq, true) }); n != 0 {
		t.Fatalf("Fill allocates %v times", n)
	}
	if c.NewBlocks != 24 {
		t.Fatalf("NewBlocks = %d, want 24", c.NewBlocks)
	}
}

// BenchmarkFillWhileBooking is BenchmarkNewBlocks64Workers/mixed with one
// goroutine booking and freeing 512-block requests on the same 64 ranks
// all the time: scoring takes no lock, so what it measures is the cost of
// sharing the cores and caches with a writer. The allocations reported are
// the booking goroutine's (the scorer allocates nothing).
func BenchmarkFillWhileBooking(b *testing.B) {
	handles, seq := newBlocksFixture(b, -1)
	tr := newTracker(b, nil)
	for _, h := range handles {
		tr.workers.Store(h.Key(), h) // share the handles with a second tracker
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		bk := &tbook{RequestID: "churn", SequenceHashes: seq, PrefillTokens: 512, AssumeKVReuse: true}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			bk.Worker = handles[i%len(handles)].Key()
			_ = tr.Book(bk, t0)
			tr.Free("churn")
		}
	}()
	var c Candidate
	b.ReportAllocs()
	for b.Loop() {
		for _, h := range handles {
			h.Fill(&c, seq, true)
		}
	}
	b.StopTimer()
	close(stop)
	<-done
}

// BenchmarkCreditStored is the cost KV-event progress adds per 32-block
// BlockStored event (compare radix's BenchmarkApplyStored, the index's
// cost of the same event): "chunk" continues a booking credited before
// (one sequence hash), "unmatched" an event of no booking behind 8
// pending ones (every booking's two next-block checks, then the scan for
// a recomputed prefix: 264 hashes).
func BenchmarkCreditStored(b *testing.B) {
	const blocks = 32
	setup := func(b *testing.B, pending int) (*testTracker, *WorkerLoad) {
		tr := newTracker(b, nil)
		w := tr.AddWorker(wk(1, 0))
		for i := range pending {
			p := newPrompt(uint64(1_000_000+i*100_000), 100_000/blocks*blocks/2)
			must(b, tr.Book(&tbook{RequestID: fmt.Sprint(i), Worker: w.Key(), SequenceHashes: p.seq, PrefillTokens: int64(len(p.seq)) * 16, AssumeKVReuse: true, BlockSize: 16}, t0))
		}
		return tr, w
	}
	b.Run("chunk", func(b *testing.B) {
		_, w := setup(b, 1)
		p := newPrompt(1_000_000, 100_000/blocks*blocks/2)
		events := make([][]radix.Block, 0, len(p.seq)/blocks)
		for from := 0; from+blocks <= len(p.seq); from += blocks {
			events = append(events, p.stored(from, from+blocks))
		}
		credit(w, events[0])
		k := 1
		b.ReportAllocs()
		for b.Loop() {
			if k == len(events) {
				b.StopTimer()
				_, w = setup(b, 1)
				credit(w, events[0])
				k = 1
				b.StartTimer()
			}
			credit(w, events[k])
			k++
		}
	})
	b.Run("unmatched", func(b *testing.B) {
		_, w := setup(b, 8)
		ev := newPrompt(7, blocks).stored(0, blocks)
		b.ReportAllocs()
		for b.Loop() {
			credit(w, ev)
		}
	})
}

// familiesFixture books, on each of 8 worker ranks, 128 live requests
// shaped like kvselect bench's default workload at C1024: one of 16
// system prompts (64 to 256 blocks), then a prefix of one of 64
// conversations' history (its family's; up to 192 blocks), then 4 to 32
// blocks of its own. So each rank's trie root has up to 16 children (a
// map beyond smallKids) and every family node branches into
// conversations. It returns the ranks and 64 query prompts drawn the same
// way (their own blocks new).
func familiesFixture(b testing.TB) ([]*WorkerLoad, [][]uint64) {
	tr := newTracker(b, nil)
	rng := rand.New(rand.NewPCG(26, 26))
	sys := make([][]uint64, 16)
	for f := range sys {
		sys[f] = seqN(1_000_000*(f+1), 64+rng.IntN(193))
	}
	convFam := make([]int, 64)
	convs := make([][]uint64, 64)
	for c := range convs {
		convFam[c] = rng.IntN(len(sys))
		convs[c] = seqN(100_000_000*(c+1), 192)
	}
	own := 1_000_000_000
	prompt := func() []uint64 {
		c := rng.IntN(len(convs))
		local := append(append([]uint64(nil), sys[convFam[c]]...), convs[c][:rng.IntN(193)]...)
		n := 4 + rng.IntN(29)
		local = append(local, seqN(own, n)...)
		own += n
		return chain(local)
	}
	handles := make([]*WorkerLoad, 8)
	for i := range handles {
		handles[i] = tr.AddWorker(wk(uint64(i), 0))
		for j := range 128 {
			must(b, tr.Book(&tbook{RequestID: fmt.Sprintf("w%d-%d", i, j), Worker: handles[i].Key(), SequenceHashes: prompt(), AssumeKVReuse: true}, t0))
		}
	}
	queries := make([][]uint64, 64)
	for i := range queries {
		queries[i] = prompt()
	}
	return handles, queries
}

// BenchmarkNewBlocksFamilies is Fill on each of familiesFixture's 8 ranks
// for one query prompt (a selection's candidate loads), the queries taken
// in turn.
func BenchmarkNewBlocksFamilies(b *testing.B) {
	handles, queries := familiesFixture(b)
	var c Candidate
	var sink int64
	k := 0
	b.ReportAllocs()
	for b.Loop() {
		q := queries[k%len(queries)]
		k++
		for _, h := range handles {
			h.Fill(&c, q, true)
			sink += c.NewBlocks
		}
	}
	_ = sink
}

// BenchmarkBookFreeFamilies books and frees one query prompt on one of
// familiesFixture's ranks (128 live requests sharing its prefixes), the
// queries and ranks taken in turn.
func BenchmarkBookFreeFamilies(b *testing.B) {
	handles, queries := familiesFixture(b)
	k := 0
	b.ReportAllocs()
	for b.Loop() {
		var s Slot
		if err := s.Book(handles[k%len(handles)], &Booking{SequenceHashes: queries[k%len(queries)], PrefillTokens: 1024, AssumeKVReuse: true, BlockSize: 16}); err != nil {
			b.Fatal(err)
		}
		s.Release()
		k++
	}
}
