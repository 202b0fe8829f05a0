package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAppendHashesGivesBackTheBooking: whatever part of its hashes a slot
// copied (it shares the rest with live prompts' trie nodes), AppendHashes
// returns exactly what Book was given, while other bookings on the worker
// come and go (splitting and removing the nodes it shares). Prompts are
// chains sharing prefixes of one another, identical prompts, and hashes
// that are no chain (equal at the positions commonPrefix probes, different
// elsewhere), with and without prefill credit.
func TestAppendHashesGivesBackTheBooking(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	w := NewWorkerLoad(wk(1, 0), &Config{TrackActiveBlocks: true})
	base := [][]uint64{chain(seqN(1, 300)), chain(seqN(1000, 40)), chain(seqN(1, 120), seqN(5000, 80)...)}
	type live struct {
		s    *Slot
		seq  []uint64
		name string
	}
	var lives []live
	for op := range 3000 {
		if len(lives) > 40 || (len(lives) > 0 && rng.IntN(3) == 0) {
			j := rng.IntN(len(lives))
			lives[j].s.Release()
			lives[j] = lives[len(lives)-1]
			lives = lives[:len(lives)-1]
		} else {
			b := base[rng.IntN(len(base))]
			d := 1 + rng.IntN(len(b))
			seq := slices.Clone(b[:d])
			name := fmt.Sprintf("prefix %d", d)
			switch rng.IntN(4) {
			case 0: // its own tail after the shared prefix
				seq = append(seq, chain(seqN(10_000+op*100, 1+rng.IntN(30)))...)
				name += " and its own tail"
			case 1: // no chain: a middle hash differs, the probed ones agree
				if len(seq) > 3 {
					seq[len(seq)/3] ^= 0xdead
					name += ", a middle hash changed"
				}
			}
			bk := &Booking{SequenceHashes: seq, AssumeKVReuse: true}
			if rng.IntN(2) == 0 {
				bk.PrefillTokens, bk.BlockSize = int64(1+rng.IntN(16*len(seq))), 16
			}
			s := &Slot{}
			must(t, s.Book(w, bk))
			lives = append(lives, live{s, slices.Clone(seq), name})
		}
		for _, l := range lives {
			if got := l.s.AppendHashes([]uint64{42}); got[0] != 42 || !slices.Equal(got[1:], l.seq) {
				t.Fatalf("op %d, %s (%d hashes): AppendHashes gives %d hashes, not the booked ones", op, l.name, len(l.seq), len(got)-1)
			}
		}
	}
	for _, l := range lives {
		l.s.Release()
		if got := l.s.AppendHashes(nil); got != nil {
			t.Fatalf("released: %d hashes", len(got))
		}
	}
}

// TestBookCopiesOnlyTheUnsharedPart: a booking whose prompt extends a live
// one copies the hashes from where it leaves the live prompt (or from the
// block before its cached prefix when it takes prefill credit), and that
// credit still finds its next blocks.
func TestBookCopiesOnlyTheUnsharedPart(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	p := newPrompt(100, 300)
	must(t, tr.Book(&tbook{RequestID: "live", Worker: w.Key(), SequenceHashes: p.seq[:200], AssumeKVReuse: true}, t0))

	var plain Slot
	must(t, plain.Book(w, &Booking{SequenceHashes: p.seq[:260], AssumeKVReuse: true}))
	if plain.hashesAt != 200 || len(plain.hashes) != 60 {
		t.Fatalf("no credit: copied %d hashes from block %d, want 60 from 200", len(plain.hashes), plain.hashesAt)
	}
	plain.Release()

	// 60 blocks of prefill on the 300: the cached prefix is 240 blocks,
	// but the trie shares only 200, so the copy starts there.
	var cr Slot
	must(t, cr.Book(w, &Booking{SequenceHashes: p.seq, PrefillTokens: 60 * 16, AssumeKVReuse: true, BlockSize: 16}))
	if cr.hashesAt != 200 || cr.cursor != 240 {
		t.Fatalf("credit: copy from block %d, cursor %d; want 200, 240", cr.hashesAt, cr.cursor)
	}
	cr.Release()

	// 250 blocks of prefill: cached prefix 50, copy from block 49.
	var deep Slot
	must(t, deep.Book(w, &Booking{SequenceHashes: p.seq, PrefillTokens: 250 * 16, AssumeKVReuse: true, BlockSize: 16}))
	if deep.hashesAt != 49 || deep.cursor != 50 {
		t.Fatalf("deep credit: copy from block %d, cursor %d; want 49, 50", deep.hashesAt, deep.cursor)
	}
	credit(w, p.stored(50, 82))
	if got := w.Loads().ComputedPrefillTokens; got != 32*16 {
		t.Fatalf("credited %d tokens for blocks 50-81, want %d", got, 32*16)
	}
	if !slices.Equal(deep.AppendHashes(nil), p.seq) {
		t.Fatal("AppendHashes of the deep booking")
	}
	deep.Release()
}

// TestAcquireCopiesWhenTheEstimateWasDeep: when the path leaves the trie
// before the depth the caller's copy starts at (a release between Book's
// lock-free estimate and its lock), acquire copies the path from there and
// says so.
func TestAcquireCopiesWhenTheEstimateWasDeep(t *testing.T) {
	var tr promptTrie
	a := chain(seqN(1, 200))
	tr.acquire(a, a, 0)
	b := chain(seqN(1, 100), seqN(9000, 100)...) // leaves a at block 100
	term, _, own, at, exact := tr.acquire(b, b[150:], 150)
	if at != 100 || !slices.Equal(own, b[100:]) || !exact {
		t.Fatalf("copy from block %d (%d hashes), exact %v; want 100, 100, true", at, len(own), exact)
	}
	if &own[0] == &b[100] {
		t.Fatal("acquire retained the caller's path instead of a copy")
	}
	if end := term.chainAt + len(term.chain); end != 200 || term.chainAt != 100 {
		t.Fatalf("new node chain [%d, %d), want [100, 200)", term.chainAt, end)
	}
	tr.check()
}
