package epp

import (
	"errors"
	"testing"
)

// FuzzParseBody: the body parser never panics, and any error it returns
// is the client's (a 400). Bodies are bounded as the stream bounds them.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		chatBody, `{"model":"m","prompt":"hi"}`, `{"prompt":[1,2,3]}`, `{"prompt":["a","b"]}`, `{"prompt":null,"messages":null}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[],"chat_template_kwargs":{"a":1},"add_generation_prompt":false,"continue_final_message":true}`,
		`{"messages":"x"}`, `{"prompt":1.5}`, `[]`, `{`, ``, `{"model":1}`, `{"prompt":[4294967296]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		var r request
		if err := parseBody(body, &r); err != nil && !errors.Is(err, errBody) {
			t.Fatalf("%q: an error that is not a bad body: %v", body, err)
		}
	})
}
