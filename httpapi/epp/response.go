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
		return
	}
	if st.sse && len(st.line) > 0 && !st.lineOver {
		st.sseLine(st.line) // a last event without its newline
	}
	if !st.sse && !st.respOver {
		if n, ok := usageTokens(st.resp); ok {
			st.addTokens(n - st.tokens)
		}
	}
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

// sseLine counts one line: a data event other than [DONE] is one token
// (an engine streams one delta per decode step), unless it carries
// usage.completion_tokens, which is the count so far.
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
		if n, ok := usageTokens(payload); ok {
			st.addTokens(n - st.tokens)
			return
		}
	}
	st.addTokens(1)
}

// usageTokens reads usage.completion_tokens of an OpenAI response or
// stream event.
func usageTokens(b []byte) (int64, bool) {
	var u struct {
		Usage *struct {
			CompletionTokens *int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &u) != nil || u.Usage == nil || u.Usage.CompletionTokens == nil {
		return 0, false
	}
	return *u.Usage.CompletionTokens, true
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
		st.s.stats.requests[OutcomeAbandoned].Add(1)
	}
	st.free(cmp.Or(st.why, FreeClosed))
}
