package epp

import (
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvselect/kvselect/core/text"
)

// recorder is a test Observer: it keeps a copy of every observation.
type recorder struct {
	mu  sync.Mutex
	obs []Observation
}

func (r *recorder) ObserveRequest(o *Observation) {
	r.mu.Lock()
	r.obs = append(r.obs, *o)
	r.mu.Unlock()
}

// last waits for the gateway's streams to end (Process observes before
// it counts the stream closed) and returns the one observation made since
// the previous call.
func (r *recorder) last(t *testing.T, g *gateway, seen *int) Observation {
	t.Helper()
	g.settle()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.obs) != *seen+1 {
		t.Fatalf("%d observations, want %d", len(r.obs), *seen+1)
	}
	*seen++
	return r.obs[len(r.obs)-1]
}

// TestEPPObservations drives one stream per case and checks what the
// Observer is handed: the outcome, the body and response sizes as sent,
// the prompt's tokens (usage.prompt_tokens first, else the pick's
// tokens), the output tokens (usage, else SSE events counted), the
// cached tokens when reported, and the times' order; a request that did
// not complete has Completed false, and a stream that never was a request
// is not observed.
func TestEPPObservations(t *testing.T) {
	rec := &recorder{}
	g := newGateway(t, 2, Config{Observer: rec}, nil)
	seen := 0

	// A streamed chat whose final event reports usage, cached tokens
	// included: usage wins over the 3 events counted.
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(true, false))
	c.recv()
	first := sse(3, 0)
	final := `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":4}}}` + "\n\ndata: [DONE]\n\n"
	c.send(respBody(first, false))
	c.recv()
	c.send(respBody(final, true))
	c.recv()
	_ = c.s.CloseSend()
	o := rec.last(t, g, &seen)
	if o.Outcome != OutcomeRouted || !o.Scheduled || !o.Completed || !o.FirstChunk {
		t.Fatalf("streamed chat: %+v", o)
	}
	if o.Model != "m" || o.TargetModel != "m" || o.RequestBytes != len(chatBody) || o.ResponseBytes != int64(len(first)+len(final)) {
		t.Fatalf("streamed chat: models or sizes %+v", o)
	}
	if o.InputTokens != 9 || o.OutputTokens != 20 || !o.HasCachedTokens || o.CachedTokens != 4 {
		t.Fatalf("streamed chat: tokens %+v", o)
	}
	if !(o.Scheduling > 0 && o.TTFT > 0 && o.TTFT <= o.Duration) {
		t.Fatalf("streamed chat: times %+v", o)
	}

	// A prompt of token ids, another model named in the body, a JSON
	// response in two chunks without usage: the ids are the input
	// tokens, the output is unknown (0).
	c = g.open()
	c.send(reqHeaders(false, nil))
	body := `{"model":"client-name","prompt":[1,2,3,4,5,6,7]}`
	c.send(reqBody(body, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(false, false))
	c.recv()
	c.send(respBody(`{"choices":[{"te`, false))
	c.recv()
	c.send(respBody(`xt":"x"}]}`, true))
	c.recv()
	_ = c.s.CloseSend()
	o = rec.last(t, g, &seen)
	if o.Model != "client-name" || o.TargetModel != "m" || o.InputTokens != 7 || o.OutputTokens != 0 || o.HasCachedTokens || !o.Completed || o.ResponseBytes != 26 {
		t.Fatalf("token ids, JSON: %+v", o)
	}

	// An SSE response without usage: its events are the output tokens.
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(`{"prompt":[1,2,3]}`, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(true, false))
	c.recv()
	c.send(respBody(sse(5, 0), true))
	c.recv()
	_ = c.s.CloseSend()
	o = rec.last(t, g, &seen)
	if o.Model != "" || o.TargetModel != "m" || o.InputTokens != 3 || o.OutputTokens != 5 || !o.Completed {
		t.Fatalf("SSE without usage: %+v", o)
	}

	// Refused (400): observed with its outcome, never completed.
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody("not json", true))
	if code, _ := immediateOf(t, c.recv()); code != 400 {
		t.Fatalf("status %d", code)
	}
	_ = c.s.CloseSend()
	o = rec.last(t, g, &seen)
	if o.Outcome != OutcomeBadRequest || o.Scheduled || o.Completed || o.RequestBytes != len("not json") {
		t.Fatalf("400: %+v", o)
	}

	// Dropped mid-response: routed, its first chunk seen, not completed.
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(true, false))
	c.recv()
	c.send(respBody(sse(2, 0), false))
	c.recv()
	c.cancel()
	o = rec.last(t, g, &seen)
	if o.Outcome != OutcomeRouted || !o.FirstChunk || o.Completed || o.OutputTokens != 2 {
		t.Fatalf("dropped mid-response: %+v", o)
	}

	// Abandoned after its headers (BUFFERED, whose headers are answered
	// at once: the server has seen them before the drop).
	c = g.open()
	h := reqHeaders(false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
	c.send(h)
	c.recv()
	c.cancel()
	if o = rec.last(t, g, &seen); o.Outcome != OutcomeAbandoned || o.Scheduled {
		t.Fatalf("abandoned: %+v", o)
	}

	// A request without a body: routed unbooked, complete at the
	// response headers' end_of_stream.
	c = g.open()
	c.send(reqHeaders(true, nil, ":method", "GET"))
	picked(t, c.recv())
	c.send(respHeaders(false, true))
	c.recv()
	_ = c.s.CloseSend()
	if o = rec.last(t, g, &seen); o.Outcome != OutcomeRoutedUnbooked || !o.Scheduled || !o.Completed || o.FirstChunk || o.InputTokens != 0 {
		t.Fatalf("bodyless: %+v", o)
	}

	// A stream without any message is no request.
	c = g.open()
	_ = c.s.CloseSend()
	_, _ = c.s.Recv()
	g.settle()
	rec.mu.Lock()
	n := len(rec.obs)
	rec.mu.Unlock()
	var requests uint64
	for _, v := range g.srv.Stats().Requests {
		requests += v
	}
	if n != seen || uint64(n) != requests {
		t.Fatalf("%d observations, %d seen, %d requests counted", n, seen, requests)
	}
}

// TestEPPObservedTokenized: a chat body's input tokens, without usage in
// the response, are the tokens its template and tokenizer made.
func TestEPPObservedTokenized(t *testing.T) {
	tok := llama3(t)
	rec := &recorder{}
	g := newGateway(t, 2, Config{Tokenizers: map[string]*text.Tokenizer{"m": tok}, Observer: rec}, nil)
	in := text.Input{Messages: []byte(`[{"role":"user","content":"hello there"}]`)}
	want, err := in.Tokens(tok, nil, false, time.Now())
	if err != nil || len(want) == 0 {
		t.Fatal(err)
	}
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(true, false))
	c.recv()
	c.send(respBody(sse(1, 0), true))
	c.recv()
	_ = c.s.CloseSend()
	seen := 0
	if o := rec.last(t, g, &seen); o.InputTokens != int64(len(want)) {
		t.Fatalf("input tokens %d, want %d", o.InputTokens, len(want))
	}
}

// TestReadUsage: the counts of a usage object, -1 for each absent, null
// or negative one, and no usage at all from a body that is no JSON.
func TestReadUsage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want usageCounts
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}`, usageCounts{5, 7, 2}, true},
		{`{"usage":{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":null}}`, usageCounts{5, 7, -1}, true},
		{`{"usage":{"completion_tokens":7}}`, usageCounts{-1, 7, -1}, true},
		{`{"usage":null}`, usageCounts{-1, -1, -1}, true},
		{`{"choices":[]}`, usageCounts{-1, -1, -1}, true},
		{`{"usage":{"prompt_tokens":null,"completion_tokens":-3}}`, usageCounts{-1, -1, -1}, true},
		{`not json`, usageCounts{-1, -1, -1}, false},
	} {
		got, ok := readUsage([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
