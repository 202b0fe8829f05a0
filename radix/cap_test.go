package radix

import "testing"

// chainStore stores blocks ext first..first+n-1 with local hashes
// loc+0..loc+n-1 for w on tier, after parent (0: from the root).
func chainStore(w WorkerKey, tier Tier, parent, first, loc uint64, n int) *Event {
	ev := &Event{Worker: w, Kind: Stored, Tier: tier, ParentHash: parent, HasParent: parent != 0}
	for i := range n {
		ev.Blocks = append(ev.Blocks, Block{Hash: first + uint64(i), Local: loc + uint64(i)})
	}
	return ev
}

// TestMaxBlocksPerRank: a store that takes a worker rank past
// MaxBlocksPerRank (all tiers counted) clears that rank alone, counted as
// rank_over_capacity; the rank then rebuilds from its next stores, and
// the other ranks keep their blocks.
func TestMaxBlocksPerRank(t *testing.T) {
	ix, err := New(Config{MaxBlocksPerRank: 10})
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := WorkerKey{WorkerID: 1}, WorkerKey{WorkerID: 2}
	for _, ev := range []*Event{
		chainStore(w1, TierDevice, 0, 100, 1000, 6),
		chainStore(w1, TierHostPinned, 105, 200, 1006, 3), // 9 in all: at the bound
		chainStore(w2, TierDevice, 0, 100, 1000, 5),
	} {
		if !ix.Apply(ev) {
			t.Fatalf("store %+v refused", ev)
		}
	}
	var r Result
	q := []uint64{1000, 1001, 1002, 1003, 1004, 1005, 1006}
	depth := func(w WorkerKey) int {
		ix.Match(q, &r)
		for _, m := range r.Matches {
			if m.Worker == w {
				return int(m.Device + m.Host)
			}
		}
		return 0
	}
	if d := depth(w1); d != 7 {
		t.Fatalf("w1 depth %d before the bound, want 7", d)
	}
	// Two more device blocks: 11 > 10.
	if ix.Apply(chainStore(w1, TierDevice, 0, 300, 5000, 2)) {
		t.Fatal("the store past the bound reported applied")
	}
	st := ix.Stats()
	if st.Dropped[DropRankOverCapacity] != 1 || st.Blocks[TierDevice] != 5 || st.Blocks[TierHostPinned] != 0 || st.Workers != 1 {
		t.Fatalf("after the bound: %+v", st)
	}
	if d1, d2 := depth(w1), depth(w2); d1 != 0 || d2 != 5 {
		t.Fatalf("depths w1 %d w2 %d, want 0 and 5", d1, d2)
	}
	if !ix.Apply(chainStore(w1, TierDevice, 0, 100, 1000, 4)) || depth(w1) != 4 || ix.MaxBlocksPerRank() != 10 {
		t.Fatalf("w1 did not rebuild: depth %d", depth(w1))
	}
	if err := checkIndex(ix); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{MaxBlocksPerRank: -1}); err == nil {
		t.Fatal("a negative bound was accepted")
	}
	if ix, _ := New(Config{}); ix.MaxBlocksPerRank() != DefaultMaxBlocksPerRank {
		t.Fatal("default bound")
	}
}

// TestRestoreSkipsRanksOverTheBound: a dump in which one rank holds more
// blocks than MaxBlocksPerRank (a peer with a larger bound dumped it)
// restores every other rank whole and skips that rank whole, counted once,
// instead of cutting it at an arbitrary point of the replay.
func TestRestoreSkipsRanksOverTheBound(t *testing.T) {
	big, _ := New(Config{MaxBlocksPerRank: 100})
	w1, w2 := WorkerKey{WorkerID: 1}, WorkerKey{WorkerID: 2}
	big.Apply(chainStore(w1, TierDevice, 0, 100, 1000, 8))
	big.Apply(chainStore(w1, TierHostPinned, 107, 200, 1008, 5))
	big.Apply(chainStore(w2, TierDevice, 0, 100, 1000, 4))
	small, _ := New(Config{MaxBlocksPerRank: 10})
	if n := small.Restore(big.Dump()); n != 1 {
		t.Fatalf("restored %d events, want w2's one", n)
	}
	st := small.Stats()
	if st.Dropped[DropRankOverCapacity] != 1 || st.Blocks[TierDevice] != 4 || st.Blocks[TierHostPinned] != 0 || st.Workers != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Within the bound the whole dump is restored.
	again, _ := New(Config{})
	if n := again.Restore(big.Dump()); n != len(big.Dump()) || again.Stats().Blocks != big.Stats().Blocks {
		t.Fatalf("restored %d of %d events: %+v", n, len(big.Dump()), again.Stats())
	}
	if err := checkIndex(small); err != nil {
		t.Fatal(err)
	}
}

// TestApproxIgnoresRankBound: an approximate index is bounded by its own
// MaxBlocks (with timers for every recorded block), not by a per-rank
// bound that would clear a rank behind its timers.
func TestApproxIgnoresRankBound(t *testing.T) {
	a, err := NewApprox(ApproxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n := a.Index().MaxBlocksPerRank(); n <= DefaultMaxBlocksPerRank {
		t.Fatalf("approximate index per-rank bound %d", n)
	}
}
