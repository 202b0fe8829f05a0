package text

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestLoadedTokenizerHeapAlloc: a loaded tokenizer holds at most twice
// its tokenizer.json in heap (its vocabulary, token table, merges and
// added tokens; the word cache is bounded apart, CacheStats.Limit).
// make test runs it without -race (its name has Alloc), whose shadow
// allocations would count.
func TestLoadedTokenizerHeapAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations count in the heap; make test runs this without -race")
	}
	requireReferences(t)
	for _, fam := range families {
		tj, err := os.ReadFile(filepath.Join(modelDir(fam), "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		tc, _ := os.ReadFile(filepath.Join(modelDir(fam), "tokenizer_config.json"))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tok, err := Load(tj, tc)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%s: tokenizer.json %d bytes, tokenizer %d bytes (%.2fx)", fam, len(tj), held, float64(held)/float64(len(tj)))
		if held > 2*int64(len(tj)) {
			t.Errorf("%s: the tokenizer holds %d bytes, over twice its %d-byte tokenizer.json", fam, held, len(tj))
		}
		runtime.KeepAlive(tok)
		runtime.KeepAlive(tj) // measured in both readings: it is not the tokenizer's
	}
}
