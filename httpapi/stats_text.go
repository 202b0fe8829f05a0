package httpapi

import (
	"io"
	"strconv"

	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/perf"
)

// tokenizerDescs describe the families writeTokenizerStats writes: each
// configured tokenizer's two bounded caches (core/text): the word cache
// (pre-tokens' ids) and the chunk cache (long segments' chunks).
var tokenizerDescs = []perf.Desc{
	{Name: "kvselect_tokenizer_cache_bytes", Kind: perf.Gauge, Help: "Bytes a tokenizer's cache holds, by model and cache (word: pre-tokens' ids; chunk: the ids of long prompts' chunks, so that a shared head is tokenized once)."},
	{Name: "kvselect_tokenizer_cache_limit_bytes", Kind: perf.Gauge, Help: "The bytes a tokenizer's cache holds at most, by model and cache."},
	{Name: "kvselect_tokenizer_cache_hits_total", Kind: perf.Counter, Help: "Lookups a tokenizer's cache answered, by model and cache."},
	{Name: "kvselect_tokenizer_cache_misses_total", Kind: perf.Counter, Help: "Lookups a tokenizer's cache did not answer (the text was tokenized), by model and cache."},
}

// writeTokenizerStats writes tokenizerDescs' families, models in order.
func (s *Server) writeTokenizerStats(w io.Writer) {
	for _, name := range tokenizerNames(s.cfg.Tokenizers) {
		tok := s.cfg.Tokenizers[name]
		for _, c := range []struct {
			cache string
			st    text.CacheStats
		}{{"word", tok.CacheStats()}, {"chunk", tok.ChunkCacheStats()}} {
			l := `{model=` + strconv.Quote(name) + `,cache="` + c.cache + `"}`
			perf.WriteGauge(w, "kvselect_tokenizer_cache_bytes"+l, float64(c.st.Bytes))
			perf.WriteGauge(w, "kvselect_tokenizer_cache_limit_bytes"+l, float64(c.st.Limit))
			perf.WriteCounter(w, "kvselect_tokenizer_cache_hits_total"+l, c.st.Hits)
			perf.WriteCounter(w, "kvselect_tokenizer_cache_misses_total"+l, c.st.Misses)
		}
	}
}
