package core

import (
	"encoding/binary"
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/zeebo/xxh3"
)

func TestLocalHashesVariants(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	seed := radix.HashSeed("", "")
	var buf []byte
	// Plain: radix's scheme; the known answer of [1,2,3,4] is Dynamo's.
	plain := localHashes(nil, toks, 4, seed, false, nil, &buf)
	if len(plain) != 2 || plain[0] != 14643705804678351452 {
		t.Fatalf("plain %v", plain)
	}
	// Eagle: windows of bs+1 with stride bs: (9-1)/4 = 2 blocks.
	eagle := localHashes(nil, toks, 4, seed, true, nil, &buf)
	if len(eagle) != 2 || eagle[0] != radix.BlockHash(toks[0:5], seed) || eagle[1] != radix.BlockHash(toks[4:9], seed) {
		t.Fatalf("eagle %v", eagle)
	}
	if got := localHashes(nil, toks[:8], 4, seed, true, nil, &buf); len(got) != 1 {
		t.Fatalf("eagle of 8 tokens: %d blocks, want 1", len(got))
	}
	// Multimodal: block 1 appends its mm hashes ascending.
	mm := localHashes(nil, toks, 4, seed, false, [][]uint64{nil, {9, 3}}, &buf)
	var want []byte
	for _, tk := range toks[4:8] {
		want = binary.LittleEndian.AppendUint32(want, tk)
	}
	want = binary.LittleEndian.AppendUint64(want, 3)
	want = binary.LittleEndian.AppendUint64(want, 9)
	if mm[0] != plain[0] || mm[1] != xxh3.HashSeed(want, seed) || mm[1] == plain[1] {
		t.Fatalf("mm %v", mm)
	}
}
