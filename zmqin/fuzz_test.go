package zmqin

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

var writeCorpus = flag.Bool("write-fuzz-corpus", false, "rewrite testdata/fuzz/FuzzDecode from the golden fixtures and encoder output")

// fuzzSeeds are the seed payloads: the golden fixtures, encoder output in
// every encoding, and a few malformed envelopes.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, name := range []string{
		"vllm_map_stored.hex", "vllm_array_stored.hex", "sglang_array_signed.hex",
		"vllm_v08_short.hex", "drops.hex", "map_any_order.hex",
	} {
		seeds = append(seeds, readHex(t, name))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, enc := range allEncoders() {
		seeds = append(seeds, enc.AppendBatch(nil, randomBatch(rng, 4)))
	}
	seeds = append(seeds, nil, []byte{0xc1}, []byte{0x93, 0xc0, 0x90, 0xc0}, []byte{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0x90})
	return seeds
}

// TestWriteFuzzCorpus regenerates the checked-in seed corpus when run with
// -write-fuzz-corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -write-fuzz-corpus to regenerate testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, p := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\nbyte(%q)\n[]byte(%q)\n[]byte(%q)\n", byte(3), []byte{0, 0, 0, 0, 0, 0, 0, byte(i)}, p)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzDecode feeds arbitrary frames and payloads to ParseFrames and Decode:
// never a panic, errors only of the documented classes, never more events
// or blocks than payload bytes, scratch memory bounded by the payload, and
// a deterministic result on a reused, Reset decoder.
func FuzzDecode(f *testing.F) {
	for i, p := range fuzzSeeds(f) {
		f.Add(uint8(3), []byte{0, 0, 0, 0, 0, 0, 0, byte(i)}, p)
	}
	f.Add(uint8(2), []byte{1}, []byte{0x90})
	f.Fuzz(checkDecode)
}

// TestDecodeMutations runs the fuzz properties over deterministic random
// mutations of the seeds, so that plain `go test` exercises them too.
func TestDecodeMutations(t *testing.T) {
	seeds := fuzzSeeds(t)
	rng := rand.New(rand.NewPCG(5, 6))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		p := append([]byte(nil), seeds[rng.IntN(len(seeds))]...)
		for k := rng.IntN(4) + 1; k > 0 && len(p) > 0; k-- {
			j := rng.IntN(len(p))
			switch rng.IntN(3) {
			case 0:
				p[j] = byte(rng.Uint32())
			case 1:
				p = append(p[:j], p[j+1:]...)
			default:
				p = append(p[:j], append([]byte{byte(rng.Uint32())}, p[j:]...)...)
			}
		}
		checkDecode(t, 3, []byte{0, 0, 0, 0, 0, 0, 0, 1}, p)
	}
}

// checkDecode holds the fuzz properties for one (frames, payload) input.
func checkDecode(t *testing.T, nframes uint8, seq, payload []byte) {
	frames := [][]byte{nil, seq, payload, nil}[:nframes%5]
	if _, p, err := ParseFrames(frames); err != nil {
		if !errors.Is(err, ErrFrames) {
			t.Fatalf("ParseFrames error %v does not wrap ErrFrames", err)
		}
		if len(frames) == 3 && len(seq) == SeqLen {
			t.Fatalf("valid frames rejected: %v", err)
		}
	} else if len(frames) != 3 || len(seq) != SeqLen || len(p) != len(payload) {
		t.Fatalf("ParseFrames accepted %d frames with a %d-byte seq", len(frames), len(seq))
	}

	for _, bs := range []int{4, 16} {
		d := NewDecoder(bs)
		w := radix.WorkerKey{WorkerID: 1, DPRank: 2}
		b, err := d.Decode(payload, w)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error %v does not wrap ErrMalformed", err)
			}
			if len(b.Events) != 0 {
				t.Fatal("events returned with an error")
			}
			continue
		}
		checkBounds(t, d, &b, len(payload))
		// Reset forgets learned groups, so the reused decoder must
		// reproduce the fresh decoder's result.
		first := cloneBatch(b)
		d.Reset()
		b2, err := d.Decode(payload, w)
		if err != nil || !reflect.DeepEqual(first, cloneBatch(b2)) {
			t.Fatalf("second decode differs: %v", err)
		}
	}
}

func checkBounds(t *testing.T, d *Decoder, b *Batch, n int) {
	t.Helper()
	items := 0
	for _, e := range b.Events {
		if e.Worker.WorkerID != 1 {
			t.Fatalf("worker %v", e.Worker)
		}
		switch e.Kind {
		case radix.Stored:
			if len(e.Blocks) == 0 || e.Hashes != nil {
				t.Fatalf("bad stored event %+v", e)
			}
		case radix.Removed:
			if len(e.Hashes) == 0 || e.Blocks != nil {
				t.Fatalf("bad removed event %+v", e)
			}
		case radix.Cleared:
		default:
			t.Fatalf("bad kind %v", e.Kind)
		}
		items += len(e.Blocks) + len(e.Hashes)
	}
	if len(b.Events) > n || items > n || int(b.Skipped.Total())+len(b.Events) > n {
		t.Fatalf("%d events, %d blocks+hashes, %d skipped from %d bytes", len(b.Events), items, b.Skipped.Total(), n)
	}
	// Scratch capacity is driven by decoded elements, never by declared
	// lengths: append growth stays within about twice the payload.
	limit := 2*n + 64
	if cap(d.events) > limit || cap(d.meta) > limit || cap(d.blocks) > limit || cap(d.hashes) > limit || cap(d.tokens) > limit {
		t.Fatalf("scratch capacities %d %d %d %d %d for %d bytes",
			cap(d.events), cap(d.meta), cap(d.blocks), cap(d.hashes), cap(d.tokens), n)
	}
}

func cloneBatch(b Batch) Batch {
	evs := make([]radix.Event, len(b.Events))
	for i, e := range b.Events {
		if e.Blocks != nil {
			e.Blocks = append([]radix.Block(nil), e.Blocks...)
		}
		if e.Hashes != nil {
			e.Hashes = append([]uint64(nil), e.Hashes...)
		}
		evs[i] = e
	}
	b.Events = evs
	return b
}

// FuzzReplayReply: ParseReplayReply never panics, accepts exactly the two
// documented shapes, and flags the end marker only with an empty payload.
func FuzzReplayReply(f *testing.F) {
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	f.Add(uint8(3), []byte{}, []byte{}, end, []byte{})
	f.Add(uint8(4), []byte{}, []byte("kv"), []byte{0, 0, 0, 0, 0, 0, 0, 5}, []byte{0x90})
	f.Add(uint8(2), []byte{1}, []byte{}, end, []byte{1})
	f.Fuzz(func(t *testing.T, n uint8, a, b, c, d []byte) {
		frames := [][]byte{a, b, c, d}[:n%5]
		seq, payload, isEnd, err := ParseReplayReply(frames)
		if err != nil {
			if !errors.Is(err, ErrFrames) {
				t.Fatalf("error %v does not wrap ErrFrames", err)
			}
			return
		}
		if len(frames) < 3 || len(frames[0]) != 0 {
			t.Fatalf("accepted %d frames", len(frames))
		}
		last := frames[len(frames)-1]
		if len(payload) != len(last) || isEnd != (seq == ReplayEndSeq && len(last) == 0) {
			t.Fatalf("seq %x payload %d end %v", seq, len(payload), isEnd)
		}
	})
}
