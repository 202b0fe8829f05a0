// Package text turns prompts into the token ids the engine computes for
// them, so that the block hashes kvselect derives from text are the ones
// the engine's KV events carry: a model's Hugging Face tokenizer
// (tokenizer.json and tokenizer_config.json, read by the host and handed
// to Load) in pure Go, token for token as the Rust tokenizers behind
// transformers (what vLLM and SGLang run) compute them.
//
// Implemented: byte-level BPE (the vocabulary spelled in GPT-2's byte
// alphabet, ranked merges, ignore_merges) with the Split pre-tokenizer
// patterns of Llama 3.x, Qwen 2.5/3, DeepSeek V3 and GPT-OSS, matched by
// hand with Oniguruma's semantics (look-ahead and ordered alternation,
// which Go's regexp lacks: pretok.go); SentencePiece-style BPE over
// characters with byte fallback and unk fusing, normalized by Prepend and
// Replace (Llama 2, Mistral: no pre-tokenizer) or pre-tokenized by
// Metaspace with split false and any prepend scheme (the non-legacy form
// transformers' LlamaConverter writes: metaspace.go); NFC and NFKC
// normalizers;
// added tokens matched before the model as tokenizers' AddedVocabulary
// matches them; the TemplateProcessing and ByteLevel post-processors and
// the BOS rule of LlamaTokenizerFast; the ByteLevel decoder with Rust's
// lossy UTF-8, the SentencePiece decoder (▁, ByteFallback, Fuse, Strip),
// and transformers' clean_up_tokenization_spaces. Anything else in a file (another model type, pre-tokenizer,
// pattern or normalizer) makes Load fail with ErrUnsupported naming it:
// never an approximation.
//
// The package does no I/O and imports nothing of the repository. A
// Tokenizer is safe for concurrent use; its word cache is bounded
// (CacheStats).
package text
