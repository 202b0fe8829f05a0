package bench

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// mooncakePath is the public Mooncake trace's first 1,000 requests, the
// one copy in the repository; the tests replay its first mooncakeLimit.
const (
	mooncakePath  = "testdata/mooncake_trace_1000.jsonl"
	mooncakeLimit = 200
)

func smallSynthetic() SyntheticConfig {
	c := DefaultSynthetic()
	c.Prompts = 600
	c.Families = 4
	c.SystemMin, c.SystemMax = 256, 512
	c.ActiveSessions = 8
	return c
}

func TestSyntheticDeterministic(t *testing.T) {
	a := Synthetic(smallSynthetic(), 16, 7)
	b := Synthetic(smallSynthetic(), 16, 7)
	c := Synthetic(smallSynthetic(), 16, 8)
	if len(a) != 600 || len(b) != 600 {
		t.Fatalf("got %d and %d prompts, want 600", len(a), len(b))
	}
	for i := range a {
		if a[i].ISL != b[i].ISL || a[i].OutputTokens != b[i].OutputTokens ||
			!slices.Equal(a[i].Local, b[i].Local) || !slices.Equal(a[i].Seq, b[i].Seq) ||
			a[i].Family != b[i].Family || a[i].Conversation != b[i].Conversation || a[i].Turn != b[i].Turn {
			t.Fatalf("prompt %d differs between two runs with seed 7", i)
		}
	}
	same := 0
	for i := range a {
		if slices.Equal(a[i].Local, c[i].Local) {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("seeds 7 and 8 produced the same prompts")
	}
}

func TestSyntheticPrefixSharing(t *testing.T) {
	const bs = 16
	cfg := smallSynthetic()
	ps := Synthetic(cfg, bs, 3)
	sysBlocks := cfg.SystemMin / bs // every system prompt has at least this many full blocks

	firstOfFamily := map[int]*Prompt{}
	lastTurn := map[int]*Prompt{}
	multiTurn, familyShares := 0, 0
	for i := range ps {
		p := &ps[i]
		if !slices.Equal(p.Seq, radix.SequenceHashes(nil, p.Local)) {
			t.Fatalf("prompt %d: sequence hashes are not the chain of the local hashes", i)
		}
		if len(p.Local) != p.ISL/bs {
			t.Fatalf("prompt %d: %d blocks for %d tokens at block size %d", i, len(p.Local), p.ISL, bs)
		}
		// Every prompt of a family starts with the family's system prompt.
		if f, ok := firstOfFamily[p.Family]; ok {
			if !slices.Equal(f.Local[:sysBlocks], p.Local[:sysBlocks]) {
				t.Fatalf("prompt %d does not share family %d's system prompt", i, p.Family)
			}
			familyShares++
		} else {
			firstOfFamily[p.Family] = p
		}
		// A conversation's next turn extends the previous turn's prompt.
		if prev, ok := lastTurn[p.Conversation]; ok {
			if p.Turn != prev.Turn+1 || len(p.Local) <= len(prev.Local) ||
				!slices.Equal(prev.Local, p.Local[:len(prev.Local)]) {
				t.Fatalf("prompt %d (conversation %d turn %d) does not extend turn %d", i, p.Conversation, p.Turn, prev.Turn)
			}
			multiTurn++
		} else if p.Turn != 0 {
			t.Fatalf("prompt %d: conversation %d starts at turn %d", i, p.Conversation, p.Turn)
		}
		lastTurn[p.Conversation] = p
	}
	if len(firstOfFamily) != cfg.Families {
		t.Errorf("%d families used, want %d", len(firstOfFamily), cfg.Families)
	}
	// Different families do not share their first block (random tokens).
	for f, p := range firstOfFamily {
		for g, q := range firstOfFamily {
			if f < g && p.Local[0] == q.Local[0] {
				t.Errorf("families %d and %d share their first block", f, g)
			}
		}
	}
	if multiTurn < len(ps)/2 || familyShares < len(ps)/2 {
		t.Errorf("too little sharing: %d later turns, %d family shares of %d prompts", multiTurn, familyShares, len(ps))
	}
}

func TestTraceExpansionExact(t *testing.T) {
	recs := []TraceRecord{
		{InputLength: 1100, OutputLength: 7, HashIDs: []uint64{0, 1, 2}}, // 2 full 512-blocks + 76 tokens
		{InputLength: 1536, OutputLength: 9, HashIDs: []uint64{0, 5, 6}}, // exactly 3 blocks
	}
	for _, bs := range []int{16, 64, 512} {
		ps, err := ExpandTrace(recs, bs)
		if err != nil {
			t.Fatal(err)
		}
		k := 512 / bs
		for i, rec := range recs {
			p := ps[i]
			want := min(len(rec.HashIDs)*k, rec.InputLength/bs)
			if len(p.Local) != want || len(p.Seq) != want || p.ISL != rec.InputLength || p.OutputTokens != rec.OutputLength {
				t.Fatalf("bs %d record %d: %d blocks (want %d), isl %d, out %d", bs, i, len(p.Local), want, p.ISL, p.OutputTokens)
			}
			for b, h := range p.Local {
				id, j := rec.HashIDs[b/k], b%k
				if h != radix.BlockHash(TraceBlockTokens(nil, id, j, bs), radix.Seed) {
					t.Fatalf("bs %d record %d block %d is not the hash of id %d sub-block %d", bs, i, b, id, j)
				}
			}
			if !slices.Equal(p.Seq, radix.SequenceHashes(nil, p.Local)) {
				t.Fatalf("bs %d record %d: sequence hashes are not the chain", bs, i)
			}
		}
		// Both records start with id 0: exactly k shared blocks.
		shared := 0
		for shared < min(len(ps[0].Seq), len(ps[1].Seq)) && ps[0].Seq[shared] == ps[1].Seq[shared] {
			shared++
		}
		if shared != k {
			t.Fatalf("bs %d: records share %d sequence hashes, want %d", bs, shared, k)
		}
	}
	// 1100 tokens at block size 16: 68 full blocks, not 3*32 = 96.
	ps, _ := ExpandTrace(recs[:1], 16)
	if len(ps[0].Local) != 68 {
		t.Fatalf("want 68 blocks, got %d", len(ps[0].Local))
	}
	if _, err := ExpandTrace(recs, 48); err == nil {
		t.Fatal("block size 48 does not divide 512 and must be rejected")
	}
}

func TestTraceTokensIndependentOfBlockSize(t *testing.T) {
	whole := TraceBlockTokens(nil, 42, 0, 512)
	var parts []uint32
	for j := range 32 {
		parts = TraceBlockTokens(parts, 42, j, 16)
	}
	if !slices.Equal(whole, parts) {
		t.Fatal("sub-blocks of size 16 do not concatenate to the 512-token block")
	}
}

func TestMooncakeTraceFile(t *testing.T) {
	f, err := os.Open(mooncakePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1000 {
		t.Fatalf("%d records, want 1000", len(recs))
	}
	recs = recs[:mooncakeLimit]
	const bs = 16
	ps, err := ExpandTrace(recs, bs)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for i, p := range ps {
		if want := min(len(recs[i].HashIDs)*32, recs[i].InputLength/bs); len(p.Local) != want {
			t.Fatalf("record %d: %d blocks, want %d", i, len(p.Local), want)
		}
		blocks += len(p.Local)
	}
	// Records 0-2 of the file all start with hash id 0, then diverge.
	for _, i := range []int{1, 2} {
		if recs[i].HashIDs[0] != 0 || recs[i].HashIDs[1] == recs[0].HashIDs[1] {
			t.Fatalf("trace file changed: record %d", i)
		}
		if !slices.Equal(ps[0].Seq[:32], ps[i].Seq[:32]) || ps[0].Seq[32] == ps[i].Seq[32] {
			t.Fatalf("records 0 and %d must share exactly their first 32 blocks", i)
		}
	}
	t.Logf("%d prompts, %d blocks at block size %d", len(ps), blocks, bs)
}

func TestPromptJSONIsSigned64(t *testing.T) {
	p := Prompt{ISL: 32, OutputTokens: 5, Local: []uint64{1, math.MaxUint64}, Seq: []uint64{1 << 63, 2}}
	b := AppendPromptJSON(nil, &p)
	var got struct {
		BlockHashes    []int64 `json:"block_hashes"`
		SequenceHashes []int64 `json:"sequence_hashes"`
		ISLTokens      int     `json:"isl_tokens"`
		Expected       int     `json:"expected_output_tokens"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !strings.Contains(string(b), `-1`) || got.ISLTokens != 32 || got.Expected != 5 {
		t.Fatalf("body %s", b)
	}
	for i := range p.Local {
		if uint64(got.BlockHashes[i]) != p.Local[i] || uint64(got.SequenceHashes[i]) != p.Seq[i] {
			t.Fatalf("hash %d does not round-trip through int64: %s", i, b)
		}
	}
}

func TestLoadWorkload(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Synthetic = smallSynthetic()
	ps, desc, err := LoadWorkload(&cfg)
	if err != nil || len(ps) != 600 || !strings.Contains(desc, "synthetic") {
		t.Fatalf("%d prompts, %q, %v", len(ps), desc, err)
	}
	for i := range ps {
		if string(AppendPromptJSON(nil, &ps[i])) != string(ps[i].Body) {
			t.Fatalf("prompt %d body not encoded", i)
		}
	}
	cfg.Workload = "trace:/nonexistent"
	if _, _, err := LoadWorkload(&cfg); err == nil {
		t.Fatal("missing trace file must fail")
	}
}

// TestPromptTokensHashLikeTheEngine checks that the tokens an engine is
// served hash, as the engine hashes them, to the prompt's block_hashes: the
// selector's index (fed by the engine's events) and the request agree.
func TestPromptTokensHashLikeTheEngine(t *testing.T) {
	const bs = 64
	trace, err := ExpandTrace([]TraceRecord{
		{InputLength: 1024, HashIDs: []uint64{1, 2}},
		{InputLength: 1000, HashIDs: []uint64{3, 4}},
		{InputLength: 1536, HashIDs: []uint64{1, 2, 5}},
	}, bs)
	if err != nil {
		t.Fatal(err)
	}
	syn := smallSynthetic()
	syn.Prompts = 20
	for _, p := range append(trace, Synthetic(syn, bs, 3)...) {
		toks := p.AppendTokens(nil, bs)
		if len(toks) != len(p.Local)*bs {
			t.Fatalf("prompt %d: %d tokens for %d blocks", p.Index, len(toks), len(p.Local))
		}
		if got := radix.LocalHashes(nil, toks, bs, radix.HashSeed("", "")); !slices.Equal(got, p.Local) {
			t.Fatalf("prompt %d: engine hashes differ from the prompt's", p.Index)
		}
	}
}

// TestPromptTokensJSON: a token-form body carries the prompt's ISL tokens,
// whose full blocks hash (as the selector hashes token_ids) to the
// prompt's block_hashes, for synthetic and trace prompts (whose last
// 512-token block is partial), and its expected output.
func TestPromptTokensJSON(t *testing.T) {
	const bs = 16
	trace, err := ExpandTrace([]TraceRecord{
		{InputLength: 1000, OutputLength: 7, HashIDs: []uint64{3, 4}},
		{InputLength: 512, HashIDs: []uint64{3}},
	}, bs)
	if err != nil {
		t.Fatal(err)
	}
	syn := smallSynthetic()
	syn.Prompts = 30
	for _, p := range append(trace, Synthetic(syn, bs, 5)...) {
		b := AppendPromptTokensJSON(nil, &p)
		var got struct {
			TokenIDs []uint32 `json:"token_ids"`
			Expected int      `json:"expected_output_tokens"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%.200s: %v", b, err)
		}
		if len(got.TokenIDs) != p.ISL || got.Expected != p.OutputTokens || strings.Contains(string(b), "hashes") {
			t.Fatalf("prompt %d: %d tokens of %d, expected output %d of %d", p.Index, len(got.TokenIDs), p.ISL, got.Expected, p.OutputTokens)
		}
		if h := radix.LocalHashes(nil, got.TokenIDs, bs, radix.Seed); !slices.Equal(h, p.Local) {
			t.Fatalf("prompt %d: token_ids hash to %d blocks unlike the prompt's %d", p.Index, len(h), len(p.Local))
		}
		if !slices.Equal(got.TokenIDs[:len(p.Local)*bs], p.AppendTokens(nil, bs)) {
			t.Fatalf("prompt %d: the body's full blocks are not the engine's tokens", p.Index)
		}
	}
	cfg := DefaultConfig()
	cfg.Synthetic = syn
	cfg.PromptForm = PromptTokens
	ps, desc, err := LoadWorkload(&cfg)
	if err != nil || !strings.Contains(desc, "(tokens)") || !strings.HasPrefix(string(ps[0].Body), `{"token_ids":[`) {
		t.Fatalf("%q, %v, %.40s", desc, err, ps[0].Body)
	}
}
