package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/kvselect/kvselect/radix"
)

// Prompt is one request's prompt and its request body.
//
// The harness sends hashes by default (PromptHashes: block_hashes,
// sequence_hashes, isl_tokens): a Mooncake trace has no tokens, only block
// ids, and Dynamo's own callers hash once and send the trio; the body is
// also 2.5 times smaller at block size 16 (two numbers per block instead of
// sixteen), which keeps the client's share of the two cores down.
// PromptTokens sends token_ids instead, so the selector's hashing and the
// larger bodies are measured too. Every local hash is the real XXH3 hash
// (radix.BlockHash, seed 1337) of a concrete token block (SyntheticTokens,
// TraceBlockTokens), so both forms describe the same prompt, and a
// simulated engine can publish KV events whose tokens hash to the same
// values.
type Prompt struct {
	ISL          int      // input length in tokens (isl_tokens)
	OutputTokens int      // expected output tokens (sent as expected_output_tokens when > 0)
	Local        []uint64 // local block hashes of the full blocks of the prompt; read-only
	Seq          []uint64 // sequence hashes: the radix.SequenceHashes chain of Local; read-only
	// Family, Conversation and Turn locate a synthetic prompt (Family is -1
	// for trace prompts, Turn 0 is a conversation's first turn); Index is the
	// record's position for trace prompts.
	Family, Conversation, Turn, Index int
	// ToolResult marks a synthetic turn whose new input is a tool's result
	// (an agent's tool call) rather than a user's message.
	ToolResult bool
	// Tokens (synthetic prompts) or TraceIDs (trace prompts, the record's
	// hash_ids) are the prompt's content, from which AppendTokens rebuilds
	// the tokens of its full blocks for a simulated engine; read-only.
	Tokens   []uint32
	TraceIDs []uint64
	// TimestampMs is a trace prompt's arrival from the trace start.
	TimestampMs int64
	// Body is the prompt's JSON object in one of the two forms
	// (AppendPromptJSON, AppendPromptTokensJSON). Body[1:] is spliced after
	// a selection_id.
	Body []byte
	// openAI is the prompt's OpenAI completions body of MixEPP
	// (openAIBody); nil otherwise.
	openAI []byte
}

// Prompt forms: how Config.PromptForm sends a prompt in selection bodies.
const (
	PromptHashes = "hashes" // block_hashes, sequence_hashes, isl_tokens
	PromptTokens = "tokens" // token_ids; the selector hashes them
	// PromptText: see textform.go.
)

// AppendPromptJSON appends p's request body in the hash form to dst:
// `{"block_hashes":[...],"sequence_hashes":[...],"isl_tokens":N
// [,"expected_output_tokens":M]}`, the u64 hashes as signed 64-bit numbers
// (their bits, as the selection API reads them).
func AppendPromptJSON(dst []byte, p *Prompt) []byte {
	dst = append(dst, `{"block_hashes":[`...)
	dst = appendI64s(dst, p.Local)
	dst = append(dst, `],"sequence_hashes":[`...)
	dst = appendI64s(dst, p.Seq)
	dst = append(dst, `],"isl_tokens":`...)
	dst = strconv.AppendInt(dst, int64(p.ISL), 10)
	if p.OutputTokens > 0 {
		dst = append(dst, `,"expected_output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(p.OutputTokens), 10)
	}
	return append(dst, '}')
}

// AppendPromptTokensJSON appends p's request body in the token form to dst:
// `{"token_ids":[...][,"expected_output_tokens":M]}` with the prompt's ISL
// tokens (AppendAllTokens); the selector takes the input length from them
// and hashes their full blocks to p.Local.
func AppendPromptTokensJSON(dst []byte, p *Prompt) []byte {
	dst = append(dst, `{"token_ids":[`...)
	var buf [64]uint32
	for pos := 0; pos < p.ISL; pos += len(buf) {
		n := min(len(buf), p.ISL-pos)
		for i, t := range p.appendTokenRange(buf[:0], pos, pos+n) {
			if pos+i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, uint64(t), 10)
		}
	}
	dst = append(dst, ']')
	if p.OutputTokens > 0 {
		dst = append(dst, `,"expected_output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(p.OutputTokens), 10)
	}
	return append(dst, '}')
}

func appendI64s(dst []byte, hs []uint64) []byte {
	for i, h := range hs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(h), 10)
	}
	return dst
}

// LoadWorkload builds the prompts of cfg.Workload with their bodies encoded,
// and a one-line description for the report.
func LoadWorkload(cfg *Config) ([]Prompt, string, error) {
	var ps []Prompt
	var src string
	syn, isSyn := cfg.synthetic()
	switch {
	case isSyn:
		ps = Synthetic(syn, cfg.BlockSize, cfg.Seed)
		convs, tools := 0, 0
		for i := range ps {
			convs = max(convs, ps[i].Conversation+1)
			if ps[i].ToolResult {
				tools++
			}
		}
		src = fmt.Sprintf("%s seed %d (%d families, %d conversations, %d tool-result turns)", cfg.Workload, cfg.Seed, syn.Families, convs, tools)
	case strings.HasPrefix(cfg.Workload, "trace:"):
		path := strings.TrimPrefix(cfg.Workload, "trace:")
		f, err := os.Open(path)
		if err != nil {
			return nil, "", fmt.Errorf("bench: workload: %w", err)
		}
		recs, err := ReadTrace(f)
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("bench: workload %s: %w", path, err)
		}
		if len(recs) == 0 {
			return nil, "", fmt.Errorf("bench: workload %s: no records", path)
		}
		if cfg.TraceLimit > 0 && cfg.TraceLimit < len(recs) {
			recs = recs[:cfg.TraceLimit]
			path = fmt.Sprintf("%s (first %d)", path, cfg.TraceLimit)
		}
		if cfg.TraceRepeat > 1 {
			recs = RepeatTrace(recs, cfg.TraceRepeat)
			path = fmt.Sprintf("%s x%d", path, cfg.TraceRepeat)
		}
		ps, err = ExpandTrace(recs, cfg.BlockSize)
		if err != nil {
			return nil, "", err
		}
		src = fmt.Sprintf("trace %s (%d records)", path, len(recs))
	default:
		return nil, "", fmt.Errorf("%w: workload %q", ErrConfig, cfg.Workload)
	}
	if cfg.PromptForm == PromptText {
		if err := textualize(ps, cfg.Tokenizer, cfg.BlockSize); err != nil {
			return nil, "", err
		}
	}
	var isl, blocks, size int
	for i := range ps {
		switch cfg.PromptForm {
		case PromptTokens:
			ps[i].Body = AppendPromptTokensJSON(nil, &ps[i])
		case PromptHashes:
			ps[i].Body = AppendPromptJSON(nil, &ps[i])
		} // PromptText: textualize wrote them
		isl += ps[i].ISL
		blocks += len(ps[i].Local)
		size += len(ps[i].Body)
	}
	n := len(ps)
	desc := fmt.Sprintf("%s: %d prompts, mean %d tokens, %d blocks, %d body bytes (%s)",
		src, n, isl/n, blocks/n, size/n, cfg.PromptForm)
	return ps, desc, nil
}

// ---- synthetic ----

// Synthetic generates cfg.Prompts prompts, deterministic in seed and
// blockSize. It keeps cfg.ActiveSessions conversations open; each step picks
// one at random and emits its next turn: the family's system prompt, the
// conversation's history (earlier user messages and answers) and a new user
// message. A conversation that has had its turns is replaced by a new one
// from a random family. So prompts of one family share the system prompt's
// blocks, and a conversation's turn t+1 extends turn t's prompt.
func Synthetic(cfg SyntheticConfig, blockSize int, seed int64) []Prompt {
	if err := cfg.Validate(); err != nil {
		panic("BUG: " + err.Error())
	}
	if blockSize < 1 {
		panic("BUG: bench: Synthetic with block size < 1")
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6b7673656c656374))
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	tokens := func(dst []uint32, n int) []uint32 {
		for range n {
			dst = append(dst, rng.Uint32N(cfg.VocabSize))
		}
		return dst
	}

	type family struct {
		tokens     []uint32
		local, seq []uint64
	}
	fams := make([]family, cfg.Families)
	for i := range fams {
		f := &fams[i]
		f.tokens = tokens(nil, between(cfg.SystemMin, cfg.SystemMax))
		f.local, f.seq = extendHashes(nil, nil, f.tokens, blockSize)
	}

	type conv struct {
		id, family, turn, turns int
		tokens                  []uint32
		local, seq              []uint64
		// tool: the last answer was a tool call; this turn brings its
		// result.
		tool bool
	}
	nextID := 0
	newConv := func() conv {
		f := rng.IntN(len(fams))
		c := conv{id: nextID, family: f, turns: between(cfg.TurnsMin, cfg.TurnsMax)}
		nextID++
		// Copies, so that a conversation's appends never write into the
		// family's arrays that other conversations share.
		c.tokens = append([]uint32(nil), fams[f].tokens...)
		c.local = append([]uint64(nil), fams[f].local...)
		c.seq = append([]uint64(nil), fams[f].seq...)
		return c
	}
	active := make([]conv, cfg.ActiveSessions)
	for i := range active {
		active[i] = newConv()
	}

	out := make([]Prompt, 0, cfg.Prompts)
	for len(out) < cfg.Prompts {
		i := rng.IntN(len(active))
		c := &active[i]
		if c.tool {
			c.tokens = tokens(c.tokens, between(cfg.ToolMin, cfg.ToolMax))
		} else {
			c.tokens = tokens(c.tokens, between(cfg.UserMin, cfg.UserMax))
		}
		c.local, c.seq = extendHashes(c.local, c.seq, c.tokens, blockSize)
		n := len(c.local)
		// Whether this turn's answer is a tool call. No draw without tool
		// turns, so that such workloads stay what they were.
		callsTool := cfg.ToolTurnProb > 0 && c.turn+1 < c.turns && rng.Float64() < cfg.ToolTurnProb
		outLen := 0
		if callsTool {
			outLen = between(cfg.ToolCallMin, cfg.ToolCallMax)
		} else {
			outLen = between(cfg.OutputMin, cfg.OutputMax)
		}
		out = append(out, Prompt{
			ISL:          len(c.tokens),
			OutputTokens: outLen,
			ToolResult:   c.tool,
			// Full slice expressions: later appends to the conversation
			// never change what this prompt sees.
			Local:  c.local[:n:n],
			Seq:    c.seq[:n:n],
			Tokens: c.tokens[:len(c.tokens):len(c.tokens)],
			Family: c.family, Conversation: c.id, Turn: c.turn, Index: len(out),
		})
		c.tokens = tokens(c.tokens, out[len(out)-1].OutputTokens)
		c.local, c.seq = extendHashes(c.local, c.seq, c.tokens, blockSize)
		c.tool = callsTool
		c.turn++
		if c.turn == c.turns {
			*c = newConv()
		}
	}
	return out
}

// RepeatTrace returns n copies of recs one after another: copy k's
// timestamps are shifted by k times (the trace's span plus its mean gap
// between arrivals), and its hash ids by k times (the largest id + 1), so
// the copies share no content (a copy is new traffic with the trace's
// shape, not a replay of the same prompts).
func RepeatTrace(recs []TraceRecord, n int) []TraceRecord {
	if n <= 1 || len(recs) == 0 {
		return recs
	}
	t0, t1, maxID := recs[0].Timestamp, recs[0].Timestamp, uint64(0)
	for _, r := range recs {
		t0, t1 = min(t0, r.Timestamp), max(t1, r.Timestamp)
		for _, h := range r.HashIDs {
			maxID = max(maxID, h)
		}
	}
	span := t1 - t0
	if len(recs) > 1 {
		span += span / int64(len(recs)-1)
	}
	out := make([]TraceRecord, 0, n*len(recs))
	for k := range n {
		for _, r := range recs {
			c := r
			c.Timestamp += int64(k) * span
			c.HashIDs = make([]uint64, len(r.HashIDs))
			for i, h := range r.HashIDs {
				c.HashIDs[i] = h + uint64(k)*(maxID+1)
			}
			out = append(out, c)
		}
	}
	return out
}

// extendHashes appends the local and sequence hashes of the full blocks of
// tokens that local does not cover yet. Invariant: len(local) == len(seq),
// and seq is radix.SequenceHashes(local).
func extendHashes(local, seq []uint64, tokens []uint32, bs int) ([]uint64, []uint64) {
	for (len(local)+1)*bs <= len(tokens) {
		i := len(local)
		h := radix.BlockHash(tokens[i*bs:(i+1)*bs], radix.Seed)
		local = append(local, h)
		if i == 0 {
			seq = append(seq, h)
		} else {
			seq = append(seq, radix.SeqHash(seq[i-1], h))
		}
	}
	return local, seq
}

// ---- Mooncake traces ----

// MooncakeBlockTokens is the block size of a Mooncake trace's hash_ids.
const MooncakeBlockTokens = 512

// TraceRecord is one line of a Mooncake JSONL trace.
type TraceRecord struct {
	Timestamp    int64    `json:"timestamp"` // ms from the trace start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"` // one id per 512-token block; equal ids mean equal prefixes
}

// ReadTrace reads a Mooncake JSONL trace; blank lines are skipped.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var recs []TraceRecord
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if rec.InputLength <= 0 || len(rec.HashIDs) == 0 {
			return nil, fmt.Errorf("line %d: input_length must be > 0 and hash_ids non-empty", line)
		}
		recs = append(recs, rec)
	}
	return recs, sc.Err()
}

// ExpandTrace turns trace records into prompts at block size bs, which must
// divide 512: hash id h becomes the k = 512/bs local hashes of the blocks
// TraceBlockTokens(h, 0..k-1, bs), and the chain is cut to the
// floor(input_length/bs) full blocks of the prompt (the last 512-token block
// of a record is usually partial, and a partial block is never hashed).
func ExpandTrace(recs []TraceRecord, bs int) ([]Prompt, error) {
	if bs < 1 || MooncakeBlockTokens%bs != 0 {
		return nil, fmt.Errorf("%w: block size %d does not divide %d", ErrConfig, bs, MooncakeBlockTokens)
	}
	k := MooncakeBlockTokens / bs
	cache := make(map[uint64][]uint64) // hash id -> its k local hashes
	var tok []uint32
	out := make([]Prompt, len(recs))
	for i, rec := range recs {
		n := min(len(rec.HashIDs)*k, rec.InputLength/bs)
		local := make([]uint64, 0, n)
		for _, id := range rec.HashIDs {
			if len(local) == n {
				break
			}
			hs, ok := cache[id]
			if !ok {
				hs = make([]uint64, k)
				for j := range k {
					tok = TraceBlockTokens(tok[:0], id, j, bs)
					hs[j] = radix.BlockHash(tok, radix.Seed)
				}
				cache[id] = hs
			}
			local = append(local, hs[:min(k, n-len(local))]...)
		}
		out[i] = Prompt{
			ISL:          rec.InputLength,
			OutputTokens: rec.OutputLength,
			Local:        local,
			Seq:          radix.SequenceHashes(make([]uint64, 0, n), local),
			Family:       -1, Conversation: -1, Index: i,
			TraceIDs:    rec.HashIDs,
			TimestampMs: rec.Timestamp,
		}
	}
	return out, nil
}

// AppendTokens appends to dst the tokens of p's full blocks at block size bs
// (the size p was built with): len(p.Local)*bs tokens whose local hashes
// are p.Local, what a simulated engine must be served so that its KV events
// and the selector's index agree with the prompt's hashes.
func (p *Prompt) AppendTokens(dst []uint32, bs int) []uint32 {
	n := len(p.Local)
	if p.TraceIDs == nil {
		if len(p.Tokens) < n*bs {
			panic("BUG: bench: AppendTokens on a prompt without its tokens")
		}
		return append(dst, p.Tokens[:n*bs]...)
	}
	k := MooncakeBlockTokens / bs
	for b := range n {
		dst = TraceBlockTokens(dst, p.TraceIDs[b/k], b%k, bs)
	}
	return dst
}

// AppendAllTokens appends to dst the prompt's ISL tokens, what a token-form
// body carries: its full blocks' tokens (those of AppendTokens at the block
// size p was built with), then the tokens of its last, partial block.
func (p *Prompt) AppendAllTokens(dst []uint32) []uint32 {
	return p.appendTokenRange(dst, 0, p.ISL)
}

// appendTokenRange appends tokens [from, to) of the prompt: a synthetic
// prompt's own tokens; a trace prompt's token at position i is token i%512
// of hash id i/512 (TraceBlockTokens), and a position past the record's
// hash ids (an input_length above 512 per id, which the Mooncake traces do
// not have) gets a pseudo-random token of its own prompt.
func (p *Prompt) appendTokenRange(dst []uint32, from, to int) []uint32 {
	if p.TraceIDs == nil {
		if len(p.Tokens) < to {
			panic("BUG: bench: token range of a prompt without its tokens")
		}
		return append(dst, p.Tokens[from:to]...)
	}
	for i := from; i < to; i++ {
		if b := i / MooncakeBlockTokens; b < len(p.TraceIDs) {
			dst = append(dst, traceToken(p.TraceIDs[b], i%MooncakeBlockTokens))
		} else {
			dst = append(dst, uint32(splitmix64(^uint64(p.Index)<<24+uint64(i))%traceVocab))
		}
	}
	return dst
}

// TraceBlockTokens appends to dst the bs tokens of sub-block j of trace hash
// id: tokens j*bs .. j*bs+bs-1 of the 512 pseudo-random tokens that stand for
// the id's content. The 512 tokens depend only on the id, so every block size
// slices the same content.
func TraceBlockTokens(dst []uint32, id uint64, j, bs int) []uint32 {
	for p := j * bs; p < (j+1)*bs; p++ {
		dst = append(dst, traceToken(id, p))
	}
	return dst
}

// traceVocab bounds the token ids standing for a trace's content.
const traceVocab = 128000

// traceToken is token p (0 <= p < 512) of trace hash id's content.
func traceToken(id uint64, p int) uint32 {
	return uint32(splitmix64(id*MooncakeBlockTokens+uint64(p)) % traceVocab)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
