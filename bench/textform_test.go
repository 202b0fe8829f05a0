package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvselect/kvselect/core/text"
)

// llama3Dir holds the real Llama 3 tokenizer files make installs for
// core/text's tests.
var llama3Dir = filepath.Join("..", "core", "text", "testdata", "npm", "node_modules", "@lenml", "tokenizer-llama3", "models")

func llama3(t *testing.T) *text.Tokenizer {
	t.Helper()
	tj, err := os.ReadFile(filepath.Join(llama3Dir, "tokenizer.json"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("SKIPPING: make tokenizer-refs installs the tokenizer files: " + err.Error())
	}
	tc, err := os.ReadFile(filepath.Join(llama3Dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := text.Load(tj, tc)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTextForm: the text form's bodies carry the prompt's text, its
// tokens are the tokenizer's ids of that text (what the selector will
// hash), its length stays about the token form's (one-token words), and
// prompts that share a token prefix share about as many blocks in text.
func TestTextForm(t *testing.T) {
	tok := llama3(t)
	cfg := DefaultConfig()
	cfg.Synthetic.Prompts = 64
	tokens, _, err := LoadWorkload(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PromptForm, cfg.Tokenizer = PromptText, tok
	texts, desc, err := LoadWorkload(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(desc)
	shared := func(ps []Prompt, i, j int) int {
		n := 0
		for n < len(ps[i].Seq) && n < len(ps[j].Seq) && ps[i].Seq[n] == ps[j].Seq[n] {
			n++
		}
		return n
	}
	var sharedTok, sharedText int
	for i := range texts {
		var body struct {
			Prompt string `json:"prompt"`
		}
		if err := json.Unmarshal(texts[i].Body, &body); err != nil || body.Prompt == "" {
			t.Fatalf("prompt %d: body %.80s: %v", i, texts[i].Body, err)
		}
		ids := tok.Encode(nil, body.Prompt, true)
		if !slices.Equal(ids, texts[i].Tokens) || texts[i].ISL != len(ids) || len(texts[i].Local) != len(ids)/cfg.BlockSize {
			t.Fatalf("prompt %d: tokens and hashes are not those of its text", i)
		}
		if d := texts[i].ISL - tokens[i].ISL; d < 0 || d > 2 {
			t.Fatalf("prompt %d: %d tokens as text, %d as tokens", i, texts[i].ISL, tokens[i].ISL)
		}
		if i > 0 {
			sharedTok += shared(tokens, i-1, i)
			sharedText += shared(texts, i-1, i)
		}
	}
	if sharedTok == 0 || sharedText < sharedTok*9/10 {
		t.Fatalf("consecutive prompts share %d blocks as tokens, %d as text", sharedTok, sharedText)
	}
}
