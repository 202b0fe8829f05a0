package text

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// BenchmarkEncodeCorpus encodes the exactness corpus (the 10,000 short
// strings, without the two long inputs) with each family's tokenizer, one
// core; compare with tokenizers.js on the same strings in the same run:
// TIMING=1 node testdata/npm/ref.mjs (perf/RESULTS.md has the commands).
func BenchmarkEncodeCorpus(b *testing.B) {
	requireReferences(b)
	inputs := corpus()[:10000]
	n := 0
	for _, s := range inputs {
		n += len(s)
	}
	for _, fam := range families {
		tok := load(b, fam)
		for _, cold := range []bool{false, true} {
			name := fam + "/warm"
			if cold {
				name = fam + "/cold" // the caches emptied before each pass
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(n))
				var ids []uint32
				for b.Loop() {
					if cold {
						tok.resetCaches()
					}
					for _, s := range inputs {
						ids = tok.Encode(ids[:0], s, false)
					}
				}
			})
		}
	}
}

// BenchmarkEncodePrompt4096 encodes a prose prompt of about 4,096 Llama 3
// tokens, cold (a fresh cache each time) and warm.
func BenchmarkEncodePrompt4096(b *testing.B) {
	requireReferences(b)
	tok := load(b, "llama3")
	words := strings.Fields("the quick brown fox jumps over the lazy dog while a system prompt describes tools, JSON schemas 12345 and code: func main() { fmt.Println(\"hi\") }")
	var sb strings.Builder
	for i := 0; sb.Len() < 18000; i++ {
		sb.WriteString(words[i%len(words)])
		sb.WriteByte(' ')
	}
	prompt := sb.String()
	b.Logf("%d tokens", len(tok.Encode(nil, prompt, false)))
	// cold: both caches emptied before each encode; words: the word cache
	// warm, the chunk cache emptied (a prompt seen for the first time, in
	// words seen before); warm: the prompt seen before (its chunks cached).
	for _, mode := range []string{"cold", "words", "warm"} {
		b.Run(mode, func(b *testing.B) {
			var ids []uint32
			ids = tok.Encode(ids[:0], prompt, false)
			for b.Loop() {
				switch mode {
				case "cold":
					tok.resetCaches()
				case "words":
					tok.chunks.reset()
				}
				ids = tok.Encode(ids[:0], prompt, false)
			}
		})
	}
}

// resetCaches empties the word and chunk caches.
func (t *Tokenizer) resetCaches() {
	t.model.cache.reset()
	t.chunks.reset()
}

func (c *idCache) reset() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.m, sh.bytes = nil, 0
		sh.mu.Unlock()
	}
}

// TestWriteCorpus writes the benchmark's inputs for the tokenizers.js
// timing when KVSELECT_CORPUS names a file (a helper, not a check).
func TestWriteCorpus(t *testing.T) {
	path := os.Getenv("KVSELECT_CORPUS")
	if path == "" {
		t.Skip("KVSELECT_CORPUS not set")
	}
	var b strings.Builder
	for _, s := range corpus()[:10000] {
		j, _ := json.Marshal(s)
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
