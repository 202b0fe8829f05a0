package epp

import (
	"bytes"
	"cmp"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/goccy/go-json"
)

// The response side of a stream: prefill complete at the first body chunk, output blocks from SSE events or usage, the free.

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	body := b.GetBody()
	st.obs.ResponseBytes += int64(len(body))
	if len(body) > 0 {
		st.firstChunk()
	}
	if len(body) > 0 && st.booked && !st.prefilled {
		st.prefilled = true
		st.s.stats.prefill.Add(1)
		if st.plan {
			_ = st.s.svc.DisaggPrefillComplete(st.id)
			_ = st.s.svc.PrefillComplete(st.leg)
		} else {
			_ = st.s.svc.PrefillComplete(st.id)
		}
	}
	if st.booked {
		if st.sse {
			st.scanSSE(body)
		} else if !st.respOver {
			if len(st.resp)+len(body) > maxJSONResponse {
				st.respOver, st.resp = true, st.resp[:0]
			} else {
				st.resp = append(st.resp, body...)
			}
		}
	}
	if b.GetEndOfStream() {
		st.responseEnd()
	}
	if st.duplexResp {
		return st.send(st.ans.streamed(body, b.GetEndOfStream(), false))
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}})
}

// responseEnd reads a JSON response's usage and frees the booking.
func (st *stream) responseEnd() {
	if st.phase == phaseDone {
		return
	}
	st.phase = phaseDone
	if !st.booked {
		st.completed()
		return
	}
	if st.sse && len(st.line) > 0 && !st.lineOver {
		st.sseLine(st.line) // a last event without its newline
	}
	if !st.sse && !st.respOver {
		if u, ok := readUsage(st.resp); ok {
			st.usage(u)
			if u.completion >= 0 {
				st.addTokens(u.completion - st.tokens)
			}
		}
	}
	st.completed()
	st.free(FreeComplete)
}

// scanSSE counts the response's SSE data events, carrying a line split
// across chunks (at most maxSSELine bytes of it).
func (st *stream) scanSSE(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(st.line)+len(b) > maxSSELine {
				st.lineOver = true
			} else if !st.lineOver {
				st.line = append(st.line, b...)
			}
			return
		}
		line := b[:i]
		if len(st.line) > 0 || st.lineOver {
			if !st.lineOver && len(st.line)+len(line) <= maxSSELine {
				line = append(st.line, line...)
			} else {
				st.lineOver = true
			}
		}
		st.sseLine(line)
		st.line, st.lineOver = st.line[:0], false
		b = b[i+1:]
	}
}

// sseLine counts one line: a data event that carries output (carriesToken)
// is one token (an engine streams one delta per decode step), unless it
// carries usage.completion_tokens, which is the count so far. An event
// without output (vLLM's and OpenAI's first chat chunk, the role alone;
// OpenAI's last, an empty delta with the finish reason) counts none: a
// token counted is an output block booked, and a later usage only adds.
func (st *stream) sseLine(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 || string(payload) == "[DONE]" {
		return
	}
	if !st.lineOver && bytes.Contains(payload, []byte(`"usage"`)) {
		if u, ok := readUsage(payload); ok {
			st.usage(u)
			if u.completion >= 0 {
				st.addTokens(u.completion - st.tokens)
				return
			}
		}
	}
	if carriesToken(payload) {
		st.addTokens(1)
	}
}

// tokenKeys are the fields of an OpenAI stream event's choice whose
// non-empty string value is generated output: a completion's text, a chat
// delta's content, and the reasoning text vLLM and SGLang stream apart
// (reasoning_content; reasoning in vLLM since 0.10).
var tokenKeys = [][]byte{[]byte(`"text":`), []byte(`"content":`), []byte(`"reasoning_content":`), []byte(`"reasoning":`)}

// carriesToken reports whether a stream event's JSON holds generated
// output: a tokenKeys field with a non-empty string, or a non-empty
// tool_calls list. A
// byte scan, not a decode: it runs on every event, and the engines write
// compact JSON (a space after the colon is skipped all the same). A key
// inside a string value (a content that itself spells "text":) can only
// make an event count, which every content event does anyway.
func carriesToken(p []byte) bool {
	for _, k := range tokenKeys {
		for rest := p; ; {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = bytes.TrimLeft(rest[i+len(k):], " \t")
			if len(rest) >= 2 && rest[0] == '"' && rest[1] != '"' {
				return true
			}
		}
	}
	if i := bytes.Index(p, []byte(`"tool_calls":`)); i >= 0 {
		rest := bytes.TrimLeft(p[i+len(`"tool_calls":`):], " \t")
		return len(rest) >= 2 && rest[0] == '[' && rest[1] != ']'
	}
	return false
}

// usageCounts are the counts of an OpenAI usage object, each -1 when
// absent: prompt_tokens, completion_tokens and
// prompt_tokens_details.cached_tokens (vLLM's and OpenAI's).
type usageCounts struct{ prompt, completion, cached int64 }

// usageBody is usage's wire shape. Fields start at -1, which a decode
// leaves in place for an absent or null field (so no pointer field, and
// no allocation per count).
type usageBody struct {
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		Details          struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// readUsage reads the usage of an OpenAI response or stream event; false
// when b is no JSON object. A count that is absent, null or negative is
// -1.
func readUsage(b []byte) (usageCounts, bool) {
	var u usageBody
	u.Usage.PromptTokens, u.Usage.CompletionTokens, u.Usage.Details.CachedTokens = -1, -1, -1
	if json.Unmarshal(b, &u) != nil {
		return usageCounts{-1, -1, -1}, false
	}
	return usageCounts{max(u.Usage.PromptTokens, -1), max(u.Usage.CompletionTokens, -1), max(u.Usage.Details.CachedTokens, -1)}, true
}

// addTokens adds n output tokens (n <= 0 adds none) and reports every
// whole block of them as one output block.
func (st *stream) addTokens(n int64) {
	if n <= 0 || !st.booked {
		return
	}
	st.tokens += n
	id := st.id
	if st.plan {
		id = st.leg
	}
	for st.blocks < st.tokens/st.blockSize {
		st.blocks++
		st.s.stats.blocks.Add(1)
		_ = st.s.svc.OutputBlock(id, nil)
	}
}

// free releases the booking, once, counting why.
func (st *stream) free(why int) {
	if !st.booked {
		return
	}
	st.booked = false
	if st.plan {
		_, _ = st.s.svc.ReleaseDisagg(st.id)
	} else {
		_ = st.s.svc.Free(st.id)
	}
	st.s.stats.freed[why].Add(1)
}

// finish ends the stream's request: a request that never got a pick is
// abandoned, and a booking still held is freed for why (closed when the
// gateway ended the stream cleanly).
func (st *stream) finish() {
	if st.phase == phaseHeaders {
		st.count(OutcomeAbandoned)
	}
	st.free(cmp.Or(st.why, FreeClosed))
}
