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
