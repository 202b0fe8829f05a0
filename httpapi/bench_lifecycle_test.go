package httpapi

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/valyala/fasthttp"
)

// lcPrompt is one prompt of the lifecycle benchmark: its tokens and the
// two hash chains of its full blocks.
type lcPrompt struct {
	tokens     []uint32
	local, seq []uint64
}

// lcPrompts generates n prompts shaped like kvselect bench's default
// synthetic workload (bench.DefaultSynthetic, block size 16): 16 families
// of 1-4 Ki-token system prompts, 64 interleaved conversations of 1 to 8
// turns, each turn adding a 32-512-token message to the history and a
// 64-512-token answer after it. Deterministic.
func lcPrompts(n int) []lcPrompt {
	rng := rand.New(rand.NewPCG(26, 26))
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	add := func(dst []uint32, k int) []uint32 {
		for range k {
			dst = append(dst, rng.Uint32N(128000))
		}
		return dst
	}
	fams := make([][]uint32, 16)
	for i := range fams {
		fams[i] = add(nil, between(1024, 4096))
	}
	type conv struct {
		tokens      []uint32
		turn, turns int
	}
	newConv := func() conv {
		return conv{tokens: append([]uint32(nil), fams[rng.IntN(len(fams))]...), turns: between(1, 8)}
	}
	convs := make([]conv, 64)
	for i := range convs {
		convs[i] = newConv()
	}
	out := make([]lcPrompt, 0, n)
	for len(out) < n {
		c := &convs[rng.IntN(len(convs))]
		c.tokens = add(c.tokens, between(32, 512))
		toks := c.tokens[:len(c.tokens):len(c.tokens)]
		local := radix.LocalHashes(nil, toks, 16, radix.Seed)
		out = append(out, lcPrompt{tokens: toks, local: local, seq: radix.SequenceHashes(nil, local)})
		c.tokens = add(c.tokens, between(64, 512))
		if c.turn++; c.turn == c.turns {
			*c = newConv()
		}
	}
	return out
}

// lcBody appends the members of a prompt's selection body and its closing
// brace, in the hash or the token form, as kvselect bench sends them
// (bench.AppendPromptJSON, bench.AppendPromptTokensJSON).
func lcBody(dst []byte, p *lcPrompt, tokens bool) []byte {
	if tokens {
		dst = append(dst, `"token_ids":[`...)
		for i, t := range p.tokens {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, uint64(t), 10)
		}
		return append(dst, `],"expected_output_tokens":256}`...)
	}
	dst = append(dst, `"block_hashes":[`...)
	for i, h := range p.local {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(h), 10)
	}
	dst = append(dst, `],"sequence_hashes":[`...)
	for i, h := range p.seq {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(h), 10)
	}
	dst = append(dst, `],"isl_tokens":`...)
	dst = strconv.AppendInt(dst, int64(len(p.tokens)), 10)
	return append(dst, `,"expected_output_tokens":256}`...)
}

// lcService is kvselect bench's selector shape: 8 workers of one rank,
// block size 16, KV events on, whose index holds the first fill prompts,
// each stored on the worker of its family's first block (as the
// selector's cache affinity would place most of them).
func lcService(b testing.TB, ps []lcPrompt, fill int) *core.Service {
	svc, err := core.New(core.DefaultConfig(), core.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for w := range 8 {
		ep := fmt.Sprintf("http://w%d:8000", w)
		bs := uint32(16)
		f := core.WorkerFields{Endpoint: &ep, BlockSize: &bs, KVEventsEndpoints: map[uint32]string{0: fmt.Sprintf("tcp://127.0.0.1:%d", 6000+w)}}
		if r, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: uint64(w), ModelName: core.DefaultPartition, WorkerFields: f}); err != nil || r.Lifecycle != core.Schedulable {
			b.Fatal(err, r.NotSchedulableReasons)
		}
	}
	sink := svc.EventSink(core.DefaultPartition, core.DefaultPartition)
	for i := range min(fill, len(ps)) {
		p := &ps[i]
		ev := radix.Event{Worker: radix.WorkerKey{WorkerID: p.local[0] % 8}, Kind: radix.Stored}
		for j, l := range p.local {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: p.seq[j], Local: l})
		}
		sink.ApplyBatch([]radix.Event{ev})
	}
	return svc
}

// lcCall runs one request through the handler on a reused RequestCtx.
func lcCall(srv *Server, ctx *fasthttp.RequestCtx, method string, uri, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.SetRequestURIBytes(uri)
	ctx.Request.Header.SetMethod(method)
	if body != nil {
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBodyRaw(body)
	}
	srv.Handle(ctx)
}

// BenchmarkLifecycle is kvselect bench's lifecycle mix through the
// handler, without sockets: per op, one select_and_reserve (a 275-block
// prompt on average, hash or token form), its prefill_complete, three
// output_block calls and, for the booking made 1024 ops before, the
// DELETE, so 1024 requests stay live on the 8 workers (128 per worker
// trie, as at C1024). Divide by 6 for the mean per HTTP call.
//
// "select_and_reserve" is the booking call alone, the live set kept the
// same way (its DELETE outside the timer).
func BenchmarkLifecycle(b *testing.B) {
	ps := lcPrompts(2048)
	const live = 1024
	for _, form := range []string{"hashes", "tokens"} {
		bodies := make([][]byte, len(ps))
		for i := range ps {
			bodies[i] = lcBody([]byte{'{'}, &ps[i], form == "tokens")
		}
		for _, only := range []bool{false, true} {
			name := form + "/lifecycle"
			if only {
				name = form + "/select_and_reserve"
			}
			b.Run(name, func(b *testing.B) {
				svc := lcService(b, ps, len(ps))
				srv, err := New(svc, DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]string, live)
				for i := range ids {
					ids[i] = fmt.Sprintf("lc-%04d", i)
				}
				booked := make([]bool, live)
				var ctx fasthttp.RequestCtx
				var body, uri []byte
				empty := []byte(`{}`)
				free := func(slot int) {
					if booked[slot] {
						uri = append(append(uri[:0], "/reservations/"...), ids[slot]...)
						lcCall(srv, &ctx, "DELETE", uri, nil)
						if ctx.Response.StatusCode() != 200 {
							b.Fatalf("DELETE: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
						}
					}
				}
				op := func(k int, timed bool) {
					slot := k % live
					if only && timed {
						b.StopTimer()
						free(slot)
						b.StartTimer()
					} else {
						free(slot)
					}
					body = append(append(append(body[:0], `{"selection_id":"`...), ids[slot]...), `",`...)
					body = append(body, bodies[k%len(bodies)][1:]...)
					lcCall(srv, &ctx, "POST", []byte("/select_and_reserve"), body)
					if ctx.Response.StatusCode() != 200 {
						b.Fatalf("select_and_reserve: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
					}
					booked[slot] = true
					if !only {
						uri = append(append(append(uri[:0], "/reservations/"...), ids[slot]...), "/prefill_complete"...)
						lcCall(srv, &ctx, "POST", uri, nil)
						uri = append(append(append(uri[:0], "/reservations/"...), ids[slot]...), "/output_block"...)
						for range 3 {
							lcCall(srv, &ctx, "POST", uri, empty)
							if ctx.Response.StatusCode() != 200 {
								b.Fatalf("output_block: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
							}
						}
					}
				}
				k := 0
				for ; k < 2*live; k++ { // fill the live set, warm the pools
					op(k, false)
				}
				b.ReportAllocs()
				for b.Loop() {
					op(k, true)
					k++
				}
			})
		}
	}
}
