package radix

import (
	"testing"

	"github.com/zeebo/xxh3"
)

// Known answers from Dynamo's tests (ai-dynamo/dynamo:lib/tokens/src/lib.rs
// and lib/kv-router/src/protocols.rs).
func TestHashKnownAnswers(t *testing.T) {
	if got := xxh3.HashStringSeed("test data", Seed); got != 13226331709069118873 {
		t.Fatalf("xxh3(test data, 1337) = %d", got)
	}
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13} // 13: partial tail dropped
	local := LocalHashes(nil, tokens, 4, HashSeed("", ""))
	wantLocal := []uint64{14643705804678351452, 16777012769546811212, 483935686894639516}
	if len(local) != len(wantLocal) {
		t.Fatalf("got %d local hashes, want %d", len(local), len(wantLocal))
	}
	for i := range wantLocal {
		if local[i] != wantLocal[i] {
			t.Errorf("local[%d] = %d, want %d", i, local[i], wantLocal[i])
		}
	}
	seq := SequenceHashes(nil, local)
	wantSeq := []uint64{14643705804678351452, 4945711292740353085, 12583592247330656132}
	for i := range wantSeq {
		if seq[i] != wantSeq[i] {
			t.Errorf("seq[%d] = %d, want %d", i, seq[i], wantSeq[i])
		}
	}
}

func TestHashSeedSalting(t *testing.T) {
	if HashSeed("", "") != Seed {
		t.Fatal("empty lora and salt must leave the seed at 1337")
	}
	lora := Seed + xxh3.HashStringSeed("my-lora", 0)
	if got := HashSeed("my-lora", ""); got != lora {
		t.Fatalf("lora seed = %d, want %d", got, lora)
	}
	both := lora + xxh3.HashStringSeed("tenant", 1)
	if got := HashSeed("my-lora", "tenant"); got != both {
		t.Fatalf("lora+salt seed = %d, want %d", got, both)
	}
	if HashSeed("", "tenant") == HashSeed("tenant", "") {
		t.Fatal("salt and lora must use different seeds")
	}
	a := BlockHash([]uint32{1, 2, 3, 4}, HashSeed("my-lora", ""))
	if a == 14643705804678351452 {
		t.Fatal("a LoRA name must change the local hash")
	}
}

func TestLocalHashesShortPrompt(t *testing.T) {
	if got := LocalHashes(nil, []uint32{1, 2, 3}, 4, Seed); len(got) != 0 {
		t.Fatalf("a prompt shorter than one block has no full block, got %v", got)
	}
}

func TestHashingAllocatesNothing(t *testing.T) {
	tokens := make([]uint32, 2048)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	local := make([]uint64, 0, 128)
	seq := make([]uint64, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		local = LocalHashes(local[:0], tokens, 16, Seed)
		seq = SequenceHashes(seq[:0], local)
	})
	if allocs != 0 {
		t.Fatalf("hashing a 2048-token prompt allocated %.1f times, want 0", allocs)
	}
	if len(local) != 128 || len(seq) != 128 {
		t.Fatalf("got %d/%d hashes, want 128", len(local), len(seq))
	}
}

func BenchmarkHashPrompt2048(b *testing.B) {
	tokens := make([]uint32, 2048)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	local := make([]uint64, 0, 128)
	seq := make([]uint64, 0, 128)
	b.ReportAllocs()
	b.SetBytes(int64(4 * len(tokens)))
	for b.Loop() {
		local = LocalHashes(local[:0], tokens, 16, Seed)
		seq = SequenceHashes(seq[:0], local)
	}
}

// TestBlockHashMM: the mm hashes enter in ascending order whatever order
// they are given in, after the token bytes; none is BlockHash.
func TestBlockHashMM(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	var buf []byte
	if BlockHashMM(toks, nil, Seed, &buf) != BlockHash(toks, Seed) {
		t.Fatal("no mm hash differs from BlockHash")
	}
	a := BlockHashMM(toks, []uint64{42, 7, 1 << 63}, Seed, &buf)
	b := BlockHashMM(toks, []uint64{1 << 63, 42, 7}, Seed, &buf)
	want := xxh3.HashSeed([]byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0,
		7, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80}, Seed)
	if a != b || a != want {
		t.Fatalf("%d %d, want %d", a, b, want)
	}
}
