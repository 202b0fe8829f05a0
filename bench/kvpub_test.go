package bench

import (
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

// TestKVPublisherToIndex: stored runs (with parents), removals and
// flushes reach an index through a real listener, in order.
func TestKVPublisherToIndex(t *testing.T) {
	noLeak(t)
	const bs = 4
	p, err := NewKVPublisher(EngineConfig{BlockSize: bs, Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ix, _ := radix.New(radix.Config{})
	in.Sync(1, bs, []core.RankSource{{DPRank: 0, Endpoint: p.Endpoint()}}, indexSink{ix})
	waitFor(t, "subscribed", func() bool { return p.Subscribers() == 1 })

	toks := TokensForHashIDs([]uint64{1, 2, 3}, bs)
	local := radix.LocalHashes(nil, toks, bs, radix.HashSeed("", ""))
	eng := ChainHashes(nil, local)
	depth := func() int {
		var r radix.Result
		ix.Match(local, &r)
		for _, m := range r.Matches {
			return int(m.Device)
		}
		return 0
	}
	if p.Flush() {
		t.Fatal("flushed an empty batch")
	}
	// Two runs of one prompt, the second chained after the first.
	p.Stored(0, false, eng[:1], toks[:bs])
	p.Stored(eng[0], true, eng[1:], toks[bs:])
	if p.Pending() != 2 || !p.Flush() {
		t.Fatal("flush")
	}
	waitFor(t, "stored", func() bool { return depth() == 3 })
	p.Removed(eng[2])
	p.Removed(eng[1])
	p.Flush()
	waitFor(t, "removed", func() bool { return depth() == 1 })
	if s := p.Stats(); s.Stored != 3 || s.Removed != 2 || s.Batches != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestStreamHashesContinue: a conversation turn's stream (prompt, then
// answer) hashes as the next turn's prompt does over their common length,
// and a stream with no next turn gets blocks of its own.
func TestStreamHashesContinue(t *testing.T) {
	const bs = 16
	cfg := DefaultSynthetic()
	cfg.Prompts, cfg.ActiveSessions, cfg.TurnsMin, cfg.TurnsMax = 40, 1, 4, 4
	ps := Synthetic(cfg, bs, 3)
	p, next := &ps[0], &ps[1]
	if next.Conversation != p.Conversation || next.Turn != p.Turn+1 {
		t.Fatalf("prompts 0 and 1 are not consecutive turns: %+v %+v", p, next)
	}
	local, seq := StreamHashes(p, next, p.OutputTokens, bs)
	if want := StreamTokens(p, p.OutputTokens) / bs; len(seq) != want || len(local) != want {
		t.Fatalf("%d stream blocks, want %d", len(seq), want)
	}
	common := min(len(seq), len(next.Seq))
	if common <= len(p.Seq) {
		t.Fatalf("the answer should fill blocks: prompt %d blocks, common %d", len(p.Seq), common)
	}
	for k := range common {
		if seq[k] != next.Seq[k] || local[k] != next.Local[k] {
			t.Fatalf("block %d: stream hash %x, next turn's %x", k, seq[k], next.Seq[k])
		}
	}
	_, alone := StreamHashes(p, nil, p.OutputTokens, bs)
	if alone[len(p.Seq)] == seq[len(p.Seq)] {
		t.Fatal("an answer nothing repeats hashes as the next turn's")
	}
	for k := range p.Seq {
		if alone[k] != p.Seq[k] {
			t.Fatalf("prompt block %d differs", k)
		}
	}
}
